#include "daemon/aggregator/agent_stream.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "daemon/aggregator/peer_identity.h"
#include "daemon/common/logging.h"
#include "daemon/wire/batch_codec.h"
#include "daemon/wire/series_codec.h"
#include "google/protobuf/arena.h"

namespace fabricmon::aggregator {
namespace {
std::atomic<uint64_t> g_next_token{1};

// Whose new-series bucket a stream spends (PeerBudget): the certificate identity when TLS
// authenticated the peer, else the peer's address without its port (a plaintext peer opens as
// many connections as it likes from one host, but has one host).
std::string PeerKey(const PeerIdentity& identity, const std::string& peer) {
  if (identity.authenticated) {
    return absl::StrCat("certificate ", identity.Describe());
  }
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find(':');
  if (colon == std::string::npos || colon == scheme) {
    return peer;  // no port ("inproc" and the like)
  }
  return peer.substr(0, colon);
}

}  // namespace

int GrpcReceiveLimit(uint32_t max_message_bytes) {
  const uint64_t doubled = uint64_t{max_message_bytes} * 2;
  return static_cast<int>(std::min<uint64_t>(doubled, std::numeric_limits<int>::max()));
}

absl::string_view RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kBeforeHello:
      return "before_hello";
    case RejectReason::kMalformed:
      return "malformed";
    case RejectReason::kUnknownSeries:
      return "unknown_series";
    case RejectReason::kUnknownLayout:
      return "unknown_layout";
    case RejectReason::kDuplicateNode:
      return "duplicate_node";
    case RejectReason::kSeriesLimit:
      return "series_limit";
    case RejectReason::kSeriesRateLimit:
      return "series_rate_limit";
    case RejectReason::kInvalidDeclaration:
      return "invalid_declaration";
    case RejectReason::kIdentityMismatch:
      return "identity_mismatch";
    case RejectReason::kRoleForbidden:
      return "role_forbidden";
    case RejectReason::kNodeLimit:
      return "node_limit";
    case RejectReason::kIdentityConflict:
      return "identity_conflict";
    case RejectReason::kValueOutOfRange:
      return "value_out_of_range";
    case RejectReason::kTooLarge:
      return "too_large";
    case RejectReason::kUndecodable:
      return "undecodable";
    case RejectReason::kForgotten:
      return "node_forgotten";
    case RejectReason::kDeclarationConflict:
      return "declaration_conflict";
    case RejectReason::kReservedFamily:
      return "reserved_family";
    case RejectReason::kProtocol:
    case RejectReason::kCount:
      break;
  }
  return "protocol";
}

AgentStream::AgentStream(grpc::CallbackServerContext* context, store::SeriesStore& store,
                         IngestStats& stats, const StreamOptions& options, Clock& clock)
    : handle_(std::make_shared<StreamHandle>()),
      stats_(stats),
      options_(options),
      token_(g_next_token.fetch_add(1)),
      peer_(context->peer()),
      identity_(PeerIdentityFromAuthContext(context->auth_context())),
      observed_(options_.batch_observer != nullptr ? options_.batch_observer->OpenStream()
                                                   : nullptr),
      session_(store, stats, clock, observed_.get()) {
  {
    absl::MutexLock lock(&handle_->mu);
    handle_->context = context;
    handle_->stream = this;
  }
  ++stats_.streams_opened;
  ++stats_.streams_active;
  StartRead(&incoming_bytes_);
}

