#include "collectors/ib_fabric/mad_port.h"

#include <infiniband/mad.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fabricmon::collectors::ib_fabric {

absl::StatusOr<std::unique_ptr<MadPort>> MadPort::Open(const std::string& ca, int port,
                                                       absl::Duration timeout, int retries) {
  // PerfMgt for PMA queries, SubnMgt (LID-routed) for PortInfo.
  int classes[] = {IB_PERFORMANCE_CLASS, IB_SMI_CLASS};
  errno = 0;
  ibmad_port* handle =
      mad_rpc_open_port(ca.empty() ? nullptr : const_cast<char*>(ca.c_str()), port, classes, 2);
  if (handle == nullptr) {
    const int error = errno;
    return absl::UnavailableError(
        absl::StrCat("mad_rpc_open_port(", ca.empty() ? "<default>" : ca, ", ", port, ") failed",
                     error != 0 ? absl::StrCat(": ", std::strerror(error)) : std::string()));
  }
  mad_rpc_set_timeout(handle, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  mad_rpc_set_retries(handle, retries + 1);
  return std::unique_ptr<MadPort>(new MadPort(handle, ca, port));
}

MadPort::~MadPort() {
  if (port_ != nullptr) {
    mad_rpc_close_port(port_);
  }
}

int MadPort::fd() const { return mad_rpc_portid(port_); }

int MadPort::agent(int mgmt_class) const { return mad_rpc_class_agent(port_, mgmt_class); }

}  // namespace fabricmon::collectors::ib_fabric
