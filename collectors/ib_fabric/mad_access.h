#pragma once

// Before any MAD: which HCA port to sweep from, and whether MADs can be sent through it. Turns the
// usual failures into precise statuses instead of libibumad's "-EIO" (collectors/ib_fabric/
// README.md, "MAD access and its failures"):
//   - RoCE port (link layer Ethernet): FailedPrecondition "MADs are not available on RoCE ports"
//     (no SMI, no LIDs: libibumad would fail with "client_register for mgmt 1 failed");
//   - no read/write access to /dev/infiniband/umadN: PermissionDenied naming the device file;
//   - no RDMA device / no such CA or port / no umad device: NotFound.
//
// Reads sysfs below a configurable root (tests point it at a TempTree; under ibsim, umad2sim
// redirects /sys/class/infiniband* to its own tree). Thread-compatible, no state.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fabricmon::collectors::ib_fabric {

struct MadPortLocation {
  std::string ca;
  uint32_t port = 0;
  std::string link_layer;   // "InfiniBand" (also when sysfs has no link_layer file) or "Ethernet"
  std::string umad_device;  // "/dev/infiniband/umad0"; "" when sysfs names none
};

// Picks the CA and port: `ca` "" = the first device (by name) with an InfiniBand port, preferring
// an ACTIVE one; `port` 0 = the first InfiniBand port of that device, preferring an ACTIVE one.
// NotFound when the device or port does not exist; FailedPrecondition (RoCE) when the only
// candidates are Ethernet ports.
absl::StatusOr<MadPortLocation> ResolveMadPort(const std::string& sysfs_root, const std::string& ca,
                                               uint32_t port, const std::string& dev_root);

// FailedPrecondition when `location` is a RoCE port; OK otherwise.
absl::Status CheckLinkLayer(const MadPortLocation& location);

// Maps errno from access(2)/open(2) of the umad device: EACCES/EPERM → PermissionDenied,
// ENOENT/ENODEV/ENXIO → NotFound, anything else → Unavailable. Each message names `device`.
absl::Status MapDeviceError(int error, const std::string& device);

// ResolveMadPort + CheckLinkLayer + access(device, R_OK | W_OK). A device file that does not
// exist is not an error here (ibsim's umad2sim serves devices that are not in /dev); the open
// that follows reports it.
absl::StatusOr<MadPortLocation> CheckMadAccess(const std::string& sysfs_root, const std::string& ca,
                                               uint32_t port,
                                               const std::string& dev_root = "/dev/infiniband");

}  // namespace fabricmon::collectors::ib_fabric
