#include "daemon/wire/aggregator_families.h"

#include <algorithm>
#include <string>

namespace fabricmon::wire {
namespace {

using collectors::MetricType;
using collectors::Unit;

struct Entry {
  const char* name;
  MetricType type;
  Unit unit;
  const char* help;
};

// Sorted by name, as AggregatorFamilies() returns them (it sorts once more, so an entry added out
// of order cannot break FindAggregatorFamily).
constexpr Entry kEntries[] = {
    {"fabricmon_aggregator_agent_dropped_batches_total", MetricType::kCounter, Unit::kNone,
     "Batches agents reported dropping from their full replay buffers."},
    {"fabricmon_aggregator_batches_total", MetricType::kCounter, Unit::kNone,
     "Sample batches stored."},
    {"fabricmon_aggregator_clock_steps_total", MetricType::kCounter, Unit::kNone,
     "Batches re-based because their node's clock stepped back or ahead."},
    {"fabricmon_aggregator_duplicate_batches_total", MetricType::kCounter, Unit::kNone,
     "Replayed batches that were already stored (not stored again)."},
    {"fabricmon_aggregator_inventory_refused_total", MetricType::kCounter, Unit::kNone,
     "Parts of agents' inventories dropped, by reason (not_a_fabric_sweeper: switch topology from "
     "a node authorization.fabric_sweepers does not name)."},
    {"fabricmon_aggregator_nodes", MetricType::kGauge, Unit::kNone,
     "Known nodes by state (up, down)."},
    {"fabricmon_aggregator_nodes_forgotten_total", MetricType::kCounter, Unit::kNone,
     "Nodes forgotten after node_retention_s without a batch (series freed)."},
    {"fabricmon_aggregator_received_bytes_total", MetricType::kCounter, Unit::kBytes,
     "Protobuf bytes of agent messages received."},
    {"fabricmon_aggregator_redeclare_requests_total", MetricType::kCounter, Unit::kNone,
     "Series declarations asked of agents again after their series were retired."},
    {"fabricmon_aggregator_rejected_calls_total", MetricType::kCounter, Unit::kNone,
     "Diagnostics (CLI) calls refused, by reason (not_an_operator: the client certificate matches "
     "no authorization.operators pattern)."},
    {"fabricmon_aggregator_rejected_handshakes_total", MetricType::kCounter, Unit::kNone,
     "TLS handshakes refused, by reason (no_client_certificate, certificate_not_verified, not_tls, "
     "other), as gRPC reports them."},
    {"fabricmon_aggregator_rejected_messages_total", MetricType::kCounter, Unit::kNone,
     "Agent messages rejected, by reason; each ends that agent's stream."},
    {"fabricmon_aggregator_retired_series_samples_dropped_total", MetricType::kCounter, Unit::kNone,
     "Values that arrived for a series after it was retired (dropped; its agent is asked to "
     "declare it again)."},
    {"fabricmon_aggregator_samples_total", MetricType::kCounter, Unit::kNone, "Samples stored."},
    {"fabricmon_aggregator_scrape_duration_seconds", MetricType::kGauge, Unit::kSeconds,
     "Time the previous /metrics scrape took to build."},
    {"fabricmon_aggregator_series", MetricType::kGauge, Unit::kNone, "Series held for all nodes."},
    {"fabricmon_aggregator_series_retired_total", MetricType::kCounter, Unit::kNone,
     "Series retired after series_retention_s without a sample (memory freed)."},
    {"fabricmon_aggregator_streams", MetricType::kGauge, Unit::kNone,
     "Agent streams currently open."},
    {"fabricmon_aggregator_streams_opened_total", MetricType::kCounter, Unit::kNone,
     "Agent streams accepted."},
    {"fabricmon_aggregator_timestamps_backwards_total", MetricType::kCounter, Unit::kNone,
     "Batches older than their series' latest sample (a node's clock stepped back), stored "
     "re-based after it."},
    {"fabricmon_detector_tick_seconds", MetricType::kGauge, Unit::kSeconds,
     "Time the last detector evaluation took (all detectors)."},
    {"fabricmon_finding_active", MetricType::kGauge, Unit::kNone,
     "1 per active finding. kind: link_flapping, link_degraded, congestion, congestion_spreading, "
     "pause_storm, ecn_misconfigured, tcp_fallback, nvlink_degraded, nvlink_down; a host subject "
     "in node/device/port, a switch port in switch/switch_guid/port, the other end of its cable in "
     "peer. Labels stay the same while the incident lasts."},
    {"fabricmon_finding_depth_hops", MetricType::kGauge, Unit::kNone,
     "Depth in hops of an active congestion_spreading tree."},
    {"fabricmon_finding_victims", MetricType::kGauge, Unit::kNone,
     "Victim ports of an active congestion_spreading finding."},
    {"fabricmon_findings_total", MetricType::kCounter, Unit::kNone,
     "Incidents raised since the aggregator started, by kind and the severity they were raised "
     "with (an escalation is not a new incident)."},
    {"fabricmon_job_node_info", MetricType::kInfo, Unit::kNone,
     "1 for each node of each registered job (job membership, for joins in queries)."},
    {"fabricmon_job_start_time_seconds", MetricType::kGauge, Unit::kSeconds,
     "When the job was registered (Unix time)."},
    {"fabricmon_jobs", MetricType::kGauge, Unit::kNone,
     "Jobs registered with the aggregator (StartJob, not yet ended)."},
    {"fabricmon_node_agent_dropped_batches_total", MetricType::kCounter, Unit::kNone,
     "Batches the node's agent reported dropping from its full replay buffer."},
    {"fabricmon_node_clock_steps_total", MetricType::kCounter, Unit::kNone,
     "Batches of the node re-based because its clock stepped back or ahead (stored at the "
     "aggregator's estimate of their time, not refused)."},
    {"fabricmon_node_duplicate_batches_total", MetricType::kCounter, Unit::kNone,
     "Replayed batches of the node that were already stored."},
    {"fabricmon_node_identity_conflicts_total", MetricType::kCounter, Unit::kNone,
     "Streams refused because another boot id held the node's identity (two machines with one "
     "certificate or node name)."},
    {"fabricmon_node_last_seen_age_seconds", MetricType::kGauge, Unit::kSeconds,
     "Seconds since the node's agent last sent anything."},
    {"fabricmon_node_sequence_gaps_total", MetricType::kCounter, Unit::kNone,
     "Batches of the node that never arrived (agent buffer overflow or agent restart), by sequence "
     "number."},
    {"fabricmon_node_series", MetricType::kGauge, Unit::kNone, "Series the node has declared."},
    {"fabricmon_node_series_resets_total", MetricType::kCounter, Unit::kNone,
     "Counters of the node that went down (reset): a new baseline was started."},
    {"fabricmon_node_up", MetricType::kGauge, Unit::kNone,
     "1 if the node's agent is connected and sent data within the stale interval."},
    {"fabricmon_recording_active", MetricType::kGauge, Unit::kNone,
     "1 while accepted agent messages are recorded; 0 once recording stopped on an error (see "
     "fabricmon_recording_errors_total)."},
    {"fabricmon_recording_bytes", MetricType::kGauge, Unit::kBytes,
     "Bytes of the recording segment files in the directory."},
    {"fabricmon_recording_bytes_written_total", MetricType::kCounter, Unit::kNone,
     "Bytes written to recording segments since start."},
    {"fabricmon_recording_errors_total", MetricType::kCounter, Unit::kNone,
     "Recording errors by kind: write (recording stopped), open (a segment could not be created; "
     "stopped), queue_full (the writer fell behind; records dropped), delete (an old segment could "
     "not be removed)."},
    {"fabricmon_recording_oldest_timestamp_seconds", MetricType::kGauge, Unit::kSeconds,
     "Receive time of the oldest record kept (Unix seconds); 0 with none: how far back a replay "
     "can go."},
    {"fabricmon_recording_segments", MetricType::kGauge, Unit::kNone,
     "Recording segment files in the directory (kept within max_bytes and max_age_s)."},
    {"fabricmon_remote_write_oldest_pending_age_seconds", MetricType::kGauge, Unit::kSeconds,
     "Seconds the oldest pending sample of the remote_write endpoint has waited (0 when none is "
     "pending)."},
    {"fabricmon_remote_write_retries_total", MetricType::kCounter, Unit::kNone,
     "Requests to the remote_write endpoint that will be retried (5xx, 429, no response)."},
    {"fabricmon_remote_write_samples_dropped_total", MetricType::kCounter, Unit::kNone,
     "Samples never delivered to the remote_write endpoint, by reason (queue_full: its buffer was "
     "full; shutdown: still pending at the shutdown flush deadline)."},
    {"fabricmon_remote_write_samples_failed_total", MetricType::kCounter, Unit::kNone,
     "Samples the remote_write endpoint refused with a non-retryable status (4xx other than 429): "
     "dropped, not retried."},
    {"fabricmon_remote_write_samples_pending", MetricType::kGauge, Unit::kNone,
     "Samples queued or in flight for the remote_write endpoint."},
    {"fabricmon_remote_write_samples_sent_total", MetricType::kCounter, Unit::kNone,
     "Samples the remote_write endpoint accepted (2xx)."},
    {"fabricmon_series_saturated", MetricType::kGauge, Unit::kNone,
     "1 for each saturating counter pinned at its maximum (its rate reads 0 but is unknown; clear "
     "the counter to resume): metric names the counter."},
    {"fabricmon_topology_disagreements", MetricType::kGauge, Unit::kNone,
     "Cables the fabric collector reported that contradict the operator's topology file or link "
     "list (the operator's cable is kept)."},
    {"fabricmon_topology_guid_conflicts", MetricType::kGauge, Unit::kNone,
     "HCA GUIDs claimed by more than one node's inventory (such a GUID names none of them)."},
    {"fabricmon_topology_links", MetricType::kGauge, Unit::kNone,
     "Cables in the fabric graph the detectors use."},
    {"fabricmon_topology_unclaimed_ca", MetricType::kGauge, Unit::kNone,
     "1 for each fabric CA (host HCA) the topology knows that no node known to the aggregator "
     "claims in its inventory: a host whose agent is missing (detectors.unclaimed_ca_ignore leaves "
     "out hosts that run none by design)."},
};

}  // namespace

const std::vector<CatalogueFamily>& AggregatorFamilies() {
  static const std::vector<CatalogueFamily>* const families = [] {
    auto* out = new std::vector<CatalogueFamily>();
    for (const Entry& entry : kEntries) {
      CatalogueFamily family;
      family.name = entry.name;
      family.help = entry.help;
      family.type = entry.type;
      family.unit = entry.unit;
      out->push_back(std::move(family));
    }
    std::sort(out->begin(), out->end(),
              [](const CatalogueFamily& a, const CatalogueFamily& b) { return a.name < b.name; });
    return out;
  }();
  return *families;
}

const CatalogueFamily* FindAggregatorFamily(absl::string_view name) {
  const std::vector<CatalogueFamily>& families = AggregatorFamilies();
  auto it = std::lower_bound(
      families.begin(), families.end(), name,
      [](const CatalogueFamily& family, absl::string_view key) { return family.name < key; });
  return it != families.end() && it->name == name ? &*it : nullptr;
}

const CatalogueFamily* FindProjectFamily(absl::string_view name) {
  const CatalogueFamily* family = MetricCatalogue::Project().Find(name);
  return family != nullptr ? family : FindAggregatorFamily(name);
}

}  // namespace fabricmon::wire
