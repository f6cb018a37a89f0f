#include "daemon/detectors/engine.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "daemon/detectors/congestion.h"
#include "daemon/detectors/link_degraded.h"
#include "daemon/detectors/link_flap.h"
#include "daemon/detectors/nvlink.h"
#include "daemon/detectors/roce_detectors.h"
#include "daemon/detectors/straggler.h"
#include "daemon/detectors/tcp_fallback.h"
#include "re2/re2.h"

namespace fabricmon::detectors {
namespace {

constexpr int64_t kSecond = 1000000000;

// The one explicit list of detectors, configured from the thresholds (defaults where unset;
// validated by ValidateThresholds).
std::vector<std::unique_ptr<Detector>> BuildDetectors(const v1::DetectorThresholds& t) {
  std::vector<std::unique_ptr<Detector>> detectors;
  LinkFlapOptions flap;
  if (t.flap_transitions() > 0) flap.transitions = t.flap_transitions();
  if (t.flap_window_s() > 0) flap.window_nanos = t.flap_window_s() * kSecond;
  if (t.has_flap_quiet_s()) flap.quiet_nanos = t.flap_quiet_s() * kSecond;
  detectors.push_back(std::make_unique<LinkFlapDetector>(flap));

  LinkDegradedOptions degraded;
  if (t.degraded_errors_in_window() > 0) degraded.errors_in_window = t.degraded_errors_in_window();
  if (t.degraded_window_s() > 0) degraded.window_nanos = t.degraded_window_s() * kSecond;
  detectors.push_back(std::make_unique<LinkDegradedDetector>(degraded));

  CongestionOptions congestion;
  if (t.congestion_fraction() > 0) {
    congestion.wait_fraction = t.congestion_fraction();
    congestion.pause_fraction = t.congestion_fraction();
  }
  if (t.has_congestion_raise_samples()) {
    congestion.raise_samples = t.congestion_raise_samples();
  }
  if (t.has_congestion_clear_samples()) {
    congestion.clear_samples = t.congestion_clear_samples();
  }
  if (t.has_congestion_min_victims_without_topology()) {
    congestion.min_victims_without_topology = t.congestion_min_victims_without_topology();
  }
  detectors.push_back(std::make_unique<CongestionDetector>(congestion));

  PauseStormOptions storm;
  if (t.pause_storm_fraction() > 0) storm.fraction = t.pause_storm_fraction();
  if (t.has_pause_storm_intervals()) storm.consecutive_intervals = t.pause_storm_intervals();
  detectors.push_back(std::make_unique<PauseStormDetector>(storm));

  EcnOptions ecn;
  if (t.congestion_fraction() > 0) ecn.pause_fraction = t.congestion_fraction();
  if (t.has_ecn_pause_fraction()) ecn.pause_fraction = t.ecn_pause_fraction();
  if (t.has_ecn_cnp_ignored_per_second()) {
    ecn.cnp_ignored_per_second = t.ecn_cnp_ignored_per_second();
  }
  if (t.has_ecn_ticks()) ecn.ticks = t.ecn_ticks();
  detectors.push_back(std::make_unique<EcnMisconfigDetector>(ecn));

  TcpFallbackOptions fallback;
  if (t.tcp_fallback_min_bytes_per_second() > 0) {
    fallback.min_kernel_bytes_per_second = t.tcp_fallback_min_bytes_per_second();
  }
  if (t.tcp_fallback_rdma_ratio() > 0) fallback.rdma_ratio = t.tcp_fallback_rdma_ratio();
  if (t.has_tcp_fallback_gpu_busy()) fallback.gpu_busy = t.tcp_fallback_gpu_busy();
  if (t.has_tcp_fallback_rdma_history_s()) {
    fallback.rdma_history_nanos = t.tcp_fallback_rdma_history_s() * kSecond;
  }
  if (t.has_tcp_fallback_min_symmetry()) fallback.min_symmetry = t.tcp_fallback_min_symmetry();
  if (t.has_tcp_fallback_ticks()) fallback.consecutive_ticks = t.tcp_fallback_ticks();
  detectors.push_back(std::make_unique<TcpFallbackDetector>(fallback));

  NvlinkOptions nvlink;
  if (t.has_error_rate_per_second()) nvlink.errors_per_second = t.error_rate_per_second();
  detectors.push_back(std::make_unique<NvlinkDetector>(nvlink));
  return detectors;
}

int KindRank(const std::string& kind) {
  static const char* kOrder[] = {"link_flapping", "congestion_spreading", "tcp_fallback",
                                 "pause_storm",   "nvlink_down",          "link_degraded",
                                 "congestion",    "nvlink_degraded",      "ecn_misconfigured"};
  for (int i = 0; i < static_cast<int>(std::size(kOrder)); ++i) {
    if (kind == kOrder[i]) {
      return i;
    }
  }
  return 100;
}

}  // namespace

absl::Status ValidateThresholds(const v1::DetectorThresholds& t) {
  auto fraction = [](const char* name, double value) -> absl::Status {
    if (!(value >= 0 && value <= 1)) {  // also refuses NaN
      return absl::InvalidArgumentError(
          absl::StrCat("detectors.", name, " must lie in 0..1, not ", value));
    }
    return absl::OkStatus();
  };
  auto non_negative = [](const char* name, double value) -> absl::Status {
    if (!(value >= 0) || std::isinf(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("detectors.", name, " must be a finite number >= 0, not ", value));
    }
    return absl::OkStatus();
  };
  auto at_least_one = [](const char* name, bool has, uint32_t value) -> absl::Status {
    if (has && value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("detectors.", name, " must be at least 1"));
    }
    return absl::OkStatus();
  };
  for (absl::Status status : {
           fraction("congestion_fraction", t.congestion_fraction()),
           fraction("pause_storm_fraction", t.pause_storm_fraction()),
           fraction("tcp_fallback_rdma_ratio", t.tcp_fallback_rdma_ratio()),
           fraction("tcp_fallback_gpu_busy", t.tcp_fallback_gpu_busy()),
           fraction("tcp_fallback_min_symmetry", t.tcp_fallback_min_symmetry()),
           fraction("ecn_pause_fraction", t.ecn_pause_fraction()),
           non_negative("tcp_fallback_min_bytes_per_second", t.tcp_fallback_min_bytes_per_second()),
           non_negative("error_rate_per_second", t.error_rate_per_second()),
           non_negative("ecn_cnp_ignored_per_second", t.ecn_cnp_ignored_per_second()),
           at_least_one("tcp_fallback_ticks", t.has_tcp_fallback_ticks(), t.tcp_fallback_ticks()),
           at_least_one("ecn_ticks", t.has_ecn_ticks(), t.ecn_ticks()),
           at_least_one("pause_storm_intervals", t.has_pause_storm_intervals(),
                        t.pause_storm_intervals()),
           at_least_one("congestion_raise_samples", t.has_congestion_raise_samples(),
                        t.congestion_raise_samples()),
           at_least_one("congestion_clear_samples", t.has_congestion_clear_samples(),
                        t.congestion_clear_samples()),
           at_least_one("congestion_min_victims_without_topology",
                        t.has_congestion_min_victims_without_topology(),
                        t.congestion_min_victims_without_topology()),
       }) {
    if (!status.ok()) {
      return status;
    }
  }
  if (absl::Status status = ValidateStragglerThresholds(t); !status.ok()) {
    return status;
  }
  if (!t.unclaimed_ca_ignore().empty()) {
    re2::RE2 pattern(t.unclaimed_ca_ignore(), re2::RE2::Quiet);
    if (!pattern.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("detectors.unclaimed_ca_ignore: ", pattern.error()));
    }
  }
  return absl::OkStatus();
}

