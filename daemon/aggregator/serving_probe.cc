#include "daemon/aggregator/serving_probe.h"

#include <utility>

#include "grpcpp/generic/generic_stub.h"

namespace fabricmon::aggregator {

ServingProbe::ServingProbe(std::shared_ptr<grpc::Channel> channel, const Clock& clock)
    : channel_(std::move(channel)), clock_(clock) {}

void ServingProbe::Probe(absl::Duration deadline) {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->in_flight) {
      return;  // the last one has not been answered: it counts against last_answer_nanos()
    }
    state_->in_flight = true;
  }
  // One call's objects live until its completion runs.
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
  };
  auto call = std::make_shared<Call>();
  // An empty message, but a valid buffer: a default ByteBuffer has none, and gRPC refuses it.
  grpc::Slice empty;
  call->request = grpc::ByteBuffer(&empty, 1);
  call->context.set_deadline(std::chrono::system_clock::now() +
                             absl::ToChronoMilliseconds(deadline));
  grpc::GenericStub stub(channel_);
  std::shared_ptr<State> state = state_;
  const Clock* clock = &clock_;
  stub.UnaryCall(&call->context, kMethod, grpc::StubOptions(), &call->request, &call->response,
                 [call, state, clock](grpc::Status status) {
                   absl::MutexLock lock(&state->mu);
                   state->in_flight = false;
                   // UNIMPLEMENTED is the server's answer; DEADLINE_EXCEEDED, UNAVAILABLE or
                   // CANCELLED mean no server answered.
                   if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED || status.ok()) {
                     state->last_answer_nanos = clock->MonotonicNanos();
                   }
                 });
}

int64_t ServingProbe::last_answer_nanos() const {
  absl::MutexLock lock(&state_->mu);
  return state_->last_answer_nanos;
}

bool ServingProbe::in_flight() const {
  absl::MutexLock lock(&state_->mu);
  return state_->in_flight;
}

}  // namespace fabricmon::aggregator
