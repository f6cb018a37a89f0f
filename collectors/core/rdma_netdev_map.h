#pragma once

// Which netdev belongs to which RDMA device port, read from a sysfs root (default /sys, or a
// fixture tree). The one place the ib_sysfs, ethtool and netdev collectors learn it from.
//
// sysfs tells it two ways, and a port may show either, both or neither:
//   - the GID table: <root>/class/infiniband/<dev>/ports/<n>/gid_attrs/ndevs/<index> names the
//     netdev of each RoCE GID (exact device and port; a RoCE LAG's bond, a VLAN; unused entries
//     and every entry of an InfiniBand port are empty or fail with EINVAL);
//   - the PCI function: an RDMA device and the netdevs registered on the same bus device
//     (<root>/class/net/<netdev>/device/infiniband/<dev>, or from the other side
//     <root>/class/infiniband/<dev>/device/net/<netdev>), on RDMA port dev_port + 1 (dev_port is
//     the 0-based port of a multi-port function such as mlx4; what ibdev2netdev assumes). This is
//     how IPoIB netdevs, VFs and RoCE ports with no populated GID are found.
// GID tables also list netdevs of other network namespaces (a pod's macvlan): a netdev absent from
// <root>/class/net is left out, unless class/net cannot be listed at all (a capture of
// class/infiniband alone), where names cannot be checked.
//
// Reading never fails: a missing directory or file contributes nothing. Immutable once read;
// thread-compatible.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace fabricmon::collectors {

// How sysfs showed a link.
enum class RdmaNetdevSource {
  kGidTable,     // named by the port's GID table: device and port are exact
  kPciFunction,  // same bus device; port from dev_port
};

struct RdmaNetdevLink {
  std::string netdev;
  std::string rdma_device;
  // 1-based RDMA port; 0 when unknown (a PCI function whose dev_port is not a number).
  uint32_t port = 0;
  RdmaNetdevSource source = RdmaNetdevSource::kGidTable;
};

// What a reading may open. An operator's exclusion is a promise that no file of that device is
// opened (a firmware-restricted function logs a kernel error for every read): an RDMA device
// that `rdma_device` refuses has none of its files read (its GID tables, its device/net), a
// netdev that `netdev` refuses none of its class/net entries. Unset: everything.
struct RdmaNetdevScope {
  std::function<bool(absl::string_view)> rdma_device;
  std::function<bool(absl::string_view)> netdev;
};

class RdmaNetdevMap {
 public:
  // Reads the GID tables of every port under <root>/class/infiniband and the PCI functions of
  // every netdev under <root>/class/net and of every RDMA device, within `scope`.
  static RdmaNetdevMap Read(const std::string& sysfs_root, const RdmaNetdevScope& scope = {});

  // Every link, unique, sorted by netdev, then GID-table links before PCI-function ones, then
  // device and port.
  const std::vector<RdmaNetdevLink>& links() const { return links_; }

  // Netdevs of one RDMA port, unique: those its GID table names (sorted), then those of its PCI
  // function on that port (sorted). Empty for a port with no netdev (InfiniBand without IPoIB,
  // iWARP, EFA).
  std::vector<std::string> NetdevsOf(absl::string_view rdma_device, uint32_t port) const;

  // Every link of one netdev, in links() order (GID-table links first). Empty when no RDMA
  // device maps it.
  std::vector<RdmaNetdevLink> LinksOf(absl::string_view netdev) const;

  // The RDMA port behind a netdev: the first GID-table link when a GID table names it (exact),
  // else the first PCI-function link (the lowest-named RDMA device of its bus device). nullopt
  // when no RDMA device maps it.
  std::optional<RdmaNetdevLink> LinkOf(absl::string_view netdev) const;

 private:
  std::vector<RdmaNetdevLink> links_;
};

// The physical netdevs below `netdev` in <root>/class/net: itself when it has a `device` entry (a
// bus device: even a dangling link) or no `lower_*` links, else, recursively, the netdevs its
// `lower_*` links name (a VLAN on a bond on two ports → both ports). Upper devices have no
// statistics of their own. Depth is bounded (a VLAN on a bond on a port is the deepest stack seen
// in practice; the bound also stops link loops). Sorted, unique.
std::vector<std::string> PhysicalNetdevsBelow(const std::string& sysfs_root,
                                              const std::string& netdev);

}  // namespace fabricmon::collectors
