#include "collectors/rdma_qp/rdma_qp_collector.h"

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectors/rdma_qp/rdma_qp_families.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/logging.h"
#include "daemon/common/status.h"

namespace fabricmon::collectors {
namespace {

using rdma_qp::QpEntry;
using rdma_qp::RdmaDevice;
using rdma_qp::RdmaNetlinkReply;

constexpr int64_t kDefaultIntervalMs = 10000;
constexpr int64_t kDefaultRediscoverMs = 60000;
constexpr size_t kDefaultMaxProcesses = 256;
// The kernel sends dump pages of at most 32 KiB (netlink_dump's max_recvmsg_len cap); twice that
// leaves room, and MSG_TRUNC tells if a page was bigger anyway.
constexpr size_t kReceiveBuffer = 64 * 1024;
// TASK_COMM_LEN is 16; read a little more so a longer file is still cut cleanly.
constexpr size_t kCommMaxBytes = 64;

// The real socket. Owns `fd`.
class SocketRdmaNetlink final : public RdmaNetlink {
 public:
  SocketRdmaNetlink(int fd, RdmaNetlinkLimits limits)
      : fd_(fd), limits_(limits), buffer_(kReceiveBuffer) {}
  ~SocketRdmaNetlink() override { ::close(fd_); }
  SocketRdmaNetlink(const SocketRdmaNetlink&) = delete;
  SocketRdmaNetlink& operator=(const SocketRdmaNetlink&) = delete;

  absl::StatusOr<std::string> Dump(absl::string_view request) override {
    struct nlmsghdr request_header;
    if (request.size() < sizeof(request_header)) {
      return absl::InternalError("RDMA netlink request shorter than a netlink header");
    }
    std::memcpy(&request_header, request.data(), sizeof(request_header));
    struct sockaddr_nl kernel = {};
    kernel.nl_family = AF_NETLINK;
    ssize_t sent;
    do {
      sent = ::sendto(fd_, request.data(), request.size(), 0,
                      reinterpret_cast<const struct sockaddr*>(&kernel), sizeof(kernel));
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) {
      return ::fabricmon::ErrnoToStatus(errno, "send RDMA netlink request");
    }
    if (static_cast<size_t>(sent) != request.size()) {
      return absl::UnavailableError("short send of RDMA netlink request");
    }

    std::string replies;
    for (int i = 0; i < limits_.max_messages; ++i) {
      const ssize_t received = ::recv(fd_, buffer_.data(), buffer_.size(), MSG_TRUNC);
      if (received < 0) {
        if (errno == EINTR) {
          continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          return absl::DeadlineExceededError(absl::StrCat("RDMA netlink dump: no reply within ",
                                                          limits_.receive_timeout_ms, " ms"));
        }
        return ::fabricmon::ErrnoToStatus(errno, "recv RDMA netlink reply");
      }
      if (received == 0) {
        return absl::UnavailableError("RDMA netlink socket closed");
      }
      if (static_cast<size_t>(received) > buffer_.size()) {
        return absl::DataLossError(absl::StrCat("RDMA netlink reply of ", received,
                                                " bytes truncated to ", buffer_.size()));
      }
      if (AppendOwnMessages(absl::string_view(buffer_.data(), received), request_header.nlmsg_seq,
                            replies)) {
        return replies;
      }
      if (replies.size() > limits_.max_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("RDMA netlink dump larger than ", limits_.max_bytes, " bytes"));
      }
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("RDMA netlink dump longer than ", limits_.max_messages, " messages"));
  }

