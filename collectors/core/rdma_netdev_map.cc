#include "collectors/core/rdma_netdev_map.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/file_reader.h"

namespace fabricmon::collectors {
namespace {

constexpr int kMaxUpperDepth = 4;
constexpr absl::string_view kLowerPrefix = "lower_";

// lstat, not stat: a capture may hold `device` as a dangling link (the procfs fixture does).
bool EntryExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// RDMA port of a netdev on a PCI function, from the directory holding its `dev_port`. A function
// without the file (kernels before 3.15, single-port drivers) has one port; a file that does not
// hold a number leaves the port unknown rather than guessing one.
uint32_t PortFromDevPort(const std::string& netdev_dir) {
  absl::StatusOr<std::string> text = ReadTrimmed(JoinPath(netdev_dir, "dev_port"));
  if (!text.ok()) {
    return absl::IsNotFound(text.status()) ? 1 : 0;
  }
  if (text->empty()) {
    return 1;
  }
  uint32_t dev_port = 0;
  if (!absl::SimpleAtoi(*text, &dev_port) || dev_port >= UINT32_MAX) {
    return 0;
  }
  return dev_port + 1;
}

class Reader {
 public:
  Reader(const std::string& root, const RdmaNetdevScope& scope)
      : net_dir_(JoinPath(root, "class/net")),
        ib_dir_(JoinPath(root, "class/infiniband")),
        scope_(scope) {
    absl::StatusOr<std::vector<std::string>> names = ListDirectory(net_dir_);
    if (names.ok()) {
      net_listed_ = true;
      present_.insert(names->begin(), names->end());
    }
  }

  std::vector<RdmaNetdevLink> Run() {
    absl::StatusOr<std::vector<std::string>> devices = ListDirectory(ib_dir_);
    if (devices.ok()) {
      for (const std::string& device : *devices) {
        if (scope_.rdma_device && !scope_.rdma_device(device)) {
          continue;
        }
        FromGidTables(device);
        FromDeviceNet(device);
      }
    }
    FromNetdevs();
    std::sort(links_.begin(), links_.end(), Less);
    links_.erase(std::unique(links_.begin(), links_.end(), Equal), links_.end());
    return std::move(links_);
  }

 private:
  static auto Key(const RdmaNetdevLink& link) {
    return std::tie(link.netdev, link.source, link.rdma_device, link.port);
  }
  static bool Less(const RdmaNetdevLink& a, const RdmaNetdevLink& b) { return Key(a) < Key(b); }
  static bool Equal(const RdmaNetdevLink& a, const RdmaNetdevLink& b) { return Key(a) == Key(b); }

  bool Present(const std::string& netdev) const {
    return !net_listed_ || present_.count(netdev) > 0;
  }

  // A GID table entry is the kernel's, but a capture's is a file anyone wrote: a name that is not
  // one path component would make later joins leave class/net.
  static bool ValidName(const std::string& netdev) {
    return !netdev.empty() && netdev != "." && netdev != ".." &&
           netdev.find('/') == std::string::npos;
  }

  void Add(const std::string& netdev, const std::string& device, uint32_t port,
           RdmaNetdevSource source) {
    if (!ValidName(netdev) || !Present(netdev)) {
      return;
    }
    links_.push_back(RdmaNetdevLink{netdev, device, port, source});
  }

  void FromGidTables(const std::string& device) {
    const std::string ports_dir = JoinPath(ib_dir_, absl::StrCat(device, "/ports"));
    absl::StatusOr<std::vector<std::string>> ports = ListDirectory(ports_dir);
    if (!ports.ok()) {
      return;
    }
    for (const std::string& port_name : *ports) {
      uint32_t port = 0;
      if (!absl::SimpleAtoi(port_name, &port) || port == 0) {
        continue;
      }
      const std::string ndevs_dir =
          JoinPath(ports_dir, absl::StrCat(port_name, "/gid_attrs/ndevs"));
      absl::StatusOr<std::vector<std::string>> indexes = ListDirectory(ndevs_dir);
      if (!indexes.ok()) {
        continue;  // kernels before 4.13 have no gid_attrs
      }
      std::set<std::string> names;  // a netdev has several GIDs (IPv6 link-local, IPv4-mapped)
      for (const std::string& index : *indexes) {
        absl::StatusOr<std::string> name = ReadTrimmed(JoinPath(ndevs_dir, index));
        if (name.ok() && !name->empty()) {
          names.insert(*std::move(name));
        }
      }
      for (const std::string& name : names) {
        Add(name, device, port, RdmaNetdevSource::kGidTable);
      }
    }
  }