namespace {

// The stream whose read this thread is handling (null: none). An ack that settles there goes out
// at once, with the flow-control update gRPC writes for the read; one settled anywhere else
// waits for the stream's next read (ack_flusher.h).
thread_local const AgentStream* reading_stream = nullptr;

class ReadingStream {
 public:
  explicit ReadingStream(const AgentStream* stream) { reading_stream = stream; }
  ~ReadingStream() { reading_stream = nullptr; }
  ReadingStream(const ReadingStream&) = delete;
  ReadingStream& operator=(const ReadingStream&) = delete;
};

// Where a read's message is parsed: an arena kept per thread that handles reads, reset before
// each message. A batch's values, its presence bitmap and the message objects come out of a block
// the thread keeps instead of about ten mallocs and frees per batch (the repeated field grows by
// doubling as it is parsed), and no stream holds its last message between reads. A read handled
// while this thread already handles one (not expected: gRPC runs one reaction at a time per
// thread) parses into a message of its own.
class ParsedMessage {
 public:
  ParsedMessage() {
    thread_local std::unique_ptr<ThreadArena> thread_arena;
    if (thread_arena == nullptr) {
      thread_arena = std::make_unique<ThreadArena>();
    }
    if (!thread_arena->in_use) {
      arena_ = thread_arena.get();
      arena_->in_use = true;
      arena_->arena.Reset();
      message_ = google::protobuf::Arena::CreateMessage<v1::AgentMessage>(&arena_->arena);
    } else {
      message_ = &own_;
    }
  }
  ~ParsedMessage() {
    if (arena_ != nullptr) {
      arena_->in_use = false;
    }
  }
  ParsedMessage(const ParsedMessage&) = delete;
  ParsedMessage& operator=(const ParsedMessage&) = delete;

  v1::AgentMessage& get() { return *message_; }

 private:
  struct ThreadArena {
    // Room for a batch of a few thousand series with its repeated field's earlier sizes; a
    // larger message takes more blocks, freed at the next reset.
    static constexpr size_t kBlockBytes = 64 * 1024;
    ThreadArena() : arena(block.get(), kBlockBytes) {}
    std::unique_ptr<char[]> block = std::make_unique<char[]>(kBlockBytes);
    google::protobuf::Arena arena;
    bool in_use = false;
  };
  ThreadArena* arena_ = nullptr;
  v1::AgentMessage* message_ = nullptr;
  v1::AgentMessage own_;
};

}  // namespace

void AgentStream::OnReadDone(bool ok) {
  const ReadingStream reading(this);
  if (!ok) {
    // The agent half-closed or the call broke: finish when pending writes are out. (A message
    // beyond GrpcReceiveLimit also ends here: gRPC fails the call with RESOURCE_EXHAUSTED before
    // we see a byte, indistinguishable from a peer that went away.)
    absl::MutexLock lock(&mu_);
    if (!finish_.has_value()) {
      finish_ = grpc::Status::OK;
    }
    MaybeWriteLocked();
    return;
  }
  const size_t size = incoming_bytes_.Length();
  stats_.bytes += size;
  if (size > options_.max_message_bytes) {
    incoming_bytes_.Clear();
    Fail(Error{RejectReason::kTooLarge, v1::Reject::REASON_TOO_LARGE,
               absl::StatusCode::kResourceExhausted,
               absl::StrCat("message of ", size, " bytes is above max_message_bytes (",
                            options_.max_message_bytes, ")")});
    return;
  }
  if (options_.recorder != nullptr) {
    // Deserialize() empties the buffer; the slices keep the bytes for RecordAccepted.
    incoming_slices_.clear();
    if (!incoming_bytes_.Dump(&incoming_slices_).ok()) {
      incoming_slices_.clear();
    }
  }
  ParsedMessage parsed;
  v1::AgentMessage& incoming = parsed.get();
  if (!grpc::SerializationTraits<v1::AgentMessage>::Deserialize(&incoming_bytes_, &incoming).ok()) {
    Fail(Error{RejectReason::kUndecodable, v1::Reject::REASON_UNDECODABLE,
               absl::StatusCode::kInvalidArgument,
               absl::StrCat("a message of ", size,
                            " bytes does not decode as a fabricmon.v1.AgentMessage (broken "
                            "encoding, or a string that is not valid UTF-8)")});
    return;
  }
  filtered_.reset();
  std::optional<Error> error = Handle(incoming);
  if (error.has_value()) {
    Fail(*error);
    return;
  }
  if (options_.recorder != nullptr) {
    // An AckRequest concerns only this stream's acks: a replay has nothing to do with it. The
    // batches of a SampleBatches message were recorded one by one (RecordBatch).
    if (incoming.body_case() != v1::AgentMessage::kAckRequest &&
        incoming.body_case() != v1::AgentMessage::kBatches) {
      RecordAccepted(incoming, filtered_.has_value() ? &*filtered_ : nullptr);
    }
    incoming_slices_.clear();
  }
  if (end_after_batch_) {
    absl::MutexLock lock(&mu_);
    if (!finish_.has_value()) {
      finish_ = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "series the aggregator retired came back: reconnect to declare them");
    }
    MaybeWriteLocked();
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (ack_waiting_since_ != absl::InfiniteFuture()) {
      MaybeWriteLocked();  // what settled since, with this read's flow-control update
    }
  }
  StartRead(&incoming_bytes_);
}

