#pragma once

// RDMA queue-pair inventory: how many QPs each RDMA device has (by type and state) and which
// user processes own them, from the RDMA netlink resource tracker (RDMA_NLDEV_CMD_RES_QP_GET,
// the dump behind `rdma resource show qp`).
//
// Why: a training job that should use RDMA but fell back to TCP still uses its GPUs but owns no
// QP. fabricmon_rdma_process_qps{pid} next to the GPU processes makes that visible per node
// (and, later, to the aggregator's TCP-fallback detector).
//
// Cost model: Discover() opens one NETLINK_RDMA socket and dumps the device list
// (RDMA_NLDEV_CMD_GET). Collect() sends one RES_QP_GET dump per device and reads
// <procfs_root>/<pid>/comm of each process kept (at most max_processes). Every dump is bounded
// (receive timeout, maximum bytes and messages: see RdmaNetlinkLimits), so a wedged kernel or a
// huge table can never hang the agent's collector thread.
//
// Visibility: the kernel shows the QPs of processes in the reader's pid namespace, and kernel
// QPs only in the initial one; pids are as seen from the agent's namespace. No capability is
// needed for the QP dump (CAP_NET_ADMIN only adds key material to MR/PD dumps and raw dumps).
// A pid whose /proc entry is gone or hidden (ProtectProc=invisible) gets comm="".
//
// Errors: a device whose dump fails is counted in fabricmon_collector_errors_total{collector=
// "rdma_qp",kind}: "missing" for ENODEV (the device vanished; WantsRediscovery() turns true),
// "permission" for EPERM/EACCES, "io" for a reply that does not parse, a timeout or any other
// failure. The other devices are still read; Collect() fails only when every device failed.
//
// Thread-safety: not thread-safe; the agent calls Discover()/Collect() from one thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/core/collector.h"
#include "collectors/core/collector_errors.h"
#include "collectors/core/collector_registry.h"
#include "collectors/rdma_qp/rdma_netlink_parser.h"
#include "fabricmon/v1/config.pb.h"

namespace fabricmon::collectors {

inline constexpr char kRdmaQpCollectorName[] = "rdma_qp";

// The seam over the NETLINK_RDMA socket: one dump request in, every reply byte out. The fake in
// the tests returns constructed replies; the real one is OpenRdmaNetlink().
class RdmaNetlink {
 public:
  virtual ~RdmaNetlink() = default;
  // Sends `request` (one netlink dump request) and returns the concatenated replies up to and
  // including NLMSG_DONE or NLMSG_ERROR. DeadlineExceeded when the kernel stops answering,
  // ResourceExhausted past the limits, other errno codes from send/recv.
  virtual absl::StatusOr<std::string> Dump(absl::string_view request) = 0;
};

struct RdmaNetlinkLimits {
  int receive_timeout_ms = 2000;  // SO_RCVTIMEO of each recv()
  size_t max_bytes = 32u << 20;   // per dump (a QP entry is ~100 bytes)
  int max_messages = 65536;       // recv() calls per dump
};

// Opens a NETLINK_RDMA socket. NotFound ("no RDMA netlink: ib_core not loaded") when the kernel
// does not know the protocol (EPROTONOSUPPORT, EAFNOSUPPORT); other socket errors by errno.
absl::StatusOr<std::unique_ptr<RdmaNetlink>> OpenRdmaNetlink(RdmaNetlinkLimits limits = {});

using RdmaNetlinkOpener = std::function<absl::StatusOr<std::unique_ptr<RdmaNetlink>>()>;

// Whether this process runs in the host's (initial) PID namespace, where the kernel's QP dump
// lists every process's QPs (fabricmon_rdma_qp_sees_all_processes).
bool InInitialPidNamespace();

class RdmaQpCollector final : public Collector {
 public:
  // InvalidArgument on an interval below 100 ms. `opener` is called by every Discover()
  // (default: OpenRdmaNetlink).
  static absl::StatusOr<std::unique_ptr<RdmaQpCollector>> Create(
      const v1::RdmaQpCollectorConfig& config, RdmaNetlinkOpener opener = nullptr);

  absl::string_view name() const override { return kRdmaQpCollectorName; }
  // Opens the socket and lists the RDMA devices. NotFound when there is no RDMA netlink or no
  // device. Adds nothing to `inventory` (ib_sysfs reports the devices).
  absl::Status Discover(v1::Inventory& inventory) override;
  // NotFound when Discover() found nothing; the first failure when every device's dump failed;
  // otherwise OK.
  absl::Status Collect(SampleSink& sink) override;
  bool WantsRediscovery() const override { return wants_rediscovery_; }
  // RDMA netlink unavailable (ib_core not loaded), no device, or the dump refused.
  Diagnosis Diagnose(const DiagnosisInput& input) const override;
  int64_t interval_ms() const override { return interval_ms_; }
  int64_t rediscover_interval_ms() const override { return rediscover_interval_ms_; }

  const std::vector<rdma_qp::RdmaDevice>& devices() const { return devices_; }
  const CollectorErrors& errors() const { return errors_; }

 private:
  RdmaQpCollector(RdmaNetlinkOpener opener, std::string procfs_root, int64_t interval_ms,
                  int64_t rediscover_interval_ms, size_t max_processes);

  // One dump through `netlink_`, parsed; the NLMSG_ERROR of the reply as a status.
  absl::StatusOr<rdma_qp::RdmaNetlinkReply> DumpAndParse(uint32_t command,
                                                         std::optional<uint32_t> device_index,
                                                         absl::string_view what);
  // Contents of <procfs_root>/<pid>/comm without the newline; "" when unreadable.
  std::string ReadComm(uint32_t pid) const;

  const RdmaNetlinkOpener opener_;
  const std::string procfs_root_;
  const int64_t interval_ms_;
  const int64_t rediscover_interval_ms_;
  const size_t max_processes_;
  const bool sees_all_processes_;  // InInitialPidNamespace() at construction
  std::unique_ptr<RdmaNetlink> netlink_;
  std::vector<rdma_qp::RdmaDevice> devices_;
  uint32_t seq_ = 0;
  CollectorErrors errors_;
  bool wants_rediscovery_ = false;
};

// Registers "rdma_qp" (enabled by default; idle where there is no RDMA) with `registry`.
void RegisterRdmaQpCollector(CollectorRegistry& registry);

}  // namespace fabricmon::collectors
