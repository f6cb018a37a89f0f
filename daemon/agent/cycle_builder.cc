#include "daemon/agent/cycle_builder.h"

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/wire/series_codec.h"

namespace fabricmon::agent {

void CycleBuilder::Add(const collectors::SeriesDesc& desc, uint64_t raw_value) {
  auto [it, inserted] = ids_.try_emplace(desc.fingerprint, 0);
  if (inserted) {
    // Validate once per series what the aggregator validates at declaration: one refused
    // declaration ends the node's whole stream (and every reconnect's), so a single odd counter
    // file name must cost that series only.
    absl::StatusOr<collectors::SeriesDesc> accepted =
        wire::FromDeclaration(wire::ToDeclaration(desc, 1));
    if (!accepted.ok()) {
      ++invalid_series_;
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << desc.collector << ": series " << desc.name.substr(0, 120)
          << " left out, the aggregator would refuse it: " << accepted.status().message();
      return;  // ids_ keeps 0: left out from now on
    }
    it->second = table_.Intern(desc);
  }
  if (it->second == 0) {
    return;
  }
  series_ids_.push_back(it->second);
  values_.push_back(raw_value);
}

Cycle CycleBuilder::Finish(int64_t timestamp_unix_nanos, uint32_t collect_duration_us) {
  Cycle cycle;
  cycle.timestamp_unix_nanos = timestamp_unix_nanos;
  cycle.collect_duration_us = collect_duration_us;
  auto same = std::find_if(recent_layouts_.begin(), recent_layouts_.end(),
                           [&](const auto& layout) { return *layout == series_ids_; });
  if (same == recent_layouts_.end()) {
    if (recent_layouts_.size() == kRecentLayouts) {
      recent_layouts_.pop_back();
    }
    recent_layouts_.push_front(std::make_shared<const Layout>(series_ids_));
  } else if (same != recent_layouts_.begin()) {
    std::rotate(recent_layouts_.begin(), same, same + 1);
  }
  cycle.layout = recent_layouts_.front();
  cycle.values = std::move(values_);
  values_.clear();
  values_.reserve(cycle.values.size());
  series_ids_.clear();
  return cycle;
}

}  // namespace fabricmon::agent
