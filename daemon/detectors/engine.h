#pragma once

// Runs the detectors: every tick it resolves the topology from the agents' inventories and the
// configured topology files (rebuilt only when one of them changed), lets each detector evaluate
// the store, and hands the findings to the tracker. Also answers "what touches these nodes"
// (Diagnose) and "which cables are there" (GetTopology, the last tick's links) and how its last
// tick went (Health, what the findings exporter in daemon/aggregator turns into metrics).
//
// Threads: none of its own. The caller ticks it (the aggregator's DetectorTicker, a test, replay);
// one Tick() runs at a time and everything is thread-safe.

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/clock.h"
#include "daemon/detectors/cable_graph.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/finding_tracker.h"
#include "daemon/detectors/providers.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/config.pb.h"
#include "fabricmon/v1/diagnostics.pb.h"

namespace re2 {
class RE2;
}

namespace fabricmon::detectors {

// Whether every threshold lies in its documented range (config.proto); InvalidArgument naming
// the field otherwise. The aggregator refuses to start on an error.
absl::Status ValidateThresholds(const v1::DetectorThresholds& thresholds);

// How the engine's last tick and topology build went, for self-metrics.
struct EngineHealth {
  int64_t last_tick_nanos = 0;  // how long the last Tick() took (all detectors)
  size_t topology_links = 0;    // cables as of the last tick
  size_t guid_conflicts = 0;    // as of the last topology build
  size_t disagreements = 0;     // as of the last topology build
  // Fabric CAs no node claims, less those detectors.unclaimed_ca_ignore matches:
  // (canonical GUID, description).
  std::vector<std::pair<std::string, std::string>> unclaimed_cas;
};

class DetectionEngine final : public FindingsProvider, public TopologyProvider {
 public:
  // Keeps references to `store` and `clock`. `thresholds` configure the detectors (defaults for
  // unset fields, see config.proto).
  DetectionEngine(const store::SeriesStore& store, const Clock& clock,
                  const v1::DetectorThresholds& thresholds, int64_t tick_nanos);
  ~DetectionEngine() override;

  // Static topology: a link-list file's content and/or fabric inventory parsed from an
  // ibnetdiscover file. InvalidArgument on a malformed link list.
  absl::Status SetLinkList(std::string text) ABSL_LOCKS_EXCLUDED(mu_);
  void SetStaticFabric(v1::Inventory fabric) ABSL_LOCKS_EXCLUDED(mu_);
  // An agent's inventory stops counting towards the topology once its node has been disconnected
  // for longer than this (default 10 minutes; 0: kept while the store keeps the node). Its
  // switch topology and GUIDs then no longer name cables nor conflict with anyone.
  void SetAgentTopologyRetention(int64_t nanos) ABSL_LOCKS_EXCLUDED(mu_);

  // Adds a detector that needs more than thresholds to be built (the straggler detector reads
  // the aggregator's jobs). Call before the first Tick().
  void AddDetector(std::unique_ptr<Detector> detector) ABSL_LOCKS_EXCLUDED(tick_mu_);

  // One evaluation now. The caller decides the cadence (tick_nanos() is the configured one).
  void Tick() ABSL_LOCKS_EXCLUDED(tick_mu_);
  int64_t tick_nanos() const { return tick_nanos_; }
  // Clock::MonotonicNanos() when the last Tick() finished; 0 before the first. The aggregator's
  // watchdog pings only while this moves (a stalled detector thread stops them). Thread-safe.
  int64_t last_tick_monotonic_nanos() const {
    return last_tick_end_nanos_.load(std::memory_order_relaxed);
  }

  const FindingTracker& tracker() const { return tracker_; }
  // Findings that touch `nodes`: on the nodes, on cables to them, spreading trees they are root
  // or victims of. Ranked most severe first; a one-paragraph verdict.
  v1::DiagnoseResponse Diagnose(const std::vector<std::string>& nodes) const override;
  std::vector<v1::Finding> Findings(bool include_cleared, const std::string& kind) const override;
  std::vector<v1::Finding> FindingsOfNode(const std::string& node) const override;
  // How many times a tick has built the topology (it is kept while its inputs stay the same).
  uint64_t topology_builds() const { return topology_builds_.load(std::memory_order_relaxed); }
  // Current topology size (links), for self-metrics and the CLI.
  size_t topology_links() const ABSL_LOCKS_EXCLUDED(mu_);
  // The cables the last Tick() resolved (before the first tick: resolved now), host end first.
  v1::GetTopologyResponse GetTopology() const override ABSL_LOCKS_EXCLUDED(mu_);

  EngineHealth Health() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Agents' inventories, the static fabric and the link list, resolved.
  CableGraph BuildTopology(const std::vector<std::shared_ptr<store::NodeState>>& nodes) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // What a topology was built from: each counted node's name and inventory stamp (nodes gone
  // longer than the retention are left out), and the version of the static topology. Equal
  // inputs, equal topology.
  struct TopologyInputs {
    std::vector<std::pair<std::string, uint64_t>> nodes;
    uint64_t static_version = 0;
    bool operator==(const TopologyInputs& other) const {
      return static_version == other.static_version && nodes == other.nodes;
    }
  };
  TopologyInputs InputsOf(const std::vector<std::shared_ptr<store::NodeState>>& nodes) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `node`'s inventory still counts towards the topology (see SetAgentTopologyRetention).
  bool CountsForTopology(const store::NodeState& node, int64_t retention_nanos) const;
  // Logs the topology's GUID conflicts and disagreements when they changed since the last build,
  // and keeps them for GetTopology() and Collect().
  void PublishProblems(const CableGraph& topology) ABSL_LOCKS_EXCLUDED(mu_);

  const store::SeriesStore& store_;
  const Clock& clock_;
  const int64_t tick_nanos_;
  std::vector<std::unique_ptr<Detector>> detectors_;
  FindingTracker tracker_;

  absl::Mutex tick_mu_;  // one Tick at a time (detectors keep state)
  // The last tick's topology, kept while its inputs stay the same: resolving it costs as much as
  // all detectors together at 1,000 nodes (tests/bench/stream/detector_bench.cc).
  std::unique_ptr<CableGraph> topology_ ABSL_GUARDED_BY(tick_mu_);
  SeriesCache series_cache_ ABSL_GUARDED_BY(tick_mu_);  // its ports are topology_'s: reset with it
  TopologyInputs topology_inputs_ ABSL_GUARDED_BY(tick_mu_);
  std::atomic<uint64_t> topology_builds_{0};
  std::atomic<int64_t> last_tick_end_nanos_{0};
  mutable absl::Mutex mu_;
  uint64_t static_version_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by SetLinkList/SetStaticFabric
  std::string link_list_ ABSL_GUARDED_BY(mu_);
  v1::Inventory static_fabric_ ABSL_GUARDED_BY(mu_);
  std::vector<TopologyLink> links_ ABSL_GUARDED_BY(mu_);           // as of the last tick
  std::vector<GuidConflict> guid_conflicts_ ABSL_GUARDED_BY(mu_);  // as of the last build
  std::set<std::string> disagreements_ ABSL_GUARDED_BY(mu_);       // as of the last build
  // Fabric CAs no node claims, less those unclaimed_ca_ignore matches: (GUID, description).
  std::vector<std::pair<std::string, std::string>> unclaimed_cas_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<re2::RE2> unclaimed_ca_ignore_;  // null: ignore none
  int64_t agent_topology_retention_nanos_ ABSL_GUARDED_BY(mu_) = 600'000'000'000;
  int64_t links_resolved_unix_nanos_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no tick yet
  int64_t last_tick_duration_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fabricmon::detectors
