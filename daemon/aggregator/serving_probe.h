#pragma once

// Whether a gRPC server still answers calls: the aggregator's watchdog asks it before each
// WATCHDOG=1 ping (README "Running under systemd").
//
// A probe is a unary call, through the server's in-process channel, to a method no service
// implements. The server answers UNIMPLEMENTED from its callback machinery, the same threads
// that run the agents' streams, without touching any service, counter or log: an answer means
// the server is serving; a call that gets none within its deadline means it is not.

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/common/clock.h"
#include "grpcpp/grpcpp.h"

namespace fabricmon::aggregator {

class ServingProbe {
 public:
  // The method probed: in no service of ours.
  static constexpr char kMethod[] = "/fabricmon.v1.Liveness/Probe";

  // Keeps `channel` (e.g. grpc::Server::InProcessChannel()) and a reference to `clock`, which
  // must outlive the probe. An in-process channel must not be probed once its server was shut
  // down (gRPC 1.51 crashes creating the call): stop probing first.
  ServingProbe(std::shared_ptr<grpc::Channel> channel, const Clock& clock);

  // Starts one probe unless one is in flight. Non-blocking; completions arrive on gRPC's threads.
  // Thread-safe.
  void Probe(absl::Duration deadline);
  // clock.MonotonicNanos() when the server last answered a probe; 0 before the first. Thread-safe.
  int64_t last_answer_nanos() const;
  // Whether a probe awaits its answer (or its deadline). Thread-safe.
  bool in_flight() const;

 private:
  struct State {
    absl::Mutex mu;
    bool in_flight ABSL_GUARDED_BY(mu) = false;
    int64_t last_answer_nanos ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<grpc::Channel> channel_;
  const Clock& clock_;
  // Shared with the call in flight, which may finish after the probe is gone.
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace fabricmon::aggregator
