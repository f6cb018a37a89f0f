#pragma once

#include <cstdint>
#include <vector>

#include "collectors/core/sample.h"

namespace fabricmon::collectors {

struct RecordedSample {
  SeriesDesc series;
  uint64_t raw_value = 0;
};

// Keeps a copy of every sample it receives, in order. For `--once`, the agent's local /metrics
// and tests. Not thread-safe.
class RecordingSink final : public SampleSink {
 public:
  void Add(const SeriesDesc& desc, uint64_t raw_value) override {
    samples_.push_back({desc, raw_value});
  }
  const std::vector<RecordedSample>& samples() const { return samples_; }
  std::vector<RecordedSample> Take() { return std::move(samples_); }
  void Clear() { samples_.clear(); }

 private:
  std::vector<RecordedSample> samples_;
};

}  // namespace fabricmon::collectors
