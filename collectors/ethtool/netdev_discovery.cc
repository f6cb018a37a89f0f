#include "collectors/ethtool/netdev_discovery.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "daemon/common/file_reader.h"

namespace fabricmon::collectors::ethtool {
namespace {

// VLAN on bond on port is the deepest stack seen in practice; the bound also stops link loops.
constexpr int kMaxUpperDepth = 4;
constexpr char kEtherType[] = "1";  // ARPHRD_ETHER in <root>/class/net/<n>/type

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;  // a dangling `device` link still counts
}

class Finder {
 public:
  Finder(const std::string& root, bool all_physical)
      : net_dir_(JoinPath(root, "class/net")),
        ib_dir_(JoinPath(root, "class/infiniband")),
        all_physical_(all_physical) {
    absl::StatusOr<std::vector<std::string>> names = ListDirectory(net_dir_);
    if (names.ok()) {
      net_listed_ = true;
      present_.insert(names->begin(), names->end());
    }
  }

  std::vector<NetdevCandidate> Run() {
    FromGidTables();
    FromPciFunctions();
    if (all_physical_) {
      for (const std::string& name : present_) {
        if (Exists(JoinPath(net_dir_, name + "/device"))) {
          found_[name];  // no RDMA device unless another rule adds one
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

  std::string Attribute(const std::string& path) {
    absl::StatusOr<std::string> value = ReadTrimmed(path);
    return value.ok() ? *value : std::string();
  }

  // RoCE only: IPoIB netdevs (type 32) also sit behind RDMA devices but are InfiniBand.
  bool IsEthernet(const std::string& name) {
    absl::StatusOr<std::string> type = ReadTrimmed(JoinPath(net_dir_, name + "/type"));
    return !type.ok() || *type == kEtherType;
  }

  bool Present(const std::string& name) {
    // Without a readable class/net (a capture of class/infiniband only) names cannot be checked.
    return !net_listed_ || present_.count(name) > 0;
  }

  // The physical netdevs under `name` (itself when it has a `device` entry or no lowers).
  void Lowest(const std::string& name, int depth, std::vector<std::string>& out) {
    const std::string dir = JoinPath(net_dir_, name);
    if (depth >= kMaxUpperDepth || Exists(JoinPath(dir, "device"))) {
      out.push_back(name);
      return;
    }
    absl::StatusOr<std::vector<std::string>> entries = ListDirectory(dir);
    std::vector<std::string> lowers;
    if (entries.ok()) {
      for (const std::string& entry : *entries) {
        if (absl::StartsWith(entry, "lower_")) {
          lowers.push_back(entry.substr(6));
        }
      }
    }
    if (lowers.empty()) {
      out.push_back(name);  // e.g. a veth under Soft-RoCE: ask the driver itself
      return;
    }
    for (const std::string& lower : lowers) {
      Lowest(lower, depth + 1, out);
    }
  }

  void Add(const std::string& netdev, const std::string& rdma, uint32_t port) {
    if (!Present(netdev) || !IsEthernet(netdev)) {
      return;
    }
    Entry& entry = found_[netdev];
    entry.rdma.insert(rdma);
    if (entry.port == 0) {
      entry.port = port;
    }
  }

  void FromGidTables() {
    absl::StatusOr<std::vector<std::string>> devices = ListDirectory(ib_dir_);
    if (!devices.ok()) {
      return;
    }
    for (const std::string& device : *devices) {
      const std::string ports_dir = JoinPath(ib_dir_, device + "/ports");
      absl::StatusOr<std::vector<std::string>> ports = ListDirectory(ports_dir);
      if (!ports.ok()) {
        continue;
      }
      for (const std::string& port_name : *ports) {
        uint32_t port = 0;
        if (!absl::SimpleAtoi(port_name, &port)) {
          continue;
        }
        const std::string ndevs_dir = JoinPath(ports_dir, port_name + "/gid_attrs/ndevs");
        absl::StatusOr<std::vector<std::string>> indexes = ListDirectory(ndevs_dir);
        if (!indexes.ok()) {
          continue;  // InfiniBand ports have no netdev GIDs
        }
        std::set<std::string> names;
        for (const std::string& index : *indexes) {
          // Unused GID entries fail to read (EINVAL) or are empty.
          std::string name = Attribute(JoinPath(ndevs_dir, index));
          if (!name.empty()) {
            names.insert(std::move(name));
          }
        }
        for (const std::string& name : names) {
          if (!Present(name)) {
            continue;
          }
          std::vector<std::string> lowest;
          Lowest(name, 0, lowest);
          for (const std::string& netdev : lowest) {
            Add(netdev, device, port);
          }
        }
      }
    }
  }

  void FromPciFunctions() {
    for (const std::string& name : present_) {
      const std::string base = JoinPath(net_dir_, name);
      absl::StatusOr<std::vector<std::string>> rdma =
          ListDirectory(JoinPath(base, "device/infiniband"));
      if (!rdma.ok()) {
        continue;
      }
      uint32_t dev_port = 0;
      // dev_port is 0-based; RDMA ports are 1-based (what ibdev2netdev assumes).
      const bool has_port = absl::SimpleAtoi(Attribute(JoinPath(base, "dev_port")), &dev_port);
      for (const std::string& device : *rdma) {
        Add(name, device, has_port ? dev_port + 1 : 0);
      }
    }
  }

  const std::string net_dir_;
  const std::string ib_dir_;
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
