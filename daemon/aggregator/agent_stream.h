#pragma once

// One agent's telemetry stream, server side: a gRPC ServerBidiReactor allocated per call and
// deleted in OnDone() (the one sanctioned `delete this`). Protocol errors get a Reject message
// naming the problem and end this stream only; nothing else is affected.
//
// The stream takes raw bytes (gRPC's raw callback method) and parses them itself, so that every
// refusal can say why: with generated message types gRPC drops a message that does not parse
// (or is too large) before the service sees it, and the service only learns that the read
// failed, as it learns of a half-close. Here a message that does not parse (including invalid
// UTF-8 in a string, which protobuf refuses) gets REASON_UNDECODABLE, and one above
// max_message_bytes REASON_TOO_LARGE, each counted; gRPC itself accepts up to
// GrpcReceiveLimit() so that such messages reach us, and fails the call beyond it.

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/aggregator/ack_flusher.h"
#include "daemon/aggregator/authorization.h"
#include "daemon/aggregator/batch_observer.h"
#include "daemon/aggregator/ingest_session.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/peer_identity.h"
#include "daemon/common/clock.h"
#include "daemon/recording/recorder.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/telemetry.grpc.pb.h"
#include "grpcpp/support/byte_buffer.h"

namespace fabricmon::aggregator {

// max_message_bytes must lie in this range (AggregatorConfig; checked at start).
inline constexpr uint32_t kMinMessageBytes = 64 << 10;
inline constexpr uint32_t kMaxMessageBytes = 1 << 30;

// What gRPC is told to accept: twice max_message_bytes (so that a message somewhat over it is
// read and refused with a Reject that says so), at most INT_MAX.
int GrpcReceiveLimit(uint32_t max_message_bytes);

struct StreamOptions {
  uint32_t max_message_bytes = 4 << 20;
  // Mutual TLS: a hello's node name must be one of the client certificate's names (DNS SANs or
  // CN; peer_identity.h), else the stream is rejected with REASON_IDENTITY_MISMATCH and
  // PERMISSION_DENIED. An authenticated peer is always bound, whatever this says.
  bool require_peer_identity = false;
  // Roles: an operator certificate is refused (REASON_FORBIDDEN, counted as "role_forbidden"),
  // and switch topology in a non-sweeper's inventory is dropped. Null: nobody is either.
  std::shared_ptr<const Authorization> authorization;
  // Where accepted messages are recorded (after validation: a refused message never is); null:
  // no recording. Outlives every stream.
  recording::Recorder* recorder = nullptr;
  // Told of every batch stored (remote write). Null: nobody is.
  std::shared_ptr<BatchObserver> batch_observer;
  // Where an ack that settled away from the stream's read waits, at most its max_delay, for the
  // stream's next read to write it (ack_flusher.h). Null: written at once, from whichever
  // thread settled it. Outlives every stream.
  AckFlusher* ack_flusher = nullptr;
};

class AgentStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // References must outlive every stream (they belong to the server).
  AgentStream(grpc::CallbackServerContext* context, store::SeriesStore& store, IngestStats& stats,
              const StreamOptions& options, Clock& clock);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;
  void OnCancel() override {}

