#pragma once

// The families of the ib_sysfs collector. Port state, physical state and rate are shared with
// the ib_fabric collector (switch ports read through MADs land in the same families). Counter
// families come from SpecForCounter (ib_counters_parser.h); AppendIbSysfsFamilies lists every
// family this collector can declare under a fixed name. Pure data, no I/O.

#include <vector>

#include "collectors/core/family_spec.h"

namespace fabricmon::collectors::ib_sysfs {

inline constexpr FamilySpec kIbDeviceInfoFamily = InfoFamily(
    "fabricmon_ib_device_info",
    "RDMA device identity; value 1. driver is from device/driver (not the device name).");
inline constexpr FamilySpec kIbPortStateFamily = GaugeFamily(
    "fabricmon_ib_port_state",
    "Port logical state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.", Unit::kState);
inline constexpr FamilySpec kIbPortPhysStateFamily =
    GaugeFamily("fabricmon_ib_port_phys_state",
                "Port physical state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, "
                "5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest.",
                Unit::kState);
inline constexpr FamilySpec kIbPortRateFamily = GaugeFamily(
    "fabricmon_ib_port_rate_bytes_per_second",
    "Negotiated port data rate (sysfs rate), in bytes per second.", Unit::kBytesPerSecond, 1.0 / 8);
inline constexpr FamilySpec kIbPortInfoFamily =
    InfoFamily("fabricmon_ib_port_info",
               "RDMA port attributes; value 1. netdev lists mapped netdevs (RoCE, IPoIB).");
inline constexpr FamilySpec kIbPortUnreadableFamily = GaugeFamily(
    "fabricmon_ib_port_unreadable_counters",
    "Counter files of the port that are not read: EINVAL (restricted firmware) or N/A (no PMA).",
    Unit::kNone);
inline constexpr FamilySpec kIbHwCountersLifespanFamily = GaugeFamily(
    "fabricmon_ib_hw_counters_lifespan_seconds",
    "hw_counters cache lifetime: reads within it return the same value.", Unit::kSeconds, 1e-3);

inline constexpr FamilySpec kIbSysfsFixedFamilies[] = {
    kIbDeviceInfoFamily, kIbPortStateFamily,      kIbPortPhysStateFamily,      kIbPortRateFamily,
    kIbPortInfoFamily,   kIbPortUnreadableFamily, kIbHwCountersLifespanFamily,
};

// Every family with a fixed name the collector can declare: the ones above and the counters
// SpecForCounter maps known files to (each width it can give them). hw_counters/ and unknown
// counters/ files get names derived from the file name: they are not listed (the aggregator
// pins such families at their first declaration).
void AppendIbSysfsFamilies(std::vector<SeriesDesc>* out);

}  // namespace fabricmon::collectors::ib_sysfs
