#pragma once

// The agent's own families: its health (replay buffer, stream, series ids) and each collector
// run's outcome. The agent streams them like hardware counters, so they are part of the
// aggregator's metric catalogue. Pure data, header only (the catalogue needs no agent code).

#include "collectors/core/family_spec.h"

namespace fabricmon::agent {

using collectors::CounterFamily;
using collectors::FamilySpec;
using collectors::GaugeFamily;

inline constexpr FamilySpec kCollectorSuccessFamily =
    GaugeFamily("fabricmon_collector_success",
                "1 if the collector's last run succeeded (absent hardware counts as 0).",
                collectors::Unit::kNone);
inline constexpr FamilySpec kCollectorDurationFamily =
    GaugeFamily("fabricmon_collector_duration_seconds", "Wall time of the collector's last run.",
                collectors::Unit::kSeconds, 1e-9);
inline constexpr FamilySpec kCollectorPresentFamily =
    GaugeFamily("fabricmon_collector_hardware_present",
                "1 if the collector's last discovery found its hardware, 0 if absent.",
                collectors::Unit::kNone);

inline constexpr FamilySpec kCollectorTurnedOffFamily = GaugeFamily(
    "fabricmon_collector_turned_off",
    "1 for a collector the agent turned off by rule; reason=\"capture\": the agent reads a "
    "captured tree and the collector would read this host instead (enable it explicitly to "
    "override).",
    collectors::Unit::kNone);

inline constexpr FamilySpec kReplayBufferBytesFamily =
    GaugeFamily("fabricmon_agent_replay_buffer_bytes",
                "Bytes of unacknowledged cycles held for replay.", collectors::Unit::kBytes);
inline constexpr FamilySpec kReplayBufferBatchesFamily =
    GaugeFamily("fabricmon_agent_replay_buffer_batches", "Unacknowledged batches held for replay.",
                collectors::Unit::kNone);
inline constexpr FamilySpec kDroppedBatchesFamily =
    CounterFamily("fabricmon_agent_dropped_batches_total",
                  "Batches dropped unacknowledged because the replay buffer was full "
                  "and confirmed lost (announced to the aggregator).",
                  collectors::Unit::kNone, 64, collectors::Overflow::kWraps);
inline constexpr FamilySpec kEvictedUnconfirmedFamily =
    GaugeFamily("fabricmon_agent_evicted_unconfirmed_batches",
                "Batches evicted from the full replay buffer whose fate the next "
                "ack or reconnect decides (lost unless the aggregator stored them).",
                collectors::Unit::kNone);
inline constexpr FamilySpec kDroppedSamplesFamily =
    CounterFamily("fabricmon_agent_dropped_samples_total",
                  "Samples in batches dropped from the full replay buffer.",
                  collectors::Unit::kNone, 64, collectors::Overflow::kWraps);
inline constexpr FamilySpec kStreamConnectedFamily = GaugeFamily(
    "fabricmon_agent_stream_connected",
    "1 while the telemetry stream to the aggregator is established.", collectors::Unit::kNone);
inline constexpr FamilySpec kStreamConnectsFamily =
    CounterFamily("fabricmon_agent_stream_connects_total",
                  "Telemetry streams established (first connect and reconnects).",
                  collectors::Unit::kNone, 64, collectors::Overflow::kWraps);
inline constexpr FamilySpec kStreamAttemptsFamily =
    CounterFamily("fabricmon_agent_stream_connect_attempts_total",
                  "Telemetry stream attempts, successful or not.", collectors::Unit::kNone, 64,
                  collectors::Overflow::kWraps);
inline constexpr FamilySpec kReplayedBatchesFamily =
    CounterFamily("fabricmon_agent_replayed_batches_total", "Batches sent again after a reconnect.",
                  collectors::Unit::kNone, 64, collectors::Overflow::kWraps);
inline constexpr FamilySpec kSeriesFamily =
    GaugeFamily("fabricmon_agent_series",
                "Series the agent numbers now (ids of series its collectors "
                "stopped producing are reused after 10 minutes).",
                collectors::Unit::kNone);
inline constexpr FamilySpec kSeriesIdsFamily =
    GaugeFamily("fabricmon_agent_series_ids",
                "Highest series id handed out: stays near fabricmon_agent_series "
                "when ids are reused under churn.",
                collectors::Unit::kNone);
inline constexpr FamilySpec kSentBytesFamily = CounterFamily(
    "fabricmon_agent_sent_bytes_total", "Protobuf bytes written to the telemetry stream.",
    collectors::Unit::kBytes, 64, collectors::Overflow::kWraps);

inline constexpr FamilySpec kAggregatorInfoFamily = GaugeFamily(
    "fabricmon_agent_aggregator_info",
    "1 for the aggregator the agent streams to now (address) and its rank for this node in the "
    "rendezvous ranking (rank 0: the primary; higher: a fallback while better ones are "
    "unreachable).",
    collectors::Unit::kNone);
inline constexpr FamilySpec kAggregatorFailoversFamily =
    CounterFamily("fabricmon_agent_aggregator_failovers_total",
                  "Moves to the next aggregator in rank after the one in use held no stream for "
                  "failover_after_ms.",
                  collectors::Unit::kNone, 64, collectors::Overflow::kWraps);
inline constexpr FamilySpec kAggregatorFailbacksFamily = CounterFamily(
    "fabricmon_agent_aggregator_failbacks_total",
    "Returns to a better-ranked aggregator after it was reachable for failback_after_ms.",
    collectors::Unit::kNone, 64, collectors::Overflow::kWraps);

inline constexpr FamilySpec kAgentFamilies[] = {
    kCollectorSuccessFamily,    kCollectorDurationFamily,
    kCollectorPresentFamily,    kCollectorTurnedOffFamily,
    kReplayBufferBytesFamily,   kReplayBufferBatchesFamily,
    kDroppedBatchesFamily,      kEvictedUnconfirmedFamily,
    kDroppedSamplesFamily,      kStreamConnectedFamily,
    kStreamConnectsFamily,      kStreamAttemptsFamily,
    kReplayedBatchesFamily,     kSeriesFamily,
    kSeriesIdsFamily,           kSentBytesFamily,
    kAggregatorInfoFamily,      kAggregatorFailoversFamily,
    kAggregatorFailbacksFamily,
};

}  // namespace fabricmon::agent