std::optional<AgentStream::Error> AgentStream::Handle(const v1::AgentMessage& message) {
  const std::shared_ptr<store::NodeState>& node = session_.node();
  if (message.body_case() != v1::AgentMessage::kHello && node == nullptr) {
    return Error{RejectReason::kBeforeHello, v1::Reject::REASON_PROTOCOL,
                 absl::StatusCode::kFailedPrecondition, "the first message must be a hello"};
  }
  switch (message.body_case()) {
    case v1::AgentMessage::kHello:
      return HandleHello(message.hello());
    case v1::AgentMessage::kDeclarations:
      return session_.Declare(message.declarations());
    case v1::AgentMessage::kLayouts:
      return session_.AddLayouts(message.layouts());
    case v1::AgentMessage::kBatch:
      return HandleBatch(message.batch());
    case v1::AgentMessage::kBatches:
      return HandleBatches(message.batches());
    case v1::AgentMessage::kAckRequest:
      AskForAck(last_batch_sequence_);
      return std::nullopt;
    case v1::AgentMessage::kInventory: {
      v1::Inventory inventory = message.inventory().inventory();
      FilterInventory(node->name(), inventory);
      if (options_.recorder != nullptr &&
          (inventory.fabric_nodes_size() != message.inventory().inventory().fabric_nodes_size() ||
           inventory.fabric_links_size() != message.inventory().inventory().fabric_links_size())) {
        filtered_.emplace(message);
        *filtered_->mutable_inventory()->mutable_inventory() = inventory;
      }
      session_.SetInventory(std::move(inventory));
      return std::nullopt;
    }
    case v1::AgentMessage::BODY_NOT_SET:
      break;
  }
  return Error{RejectReason::kMalformed, v1::Reject::REASON_MALFORMED,
               absl::StatusCode::kInvalidArgument, "empty or unknown message"};
}

