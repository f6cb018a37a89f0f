#pragma once

// The families the aggregator writes itself — its exporter (node and aggregator health), the
// detection engine's findings and topology, jobs, the recording, remote write, and the text
// exposition's saturated-counter flag — with HELP, type and unit: the aggregator's half of the
// project's metric catalogue (MetricCatalogue::Project() holds the collectors' and the agent's
// half). These constants are the one source: every exporter makes its families from them
// (exposition::EmptyFamily), and AggregatorFamilies() is built from kAggregatorFamilies. No agent
// may declare one (IsReservedFamily). tests/unit/daemon/aggregator/aggregator_server_test.cc checks
// that the exporters write exactly these families; the metric names test checks dashboards and
// alert rules against both halves.

#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/core/family_spec.h"
#include "daemon/wire/metric_catalogue.h"

namespace fabricmon::wire {

using collectors::FamilySpec;
using collectors::GaugeFamily;
using collectors::InfoFamily;
using collectors::Unit;

// The aggregator's counters count what it computes itself: no width, nothing wraps.
constexpr FamilySpec AggregatorCounter(const char* name, const char* help, Unit unit) {
  return FamilySpec{name, help, collectors::MetricType::kCounter,    unit,
                    1.0,  0,    collectors::Overflow::kNotApplicable};
}

inline constexpr FamilySpec kAggregatorAgentDroppedBatchesTotalFamily = AggregatorCounter(
    "fabricmon_aggregator_agent_dropped_batches_total",
    "Batches agents reported dropping from their full replay buffers.", Unit::kNone);
inline constexpr FamilySpec kAggregatorBatchesTotalFamily =
    AggregatorCounter("fabricmon_aggregator_batches_total", "Sample batches stored.", Unit::kNone);
inline constexpr FamilySpec kAggregatorClockStepsTotalFamily = AggregatorCounter(
    "fabricmon_aggregator_clock_steps_total",
    "Batches re-based because their node's clock stepped back or ahead.", Unit::kNone);
inline constexpr FamilySpec kAggregatorDuplicateBatchesTotalFamily =
    AggregatorCounter("fabricmon_aggregator_duplicate_batches_total",
                      "Replayed batches that were already stored (not stored again).", Unit::kNone);
inline constexpr FamilySpec kAggregatorInventoryRefusedTotalFamily =
    AggregatorCounter("fabricmon_aggregator_inventory_refused_total",
                      "Parts of agents' inventories dropped, by reason (not_a_fabric_sweeper: "
                      "switch topology from a node authorization.fabric_sweepers does not name).",
                      Unit::kNone);
inline constexpr FamilySpec kAggregatorNodesFamily =
    GaugeFamily("fabricmon_aggregator_nodes", "Known nodes by state (up, down).", Unit::kNone);
inline constexpr FamilySpec kAggregatorNodesForgottenTotalFamily = AggregatorCounter(
    "fabricmon_aggregator_nodes_forgotten_total",
    "Nodes forgotten after node_retention_s without a batch (series freed).", Unit::kNone);
inline constexpr FamilySpec kAggregatorReceivedBytesTotalFamily =
    AggregatorCounter("fabricmon_aggregator_received_bytes_total",
                      "Protobuf bytes of agent messages received.", Unit::kBytes);
inline constexpr FamilySpec kAggregatorRedeclareRequestsTotalFamily = AggregatorCounter(
    "fabricmon_aggregator_redeclare_requests_total",
    "Series declarations asked of agents again: their series were retired, or a series cap has "
    "room again for series it kept out.",
    Unit::kNone);
inline constexpr FamilySpec kAggregatorRejectedCallsTotalFamily =
    AggregatorCounter("fabricmon_aggregator_rejected_calls_total",
                      "Diagnostics (CLI) calls refused, by reason (not_an_operator: the client "
                      "certificate matches no authorization.operators pattern).",
                      Unit::kNone);
inline constexpr FamilySpec kAggregatorRejectedHandshakesTotalFamily =
    AggregatorCounter("fabricmon_aggregator_rejected_handshakes_total",
                      "TLS handshakes refused, by reason (no_client_certificate, "
                      "certificate_not_verified, not_tls, other), as gRPC reports them.",
                      Unit::kNone);
inline constexpr FamilySpec kAggregatorRejectedMessagesTotalFamily = AggregatorCounter(
    "fabricmon_aggregator_rejected_messages_total",
    "Agent messages rejected, by reason; each ends that agent's stream.", Unit::kNone);
inline constexpr FamilySpec kAggregatorRetiredSeriesSamplesDroppedTotalFamily =
    AggregatorCounter("fabricmon_aggregator_retired_series_samples_dropped_total",
                      "Values that arrived for a series after it was retired (dropped; its agent "
                      "is asked to declare it again).",
                      Unit::kNone);
inline constexpr FamilySpec kAggregatorSamplesTotalFamily =
    AggregatorCounter("fabricmon_aggregator_samples_total", "Samples stored.", Unit::kNone);
inline constexpr FamilySpec kAggregatorScrapeDurationSecondsFamily =
    GaugeFamily("fabricmon_aggregator_scrape_duration_seconds",
                "Time the previous /metrics scrape took to build.", Unit::kSeconds);
inline constexpr FamilySpec kAggregatorSeriesFamily =
    GaugeFamily("fabricmon_aggregator_series", "Series held for all nodes.", Unit::kNone);
inline constexpr FamilySpec kAggregatorSeriesRetiredTotalFamily = AggregatorCounter(
    "fabricmon_aggregator_series_retired_total",
    "Series retired after series_retention_s without a sample (memory freed).", Unit::kNone);
inline constexpr FamilySpec kAggregatorSeriesUnstoredFamily =
    GaugeFamily("fabricmon_aggregator_series_unstored",
                "Series connected agents declared that a series cap (max_series_total, "
                "max_series_per_node) keeps out of the store; their values are dropped, the "
                "nodes' other series stored.",
                Unit::kNone);
inline constexpr FamilySpec kAggregatorStreamsFamily =
    GaugeFamily("fabricmon_aggregator_streams", "Agent streams currently open.", Unit::kNone);
inline constexpr FamilySpec kAggregatorStreamsOpenedTotalFamily = AggregatorCounter(
    "fabricmon_aggregator_streams_opened_total", "Agent streams accepted.", Unit::kNone);
inline constexpr FamilySpec kAggregatorTimestampsBackwardsTotalFamily =
    AggregatorCounter("fabricmon_aggregator_timestamps_backwards_total",
                      "Batches older than their series' latest sample (a node's clock stepped "
                      "back), stored re-based after it.",
                      Unit::kNone);
inline constexpr FamilySpec kAggregatorUnstoredSeriesSamplesDroppedTotalFamily = AggregatorCounter(
    "fabricmon_aggregator_unstored_series_samples_dropped_total",
    "Values of series a series cap keeps out of the store (dropped).", Unit::kNone);
inline constexpr FamilySpec kDetectorTickSecondsFamily =
    GaugeFamily("fabricmon_detector_tick_seconds",
                "Time the last detector evaluation took (all detectors).", Unit::kSeconds);
inline constexpr FamilySpec kFindingActiveFamily = GaugeFamily(
    "fabricmon_finding_active",
    "1 per active finding. kind: link_flapping, link_degraded, congestion, congestion_spreading, "
    "pause_storm, ecn_misconfigured, tcp_fallback, nvlink_degraded, nvlink_down; a host subject in "
    "node/device/port, a switch port in switch/switch_guid/port, the other end of its cable in "
    "peer. Labels stay the same while the incident lasts.",
    Unit::kNone);
inline constexpr FamilySpec kFindingDepthHopsFamily =
    GaugeFamily("fabricmon_finding_depth_hops",
                "Depth in hops of an active congestion_spreading tree.", Unit::kNone);
inline constexpr FamilySpec kFindingVictimsFamily =
    GaugeFamily("fabricmon_finding_victims",
                "Victim ports of an active congestion_spreading finding.", Unit::kNone);
inline constexpr FamilySpec kFindingsTotalFamily =
    AggregatorCounter("fabricmon_findings_total",
                      "Incidents raised since the aggregator started, by kind and the severity "
                      "they were raised with (an escalation is not a new incident).",
                      Unit::kNone);
inline constexpr FamilySpec kJobNodeInfoFamily =
    InfoFamily("fabricmon_job_node_info",
               "1 for each node of each registered job (job membership, for joins in queries).");
inline constexpr FamilySpec kJobStartTimeSecondsFamily = GaugeFamily(
    "fabricmon_job_start_time_seconds", "When the job was registered (Unix time).", Unit::kSeconds);
inline constexpr FamilySpec kJobsFamily =
    GaugeFamily("fabricmon_jobs", "Jobs registered with the aggregator (StartJob, not yet ended).",
                Unit::kNone);
inline constexpr FamilySpec kNodeAgentDroppedBatchesTotalFamily = AggregatorCounter(
    "fabricmon_node_agent_dropped_batches_total",
    "Batches the node's agent reported dropping from its full replay buffer.", Unit::kNone);
inline constexpr FamilySpec kNodeClockStepsTotalFamily =
    AggregatorCounter("fabricmon_node_clock_steps_total",
                      "Batches of the node re-based because its clock stepped back or ahead "
                      "(stored at the aggregator's estimate of their time, not refused).",
                      Unit::kNone);
inline constexpr FamilySpec kNodeDuplicateBatchesTotalFamily =
    AggregatorCounter("fabricmon_node_duplicate_batches_total",
                      "Replayed batches of the node that were already stored.", Unit::kNone);
inline constexpr FamilySpec kNodeIdentityConflictsTotalFamily =
    AggregatorCounter("fabricmon_node_identity_conflicts_total",
                      "Streams refused because another boot id held the node's identity (two "
                      "machines with one certificate or node name).",
                      Unit::kNone);
inline constexpr FamilySpec kNodeLastSeenAgeSecondsFamily =
    GaugeFamily("fabricmon_node_last_seen_age_seconds",
                "Seconds since the node's agent last sent anything.", Unit::kSeconds);
inline constexpr FamilySpec kNodeSequenceGapsTotalFamily =
    AggregatorCounter("fabricmon_node_sequence_gaps_total",
                      "Batches of the node that never arrived (agent buffer overflow or agent "
                      "restart), by sequence number.",
                      Unit::kNone);
inline constexpr FamilySpec kNodeSeriesFamily =
    GaugeFamily("fabricmon_node_series", "Series the node has declared.", Unit::kNone);
inline constexpr FamilySpec kNodeSeriesResetsTotalFamily = AggregatorCounter(
    "fabricmon_node_series_resets_total",
    "Counters of the node that went down (reset): a new baseline was started.", Unit::kNone);
inline constexpr FamilySpec kNodeUpFamily = GaugeFamily(
    "fabricmon_node_up",
    "1 if the node's agent is connected and sent data within the stale interval.", Unit::kNone);
inline constexpr FamilySpec kRecordingActiveFamily =
    GaugeFamily("fabricmon_recording_active",
                "1 while accepted agent messages are recorded; 0 once recording stopped on an "
                "error (see fabricmon_recording_errors_total).",
                Unit::kNone);
inline constexpr FamilySpec kRecordingBytesFamily =
    GaugeFamily("fabricmon_recording_bytes",
                "Bytes of the recording segment files in the directory.", Unit::kBytes);
inline constexpr FamilySpec kRecordingBytesWrittenTotalFamily =
    AggregatorCounter("fabricmon_recording_bytes_written_total",
                      "Bytes written to recording segments since start.", Unit::kNone);
inline constexpr FamilySpec kRecordingErrorsTotalFamily =
    AggregatorCounter("fabricmon_recording_errors_total",
                      "Recording errors by kind: write (recording stopped), open (a segment could "
                      "not be created; stopped), queue_full (the writer fell behind; records "
                      "dropped), delete (an old segment could not be removed).",
                      Unit::kNone);
inline constexpr FamilySpec kRecordingOldestTimestampSecondsFamily =
    GaugeFamily("fabricmon_recording_oldest_timestamp_seconds",
                "Receive time of the oldest record kept (Unix seconds); 0 with none: how far back "
                "a replay can go.",
                Unit::kSeconds);
inline constexpr FamilySpec kRecordingSegmentsFamily = GaugeFamily(
    "fabricmon_recording_segments",
    "Recording segment files in the directory (kept within max_bytes and max_age_s).", Unit::kNone);
inline constexpr FamilySpec kRemoteWriteOldestPendingAgeSecondsFamily =
    GaugeFamily("fabricmon_remote_write_oldest_pending_age_seconds",
                "Seconds the oldest pending sample of the remote_write endpoint has waited (0 when "
                "none is pending).",
                Unit::kSeconds);
inline constexpr FamilySpec kRemoteWriteRequestsTotalFamily = AggregatorCounter(
    "fabricmon_remote_write_requests_total",
    "Requests sent to the remote_write endpoint, by HTTP status code (error: no response).",
    Unit::kNone);
inline constexpr FamilySpec kRemoteWriteBearerTokenReloadsTotalFamily = AggregatorCounter(
    "fabricmon_remote_write_bearer_token_reloads_total",
    "Re-reads of the remote_write endpoint's changed bearer_token_file, by result (ok: a new token "
    "is in use; error: unreadable or no token, the last good one is kept).",
    Unit::kNone);
inline constexpr FamilySpec kRemoteWriteRetriesTotalFamily = AggregatorCounter(
    "fabricmon_remote_write_retries_total",
    "Requests to the remote_write endpoint that will be retried (5xx, 429, no response).",
    Unit::kNone);
inline constexpr FamilySpec kRemoteWriteSentBytesTotalFamily =
    AggregatorCounter("fabricmon_remote_write_sent_bytes_total",
                      "Request body bytes (snappy-compressed, as on the wire without HTTP's own) "
                      "the remote_write endpoint accepted (2xx).",
                      Unit::kNone);
inline constexpr FamilySpec kRemoteWriteSamplesTemplatedTotalFamily = AggregatorCounter(
    "fabricmon_remote_write_samples_templated_total",
    "Samples queued for the remote_write endpoint in a batch of a layout whose labels were "
    "compressed once (the rest are compressed as they come).",
    Unit::kNone);
inline constexpr FamilySpec kRemoteWriteSamplesDroppedTotalFamily = AggregatorCounter(
    "fabricmon_remote_write_samples_dropped_total",
    "Samples never delivered to the remote_write endpoint, by reason (queue_full: its buffer was "
    "full; shutdown: still pending at the shutdown flush deadline).",
    Unit::kNone);
inline constexpr FamilySpec kRemoteWriteSamplesFailedTotalFamily =
    AggregatorCounter("fabricmon_remote_write_samples_failed_total",
                      "Samples the remote_write endpoint refused with a non-retryable status (4xx "
                      "other than 429): dropped, not retried.",
                      Unit::kNone);
inline constexpr FamilySpec kRemoteWriteSamplesPendingFamily =
    GaugeFamily("fabricmon_remote_write_samples_pending",
                "Samples queued or in flight for the remote_write endpoint.", Unit::kNone);
inline constexpr FamilySpec kRemoteWriteSamplesSentTotalFamily =
    AggregatorCounter("fabricmon_remote_write_samples_sent_total",
                      "Samples the remote_write endpoint accepted (2xx).", Unit::kNone);
inline constexpr FamilySpec kSeriesSaturatedFamily =
    GaugeFamily("fabricmon_series_saturated",
                "1 for each saturating counter pinned at its maximum (its rate reads 0 but is "
                "unknown; clear the counter to resume): metric names the counter.",
                Unit::kNone);
inline constexpr FamilySpec kTopologyDisagreementsFamily =
    GaugeFamily("fabricmon_topology_disagreements",
                "Cables the fabric collector reported that contradict the operator's topology file "
                "or link list (the operator's cable is kept).",
                Unit::kNone);
inline constexpr FamilySpec kTopologyGuidConflictsFamily = GaugeFamily(
    "fabricmon_topology_guid_conflicts",
    "HCA GUIDs claimed by more than one node's inventory (such a GUID names none of them).",
    Unit::kNone);
inline constexpr FamilySpec kTopologyLinksFamily = GaugeFamily(
    "fabricmon_topology_links", "Cables in the fabric graph the detectors use.", Unit::kNone);
inline constexpr FamilySpec kTopologyUnclaimedCaFamily =
    GaugeFamily("fabricmon_topology_unclaimed_ca",
                "1 for each fabric CA (host HCA) the topology knows that no node known to the "
                "aggregator claims in its inventory: a host whose agent is missing "
                "(detectors.unclaimed_ca_ignore leaves out hosts that run none by design).",
                Unit::kNone);

// Every family above, sorted by name.
inline constexpr FamilySpec kAggregatorFamilies[] = {
    kAggregatorAgentDroppedBatchesTotalFamily,
    kAggregatorBatchesTotalFamily,
    kAggregatorClockStepsTotalFamily,
    kAggregatorDuplicateBatchesTotalFamily,
    kAggregatorInventoryRefusedTotalFamily,
    kAggregatorNodesFamily,
    kAggregatorNodesForgottenTotalFamily,
    kAggregatorReceivedBytesTotalFamily,
    kAggregatorRedeclareRequestsTotalFamily,
    kAggregatorRejectedCallsTotalFamily,
    kAggregatorRejectedHandshakesTotalFamily,
    kAggregatorRejectedMessagesTotalFamily,
    kAggregatorRetiredSeriesSamplesDroppedTotalFamily,
    kAggregatorSamplesTotalFamily,
    kAggregatorScrapeDurationSecondsFamily,
    kAggregatorSeriesFamily,
    kAggregatorSeriesRetiredTotalFamily,
    kAggregatorSeriesUnstoredFamily,
    kAggregatorStreamsFamily,
    kAggregatorStreamsOpenedTotalFamily,
    kAggregatorTimestampsBackwardsTotalFamily,
    kAggregatorUnstoredSeriesSamplesDroppedTotalFamily,
    kDetectorTickSecondsFamily,
    kFindingActiveFamily,
    kFindingDepthHopsFamily,
    kFindingVictimsFamily,
    kFindingsTotalFamily,
    kJobNodeInfoFamily,
    kJobStartTimeSecondsFamily,
    kJobsFamily,
    kNodeAgentDroppedBatchesTotalFamily,
    kNodeClockStepsTotalFamily,
    kNodeDuplicateBatchesTotalFamily,
    kNodeIdentityConflictsTotalFamily,
    kNodeLastSeenAgeSecondsFamily,
    kNodeSequenceGapsTotalFamily,
    kNodeSeriesFamily,
    kNodeSeriesResetsTotalFamily,
    kNodeUpFamily,
    kRecordingActiveFamily,
    kRecordingBytesFamily,
    kRecordingBytesWrittenTotalFamily,
    kRecordingErrorsTotalFamily,
    kRecordingOldestTimestampSecondsFamily,
    kRecordingSegmentsFamily,
    kRemoteWriteBearerTokenReloadsTotalFamily,
    kRemoteWriteOldestPendingAgeSecondsFamily,
    kRemoteWriteRequestsTotalFamily,
    kRemoteWriteRetriesTotalFamily,
    kRemoteWriteSamplesDroppedTotalFamily,
    kRemoteWriteSamplesFailedTotalFamily,
    kRemoteWriteSamplesPendingFamily,
    kRemoteWriteSamplesSentTotalFamily,
    kRemoteWriteSamplesTemplatedTotalFamily,
    kRemoteWriteSentBytesTotalFamily,
    kSeriesSaturatedFamily,
    kTopologyDisagreementsFamily,
    kTopologyGuidConflictsFamily,
    kTopologyLinksFamily,
    kTopologyUnclaimedCaFamily,
};

// kAggregatorFamilies as catalogue entries, sorted by name.
const std::vector<CatalogueFamily>& AggregatorFamilies();

// The aggregator's family `name`, or null.
const CatalogueFamily* FindAggregatorFamily(absl::string_view name);

// A family of the project, whoever writes it: the collectors' (MetricCatalogue::Project()) or the
// aggregator's; null for any other name.
const CatalogueFamily* FindProjectFamily(absl::string_view name);

}  // namespace fabricmon::wire
