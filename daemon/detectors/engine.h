#pragma once

// Runs the detectors: every tick it rebuilds the topology from the agents' inventories and the
// configured topology files, lets each detector evaluate the store, and hands the findings to
// the tracker. Also answers "what touches these nodes" (Diagnose) and "which cables are there"
// (GetTopology, the last tick's links), and exports findings as Prometheus families.
//
// Threads: Start() runs one detector thread owned by the engine (joined by Stop()); everything
// else is thread-safe.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/aggregator/diagnostics_service.h"
#include "daemon/aggregator/series_store.h"
#include "daemon/common/clock.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/finding_tracker.h"
#include "daemon/detectors/topology.h"
#include "fabricmon/v1/config.pb.h"
#include "fabricmon/v1/diagnostics.pb.h"
#include "prometheus/collectable.h"

namespace fabricmon::detectors {

class DetectionEngine final : public prometheus::Collectable,
                              public aggregator::FindingsProvider,
                              public aggregator::TopologyProvider {
 public:
  // Keeps references to `store` and `clock`. `thresholds` configure the detectors (defaults for
  // unset fields, see config.proto).
  DetectionEngine(const aggregator::SeriesStore& store, const Clock& clock,
                  const v1::DetectorThresholds& thresholds, int64_t tick_nanos);
  ~DetectionEngine() override;

  // Static topology: a link-list file's content and/or fabric inventory parsed from an
  // ibnetdiscover file. InvalidArgument on a malformed link list.
  absl::Status SetLinkList(std::string text) ABSL_LOCKS_EXCLUDED(mu_);
  void SetStaticFabric(v1::Inventory fabric) ABSL_LOCKS_EXCLUDED(mu_);

  // One evaluation now (tests call this directly instead of Start()).
  void Tick() ABSL_LOCKS_EXCLUDED(tick_mu_);
  void Start();
  void Stop();

  const FindingTracker& tracker() const { return tracker_; }
  // Findings that touch `nodes`: on the nodes, on cables to them, spreading trees they are root
  // or victims of. Ranked most severe first; a one-paragraph verdict.
  v1::DiagnoseResponse Diagnose(const std::vector<std::string>& nodes) const override;
  std::vector<v1::Finding> Findings(bool include_cleared, const std::string& kind) const override;
  std::vector<v1::Finding> FindingsOfNode(const std::string& node) const override;
  // Current topology size (links), for self-metrics and the CLI.
  size_t topology_links() const ABSL_LOCKS_EXCLUDED(mu_);
  // The cables the last Tick() resolved (before the first tick: resolved now), host end first.
  v1::GetTopologyResponse GetTopology() const override ABSL_LOCKS_EXCLUDED(mu_);

  // prometheus::Collectable: fabricmon_finding_active, fabricmon_finding_victims,
  // fabricmon_finding_depth_hops, fabricmon_findings_total, fabricmon_detector_tick_seconds.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  // Agents' inventories, the static fabric and the link list, resolved.
  Topology BuildTopology(const std::vector<std::shared_ptr<aggregator::NodeState>>& nodes) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const aggregator::SeriesStore& store_;
  const Clock& clock_;
  const int64_t tick_nanos_;
  std::vector<std::unique_ptr<Detector>> detectors_;
  FindingTracker tracker_;

  absl::Mutex tick_mu_;  // one Tick at a time (detectors keep state)
  mutable absl::Mutex mu_;
  std::string link_list_ ABSL_GUARDED_BY(mu_);
  v1::Inventory static_fabric_ ABSL_GUARDED_BY(mu_);
  std::vector<TopologyLink> links_ ABSL_GUARDED_BY(mu_);        // as of the last tick
  int64_t links_resolved_unix_nanos_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no tick yet
  int64_t last_tick_duration_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fabricmon::detectors