 private:
  // Appends the messages of `chunk` that answer sequence number `seq` (late replies to an
  // earlier dump that timed out are dropped). True once NLMSG_DONE or NLMSG_ERROR was appended.
  // A chunk whose headers do not walk is appended whole for the parser to report.
  static bool AppendOwnMessages(absl::string_view chunk, uint32_t seq, std::string& out) {
    size_t at = 0;
    while (at < chunk.size()) {
      const size_t left = chunk.size() - at;
      struct nlmsghdr header;
      if (left < sizeof(header)) {
        out.append(chunk.data() + at, left);
        return true;
      }
      std::memcpy(&header, chunk.data() + at, sizeof(header));
      if (header.nlmsg_len < sizeof(header) || header.nlmsg_len > left) {
        out.append(chunk.data() + at, left);
        return true;
      }
      const size_t step = std::min<size_t>(NLMSG_ALIGN(header.nlmsg_len), left);
      if (header.nlmsg_seq == seq) {
        out.append(chunk.data() + at, step);
        if (header.nlmsg_type == NLMSG_DONE || header.nlmsg_type == NLMSG_ERROR) {
          return true;
        }
      }
      at += step;
    }
    return false;
  }

  const int fd_;
  const RdmaNetlinkLimits limits_;
  std::vector<char> buffer_;
};

// Label values must be printable; comm may hold any byte (prctl(PR_SET_NAME)).
std::string PrintableComm(absl::string_view comm) {
  std::string out(comm);
  for (char& c : out) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) {
      c = '?';
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RdmaNetlink>> OpenRdmaNetlink(RdmaNetlinkLimits limits) {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  if (fd < 0) {
    const int error = errno;
    if (error == EPROTONOSUPPORT || error == EAFNOSUPPORT) {
      return absl::NotFoundError("no RDMA netlink: ib_core not loaded");
    }
    return ::fabricmon::ErrnoToStatus(error, "socket(AF_NETLINK, NETLINK_RDMA)");
  }
  struct timeval timeout = {};
  timeout.tv_sec = limits.receive_timeout_ms / 1000;
  timeout.tv_usec = (limits.receive_timeout_ms % 1000) * 1000;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) != 0) {
    const int error = errno;
    ::close(fd);
    return ::fabricmon::ErrnoToStatus(error, "setsockopt(SO_RCVTIMEO) on the RDMA netlink socket");
  }
  return std::unique_ptr<RdmaNetlink>(new SocketRdmaNetlink(fd, limits));
}

absl::StatusOr<std::unique_ptr<RdmaQpCollector>> RdmaQpCollector::Create(
    const v1::RdmaQpCollectorConfig& config, RdmaNetlinkOpener opener) {
  const int64_t interval = config.interval_ms() ? config.interval_ms() : kDefaultIntervalMs;
  const int64_t rediscover =
      config.rediscover_interval_ms() ? config.rediscover_interval_ms() : kDefaultRediscoverMs;
  if (interval < 100) {
    return absl::InvalidArgumentError("rdma_qp.interval_ms must be at least 100");
  }
  if (opener == nullptr) {
    opener = [] { return OpenRdmaNetlink(); };
  }
  return std::unique_ptr<RdmaQpCollector>(new RdmaQpCollector(
      std::move(opener), config.procfs_root().empty() ? "/proc" : config.procfs_root(), interval,
      rediscover, config.max_processes() ? config.max_processes() : kDefaultMaxProcesses));
}

RdmaQpCollector::RdmaQpCollector(RdmaNetlinkOpener opener, std::string procfs_root,
                                 int64_t interval_ms, int64_t rediscover_interval_ms,
                                 size_t max_processes)
    : opener_(std::move(opener)),
      procfs_root_(std::move(procfs_root)),
      interval_ms_(interval_ms),
      rediscover_interval_ms_(rediscover_interval_ms),
      max_processes_(max_processes),
      sees_all_processes_(InInitialPidNamespace()),
      errors_(kRdmaQpCollectorName) {}

bool InInitialPidNamespace() {
  // The initial PID namespace has a fixed inode (PROC_PID_INIT_INO, 0xEFFFFFFC) since Linux 3.8;
  // every other namespace gets a fresh one. Unreadable (no /proc): assume the worst.
  char target[64] = {};
  const ssize_t length = readlink("/proc/self/ns/pid", target, sizeof(target) - 1);
  return length > 0 && absl::string_view(target, static_cast<size_t>(length)) == "pid:[4026531836]";
}

