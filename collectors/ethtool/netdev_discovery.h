#pragma once

// Which netdevs the ethtool collector reads, found in sysfs under a configurable root (default
// /sys) so fixture trees work. Pure sysfs reading, no ioctl; thread-compatible.

#include <cstdint>
#include <string>
#include <vector>

namespace fabricmon::collectors::ethtool {

struct NetdevCandidate {
  std::string name;
  std::vector<std::string> rdma_devices;  // sorted, unique; empty when found only as physical
  uint32_t rdma_port = 0;                 // first RDMA port that maps to it (0 = unknown)
};

// Netdevs behind RDMA devices:
//   - <root>/class/infiniband/*/ports/*/gid_attrs/ndevs/* name the netdev of each RoCE GID;
//     upper devices there (VLAN, bond: no `device` entry, `lower_*` links) are replaced by the
//     physical netdevs below them, because uppers have no ethtool statistics of their own;
//   - <root>/class/net/<n>/device/infiniband/<dev> (the PCI function has an RDMA device);
// keeping only Ethernet netdevs (`type` 1 when readable: IPoIB is not RoCE) that exist under
// <root>/class/net (GID tables also list netdevs of other network namespaces).
// With `all_physical`, also every <root>/class/net/<n> that has a `device` entry (virtual
// netdevs — lo, veth, bridges — have none).
// Sorted by name. Missing directories simply contribute nothing.
std::vector<NetdevCandidate> FindNetdevs(const std::string& sysfs_root, bool all_physical);

}  // namespace fabricmon::collectors::ethtool
