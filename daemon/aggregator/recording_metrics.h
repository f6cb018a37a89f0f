#pragma once

// The recording's self-metrics (fabricmon_recording_*), read from the recorder at scrape time.
// Registered only when recording is configured.

#include <memory>
#include <vector>

#include "daemon/recording/recorder.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace fabricmon::aggregator {

class RecordingMetrics final : public prometheus::Collectable {
 public:
  explicit RecordingMetrics(std::shared_ptr<const recording::Recorder> recorder)
      : recorder_(std::move(recorder)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::shared_ptr<const recording::Recorder> recorder_;
};

}  // namespace fabricmon::aggregator