absl::StatusOr<RdmaNetlinkReply> RdmaQpCollector::DumpAndParse(uint32_t command,
                                                               std::optional<uint32_t> device_index,
                                                               absl::string_view what) {
  const std::string request = rdma_qp::BuildDumpRequest(command, device_index, ++seq_);
  absl::StatusOr<std::string> bytes = netlink_->Dump(request);
  if (!bytes.ok()) {
    return Annotate(bytes.status(), what);
  }
  absl::StatusOr<RdmaNetlinkReply> reply = rdma_qp::ParseRdmaNetlink(*bytes);
  if (!reply.ok()) {
    return Annotate(reply.status(), what);
  }
  FABRICMON_RETURN_IF_ERROR(rdma_qp::ReplyStatus(*reply, what));
  if (!reply->done) {
    return absl::DataLossError(absl::StrCat(what, ": reply ended without NLMSG_DONE"));
  }
  return reply;
}

absl::Status RdmaQpCollector::Discover(v1::Inventory& /*inventory*/) {
  netlink_.reset();
  devices_.clear();
  wants_rediscovery_ = false;
  absl::StatusOr<std::unique_ptr<RdmaNetlink>> netlink = opener_();
  if (!netlink.ok()) {
    return netlink.status();
  }
  netlink_ = *std::move(netlink);
  absl::StatusOr<RdmaNetlinkReply> reply =
      DumpAndParse(RDMA_NLDEV_CMD_GET, std::nullopt, "RDMA device list");
  if (!reply.ok()) {
    netlink_.reset();
    return reply.status();
  }
  devices_ = std::move(reply->devices);
  if (devices_.empty()) {
    netlink_.reset();
    return absl::NotFoundError("no RDMA devices");
  }
  return absl::OkStatus();
}

std::string RdmaQpCollector::ReadComm(uint32_t pid) const {
  absl::StatusOr<std::string> comm =
      ReadSmallFile(JoinPath(procfs_root_, absl::StrCat(pid, "/comm")), kCommMaxBytes);
  if (!comm.ok()) {
    return "";  // exited between the dump and now, or hidden from us
  }
  absl::string_view text = *comm;
  if (!text.empty() && text.back() == '\n') {
    text.remove_suffix(1);
  }
  return PrintableComm(text);
}