std::optional<AgentStream::Error> AgentStream::HandleHello(const v1::Hello& hello) {
  if (session_.node() != nullptr) {
    return Error{RejectReason::kProtocol, v1::Reject::REASON_PROTOCOL,
                 absl::StatusCode::kFailedPrecondition, "second hello on one stream"};
  }
  if (std::optional<Error> invalid = IngestSession::CheckNodeName(hello.node_name())) {
    return invalid;
  }
  // An operator's certificate reads the fleet; it must not also be able to write a node's series
  // (the CLI's key on a laptop would otherwise be an agent key for a node named after it).
  if (options_.authorization != nullptr && options_.authorization->IsOperator(identity_)) {
    return Error{RejectReason::kRoleForbidden, v1::Reject::REASON_FORBIDDEN,
                 absl::StatusCode::kPermissionDenied,
                 absl::StrCat("certificate ", identity_.Describe(),
                              " is an operator's (authorization.operators): operators may not "
                              "stream telemetry")};
  }
  // Bind the claimed name to the certificate before the store sees it, so that a peer using
  // another node's name can neither store series for it nor take its stream over.
  if (options_.require_peer_identity || identity_.authenticated) {
    absl::Status bound = CheckNodeIdentity(identity_, hello.node_name());
    if (!bound.ok()) {
      return Error{RejectReason::kIdentityMismatch, v1::Reject::REASON_IDENTITY_MISMATCH,
                   absl::StatusCode::kPermissionDenied, std::string(bound.message())};
    }
  }
  // The hello's inventory goes through the same sweeper filter as later updates.
  std::optional<v1::Hello> filtered;
  if (hello.inventory().fabric_nodes_size() > 0 || hello.inventory().fabric_links_size() > 0) {
    filtered = hello;
    FilterInventory(hello.node_name(), *filtered->mutable_inventory());
  }
  std::shared_ptr<StreamHandle> handle = handle_;
  std::variant<IngestSession::Attached, Error> attached = session_.Attach(
      filtered.has_value() ? *filtered : hello, token_,
      [handle] {
        absl::MutexLock lock(&handle->mu);
        if (handle->context != nullptr) {
          handle->context->TryCancel();
        }
      },
      PeerKey(identity_, peer_),
      [handle](uint64_t sequence) {
        absl::MutexLock lock(&handle->mu);
        if (handle->stream != nullptr) {
          handle->stream->SendAck(sequence);
        }
      });
  if (Error* refused = std::get_if<Error>(&attached)) {
    if (refused->reason == RejectReason::kIdentityConflict) {
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "stream from " << peer_ << " refused: " << refused->message;
    }
    return *std::move(refused);
  }
  const uint64_t last_stored_sequence =
      std::get<IngestSession::Attached>(attached).last_stored_sequence;
  if (options_.recorder != nullptr && filtered.has_value()) {
    filtered_.emplace();
    *filtered_->mutable_hello() = *std::move(filtered);
  }
  FABRICMON_LOG(Info) << "node " << hello.node_name() << " connected from " << peer_ << " (agent "
                      << hello.agent_version() << ", stored up to sequence " << last_stored_sequence
                      << ")";
  v1::AggregatorMessage reply;
  reply.mutable_hello_ack()->set_last_stored_sequence(last_stored_sequence);
  reply.mutable_hello_ack()->set_max_message_bytes(options_.max_message_bytes);
  reply.mutable_hello_ack()->set_defers_acks(true);
  reply.mutable_hello_ack()->set_takes_batches(true);
  reply.mutable_hello_ack()->set_max_batches_per_message(wire::kMaxBatchesPerMessage);
  Send(std::move(reply), /*open_acks=*/true);
  return std::nullopt;
}

std::optional<AgentStream::Error> AgentStream::HandleBatch(const v1::SampleBatch& batch) {
  // Asked before the batch is handled: without remote_write it settles inside Batch().
  if (!batch.ack_later()) {
    AskForAck(batch.sequence());
  }
  last_batch_sequence_ = std::max(last_batch_sequence_, batch.sequence());
  std::variant<IngestSession::BatchResult, Error> handled = session_.Batch(batch);
  if (Error* refused = std::get_if<Error>(&handled)) {
    return *std::move(refused);
  }
  IngestSession::BatchResult& result = std::get<IngestSession::BatchResult>(handled);
  // Values for series the node retired came back, or a cap has room again for series it kept
  // out: ask the agent to declare them again (or, for an agent before PROTOCOL_REVISION_2 that
  // sent values of retired series, end the stream so the next one declares all).
  if (result.retired_values && !session_.answers_redeclare()) {
    end_after_batch_ = true;
  } else if (!result.redeclare.empty()) {
    v1::AggregatorMessage message;
    message.mutable_redeclare()->mutable_series_ids()->Assign(result.redeclare.begin(),
                                                              result.redeclare.end());
    Send(std::move(message));
  }
  // Acknowledged once settled: now, or when remote_write is done with its samples.
  result.settlement.reset();
  return std::nullopt;
}