DetectionEngine::DetectionEngine(const store::SeriesStore& store, const Clock& clock,
                                 const v1::DetectorThresholds& thresholds, int64_t tick_nanos)
    : store_(store),
      clock_(clock),
      tick_nanos_(tick_nanos > 0 ? tick_nanos : kSecond),
      detectors_(BuildDetectors(thresholds)) {
  if (!thresholds.unclaimed_ca_ignore().empty()) {
    unclaimed_ca_ignore_ =
        std::make_unique<re2::RE2>(thresholds.unclaimed_ca_ignore(), re2::RE2::Quiet);
    if (!unclaimed_ca_ignore_->ok()) {
      unclaimed_ca_ignore_.reset();  // refused earlier by ValidateThresholds
    }
  }
}

DetectionEngine::~DetectionEngine() = default;

absl::Status DetectionEngine::SetLinkList(std::string text) {
  CableGraph check;
  absl::Status status = check.AddLinkList(text);
  if (!status.ok()) {
    return status;
  }
  absl::MutexLock lock(&mu_);
  link_list_ = std::move(text);
  ++static_version_;
  return absl::OkStatus();
}

void DetectionEngine::SetStaticFabric(v1::Inventory fabric) {
  absl::MutexLock lock(&mu_);
  static_fabric_ = std::move(fabric);
  ++static_version_;
}

