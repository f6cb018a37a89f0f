#pragma once

// The families of the ib_fabric collector: sweep health, per-node and per-port series, and the
// PMA counters (pma.h SpecOf; the same families as ib_sysfs). Pure data: no libibmad, no I/O.

#include <vector>

#include "collectors/core/family_spec.h"

namespace fabricmon::collectors::ib_fabric {

inline constexpr FamilySpec kSweepDurationFamily =
    GaugeFamily("fabricmon_ib_fabric_sweep_duration_seconds",
                "Wall time of the last sweep of the subnet's port counters.", Unit::kSeconds, 1e-9);
inline constexpr FamilySpec kDiscoveryDurationFamily =
    GaugeFamily("fabricmon_ib_fabric_discovery_duration_seconds",
                "Wall time of the last subnet discovery (libibnetdisc).", Unit::kSeconds, 1e-9);
inline constexpr FamilySpec kMadsFamily =
    CounterFamily("fabricmon_ib_fabric_mads_total",
                  "MAD requests of the sweeps by outcome: ok, timeout (every attempt), "
                  "error (status or send error), skipped (node had timed out).",
                  Unit::kNone, 64, Overflow::kWraps);
inline constexpr FamilySpec kMadRetriesFamily =
    CounterFamily("fabricmon_ib_fabric_mad_retries_total",
                  "MADs re-sent after an attempt timed out.", Unit::kNone, 64, Overflow::kWraps);
inline constexpr FamilySpec kDiscoverySmpsFamily = CounterFamily(
    "fabricmon_ib_fabric_discovery_smps_total", "SMPs libibnetdisc used for subnet discoveries.",
    Unit::kNone, 64, Overflow::kWraps);
inline constexpr FamilySpec kNodesFamily = GaugeFamily(
    "fabricmon_ib_fabric_nodes", "Nodes in the subnet at the last discovery.", Unit::kNone);
inline constexpr FamilySpec kLinksFamily =
    GaugeFamily("fabricmon_ib_fabric_links", "Cabled links at the last discovery.", Unit::kNone);
inline constexpr FamilySpec kSweptPortsFamily = GaugeFamily(
    "fabricmon_ib_fabric_swept_ports", "Ports whose counters the sweeps read.", Unit::kNone);
inline constexpr FamilySpec kNodeUpFamily =
    GaugeFamily("fabricmon_ib_fabric_node_up",
                "1 if the node's PMA answered in the last sweep, 0 if it timed out.", Unit::kNone);
inline constexpr FamilySpec kMadTimeoutsFamily =
    CounterFamily("fabricmon_ib_fabric_mad_timeouts_total",
                  "MAD requests to the node that went unanswered on every attempt.", Unit::kNone,
                  64, Overflow::kWraps);
inline constexpr FamilySpec kPortWidthFamily =
    GaugeFamily("fabricmon_ib_fabric_port_width_lanes",
                "Active link width in lanes (PortInfo.LinkWidthActive); 0 when Down.", Unit::kNone);
inline constexpr FamilySpec kLinkInfoFamily =
    InfoFamily("fabricmon_ib_fabric_link_info",
               "The cable on a switch port: the peer node and port, link width "
               "and speed, from the last discovery; value 1.");

inline constexpr FamilySpec kIbFabricOwnFamilies[] = {
    kSweepDurationFamily, kDiscoveryDurationFamily, kMadsFamily,
    kMadRetriesFamily,    kDiscoverySmpsFamily,     kNodesFamily,
    kLinksFamily,         kSweptPortsFamily,        kNodeUpFamily,
    kMadTimeoutsFamily,   kPortWidthFamily,         kLinkInfoFamily,
};

// Every family the collector can declare: the ones above, port state, physical state and rate
// (ib_sysfs_families.h) and each PMA counter at each width it can have.
void AppendIbFabricFamilies(std::vector<SeriesDesc>* out);

}  // namespace fabricmon::collectors::ib_fabric
