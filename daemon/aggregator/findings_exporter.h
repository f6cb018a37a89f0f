#pragma once

// The detection engine's findings and health as Prometheus families, for /metrics:
// fabricmon_finding_active, fabricmon_finding_victims, fabricmon_finding_depth_hops,
// fabricmon_findings_total, fabricmon_detector_tick_seconds and fabricmon_topology_* (links, GUID
// conflicts, disagreements, unclaimed CAs). Kept out of the engine so that the engine knows no
// exposition format (replay runs it without Prometheus).

#include <vector>

#include "daemon/detectors/engine.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace fabricmon::aggregator {

class FindingsExporter final : public prometheus::Collectable {
 public:
  // Keeps a reference: `engine` must outlive the exporter.
  explicit FindingsExporter(const detectors::DetectionEngine& engine) : engine_(engine) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const detectors::DetectionEngine& engine_;
};

}  // namespace fabricmon::aggregator
