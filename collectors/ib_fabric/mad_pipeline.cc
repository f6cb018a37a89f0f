#include "collectors/ib_fabric/mad_pipeline.h"

#include <infiniband/mad.h>
#include <infiniband/umad.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "collectors/ib_fabric/mad_port.h"
#include "daemon/common/status.h"

namespace fabricmon::collectors::ib_fabric {
namespace {

// PerfMgt attribute ids (IBA 16.1.2 Table 208) and SubnGet(PortInfo) (IBA 14.2.5).
unsigned AttributeId(MadKind kind) {
  switch (kind) {
    case MadKind::kClassPortInfo:
      return CLASS_PORT_INFO;
    case MadKind::kPortCounters:
      return IB_GSI_PORT_COUNTERS;
    case MadKind::kPortCountersExtended:
      return IB_GSI_PORT_COUNTERS_EXT;
    case MadKind::kPortInfo:
      return IB_ATTR_PORT_INFO;
  }
  return 0;
}

int64_t ToNanos(absl::Duration d) { return absl::ToInt64Nanoseconds(d); }

}  // namespace

void PipelineStats::Add(const PipelineStats& other) {
  sent += other.sent;
  ok += other.ok;
  timeouts += other.timeouts;
  errors += other.errors;
  retries += other.retries;
  skipped += other.skipped;
  stray += other.stray;
}

// ---------------------------------------------------------------------------------------------
// UmadTransport

UmadTransport::UmadTransport(MadPort& port) : port_(port), buffer_(umad_size() + IB_MAD_SIZE) {}

absl::Status UmadTransport::Send(const MadRequest& request, uint32_t tid, absl::Duration timeout) {
  std::vector<uint8_t> packet(umad_size() + IB_MAD_SIZE, 0);
  uint8_t payload[IB_MAD_SIZE] = {0};
  ib_rpc_t rpc;
  std::memset(&rpc, 0, sizeof(rpc));
  ib_portid_t dest;
  std::memset(&dest, 0, sizeof(dest));
  rpc.method = IB_MAD_METHOD_GET;
  rpc.attr.id = AttributeId(request.kind);
  rpc.trid = tid;  // non-zero: mad_encode() would otherwise draw one from its global counter
  rpc.timeout = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  int mgmt_class = IB_PERFORMANCE_CLASS;
  if (request.kind == MadKind::kPortInfo) {
    // LID-routed SMP: QP0, attribute modifier = port number (IBA 14.2.5.6).
    mgmt_class = IB_SMI_CLASS;
    rpc.mgtclass = IB_SMI_CLASS;
    rpc.attr.mod = request.port;
    rpc.dataoffs = IB_SMP_DATA_OFFS;
    rpc.datasz = IB_SMP_DATA_SIZE;
    ib_portid_set(&dest, request.lid, 0, 0);
  } else {
    // GSI: QP1 with the well-known Q_Key (IBA 13.5.1); PortSelect in the payload.
    rpc.mgtclass = IB_PERFORMANCE_CLASS;
    rpc.attr.mod = 0;
    rpc.dataoffs = IB_PC_DATA_OFFS;
    rpc.datasz = IB_PC_DATA_SZ;
    ib_portid_set(&dest, request.lid, 1, IB_DEFAULT_QP1_QKEY);
    if (request.kind != MadKind::kClassPortInfo) {
      mad_set_field(payload, 0, IB_PC_PORT_SELECT_F, request.port);
    }
  }
  const int agent = port_.agent(mgmt_class);
  if (agent < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("management class ", mgmt_class, " is not registered on the MAD port"));
  }
  const int length = mad_build_pkt(packet.data(), &rpc, &dest, nullptr, payload);
  if (length < 0) {
    return absl::InternalError("mad_build_pkt failed");
  }
  // The kernel keeps the request until its answer or `timeout` (then returns it with status
  // ETIMEDOUT); retries are the pipeline's, hence 0 here (as libibmad's _do_madrpc does).
  if (umad_send(port_.fd(), agent, packet.data(), length, rpc.timeout, 0) < 0) {
    const int error = errno;
    if (error == EAGAIN || error == ENOMEM || error == EINTR || error == ENOBUFS) {
      return absl::UnavailableError(absl::StrCat("umad_send: ", std::strerror(error)));
    }
    return ErrnoToStatus(error, "umad_send");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<MadTransport::Completion>> UmadTransport::Receive(
    absl::Duration timeout) {
  int length = IB_MAD_SIZE;
  int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)));
  ms = std::clamp<int64_t>(ms, 0, 60'000);
  std::fill(buffer_.begin(), buffer_.end(), 0);
  errno = 0;
  const int rc = umad_recv(port_.fd(), buffer_.data(), &length, static_cast<int>(ms));
  if (rc < 0) {
    const int error = errno != 0 ? errno : -rc;
    // Nothing arrived in time (dev_poll's -ETIMEDOUT; umad2sim's -EWOULDBLOCK for an empty
    // queue; EAGAIN from the non-blocking fd).
    if (error == ETIMEDOUT || error == EWOULDBLOCK || error == EAGAIN || error == EINTR ||
        rc == -ETIMEDOUT || rc == -EWOULDBLOCK) {
      return std::optional<Completion>();
    }
    return ErrnoToStatus(error, "umad_recv");
  }
  Completion completion;
  uint8_t* mad = static_cast<uint8_t*>(umad_get_mad(buffer_.data()));
  // User space owns only the low 32 bits of the TID (libibmad mad.c).
  completion.tid = static_cast<uint32_t>(mad_get_field64(mad, 0, IB_MAD_TRID_F));
  if (umad_status(buffer_.data()) == ETIMEDOUT) {
    completion.timed_out = true;  // our own send, handed back unanswered by the kernel
    return std::optional<Completion>(completion);
  }
  if (!mad_get_field(mad, 0, IB_MAD_RESPONSE_F)) {
    completion.tid = 0;  // an unsolicited request; not ours to answer
    return std::optional<Completion>(completion);
  }
  completion.mad_status = static_cast<uint16_t>(mad_get_field(mad, 0, IB_MAD_STATUS_F));
  std::memcpy(completion.data.data(), mad + IB_PC_DATA_OFFS, kGsDataBytes);
  return std::optional<Completion>(completion);
}