absl::Status RdmaQpCollector::Collect(SampleSink& sink) {
  if (netlink_ == nullptr || devices_.empty()) {
    return absl::NotFoundError("rdma_qp: no RDMA device discovered");
  }
  // (device, type, state) → QPs; (pid, device, type) → QPs; pid → QPs.
  std::map<std::tuple<std::string, absl::string_view, absl::string_view>, uint64_t> by_state;
  std::map<std::tuple<uint32_t, std::string, absl::string_view>, uint64_t> by_process;
  std::map<uint32_t, uint64_t> per_pid;
  size_t devices_read = 0;
  absl::Status first_failure;
  for (const RdmaDevice& device : devices_) {
    const std::string device_label = device.name.empty() ? absl::StrCat(device.index) : device.name;
    absl::StatusOr<RdmaNetlinkReply> reply = DumpAndParse(
        RDMA_NLDEV_CMD_RES_QP_GET, device.index, absl::StrCat("QP dump of ", device_label));
    if (!reply.ok()) {
      const absl::StatusCode code = reply.status().code();
      errors_.Record(code == absl::StatusCode::kNotFound           ? ErrorKind::kMissing
                     : code == absl::StatusCode::kPermissionDenied ? ErrorKind::kPermission
                                                                   : ErrorKind::kIo);
      if (code == absl::StatusCode::kNotFound) {
        wants_rediscovery_ = true;
      }
      FABRICMON_LOG_EVERY_MINUTE(Warning) << "rdma_qp: " << reply.status();
      if (first_failure.ok()) {
        first_failure = reply.status();
      }
      continue;
    }
    ++devices_read;
    for (const QpEntry& qp : reply->qps) {
      const std::string name = qp.device_name.empty() ? device_label : qp.device_name;
      const absl::string_view type = rdma_qp::QpTypeName(qp.type);
      ++by_state[{name, type, rdma_qp::QpStateName(qp.state)}];
      // Kernel QPs (RES_KERN_NAME) belong to no process.
      if (qp.pid.has_value() && qp.kernel_owner.empty()) {
        ++by_process[{*qp.pid, name, type}];
        ++per_pid[*qp.pid];
      }
    }
  }
  if (devices_read == 0) {
    errors_.Emit(sink);
    return first_failure;
  }

  for (const auto& [key, count] : by_state) {
    const auto& [device, type, state] = key;
    sink.Add(SeriesFromSpec(
                 rdma_qp::kRdmaQpsFamily, kRdmaQpCollectorName,
                 {{"device", device}, {"type", std::string(type)}, {"state", std::string(state)}}),
             count);
  }

  // Cardinality cap: keep the processes with the most QPs (ties: lower pid first).
  std::vector<std::pair<uint32_t, uint64_t>> ranked(per_pid.begin(), per_pid.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  const size_t kept_count = std::min(ranked.size(), max_processes_);
  std::map<uint32_t, std::string> kept;  // pid → comm
  for (size_t i = 0; i < kept_count; ++i) {
    kept.emplace(ranked[i].first, ReadComm(ranked[i].first));
  }
  for (const auto& [key, count] : by_process) {
    const auto& [pid, device, type] = key;
    const auto comm = kept.find(pid);
    if (comm == kept.end()) {
      continue;
    }
    sink.Add(SeriesFromSpec(rdma_qp::kRdmaProcessQpsFamily, kRdmaQpCollectorName,
                            {{"pid", absl::StrCat(pid)},
                             {"comm", comm->second},
                             {"device", device},
                             {"type", std::string(type)}}),
             count);
  }
  sink.Add(SeriesFromSpec(rdma_qp::kRdmaQpProcessesDroppedFamily, kRdmaQpCollectorName, {}),
           ranked.size() - kept_count);
  sink.Add(SeriesFromSpec(rdma_qp::kRdmaQpSeesAllProcessesFamily, kRdmaQpCollectorName, {}),
           sees_all_processes_ ? 1 : 0);
  errors_.Emit(sink);
  return absl::OkStatus();
}

Diagnosis RdmaQpCollector::Diagnose(const DiagnosisInput& input) const {
  Diagnosis diagnosis = DefaultDiagnosis(kRdmaQpCollectorName, input);
  if (diagnosis.works) {
    diagnosis.reads = absl::StrCat("queue pairs of ", devices_.size(),
                                   " RDMA device(s) over RDMA netlink, ", input.samples, " series");
    return diagnosis;
  }
  const absl::Status& failed = input.discovery.ok() ? input.collection : input.discovery;
  if (absl::IsNotFound(failed)) {
    diagnosis.problem = absl::StrCat("RDMA netlink unavailable: ", failed.message());
    diagnosis.fix =
        "load ib_core (the HCA's RDMA driver) for RDMA netlink, or set "
        "rdma_qp { enabled: false } on nodes without RDMA";
  } else if (absl::IsPermissionDenied(failed)) {
    diagnosis.fix =
        "the QP resource dump needs no capability, so EPERM is a policy of the "
        "container, seccomp or LSM around the agent: allow NETLINK_RDMA there, or set "
        "rdma_qp { enabled: false }";
  }
  return diagnosis;
}

void RegisterRdmaQpCollector(CollectorRegistry& registry) {
  registry.Register(
      kRdmaQpCollectorName, /*enabled_by_default=*/true,
      [](const CollectorContext& context) -> absl::StatusOr<std::unique_ptr<Collector>> {
        auto collector = RdmaQpCollector::Create(context.config.rdma_qp());
        if (!collector.ok()) {
          return collector.status();
        }
        return std::unique_ptr<Collector>(*std::move(collector));
      },
      [](const v1::CollectorsConfig&) -> std::string {
        return "this host's RDMA netlink: queue pairs of live processes";
      });
}

}  // namespace fabricmon::collectors
