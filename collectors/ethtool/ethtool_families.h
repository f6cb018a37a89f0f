#pragma once

// The families of the ethtool collector: its own (netdev info, string set health, extra_keys)
// and every mlx5 family (mlx5_stat_specs.h). Pure data, no I/O.

#include <vector>

#include "collectors/core/family_spec.h"

namespace fabricmon::collectors::ethtool {

inline constexpr FamilySpec kRoceNetdevInfoFamily =
    InfoFamily("fabricmon_roce_netdev_info",
               "Netdev read by the ethtool collector; value 1. driver from ETHTOOL_GDRVINFO; "
               "rdma_device lists the RDMA devices behind it (comma-separated, empty if none).");
inline constexpr FamilySpec kEthtoolStatKeysFamily =
    GaugeFamily("fabricmon_ethtool_stat_keys",
                "Keys in the netdev's ETH_SS_STATS string set (changes with DCB "
                "configuration and channel count).",
                Unit::kNone);
inline constexpr FamilySpec kEthtoolReloadsFamily =
    CounterFamily("fabricmon_ethtool_string_set_reloads_total",
                  "Times the ETH_SS_STATS string set was re-read after its size or names changed.",
                  Unit::kNone, 64, Overflow::kWraps);
inline constexpr FamilySpec kEthtoolExtraDroppedFamily = GaugeFamily(
    "fabricmon_ethtool_extra_keys_dropped",
    "Keys matching extra_keys that are not exported because of extra_keys_limit.", Unit::kNone);
// extra_keys: every selected driver key is one series of this family, the key in a label.
inline constexpr FamilySpec kEthtoolExtraFamily = CounterFamily(
    "fabricmon_ethtool_stat_total",
    "An ethtool statistic selected by extra_keys (untyped driver key, exported as a 64-bit "
    "counter; key is the trimmed ETH_SS_STATS name).",
    Unit::kNone, 64, Overflow::kWraps);

inline constexpr FamilySpec kEthtoolOwnFamilies[] = {
    kRoceNetdevInfoFamily,      kEthtoolStatKeysFamily, kEthtoolReloadsFamily,
    kEthtoolExtraDroppedFamily, kEthtoolExtraFamily,
};

// Every family the collector can declare.
void AppendEthtoolFamilies(std::vector<SeriesDesc>* out);

}  // namespace fabricmon::collectors::ethtool
