#pragma once

// The source seam of the ethtool collector: per-netdev driver info, the ETH_SS_STATS string set
// and the statistics values. The production implementation issues SIOCETHTOOL ioctls (never the
// ethtool program); tests use FixtureEthtoolApi (tests/fakes/ethtool/fixture_ethtool_api.h),
// which replays `ethtool -S` captures (node_exporter's EthtoolFixture idea).
//
// Error codes are errno-exact, so the collector treats a fixture and a kernel alike:
//   NotFound        ENODEV/ENOENT: no such netdev (vanished, renamed, another namespace)
//   Unimplemented   EOPNOTSUPP: the driver has no such ethtool operation (lo, VLAN, bonding)
//   Aborted         the string set changed under GetStats, or kept changing while being read
//                   (GetStringSet): re-read the string set
//   PermissionDenied, Unavailable, ... as daemon/common/status.h ErrnoToStatus maps them.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricmon::collectors {

// ETHTOOL_GDRVINFO.
struct EthtoolDriverInfo {
  std::string driver;  // "mlx5_core", "veth"
  std::string version;
  std::string fw_version;
  std::string bus_info;  // PCI address for PCI functions
  uint32_t n_stats = 0;  // size of ETH_SS_STATS as the driver reported it with the info
};

// Implementations are not thread-safe: one collector thread owns its api.
class EthtoolApi {
 public:
  virtual ~EthtoolApi() = default;

  // Driver identity (ETHTOOL_GDRVINFO).
  virtual absl::StatusOr<EthtoolDriverInfo> GetDriver(absl::string_view netdev) = 0;

  // Names of the ETH_SS_STATS string set in the driver's order (ETHTOOL_GSSET_INFO, falling back
  // to GDRVINFO n_stats on kernels without it, then ETHTOOL_GSTRINGS). Names are returned as the
  // kernel holds them (up to the first NUL, not trimmed): callers normalise them with
  // ethtool::NormalizeStatKey. An empty vector means the driver has no statistics set; some
  // drivers answer Unimplemented instead — callers treat both as "no ethtool statistics".
  virtual absl::StatusOr<std::vector<std::string>> GetStringSet(absl::string_view netdev) = 0;

  // One ETHTOOL_GSTATS call. On entry `values.size()` must be the caller's current string-set
  // size (> 0, else InvalidArgument). On OK, `values` holds the driver's values in string-set
  // order and its size is the driver's *current* count: a size different from the caller's set
  // means the key set changed (DCB reconfiguration; collectors/ethtool/README.md, "The key set
  // depends on configuration") and the names must be
  // re-read before the values can be attributed. Aborted when the set changed in a way the call
  // cannot return values for (it grew past the call's headroom, or the kernel refuses a count
  // mismatch, as newer kernels do): re-read the string set; the values are lost for this call.
  virtual absl::Status GetStats(absl::string_view netdev, std::vector<uint64_t>& values) = 0;
};

// The SIOCETHTOOL implementation. Opens one AF_INET datagram socket (AF_NETLINK as ethtool's
// fallback) at construction; every ioctl acts in the network namespace of the thread that
// constructed it (sockets keep the namespace they were created in), so a caller can build the
// api inside another namespace and use it from any thread. If no socket can be opened, every
// call returns that error. Kernel buffers are placed against a PROT_NONE guard page because older
// kernels ignore the caller's buffer size for GSTRINGS/GSTATS and write the *current* count: a
// set that grew between two calls ends in EFAULT, never in a heap overwrite.
std::unique_ptr<EthtoolApi> CreateIoctlEthtoolApi();

}  // namespace fabricmon::collectors