void DetectionEngine::SetAgentTopologyRetention(int64_t nanos) {
  absl::MutexLock lock(&mu_);
  agent_topology_retention_nanos_ = nanos;
}

bool DetectionEngine::CountsForTopology(const store::NodeState& node,
                                        int64_t retention_nanos) const {
  if (retention_nanos <= 0) {
    return true;
  }
  const store::NodeState::Health health = node.GetHealth();
  return health.connected || clock_.NowUnixNanos() - health.last_seen_unix_nanos <= retention_nanos;
}

DetectionEngine::TopologyInputs DetectionEngine::InputsOf(
    const std::vector<std::shared_ptr<store::NodeState>>& nodes) const {
  TopologyInputs inputs;
  int64_t retention = 0;
  {
    absl::MutexLock lock(&mu_);
    inputs.static_version = static_version_;
    retention = agent_topology_retention_nanos_;
  }
  inputs.nodes.reserve(nodes.size());
  for (const auto& node : nodes) {
    if (CountsForTopology(*node, retention)) {
      inputs.nodes.emplace_back(node->name(), node->inventory_stamp());
    }
  }
  return inputs;
}

CableGraph DetectionEngine::BuildTopology(
    const std::vector<std::shared_ptr<store::NodeState>>& nodes) const {
  CableGraph topology;
  int64_t retention = 0;
  {
    absl::MutexLock lock(&mu_);
    retention = agent_topology_retention_nanos_;
  }
  for (const auto& node : nodes) {
    // An agent gone for longer than the rediscovery window no longer vouches for its cables.
    if (CountsForTopology(*node, retention)) {
      topology.AddInventory(node->name(), node->GetSummary(/*with_inventory=*/true).inventory);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    topology.AddInventory("", static_fabric_, LinkSource::kTopologyFile);
    // Validated in SetLinkList.
    (void)topology.AddLinkList(link_list_);
  }
  topology.Resolve();
  return topology;
}

void DetectionEngine::AddDetector(std::unique_ptr<Detector> detector) {
  absl::MutexLock tick_lock(&tick_mu_);
  detectors_.push_back(std::move(detector));
}

void DetectionEngine::Tick() {
  absl::MutexLock tick_lock(&tick_mu_);
  const int64_t start = clock_.MonotonicNanos();
  std::vector<std::shared_ptr<store::NodeState>> nodes = store_.Nodes();
  // The inputs are read before the topology is built from them: a change in between makes them
  // look stale, and the next tick builds again.
  TopologyInputs inputs = InputsOf(nodes);
  std::optional<std::vector<TopologyLink>> new_links;
  if (topology_ == nullptr || !(inputs == topology_inputs_)) {
    topology_ = std::make_unique<CableGraph>(BuildTopology(nodes));
    series_cache_.ResetPorts();
    topology_inputs_ = std::move(inputs);
    new_links = topology_->Links();
    topology_builds_.fetch_add(1, std::memory_order_relaxed);
    PublishProblems(*topology_);
  }

  FabricView view(nodes, *topology_, clock_.NowUnixNanos(), &series_cache_);
  std::vector<Finding> findings;
  for (const auto& detector : detectors_) {
    detector->Evaluate(view, findings);
  }
  tracker_.Update(std::move(findings), view.now_unix_nanos());
  absl::MutexLock lock(&mu_);
  if (new_links.has_value()) {
    links_ = std::move(*new_links);
  }
  links_resolved_unix_nanos_ = view.now_unix_nanos();
  const int64_t end = clock_.MonotonicNanos();
  last_tick_duration_ = end - start;
  last_tick_end_nanos_.store(end, std::memory_order_relaxed);
}

void DetectionEngine::PublishProblems(const CableGraph& topology) {
  std::vector<GuidConflict> conflicts = topology.guid_conflicts();
  const std::set<std::string>& disagreements = topology.disagreements();
  absl::MutexLock lock(&mu_);
  // Logged when they change, not every build: a fabric that stays wrong says so once.
  std::set<std::string> known_conflicts;
  for (const GuidConflict& old : guid_conflicts_) {
    known_conflicts.insert(absl::StrCat(old.guid, absl::StrJoin(old.nodes, ",")));
  }
  for (const GuidConflict& conflict : conflicts) {
    if (known_conflicts.count(absl::StrCat(conflict.guid, absl::StrJoin(conflict.nodes, ","))) ==
        0) {
      FABRICMON_LOG(Warning) << "HCA GUID 0x" << conflict.guid << " is claimed by "
                             << conflict.nodes.size() << " nodes ("
                             << absl::StrJoin(conflict.nodes, ", ")
                             << "): it names none of them in the topology";
    }
  }
  for (const std::string& disagreement : disagreements) {
    if (disagreements_.count(disagreement) == 0) {
      FABRICMON_LOG(Warning) << "topology disagreement, the operator's cable kept: "
                             << disagreement;
    }
  }
  guid_conflicts_ = std::move(conflicts);
  disagreements_ = disagreements;
  unclaimed_cas_.clear();
  for (auto& [guid, description] : topology.UnclaimedCas()) {
    if (unclaimed_ca_ignore_ == nullptr ||
        !re2::RE2::FullMatch(description, *unclaimed_ca_ignore_)) {
      unclaimed_cas_.emplace_back(std::move(guid), std::move(description));
    }
  }
}

size_t DetectionEngine::topology_links() const {
  absl::MutexLock lock(&mu_);
  return links_.size();
}

v1::GetTopologyResponse DetectionEngine::GetTopology() const {
  std::vector<TopologyLink> links;
  int64_t resolved = 0;
  {
    absl::MutexLock lock(&mu_);
    links = links_;
    resolved = links_resolved_unix_nanos_;
  }
  std::vector<GuidConflict> conflicts;
  std::set<std::string> disagreements;
  {
    absl::MutexLock lock(&mu_);
    conflicts = guid_conflicts_;
    disagreements = disagreements_;
  }
  if (resolved == 0) {
    // No tick yet (the CLI may ask before the detector thread has run): resolve now rather than
    // answer with a misleading empty fabric.
    const CableGraph topology = BuildTopology(store_.Nodes());
    links = topology.Links();
    conflicts = topology.guid_conflicts();
    disagreements = topology.disagreements();
    resolved = clock_.NowUnixNanos();
  }
  v1::GetTopologyResponse response;
  for (const GuidConflict& conflict : conflicts) {
    v1::GuidConflict* out = response.add_guid_conflicts();
    out->set_guid(absl::StrCat("0x", conflict.guid));
    for (const std::string& node : conflict.nodes) {
      out->add_nodes(node);
    }
  }
  for (const std::string& disagreement : disagreements) {
    response.add_disagreements(disagreement);
  }
  response.set_resolved_unix_nanos(resolved);
  std::set<std::string> switches;
  std::set<std::string> hosts;
  for (const TopologyLink& link : links) {
    v1::TopologyLink* out = response.add_links();
    for (const auto& [end, proto] :
         {std::pair{&link.a, out->mutable_a()}, std::pair{&link.b, out->mutable_b()}}) {
      proto->set_node(end->node);
      proto->set_device(end->device);
      proto->set_port(end->port);
      proto->set_is_switch(end->is_switch);
      const std::string guid = CanonicalGuid(end->guid);
      proto->set_guid(guid.empty() ? "" : absl::StrCat("0x", guid));
      (end->is_switch ? switches : hosts).insert(end->node);
    }
    switch (link.source) {
      case LinkSource::kLinkList:
        out->set_source(v1::LINK_SOURCE_LINK_LIST);
        break;
      case LinkSource::kTopologyFile:
        out->set_source(v1::LINK_SOURCE_TOPOLOGY_FILE);
        break;
      case LinkSource::kFabricCollector:
        out->set_source(v1::LINK_SOURCE_FABRIC_COLLECTOR);
        break;
    }
  }
  response.set_switches(static_cast<uint32_t>(switches.size()));
  response.set_hosts(static_cast<uint32_t>(hosts.size()));
  return response;
}

v1::DiagnoseResponse DetectionEngine::Diagnose(const std::vector<std::string>& nodes) const {
  v1::DiagnoseResponse response;
  std::set<std::string> wanted;
  for (const std::string& node : nodes) {
    std::shared_ptr<store::NodeState> state = store_.Find(node);
    if (state == nullptr) {
      response.add_unknown_nodes(node);
      continue;
    }
    wanted.insert(node);
    const auto summary = state->GetSummary(false);
    v1::NodeSummary* out = response.add_nodes();
    out->set_name(summary.name);
    out->set_up(summary.connected);
    out->set_last_seen_unix_nanos(summary.last_seen_unix_nanos);
    out->set_agent_version(summary.agent_version);
    out->set_series(summary.series);
  }

  // The switches these nodes hang off, and the switches one hop beyond (their uplinks): a
  // finding there is on the nodes' paths.
  const CableGraph topology = BuildTopology(store_.Nodes());
  std::set<std::string> near_switches;
  for (const std::string& node : wanted) {
    for (const Endpoint& port : topology.PortsOf(node, false)) {
      if (std::optional<Endpoint> peer = topology.PeerOf(port); peer && peer->is_switch) {
        near_switches.insert(peer->node);
        for (const Endpoint& up : topology.PortsOf(peer->node, true)) {
          if (std::optional<Endpoint> far = topology.PeerOf(up); far && far->is_switch) {
            near_switches.insert(far->node);
          }
        }
      }
    }
  }
  auto touches = [&](const Endpoint& endpoint) {
    return endpoint.is_switch ? near_switches.count(endpoint.node) > 0
                              : wanted.count(endpoint.node) > 0;
  };

  std::vector<TrackedFinding> relevant;
  tracker_.ForEachActive([&](const TrackedFinding& tracked) {
    const Finding& f = tracked.finding;
    bool hit = touches(f.subject) || (!f.peer.node.empty() && touches(f.peer));
    for (const Endpoint& victim : f.victims) {
      hit = hit || touches(victim);
    }
    if (hit) {
      relevant.push_back(tracked);
    }
  });
  std::sort(relevant.begin(), relevant.end(), [](const auto& a, const auto& b) {
    if (a.finding.severity != b.finding.severity) return a.finding.severity > b.finding.severity;
    if (KindRank(a.finding.kind) != KindRank(b.finding.kind)) {
      return KindRank(a.finding.kind) < KindRank(b.finding.kind);
    }
    if (a.finding.victims.size() != b.finding.victims.size()) {
      return a.finding.victims.size() > b.finding.victims.size();
    }
    return a.onset_unix_nanos < b.onset_unix_nanos;
  });
  for (const TrackedFinding& tracked : relevant) {
    *response.add_findings() = ToProto(tracked);
  }
  if (wanted.empty()) {
    response.set_verdict("None of these nodes is known to the aggregator.");
  } else if (relevant.empty()) {
    response.set_verdict(absl::StrCat(
        "No active fabric finding touches these ", wanted.size(),
        " nodes (their ports, their cables, the switches they hang off or those switches' "
        "uplinks): the network is not the obvious cause."));
  } else {
    response.set_verdict(
        absl::StrCat(relevant.size(), " active finding",
                     relevant.size() == 1 ? " touches" : "s touch", " these ", wanted.size(),
                     wanted.size() == 1 ? " node. Most severe: " : " nodes. Most severe: ",
                     relevant.front().finding.summary));
  }
  return response;
}

std::vector<v1::Finding> DetectionEngine::Findings(bool include_cleared,
                                                   const std::string& kind) const {
  std::vector<TrackedFinding> all = tracker_.Active();
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (a.finding.severity != b.finding.severity) return a.finding.severity > b.finding.severity;
    return a.onset_unix_nanos < b.onset_unix_nanos;
  });
  if (include_cleared) {
    for (TrackedFinding& tracked : tracker_.Recent()) {
      all.push_back(std::move(tracked));
    }
  }
  std::vector<v1::Finding> out;
  for (const TrackedFinding& tracked : all) {
    if (kind.empty() || tracked.finding.kind == kind) {
      out.push_back(ToProto(tracked));
    }
  }
  return out;
}

std::vector<v1::Finding> DetectionEngine::FindingsOfNode(const std::string& node) const {
  std::vector<v1::Finding> out;
  tracker_.ForEachActive([&](const TrackedFinding& tracked) {
    const Finding& f = tracked.finding;
    bool hit = f.subject.node == node || f.peer.node == node;
    for (const Endpoint& victim : f.victims) {
      hit = hit || victim.node == node;
    }
    if (hit) {
      out.push_back(ToProto(tracked));
    }
  });
  return out;
}

EngineHealth DetectionEngine::Health() const {
  absl::MutexLock lock(&mu_);
  EngineHealth health;
  health.last_tick_nanos = last_tick_duration_;
  health.topology_links = links_.size();
  health.guid_conflicts = guid_conflicts_.size();
  health.disagreements = disagreements_.size();
  health.unclaimed_cas = unclaimed_cas_;
  return health;
}

}  // namespace fabricmon::detectors
