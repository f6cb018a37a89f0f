#pragma once

// The families of the netdev collector: per-netdev attributes and identity, statistics/ files
// (SpecForStatistic) and the curated TCP set (CuratedTcpMetrics). Pure data, no I/O.

#include <cstdint>
#include <vector>

#include "collectors/core/family_spec.h"

namespace fabricmon::collectors::netdev {

// sysfs prints netdev statistics from rtnl_link_stats64 (u64); drivers without ndo_get_stats64
// fill the legacy struct net_device_stats, whose fields are unsigned long, and the core widens
// them (net/core/dev.c netdev_stats_to_stats64). /proc/net/snmp and netstat fields are unsigned
// long too. On the 64-bit kernels GPU nodes run (x86_64, aarch64) all of them wrap at 2^64.
inline constexpr uint8_t kKernelLongBits = 64;
// carrier_changes / carrier_up_count / carrier_down_count are atomic_t printed with "%d"
// (net/core/net-sysfs.c): 32-bit, and they print negative past 2^31.
inline constexpr uint8_t kCarrierCounterBits = 32;
// sysfs speed is Mb/s (ethtool SPEED_*): bytes/s = Mb/s × 10^6 / 8.
inline constexpr double kMegabitsToBytes = 1e6 / 8;

inline constexpr FamilySpec kOperStateFamily =
    GaugeFamily("fabricmon_netdev_oper_state",
                "RFC 2863 operational state (sysfs operstate): 0 unknown, 1 notpresent, 2 down, "
                "3 lowerlayerdown, 4 testing, 5 dormant, 6 up.",
                Unit::kState);
inline constexpr FamilySpec kCarrierFamily =
    GaugeFamily("fabricmon_netdev_carrier",
                "1 when the netdev has carrier (physical link up), 0 when not; absent while the "
                "netdev is administratively down.",
                Unit::kState);
inline constexpr FamilySpec kCarrierChangesFamily =
    CounterFamily("fabricmon_netdev_carrier_changes_total",
                  "Carrier transitions up or down since the netdev was created (= carrier_up + "
                  "carrier_down); 32-bit, wraps.",
                  Unit::kNone, kCarrierCounterBits, Overflow::kWraps);
inline constexpr FamilySpec kCarrierUpFamily =
    CounterFamily("fabricmon_netdev_carrier_up_total",
                  "Times the carrier came up (sysfs carrier_up_count); 32-bit, wraps.", Unit::kNone,
                  kCarrierCounterBits, Overflow::kWraps);
inline constexpr FamilySpec kCarrierDownFamily =
    CounterFamily("fabricmon_netdev_carrier_down_total",
                  "Times the carrier went down: link flaps, edge-exact (sysfs "
                  "carrier_down_count); 32-bit, wraps.",
                  Unit::kNone, kCarrierCounterBits, Overflow::kWraps);
inline constexpr FamilySpec kMtuFamily = GaugeFamily(
    "fabricmon_netdev_mtu_bytes", "Netdev MTU in bytes (L3 payload size).", Unit::kBytes);
inline constexpr FamilySpec kSpeedFamily =
    GaugeFamily("fabricmon_netdev_speed_bytes_per_second",
                "Negotiated link speed (sysfs speed, Mb/s) in bytes per second; absent when "
                "unknown (link down, no link settings).",
                Unit::kBytesPerSecond, kMegabitsToBytes);
inline constexpr FamilySpec kNetdevInfoFamily = InfoFamily(
    "fabricmon_netdev_info",
    "Netdev identity; value 1. kind: ethernet, rdma_ethernet (RoCE/iWARP: RDMA bypasses the "
    "byte counters), ipoib, loopback, virtual or other. driver from device/driver; "
    "rdma_device is the RDMA device on it.");

inline constexpr FamilySpec kNetdevFixedFamilies[] = {
    kOperStateFamily,   kCarrierFamily, kCarrierChangesFamily, kCarrierUpFamily,
    kCarrierDownFamily, kMtuFamily,     kSpeedFamily,          kNetdevInfoFamily,
};

// Every family with a fixed name the collector can declare. statistics/ files the kernel adds
// later get names derived from the file name: not listed (the aggregator pins such families).
void AppendNetdevFamilies(std::vector<SeriesDesc>* out);

}  // namespace fabricmon::collectors::netdev