  // <root>/class/infiniband/<dev>/device/net/<netdev>: the RDMA device's bus device seen from
  // the RDMA side (the only way when class/net was not captured).
  void FromDeviceNet(const std::string& device) {
    const std::string dir = JoinPath(ib_dir_, absl::StrCat(device, "/device/net"));
    absl::StatusOr<std::vector<std::string>> netdevs = ListDirectory(dir);
    if (!netdevs.ok()) {
      return;
    }
    for (const std::string& netdev : *netdevs) {
      Add(netdev, device, PortFromDevPort(JoinPath(dir, netdev)), RdmaNetdevSource::kPciFunction);
    }
  }

  void FromNetdevs() {
    for (const std::string& netdev : present_) {
      if (scope_.netdev && !scope_.netdev(netdev)) {
        continue;
      }
      const std::string dir = JoinPath(net_dir_, netdev);
      absl::StatusOr<std::vector<std::string>> devices =
          ListDirectory(JoinPath(dir, "device/infiniband"));
      if (!devices.ok() || devices->empty()) {
        continue;
      }
      const uint32_t port = PortFromDevPort(dir);
      for (const std::string& device : *devices) {
        Add(netdev, device, port, RdmaNetdevSource::kPciFunction);
      }
    }
  }

  const std::string net_dir_;
  const std::string ib_dir_;
  const RdmaNetdevScope& scope_;
  bool net_listed_ = false;
  std::set<std::string> present_;
  std::vector<RdmaNetdevLink> links_;
};

void CollectLowest(const std::string& net_dir, const std::string& netdev, int depth,
                   std::set<std::string>& out) {
  const std::string dir = JoinPath(net_dir, netdev);
  if (depth >= kMaxUpperDepth || EntryExists(JoinPath(dir, "device"))) {
    out.insert(netdev);
    return;
  }
  absl::StatusOr<std::vector<std::string>> entries = ListDirectory(dir);
  bool has_lower = false;
  if (entries.ok()) {
    for (const std::string& entry : *entries) {
      if (absl::StartsWith(entry, kLowerPrefix) && entry.size() > kLowerPrefix.size()) {
        has_lower = true;
        CollectLowest(net_dir, entry.substr(kLowerPrefix.size()), depth + 1, out);
      }
    }
  }
  if (!has_lower) {
    out.insert(netdev);  // e.g. a veth under Soft-RoCE: its own driver answers
  }
}

}  // namespace

RdmaNetdevMap RdmaNetdevMap::Read(const std::string& sysfs_root, const RdmaNetdevScope& scope) {
  RdmaNetdevMap map;
  map.links_ = Reader(sysfs_root, scope).Run();
  return map;
}

std::vector<std::string> RdmaNetdevMap::NetdevsOf(absl::string_view rdma_device,
                                                  uint32_t port) const {
  std::vector<std::string> out;
  // links_ is sorted by netdev within each source, so each pass yields sorted names.
  for (RdmaNetdevSource source : {RdmaNetdevSource::kGidTable, RdmaNetdevSource::kPciFunction}) {
    for (const RdmaNetdevLink& link : links_) {
      if (link.source == source && link.rdma_device == rdma_device && link.port == port &&
          std::find(out.begin(), out.end(), link.netdev) == out.end()) {
        out.push_back(link.netdev);
      }
    }
  }
  return out;
}

std::vector<RdmaNetdevLink> RdmaNetdevMap::LinksOf(absl::string_view netdev) const {
  auto first = std::lower_bound(
      links_.begin(), links_.end(), netdev,
      [](const RdmaNetdevLink& link, absl::string_view name) { return link.netdev < name; });
  auto last = first;
  while (last != links_.end() && last->netdev == netdev) {
    ++last;
  }
  return {first, last};
}

std::optional<RdmaNetdevLink> RdmaNetdevMap::LinkOf(absl::string_view netdev) const {
  std::vector<RdmaNetdevLink> links = LinksOf(netdev);
  if (links.empty()) {
    return std::nullopt;
  }
  return std::move(links.front());  // GID-table links sort first
}

std::vector<std::string> PhysicalNetdevsBelow(const std::string& sysfs_root,
                                              const std::string& netdev) {
  std::set<std::string> lowest;
  CollectLowest(JoinPath(sysfs_root, "class/net"), netdev, 0, lowest);
  return {lowest.begin(), lowest.end()};
}

}  // namespace fabricmon::collectors