 private:
  using Error = IngestError;
  std::optional<Error> Handle(const v1::AgentMessage& message);
  std::optional<Error> HandleHello(const v1::Hello& hello);
  std::optional<Error> HandleBatch(const v1::SampleBatch& batch);
  std::optional<Error> HandleBatches(const v1::SampleBatches& batches);
  // Drops fabric_nodes/fabric_links from `inventory` unless `node_name` is a fabric sweeper;
  // counts it and logs it once per stream.
  void FilterInventory(absl::string_view node_name, v1::Inventory& inventory);
  void Fail(const Error& error);
  // Queues `message`; `open_acks`: acks may follow it (the hello's answer).
  void Send(v1::AggregatorMessage message, bool open_acks = false) ABSL_LOCKS_EXCLUDED(mu_);
  // The ledger settled every batch through `sequence`: acknowledged once an ack is asked for.
  // Settled away from this stream's read (a remote_write queue's thread) and with an
  // ack_flusher, the write waits for the next read or the flusher.
  void SendAck(uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);
  // The flusher's turn: writes an ack that waited max_delay (unless a read wrote it meanwhile),
  // or waits again for a later one.
  void FlushDeferredAck() ABSL_LOCKS_EXCLUDED(mu_);
  // Queues this stream's one flush with the flusher, for `due`.
  void DeferFlushLocked(absl::Time due) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Batch `sequence` (or, for an AckRequest, the last batch received) wants its ack: the next
  // ack goes out as soon as everything through it is settled, and carries every later settled
  // batch with it. A batch sent with ack_later asks for nothing: it rides on the next ack asked.
  void AskForAck(uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the accepted message `incoming` to the recorder: the bytes as received
  // (incoming_slices_), or `filtered` when the aggregator kept less than it received (a hello or
  // inventory update whose switch topology was dropped), so that a replay sees what this
  // aggregator used.
  void RecordAccepted(const v1::AgentMessage& incoming, const v1::AgentMessage* filtered);
  // A batch of a SampleBatches message once handled, recorded as a message of its own: a
  // recording holds the batches the aggregator stored, however they travelled (a refused one
  // ends the stream with those before it recorded).
  void RecordBatch(const v1::SampleBatch& batch);

  // What the store calls to end this stream when another takes the node over, and what the
  // node's settlement ledger calls to acknowledge batches (from a remote_write queue's thread).
  // Either may come after this stream ended on its own (a takeover racing the stream's end, a
  // batch settling late), so they go through a handle that OnDone() disarms instead of the
  // context gRPC frees after OnDone() and the stream deleted with it.
  struct StreamHandle {
    absl::Mutex mu;
    grpc::CallbackServerContext* context ABSL_GUARDED_BY(mu) = nullptr;
    AgentStream* stream ABSL_GUARDED_BY(mu) = nullptr;
  };

  const std::shared_ptr<StreamHandle> handle_;
  IngestStats& stats_;
  const StreamOptions options_;
  const uint64_t token_;
  std::string peer_;
  const PeerIdentity identity_;  // from the TLS handshake, read once at construction

  // Read side: touched only from OnReadDone (one read outstanding at a time).
  grpc::ByteBuffer incoming_bytes_;
  // With a recorder: the message's bytes, kept (by reference, not copied) until it is accepted.
  std::vector<grpc::Slice> incoming_slices_;
  std::string record_scratch_;  // a message in several slices, joined for the recorder
  std::optional<v1::AgentMessage> filtered_;  // set by Handle when it kept less than received
  const std::unique_ptr<BatchObserver::Stream> observed_;  // options_.batch_observer's, if any
  IngestSession session_;
  bool end_after_batch_ = false;        // older agent: end the stream, it reconnects
  uint64_t last_batch_sequence_ = 0;    // the highest batch sequence received on this stream
  bool logged_fabric_refused_ = false;  // FilterInventory logged for this stream

  // Write side.
  absl::Mutex mu_;
  std::deque<v1::AggregatorMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Acks wait for the hello's answer: a batch settling early (one a previous stream stored)
  // must not be acknowledged before the agent learnt where to resume.
  bool acks_open_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t pending_ack_ ABSL_GUARDED_BY(mu_) = 0;
  // Since when an ack settled away from a read has waited to be written (InfiniteFuture: none
  // waits), and whether the flusher holds a flush of this stream.
  absl::Time ack_waiting_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool flush_queued_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sent_ack_ ABSL_GUARDED_BY(mu_) = 0;
  // Sequences whose ack was asked for and not yet sent, increasing. An agent that sends several
  // batches a second asks for an ack on only some of them (SampleBatch.ack_later), so the others
  // cost no ack write here and no flow-control update for it on the agent; an older agent asks
  // for every one.
  std::deque<uint64_t> acks_asked_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);  // set: finish once drained
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer in_flight_ ABSL_GUARDED_BY(mu_);
};

class TelemetryService final
    : public v1::Telemetry::WithRawCallbackMethod_Stream<v1::Telemetry::Service> {
 public:
  // References must outlive the service.
  TelemetryService(store::SeriesStore& store, IngestStats& stats, StreamOptions options,
                   Clock& clock)
      : store_(store), stats_(stats), options_(options), clock_(clock) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Stream(
      grpc::CallbackServerContext* context) override {
    return new AgentStream(context, store_, stats_, options_, clock_);
  }

 private:
  store::SeriesStore& store_;
  IngestStats& stats_;
  const StreamOptions options_;
  Clock& clock_;
};

}  // namespace fabricmon::aggregator
