#include "daemon/agent/cycle_builder.h"


namespace fabricmon::agent {

void CycleBuilder::Add(const collectors::SeriesDesc& desc, uint64_t raw_value) {
  auto [it, inserted] = ids_.try_emplace(desc.fingerprint, 0);
  if (inserted) {
    it->second = table_.Intern(desc);
  }
  series_ids_.push_back(it->second);
  values_.push_back(raw_value);
}

Cycle CycleBuilder::Finish(int64_t timestamp_unix_nanos, uint32_t collect_duration_us) {
  Cycle cycle;
  cycle.timestamp_unix_nanos = timestamp_unix_nanos;
  cycle.collect_duration_us = collect_duration_us;
  if (last_layout_ == nullptr || *last_layout_ != series_ids_) {
    last_layout_ = std::make_shared<const Layout>(series_ids_);
  }
  cycle.layout = last_layout_;
  cycle.values = std::move(values_);
  values_.clear();
  values_.reserve(cycle.values.size());
  series_ids_.clear();
  return cycle;
}

}  // namespace fabricmon::agent
