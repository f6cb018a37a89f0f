#include "daemon/agent/cycle_builder.h"

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/wire/metric_catalogue.h"
#include "daemon/wire/series_codec.h"

namespace fabricmon::agent {

namespace {

// How far ahead of the cursor a miss looks for its series: a few series dropping out of a cycle
// (a counter file failing now and then) re-align without a hash lookup for every later value.
constexpr size_t kRealignWindow = 8;

}  // namespace

void CycleBuilder::Add(const collectors::SeriesDesc& desc, uint64_t raw_value) {
  uint32_t id;
  if (cursor_ < expected_.size() && expected_[cursor_].fingerprint == desc.fingerprint) {
    id = expected_[cursor_++].id;
  } else {
    const size_t end = std::min(expected_.size(), cursor_ + 1 + kRealignWindow);
    size_t found = cursor_ + 1;
    while (found < end && expected_[found].fingerprint != desc.fingerprint) {
      ++found;
    }
    if (found < end) {
      id = expected_[found].id;
      cursor_ = found + 1;
    } else {
      id = Lookup(desc);  // new here: the cursor stays for the series after it
    }
  }
  observed_.push_back({desc.fingerprint, id});
  if (id == 0) {
    return;
  }
  if (id >= last_cycle_.size()) {
    last_cycle_.resize(id + 1, 0);
  }
  last_cycle_[id] = cycle_;
  series_ids_.push_back(id);
  values_.push_back(raw_value);
}

uint32_t CycleBuilder::Lookup(const collectors::SeriesDesc& desc) {
  auto [it, inserted] = ids_.try_emplace(desc.fingerprint, 0);
  if (!inserted) {
    return it->second;
  }
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
    return 0;  // ids_ keeps 0: left out from now on
  }
  it->second = table_.Intern(desc);
  return it->second;
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
  expected_.swap(observed_);
  observed_.clear();
  cursor_ = 0;

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
        const uint32_t id = it->second;
        if (id != 0 && last_cycle_[id] < before) {
          released_.push_back(id);
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