std::optional<AgentStream::Error> AgentStream::HandleBatches(const v1::SampleBatches& batches) {
  if (batches.batch_size() == 0 ||
      static_cast<uint32_t>(batches.batch_size()) > wire::kMaxBatchesPerMessage) {
    return Error{RejectReason::kMalformed, v1::Reject::REASON_MALFORMED,
                 absl::StatusCode::kInvalidArgument,
                 absl::StrCat("a SampleBatches message holds ", batches.batch_size(),
                              " batches; 1 to ", wire::kMaxBatchesPerMessage, " are accepted")};
  }
  // Each as if it had come alone: a refused batch ends the stream with those before it stored
  // (and acknowledged as settled), as a message of its own would have.
  for (const v1::SampleBatch& batch : batches.batch()) {
    if (std::optional<Error> refused = HandleBatch(batch)) {
      return refused;
    }
    if (options_.recorder != nullptr) {
      RecordBatch(batch);
    }
    if (end_after_batch_) {
      break;  // the stream ends here; the rest is replayed on the next one, declared anew
    }
  }
  return std::nullopt;
}

void AgentStream::FilterInventory(absl::string_view node_name, v1::Inventory& inventory) {
  if (inventory.fabric_nodes_size() == 0 && inventory.fabric_links_size() == 0) {
    return;
  }
  if (options_.authorization != nullptr && options_.authorization->IsFabricSweeper(node_name)) {
    return;
  }
  ++stats_.inventory_fabric_refused;
  if (!logged_fabric_refused_) {
    logged_fabric_refused_ = true;
    FABRICMON_LOG(Warning) << "node " << node_name << " (" << peer_ << ") sent switch topology ("
                           << inventory.fabric_nodes_size() << " fabric nodes, "
                           << inventory.fabric_links_size()
                           << " links) but is not a fabric sweeper (authorization.fabric_sweepers):"
                              " dropped, the rest of its inventory kept";
  }
  inventory.clear_fabric_nodes();
  inventory.clear_fabric_links();
}

void AgentStream::RecordAccepted(const v1::AgentMessage& incoming,
                                 const v1::AgentMessage* filtered) {
  if (filtered == nullptr && incoming_slices_.empty()) {
    filtered = &incoming;  // the buffer could not be dumped: the parsed message, serialized
  }
  if (filtered != nullptr) {
    record_scratch_.clear();
    if (filtered->SerializeToString(&record_scratch_)) {
      options_.recorder->RecordMessage(token_, session_.node()->name(), record_scratch_);
    }
    return;
  }
  if (incoming_slices_.size() == 1) {
    const grpc::Slice& slice = incoming_slices_.front();
    options_.recorder->RecordMessage(
        token_, session_.node()->name(),
        absl::string_view(reinterpret_cast<const char*>(slice.begin()), slice.size()));
  } else {
    record_scratch_.clear();
    for (const grpc::Slice& slice : incoming_slices_) {
      record_scratch_.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    options_.recorder->RecordMessage(token_, session_.node()->name(), record_scratch_);
  }
  incoming_slices_.clear();
  if (record_scratch_.capacity() > (size_t{1} << 20)) {
    std::string().swap(record_scratch_);  // a large message's buffer is not kept per stream
  }
}

void AgentStream::RecordBatch(const v1::SampleBatch& batch) {
  v1::AgentMessage single;
  *single.mutable_batch() = batch;
  record_scratch_.clear();
  if (single.SerializeToString(&record_scratch_)) {
    options_.recorder->RecordMessage(token_, session_.node()->name(), record_scratch_);
  }
}

void AgentStream::Fail(const Error& error) {
  stats_.Reject(error.reason);
  FABRICMON_LOG_EVERY_MINUTE(Warning)
      << "rejecting stream from " << peer_
      << (session_.node() ? " (node " + session_.node()->name() + ")" : "") << ": "
      << error.message;
  v1::AggregatorMessage reject;
  reject.mutable_reject()->set_reason(error.wire_reason);
  reject.mutable_reject()->set_message(error.message);
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(reject));
  if (!finish_.has_value()) {
    finish_ = grpc::Status(static_cast<grpc::StatusCode>(error.code), error.message);
  }
  MaybeWriteLocked();
}

