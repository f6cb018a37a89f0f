#include "daemon/agent/cycle_builder.h"

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/wire/metric_catalogue.h"
#include "daemon/wire/series_codec.h"

namespace fabricmon::agent {

void CycleBuilder::Add(const collectors::SeriesDesc& desc, uint64_t raw_value) {
  auto [it, inserted] = ids_.try_emplace(desc.fingerprint);
  it->second.last_cycle = cycle_;
  if (inserted) {
    // Validate once per series what the aggregator validates at declaration: one refused
    // declaration ends the node's whole stream (and every reconnect's), so a single odd counter
    // file name must cost that series only.
    absl::StatusOr<collectors::SeriesDesc> accepted =
        wire::FromDeclaration(wire::ToDeclaration(desc, 1));
    absl::Status exposable = accepted.ok()
                                 ? wire::CheckExposable(wire::MetricCatalogue::Project(), *accepted)
                                 : accepted.status();
    if (!exposable.ok()) {
      ++invalid_series_;
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << desc.collector << ": series " << desc.name.substr(0, 120)
          << " left out, the aggregator would refuse it: " << exposable.message();
      return;  // ids_ keeps 0: left out from now on
    }
    it->second.id = table_.Intern(desc);
  }
  if (it->second.id == 0) {
    return;
  }
  series_ids_.push_back(it->second.id);
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

  // Let go of series not produced since the cycle that was current kReleaseAfterNanos ago.
  if (last_sweep_ == 0 || timestamp_unix_nanos - last_sweep_ >= kSweepNanos ||
      timestamp_unix_nanos < last_sweep_) {
    last_sweep_ = timestamp_unix_nanos;
    sweep_marks_.emplace_back(timestamp_unix_nanos, cycle_);
    uint64_t before = 0;  // release what was last produced before this cycle
    while (!sweep_marks_.empty() &&
           timestamp_unix_nanos - sweep_marks_.front().first >= kReleaseAfterNanos) {
      before = sweep_marks_.front().second;
      sweep_marks_.pop_front();
    }
    if (before != 0) {
      for (auto it = ids_.begin(); it != ids_.end();) {
        // Left-out series stay known (invalid_series() counts each once).
        if (it->second.last_cycle < before && it->second.id != 0) {
          released_.push_back(it->second.id);
          ids_.erase(it++);
        } else {
          ++it;
        }
      }
    }
  }
  ++cycle_;
  return cycle;
}

}  // namespace fabricmon::agent
