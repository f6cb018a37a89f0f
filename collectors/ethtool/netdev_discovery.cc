#include "collectors/ethtool/netdev_discovery.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "collectors/core/rdma_netdev_map.h"
#include "daemon/common/file_reader.h"

namespace fabricmon::collectors::ethtool {
namespace {

constexpr char kEtherType[] = "1";  // ARPHRD_ETHER in <root>/class/net/<n>/type

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;  // a dangling `device` link still counts
}

class Finder {
 public:
  Finder(const std::string& root, bool all_physical)
      : root_(root), net_dir_(JoinPath(root, "class/net")), all_physical_(all_physical) {
    absl::StatusOr<std::vector<std::string>> names = ListDirectory(net_dir_);
    if (names.ok()) {
      net_listed_ = true;
      present_.insert(names->begin(), names->end());
    }
  }

  std::vector<NetdevCandidate> Run() {
    const RdmaNetdevMap map = RdmaNetdevMap::Read(root_);
    // GID-table links first: they set the exact port of a netdev also found by its PCI function.
    for (const RdmaNetdevLink& link : map.links()) {
      if (link.source == RdmaNetdevSource::kGidTable) {
        // Uppers (a RoCE LAG's bond, a VLAN) have no ethtool statistics; their ports do.
        for (const std::string& netdev : PhysicalNetdevsBelow(root_, link.netdev)) {
          Add(netdev, link.rdma_device, link.port);
        }
      }
    }
    for (const RdmaNetdevLink& link : map.links()) {
      if (link.source == RdmaNetdevSource::kPciFunction) {
        Add(link.netdev, link.rdma_device, link.port);
      }
    }
    if (all_physical_) {
      for (const std::string& name : present_) {
        if (Exists(JoinPath(net_dir_, name + "/device"))) {
          found_[name];  // no RDMA device unless a link above added one
        }
      }
    }
    std::vector<NetdevCandidate> out;
    out.reserve(found_.size());
    for (auto& [name, entry] : found_) {
      NetdevCandidate candidate;
      candidate.name = name;
      candidate.rdma_devices.assign(entry.rdma.begin(), entry.rdma.end());
      candidate.rdma_port = entry.port;
      out.push_back(std::move(candidate));
    }
    return out;
  }

 private:
  struct Entry {
    std::set<std::string> rdma;
    uint32_t port = 0;
  };

  // RoCE only: IPoIB netdevs (type 32) also sit behind RDMA devices but are InfiniBand.
  bool IsEthernet(const std::string& name) {
    absl::StatusOr<std::string> type = ReadTrimmed(JoinPath(net_dir_, name + "/type"));
    return !type.ok() || *type == kEtherType;
  }

  bool Present(const std::string& name) {
    // Without a readable class/net (a capture of class/infiniband only) names cannot be checked.
    return !net_listed_ || present_.count(name) > 0;
  }

  void Add(const std::string& netdev, const std::string& rdma, uint32_t port) {
    if (!Present(netdev) || !IsEthernet(netdev)) {
      return;
    }
    Entry& entry = found_[netdev];
    entry.rdma.insert(rdma);
    if (entry.port == 0) {
      entry.port = port;  // GID-table links come first for each netdev: the exact port
    }
  }

  const std::string root_;
  const std::string net_dir_;
  const bool all_physical_;
  bool net_listed_ = false;
  std::set<std::string> present_;
  std::map<std::string, Entry> found_;
};

}  // namespace

std::vector<NetdevCandidate> FindNetdevs(const std::string& sysfs_root, bool all_physical) {
  return Finder(sysfs_root, all_physical).Run();
}

}  // namespace fabricmon::collectors::ethtool
