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

// Netdevs behind RDMA devices (collectors/core/rdma_netdev_map.h: GID tables and PCI functions),
// where an upper named by a GID table (VLAN, bond) is replaced by the physical netdevs below it,
// because uppers have no ethtool statistics of their own; keeping only Ethernet netdevs (`type` 1
// when readable: IPoIB is not RoCE) that exist under <root>/class/net.
// With `all_physical`, also every <root>/class/net/<n> that has a `device` entry (virtual
// netdevs — lo, veth, bridges — have none).
// Sorted by name. Missing directories simply contribute nothing.
std::vector<NetdevCandidate> FindNetdevs(const std::string& sysfs_root, bool all_physical);

}  // namespace fabricmon::collectors::ethtool
