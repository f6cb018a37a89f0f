#pragma once

// RAII owner of a libibmad `struct ibmad_port` (mad_rpc_open_port / mad_rpc_close_port): one umad
// fd with agents registered for the PerfMgt (GSI) and LID-routed SubnMgt classes. Every MAD the
// ib_fabric collector sends goes through an explicit MadPort; the legacy global-port API of
// libibmad (madrpc_init, pma_query without _via) is never used.
//
// Thread-safety: a MadPort is used by one thread at a time ("one MadPort per sweeping thread").
// Moving it is not supported; hold it by unique_ptr.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct ibmad_port;

namespace fabricmon::collectors::ib_fabric {

class MadPort {
 public:
  // Opens `ca` port `port` ("" and 0: libibumad's default, the first active IB port).
  // `timeout` and `retries` become the port's defaults for blocking `_via` calls
  // (mad_rpc_set_timeout / mad_rpc_set_retries; libibmad counts retries as total attempts).
  // Errors: Unavailable when libibumad cannot open or register the port (the caller's
  // CheckMadAccess() gives the precise reason first: RoCE, permissions, missing device).
  static absl::StatusOr<std::unique_ptr<MadPort>> Open(const std::string& ca, int port,
                                                       absl::Duration timeout, int retries);
  ~MadPort();
  MadPort(const MadPort&) = delete;
  MadPort& operator=(const MadPort&) = delete;

  ibmad_port* get() const { return port_; }
  // The umad fd (mad_rpc_portid) and the agent id registered for `mgmt_class` (-1 if none).
  int fd() const;
  int agent(int mgmt_class) const;
  const std::string& ca() const { return ca_; }
  int port() const { return port_number_; }

 private:
  MadPort(ibmad_port* port, std::string ca, int port_number)
      : port_(port), ca_(std::move(ca)), port_number_(port_number) {}
  ibmad_port* port_;
  std::string ca_;
  int port_number_;
};

}  // namespace fabricmon::collectors::ib_fabric