void AgentStream::Send(v1::AggregatorMessage message, bool open_acks) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(message));
  acks_open_ = acks_open_ || open_acks;
  MaybeWriteLocked();
}

void AgentStream::SendAck(uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  // Acks are cumulative: while a write is in flight, only the newest needs to go out next.
  if (sequence > pending_ack_) {
    pending_ack_ = sequence;
  }
  if (options_.ack_flusher == nullptr || reading_stream == this) {
    MaybeWriteLocked();
    return;
  }
  if (ack_waiting_since_ == absl::InfiniteFuture()) {
    ack_waiting_since_ = absl::Now();
  }
  if (!flush_queued_) {
    DeferFlushLocked(ack_waiting_since_ + options_.ack_flusher->max_delay());
  }
}

void AgentStream::DeferFlushLocked(absl::Time due) {
  flush_queued_ = true;
  std::shared_ptr<StreamHandle> handle = handle_;
  options_.ack_flusher->DeferUntil(due, [handle] {
    absl::MutexLock lock(&handle->mu);
    if (handle->stream != nullptr) {
      handle->stream->FlushDeferredAck();
    }
  });
}

void AgentStream::FlushDeferredAck() {
  absl::MutexLock lock(&mu_);
  flush_queued_ = false;
  if (ack_waiting_since_ == absl::InfiniteFuture()) {
    return;  // a read wrote it
  }
  const absl::Time due = ack_waiting_since_ + options_.ack_flusher->max_delay();
  if (due > absl::Now()) {
    DeferFlushLocked(due);  // a read wrote the one this was for; a later one waits
    return;
  }
  MaybeWriteLocked();
  // Written, or not asked for yet (an ack_later tail): the next AskForAck writes it at once.
  ack_waiting_since_ = absl::InfiniteFuture();
}

void AgentStream::AskForAck(uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (sequence > sent_ack_ && (acks_asked_.empty() || sequence > acks_asked_.back())) {
    acks_asked_.push_back(sequence);
  }
  MaybeWriteLocked();
}

void AgentStream::MaybeWriteLocked() {
  if (writing_ || finished_) {
    return;
  }
  v1::AggregatorMessage next;
  if (!queue_.empty()) {
    next = std::move(queue_.front());
    queue_.pop_front();
  } else if (acks_open_ && pending_ack_ > sent_ack_ && !acks_asked_.empty() &&
             acks_asked_.front() <= pending_ack_) {
    next.mutable_ack()->set_sequence(pending_ack_);
    sent_ack_ = pending_ack_;
    ack_waiting_since_ = absl::InfiniteFuture();  // everything settled goes with it
    while (!acks_asked_.empty() && acks_asked_.front() <= sent_ack_) {
      acks_asked_.pop_front();
    }
  } else if (finish_.has_value()) {
    finished_ = true;
    Finish(*finish_);
    return;
  } else {
    return;
  }
  bool own_buffer = false;
  in_flight_.Clear();
  (void)grpc::SerializationTraits<v1::AggregatorMessage>::Serialize(next, &in_flight_, &own_buffer);
  writing_ = true;
  StartWrite(&in_flight_);
}

void AgentStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) {
    // The peer is gone; nothing more can be written.
    queue_.clear();
    if (!finish_.has_value()) {
      finish_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed");
    }
  }
  MaybeWriteLocked();
}

void AgentStream::OnDone() {
  {
    absl::MutexLock lock(&handle_->mu);
    handle_->context = nullptr;  // gRPC frees the context once this returns
    handle_->stream = nullptr;   // and this stream is deleted
  }
  if (const std::shared_ptr<store::NodeState>& node = session_.node(); node != nullptr) {
    session_.Detach(token_);
    if (options_.recorder != nullptr) {
      options_.recorder->RecordStreamEnd(token_, node->name());
    }
    FABRICMON_LOG(Info) << "node " << node->name() << " disconnected";
  }
  --stats_.streams_active;
  delete this;
}

}  // namespace fabricmon::aggregator
