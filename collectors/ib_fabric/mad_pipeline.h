#pragma once

// Many MADs in flight over one umad port: the sweep engine of the ib_fabric collector.
//
// libibmad's `_via` calls (pma_query_via, smp_query_via) are blocking: one MAD, one round trip.
// Sweeping thousands of switch ports that way is latency-bound (that is what ibqueryerrors does).
// Here one thread keeps up to `window` requests outstanding on a single MadPort, matching
// responses by transaction id (the low 32 bits; the kernel owns the high ones, see libibmad
// mad.c mad_trid()), with a per-request deadline, retries, a per-node in-flight cap and per-node
// failure gating: a node is sent one request until it has answered once, and after a request to
// it has timed out on every attempt its remaining requests are skipped, so a dead switch costs
// one timeout chain, not one per port.
//
// Threading: a MadPipeline and its transport are used by one thread at a time (the collector's).
// One MadPort per sweeping thread (libibmad's _via calls take it explicitly; never the global
// port); the pipeline replaces N threads each blocking on its own port, which umad2sim (the ibsim
// client library) cannot even express: it routes the replies of a management class to the last umad
// fd that registered it.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectors/ib_fabric/pma.h"
#include "daemon/common/clock.h"

struct ibmad_port;

namespace fabricmon::collectors::ib_fabric {

class MadPort;

// What to ask. PMA attributes go to the GSI (QP1) of `lid`; PortInfo is a LID-routed SMP.
enum class MadKind : uint8_t {
  kClassPortInfo,         // PerfMgt ClassPortInfo (attribute 0x0001)
  kPortCounters,          // PerfMgt PortCounters (0x0012), PortSelect = port
  kPortCountersExtended,  // PerfMgt PortCountersExtended (0x001D), PortSelect = port
  kPortInfo,              // SubnGet(PortInfo) (0x0015), attribute modifier = port
};

struct MadRequest {
  uint16_t lid = 0;  // destination LID (a switch's port 0 LID, or a CA port's LID)
  uint8_t port = 0;  // PortSelect / attribute modifier
  MadKind kind = MadKind::kPortCounters;
  uint32_t node = 0;  // caller's node index: per-node cap and failure gating
};

enum class MadOutcome : uint8_t {
  kOk,
  kTimeout,      // no answer after every attempt
  kStatusError,  // answered with a non-zero MAD status (e.g. attribute unsupported)
  kSendError,    // the local send failed
  kSkipped,      // not sent: an earlier request to the same node timed out
};

struct MadResult {
  MadOutcome outcome = MadOutcome::kSkipped;
  uint16_t mad_status = 0;
  uint8_t attempts = 0;
  std::array<uint8_t, kGsDataBytes> data{};  // the payload (SMP answers use the first 64 bytes)
};

// A transport that can have many MADs outstanding. Production: UmadTransport (libibumad under
// a MadPort); tests: a scripted fake.
class MadTransport {
 public:
  struct Completion {
    uint32_t tid = 0;         // low 32 bits of the transaction id
    bool timed_out = false;   // the kernel gave the send back unanswered (umad status ETIMEDOUT)
    uint16_t mad_status = 0;  // MAD header status of a response
    std::array<uint8_t, kGsDataBytes> data{};
  };
  virtual ~MadTransport() = default;
  // Sends `request` with transaction id `tid` (non-zero), not waiting for the answer. `timeout` is
  // passed to the kernel so it tracks the request (umad_send); the pipeline keeps its own
  // deadline too. Errors: Unavailable (transient), others are fatal for the sweep.
  virtual absl::Status Send(const MadRequest& request, uint32_t tid, absl::Duration timeout) = 0;
  // Waits up to `timeout` for one completion; nullopt when none arrived. Errors are fatal.
  virtual absl::StatusOr<std::optional<Completion>> Receive(absl::Duration timeout) = 0;
};

// libibumad under a MadPort. Keeps a reference to `port`, which must outlive it.
class UmadTransport final : public MadTransport {
 public:
  explicit UmadTransport(MadPort& port);
  absl::Status Send(const MadRequest& request, uint32_t tid, absl::Duration timeout) override;
  absl::StatusOr<std::optional<Completion>> Receive(absl::Duration timeout) override;

 private:
  MadPort& port_;
  std::vector<uint8_t> buffer_;
};

struct PipelineOptions {
  int window = 64;   // requests in flight, all nodes
  int per_node = 4;  // requests in flight towards one node (after it has answered once)
  absl::Duration timeout = absl::Milliseconds(200);  // per attempt
  int retries = 2;                                   // attempts = retries + 1
};

struct PipelineStats {
  uint64_t sent = 0;      // MADs put on the wire, retries included
  uint64_t ok = 0;        // requests answered with status 0
  uint64_t timeouts = 0;  // requests that timed out on every attempt
  uint64_t errors = 0;    // status errors and send errors
  uint64_t retries = 0;   // re-sends after a timed-out attempt
  uint64_t skipped = 0;   // requests not sent because their node had timed out
  uint64_t stray = 0;     // completions for unknown transaction ids (late or duplicate)
  void Add(const PipelineStats& other);
};

class MadPipeline {
 public:
  // Keeps references to `transport` and `clock`, which must outlive the pipeline.
  MadPipeline(MadTransport& transport, Clock& clock, PipelineOptions options);

  // Runs every request to an outcome; results[i] answers requests[i]. Requests of one node are
  // sent in the order given. Returns a non-OK status only when the transport failed fatally
  // (results are then incomplete: unfinished requests read kSendError).
  absl::Status Run(absl::Span<const MadRequest> requests, std::vector<MadResult>& results,
                   PipelineStats& stats);

  const PipelineOptions& options() const { return options_; }

 private:
  uint32_t NextTid();

  MadTransport& transport_;
  Clock& clock_;
  const PipelineOptions options_;
  uint32_t next_tid_;
};

}  // namespace fabricmon::collectors::ib_fabric
