#include "collectors/ib_fabric/mad_access.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/file_reader.h"

namespace fabricmon::collectors::ib_fabric {
namespace {

std::string ReadOr(const std::string& path, const std::string& fallback) {
  absl::StatusOr<std::string> value = ReadTrimmed(path);
  return value.ok() ? *value : fallback;
}

struct Candidate {
  std::string ca;
  uint32_t port = 0;
  std::string link_layer;
  bool active = false;
};

// Ports of `ca`, numerically sorted. Missing link_layer (old kernels, umad2sim) means InfiniBand.
std::vector<Candidate> PortsOf(const std::string& sysfs_root, const std::string& ca) {
  std::vector<Candidate> out;
  const std::string dir = JoinPath(sysfs_root, absl::StrCat("class/infiniband/", ca, "/ports"));
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(dir);
  if (!names.ok()) {
    return out;
  }
  for (const std::string& name : *names) {
    uint32_t number = 0;
    if (!absl::SimpleAtoi(name, &number)) {
      continue;
    }
    Candidate candidate;
    candidate.ca = ca;
    candidate.port = number;
    candidate.link_layer = ReadOr(JoinPath(dir, name + "/link_layer"), "InfiniBand");
    // sysfs state reads "4: ACTIVE" (IBA PortState 4).
    candidate.active = absl::StartsWith(ReadOr(JoinPath(dir, name + "/state"), ""), "4");
    out.push_back(std::move(candidate));
  }
  std::sort(out.begin(), out.end(),
            [](const Candidate& a, const Candidate& b) { return a.port < b.port; });
  return out;
}

bool IsInfiniBand(const Candidate& candidate) {
  return absl::EqualsIgnoreCase(candidate.link_layer, "InfiniBand");
}

// /sys/class/infiniband_mad/umadN/{ibdev,port} name the umad device of each CA port.
std::string FindUmadDevice(const std::string& sysfs_root, const std::string& ca, uint32_t port,
                           const std::string& dev_root) {
  const std::string dir = JoinPath(sysfs_root, "class/infiniband_mad");
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(dir);
  if (!names.ok()) {
    return "";
  }
  for (const std::string& name : *names) {
    if (!absl::StartsWith(name, "umad")) {
      continue;
    }
    uint32_t number = 0;
    if (ReadOr(JoinPath(dir, name + "/ibdev"), "") == ca &&
        absl::SimpleAtoi(ReadOr(JoinPath(dir, name + "/port"), ""), &number) && number == port) {
      return JoinPath(dev_root, name);
    }
  }
  return "";
}

absl::Status RoceError(const Candidate& candidate) {
  return absl::FailedPreconditionError(absl::StrCat(
      "MADs are not available on RoCE ports: ", candidate.ca, " port ", candidate.port,
      " has link layer ", candidate.link_layer,
      " (no subnet manager, no LIDs). The ib_fabric collector needs an InfiniBand port: set "
      "ib_fabric.ca / ca_port, or leave the collector disabled on this node."));
}

}  // namespace

absl::StatusOr<MadPortLocation> ResolveMadPort(const std::string& sysfs_root, const std::string& ca,
                                               uint32_t port, const std::string& dev_root) {
  const std::string class_dir = JoinPath(sysfs_root, "class/infiniband");
  absl::StatusOr<std::vector<std::string>> devices = ListDirectory(class_dir);
  if (!devices.ok()) {
    if (absl::IsNotFound(devices.status())) {
      return absl::NotFoundError(absl::StrCat("no RDMA devices: ", class_dir, " is absent"));
    }
    return devices.status();
  }
  if (!ca.empty() && std::find(devices->begin(), devices->end(), ca) == devices->end()) {
    return absl::NotFoundError(absl::StrCat("RDMA device ", ca, " not found under ", class_dir));
  }
  std::vector<Candidate> candidates;
  for (const std::string& device : *devices) {
    if (!ca.empty() && device != ca) {
      continue;
    }
    for (Candidate& candidate : PortsOf(sysfs_root, device)) {
      if (port == 0 || candidate.port == port) {
        candidates.push_back(std::move(candidate));
      }
    }
  }
  if (candidates.empty()) {
    if (port != 0) {
      return absl::NotFoundError(absl::StrCat("port ", port, " of ", ca.empty() ? "any device" : ca,
                                              " not found under ", class_dir));
    }
    return absl::NotFoundError(absl::StrCat("no RDMA ports under ", class_dir));
  }
  const Candidate* chosen = nullptr;
  for (const Candidate& candidate : candidates) {  // an active IB port first
    if (IsInfiniBand(candidate) && candidate.active) {
      chosen = &candidate;
      break;
    }
  }
  if (chosen == nullptr) {
    for (const Candidate& candidate : candidates) {
      if (IsInfiniBand(candidate)) {
        chosen = &candidate;
        break;
      }
    }
  }
  if (chosen == nullptr) {
    return RoceError(candidates.front());
  }
  MadPortLocation location;
  location.ca = chosen->ca;
  location.port = chosen->port;
  location.link_layer = chosen->link_layer;
  location.umad_device = FindUmadDevice(sysfs_root, chosen->ca, chosen->port, dev_root);
  return location;
}

absl::Status CheckLinkLayer(const MadPortLocation& location) {
  Candidate candidate;
  candidate.ca = location.ca;
  candidate.port = location.port;
  candidate.link_layer = location.link_layer.empty() ? "InfiniBand" : location.link_layer;
  return IsInfiniBand(candidate) ? absl::OkStatus() : RoceError(candidate);
}

absl::Status MapDeviceError(int error, const std::string& device) {
  switch (error) {
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(
          "no read/write access to ", device, " (", std::strerror(error),
          "): sending MADs needs it. Grant the agent's user access to the umad device (a udev "
          "rule or group such as 'rdma'), or run it as root."));
    case ENOENT:
    case ENODEV:
    case ENXIO:
      return absl::NotFoundError(absl::StrCat(device, ": ", std::strerror(error),
                                              " (is the ib_umad kernel module loaded?)"));
    default:
      return absl::UnavailableError(absl::StrCat(device, ": ", std::strerror(error)));
  }
}

absl::StatusOr<MadPortLocation> CheckMadAccess(const std::string& sysfs_root, const std::string& ca,
                                               uint32_t port, const std::string& dev_root) {
  absl::StatusOr<MadPortLocation> location = ResolveMadPort(sysfs_root, ca, port, dev_root);
  if (!location.ok()) {
    return location.status();
  }
  absl::Status link = CheckLinkLayer(*location);
  if (!link.ok()) {
    return link;
  }
  if (!location->umad_device.empty() && access(location->umad_device.c_str(), R_OK | W_OK) != 0) {
    const int error = errno;
    if (error != ENOENT) {
      return MapDeviceError(error, location->umad_device);
    }
  }
  return location;
}

}  // namespace fabricmon::collectors::ib_fabric