// ---------------------------------------------------------------------------------------------
// MadPipeline

MadPipeline::MadPipeline(MadTransport& transport, Clock& clock, PipelineOptions options)
    : transport_(transport),
      clock_(clock),
      options_(options),
      next_tid_(static_cast<uint32_t>(clock.MonotonicNanos() >> 10) | 1u) {}

uint32_t MadPipeline::NextTid() {
  uint32_t tid = next_tid_++;
  if (tid == 0) {
    tid = next_tid_++;
  }
  return tid;
}

absl::Status MadPipeline::Run(absl::Span<const MadRequest> requests,
                              std::vector<MadResult>& results, PipelineStats& stats) {
  results.assign(requests.size(), MadResult());
  if (requests.empty()) {
    return absl::OkStatus();
  }
  const int window = std::max(1, options_.window);
  const int per_node = std::max(1, options_.per_node);
  const int attempts_max = std::max(0, options_.retries) + 1;
  const int64_t timeout_ns = std::max<int64_t>(1, ToNanos(options_.timeout));
  // Our deadline trails the kernel's (same timeout) a little, so on hardware the kernel's
  // ETIMEDOUT normally comes first; under umad2sim, which never times out, ours does the work.
  const int64_t deadline_ns = timeout_ns + std::max<int64_t>(timeout_ns / 10, 2'000'000);

  struct NodeState {
    std::deque<size_t> pending;
    int inflight = 0;
    bool confirmed = false;  // has answered at least once in this run
    bool failed = false;     // a request timed out on every attempt: skip the rest
  };
  std::unordered_map<uint32_t, NodeState> nodes;
  std::vector<uint32_t> order;  // round-robin over nodes in first-seen order
  for (size_t i = 0; i < requests.size(); ++i) {
    auto [it, inserted] = nodes.try_emplace(requests[i].node);
    if (inserted) {
      order.push_back(requests[i].node);
    }
    it->second.pending.push_back(i);
  }

  struct Slot {
    size_t request;
    int64_t deadline;
    int attempt;
  };
  std::unordered_map<uint32_t, Slot> inflight;
  inflight.reserve(static_cast<size_t>(window) * 2);
  size_t remaining = requests.size();
  size_t cursor = 0;

  auto finish = [&](size_t request, MadOutcome outcome) {
    results[request].outcome = outcome;
    --remaining;
  };
  auto fail_node = [&](NodeState& node) {
    node.failed = true;
    while (!node.pending.empty()) {
      finish(node.pending.front(), MadOutcome::kSkipped);
      ++stats.skipped;
      node.pending.pop_front();
    }
  };
  // Puts `request` on the wire as attempt `attempt`; false on a fatal transport error.
  absl::Status fatal;
  auto send = [&](size_t request, int attempt) -> bool {
    const uint32_t tid = NextTid();
    absl::Status status = transport_.Send(requests[request], tid, options_.timeout);
    results[request].attempts = static_cast<uint8_t>(std::min(attempt, 255));
    if (!status.ok() && !absl::IsUnavailable(status)) {
      fatal = status;
      return false;
    }
    if (status.ok()) {
      ++stats.sent;
    }
    // A transient send failure counts as a lost attempt: it expires like one and is retried.
    inflight.emplace(tid, Slot{request, clock_.MonotonicNanos() + deadline_ns, attempt});
    return true;
  };
  auto attempt_failed = [&](const Slot& slot) -> bool {
    NodeState& node = nodes[requests[slot.request].node];
    if (slot.attempt < attempts_max) {
      ++stats.retries;
      return send(slot.request, slot.attempt + 1);
    }
    --node.inflight;
    finish(slot.request, MadOutcome::kTimeout);
    ++stats.timeouts;
    fail_node(node);
    return true;
  };

  while (remaining > 0) {
    // Fill the window round-robin: one request per eligible node per pass.
    bool progress = true;
    while (progress && static_cast<int>(inflight.size()) < window) {
      progress = false;
      for (size_t n = 0; n < order.size() && static_cast<int>(inflight.size()) < window; ++n) {
        NodeState& node = nodes[order[(cursor + n) % order.size()]];
        const int cap = node.confirmed ? per_node : 1;
        if (node.failed || node.pending.empty() || node.inflight >= cap) {
          continue;
        }
        const size_t request = node.pending.front();
        node.pending.pop_front();
        ++node.inflight;
        if (!send(request, 1)) {
          break;
        }
        progress = true;
      }
      cursor = order.empty() ? 0 : (cursor + 1) % order.size();
      if (!fatal.ok()) {
        break;
      }
    }
    if (!fatal.ok()) {
      break;
    }
    if (inflight.empty()) {
      // Nothing outstanding but requests remain: only possible if every node is gated on a
      // failure, which finishes its requests; guard against a logic error looping forever.
      break;
    }

    int64_t now = clock_.MonotonicNanos();
    int64_t earliest = INT64_MAX;
    for (const auto& [tid, slot] : inflight) {
      earliest = std::min(earliest, slot.deadline);
    }
    const absl::Duration wait = absl::Nanoseconds(std::max<int64_t>(0, earliest - now));
    absl::StatusOr<std::optional<MadTransport::Completion>> received =
        transport_.Receive(std::max(wait, absl::Milliseconds(1)));
    if (!received.ok()) {
      fatal = received.status();
      break;
    }
    if (received->has_value()) {
      const MadTransport::Completion& completion = **received;
      auto it = inflight.find(completion.tid);
      if (it == inflight.end()) {
        ++stats.stray;
      } else {
        const Slot slot = it->second;
        inflight.erase(it);
        if (completion.timed_out) {
          if (!attempt_failed(slot)) {
            break;
          }
        } else {
          NodeState& node = nodes[requests[slot.request].node];
          --node.inflight;
          node.confirmed = true;
          MadResult& result = results[slot.request];
          result.mad_status = completion.mad_status;
          result.data = completion.data;
          // Status 0 is success; IBA 13.4.7 Table 107 bits 2-4 carry the error code (bit 0 is
          // "busy", bit 1 "redirect", which a PMA does not use for these attributes).
          if (completion.mad_status == 0) {
            ++stats.ok;
            finish(slot.request, MadOutcome::kOk);
          } else {
            ++stats.errors;
            finish(slot.request, MadOutcome::kStatusError);
          }
        }
      }
    }
    // Expire attempts whose deadline passed.
    now = clock_.MonotonicNanos();
    std::vector<std::pair<uint32_t, Slot>> expired;
    for (const auto& [tid, slot] : inflight) {
      if (slot.deadline <= now) {
        expired.emplace_back(tid, slot);
      }
    }
    for (const auto& [tid, slot] : expired) {
      inflight.erase(tid);
      if (!attempt_failed(slot)) {
        break;
      }
    }
    if (!fatal.ok()) {
      break;
    }
  }

  if (!fatal.ok() || remaining > 0) {
    for (MadResult& result : results) {
      if (result.outcome == MadOutcome::kSkipped && result.attempts > 0) {
        result.outcome = MadOutcome::kSendError;
      }
    }
    for (const auto& [tid, slot] : inflight) {
      results[slot.request].outcome = MadOutcome::kSendError;
      ++stats.errors;
    }
    if (fatal.ok()) {
      return absl::InternalError("MAD pipeline stopped with requests unfinished");
    }
    return fatal;
  }
  return absl::OkStatus();
}

}  // namespace fabricmon::collectors::ib_fabric
