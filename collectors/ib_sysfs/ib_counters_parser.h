#pragma once

// Pure mapping from kernel file names and contents to fabricmon series semantics for
// /sys/class/infiniband. Hardware facts are cited at the line that encodes them; see
// ../shared/FIELD_NOTES.md §3 and §4.1–4.2.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/core/sample.h"
#include "collectors/core/sysfs_value.h"  // SanitizeName

namespace fabricmon::collectors::ib_sysfs {

// Which directory of a port a counter file lives in.
enum class CounterGroup {
  kCounters,     // ports/N/counters/     (PMA PortCounters / PortCountersExtended)
  kCountersExt,  // ports/N/counters_ext/ (kernels < 4.5: 64-bit data and packets)
  kHwCounters,   // ports/N/hw_counters/  (driver-specific: mlx5 q-counters, congestion, ...)
};

// How a counter file is exported.
struct CounterSpec {
  std::string metric;  // full family name
  std::string help;
  Unit unit = Unit::kNone;
  uint8_t width_bits = 64;
  Overflow overflow = Overflow::kWraps;
  double scale = 1.0;
  bool skip = false;  // not a counter (hw_counters/lifespan is a setting)
};

// Maps one counter file to its series. `pma_extended` is true when the port's counters/ has the
// PortCountersExtended group (unicast_xmit_packets present): data and packet counters are then
// 64-bit; otherwise they are the legacy 32-bit ones that saturate. `driver` is the basename of
// device/driver (e.g. "mlx5_core"), used for hw_counters widths.
CounterSpec SpecForCounter(CounterGroup group, absl::string_view file, bool pma_extended,
                           absl::string_view driver);

// The counters/ files with a fixed meaning (PortCounters fields, data and packet counters):
// every other counters/ file is exported under a name derived from it.
std::vector<absl::string_view> KnownCounterFiles();

// The driver family used to pick hw_counters widths: the device/driver link's basename when
// present ("mlx5_core"). Trees without the link (captures, containers without /sys/devices) fall
// back to a hint from the device name or hca_type ("MT41xx" is ConnectX-4 and later = mlx5); the
// hint is only used for widths, never to find devices.
std::string DriverFamily(absl::string_view driver_link, absl::string_view device_name,
                         absl::string_view hca_type);

// "4: ACTIVE" → {4, "ACTIVE"}; "0: <unknown>" → {0, "<unknown>"}. ok=false if no leading number.
struct PortStateValue {
  bool ok = false;
  uint32_t code = 0;
  std::string name;
};
PortStateValue ParsePortState(absl::string_view content);

// "400 Gb/sec (4X NDR)" → 400e9; "2.5 Gb/sec (1X SDR)" → 2.5e9; "10 Mb/sec" → 10e6.
// Returns 0 when the content has no leading rate.
uint64_t ParseRateBitsPerSecond(absl::string_view content);

// LIDs are printed as hex ("0x1b"); returns 0 on anything else.
uint32_t ParseLid(absl::string_view content);

}  // namespace fabricmon::collectors::ib_sysfs
