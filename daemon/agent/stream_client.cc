#include "daemon/agent/stream_client.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/logging.h"
#include "daemon/common/thread_name.h"
#include "daemon/wire/batch_codec.h"

namespace fabricmon::agent {
namespace {

// How often a stream asks for an acknowledgement when the aggregator defers acks: an agent
// sending several batches a second asks on one of them every this often (and whenever it is
// about to end the stream), so that the others cost the aggregator no ack write and the agent no
// flow-control update for an ack (the agent still wakes for gRPC's flow-control update of each
// batch). At 1 Hz every batch asks, as before. What stays unacknowledged (at most
// this long's batches) is what a failover replays to the next aggregator beyond what was in
// flight anyway. Not longer than a 1 Hz cycle: a replayed sample equal to its series' newest in
// remote storage is a duplicate receivers drop, an older one is refused (Prometheus: "out of
// order sample"). 1.5 s halved the ack writes (a fifth of the aggregator's CPU at 1,000 agents
// x 1 Hz), and the failover test then saw Prometheus refuse replayed samples.
constexpr absl::Duration kAckInterval = absl::Milliseconds(500);

}  // namespace

// One stream attempt. Lives from Start() until OnDone(); the connection thread waits for it.
class StreamClient::Reactor final
    : public grpc::ClientBidiReactor<v1::AgentMessage, v1::AggregatorMessage> {
 public:
  explicit Reactor(StreamClient& client) : client_(client), encoder_(client.series_) {}

  void Start(v1::Telemetry::Stub& stub) {
    stub.async()->Stream(&context_, this);
    v1::AgentMessage hello;
    *hello.mutable_hello() = client_.hello_();
    hello.mutable_hello()->set_last_acked_sequence(client_.buffer_.acked_sequence());
    {
      absl::MutexLock lock(&mu_);
      cycle_interval_ = absl::Milliseconds(hello.hello().min_interval_ms());
      queue_.push_back(std::move(hello));
    }
    StartRead(&incoming_);
    // Writes are started from outside reactions (Notify), so hold the stream open until reads
    // fail (the server finished or we cancelled).
    AddHold();
    StartCall();
    Pump();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      {
        absl::MutexLock lock(&mu_);
        finishing_ = true;
      }
      RemoveHold();
      return;
    }
    switch (incoming_.body_case()) {
      case v1::AggregatorMessage::kHelloAck: {
        const uint64_t stored = incoming_.hello_ack().last_stored_sequence();
        client_.buffer_.Ack(stored);
        {
          absl::MutexLock lock(&mu_);
          defers_acks_ = incoming_.hello_ack().defers_acks();
          max_batches_per_message_ = incoming_.hello_ack().takes_batches()
                                         ? std::min(incoming_.hello_ack().max_batches_per_message(),
                                                    wire::kMaxBatchesPerMessage)
                                         : 0;
          // Everything after what the aggregator has is (re)sent; what it acked before a previous
          // disconnect is gone from the buffer and skipped.
          cursor_ = std::max(stored, client_.buffer_.acked_sequence());
          established_ = true;
        }
        {
          absl::MutexLock lock(&client_.stats_mu_);
          ++client_.stats_.connects;
          client_.stats_.connected = true;
        }
        FABRICMON_LOG(Info) << "stream established; aggregator has up to sequence " << stored;
        break;
      }
      case v1::AggregatorMessage::kAck: {
        client_.buffer_.Ack(incoming_.ack().sequence());
        absl::MutexLock lock(&client_.stats_mu_);
        ++client_.stats_.acks_received;
        break;
      }
      case v1::AggregatorMessage::kRedeclare: {
        // The aggregator retired these series while they were gone and they are back.
        const auto& ids = incoming_.redeclare().series_ids();
        absl::MutexLock lock(&mu_);
        encoder_.Forget(absl::MakeConstSpan(ids.data(), ids.size()));
        break;
      }
      case v1::AggregatorMessage::kReject: {
        FABRICMON_LOG_EVERY_MINUTE(Error)
            << "aggregator rejected the stream: " << incoming_.reject().message();
        absl::MutexLock lock(&client_.stats_mu_);
        ++client_.stats_.rejects;
        client_.stats_.last_error = incoming_.reject().message();
        break;
      }
      default:
        break;
    }
    StartRead(&incoming_);
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!queue_.empty()) {
        queue_.pop_front();
      }
      if (!ok) {
        finishing_ = true;
      }
    }
    if (!ok) {
      context_.TryCancel();  // make the pending read fail so the hold is released
      return;
    }
    Pump();
  }

  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    done_ = true;
    status_ = status;
  }

  // Starts the next write if none is in flight: queued messages first, then the next cycle. A
  // batch may be held instead (CoalesceLocked); what is held goes out as one message before
  // anything else is written.
  void Pump() {
    const v1::AgentMessage* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finishing_) {
        return;
      }
      if (queue_.empty() && established_ && !draining_) {
        EncodeNextCycleLocked();
      }
      if (!queue_.empty() && CoalesceLocked(queue_.front())) {
        held_.push_back(std::move(*queue_.front().mutable_batch()));
        queue_.pop_front();  // nothing is queued behind it (CoalesceLocked)
        return;
      }
      if (!held_.empty() && (!queue_.empty() || release_held_ || draining_)) {
        ReleaseHeldLocked();
      }
      if (queue_.empty()) {
        return;
      }
      writing_ = true;
      {
        absl::MutexLock stats_lock(&client_.stats_mu_);
        client_.stats_.bytes_sent += queue_.front().ByteSizeLong();
      }
      // The front stays where it is until OnWriteDone pops it (a deque's push_back moves no
      // element), and the hold, taken while the read's own hold is certainly still there (it
      // goes only after finishing_ is set), keeps the call from finishing before the write starts.
      next = &queue_.front();
      AddHold();
    }
    // Outside mu_: StartWrite sends inline (the sendmsg of a whole batch), and the write's
    // completion, on gRPC's thread, takes mu_ at once; started under it, that thread blocked on
    // the mutex for most writes (perf: a futex wait and two context switches per batch).
    StartWrite(next);
    RemoveHold();
  }

  void QueueInventory(const v1::Inventory& inventory) {
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) {
        return;
      }
      v1::AgentMessage message;
      *message.mutable_inventory()->mutable_inventory() = inventory;
      queue_.push_back(std::move(message));
    }
    Pump();
  }

  void ForgetSeries(absl::Span<const uint32_t> ids) {
    absl::MutexLock lock(&mu_);
    encoder_.Forget(ids);
  }

  void Cancel() { context_.TryCancel(); }

  // Asks the aggregator to acknowledge everything sent so far once it is settled, when the last
  // batch sent did not ask for its ack itself (ack_later). With `only_after`, only when no batch
  // asked for one for that long: the stream went quiet (collection stopped, a slower cycle) and
  // its tail would otherwise stay unacknowledged until the next batch.
  void RequestAck(absl::Duration only_after = absl::ZeroDuration()) {
    {
      absl::MutexLock lock(&mu_);
      if (!established_ || finishing_ || !defers_acks_ || !tail_unasked_ ||
          absl::Now() - last_ack_asked_ < only_after) {
        return;
      }
      v1::AgentMessage message;
      message.mutable_ack_request();
      queue_.push_back(std::move(message));
      tail_unasked_ = false;
    }
    Pump();
  }

  // Sends the batches held (CoalesceLocked) once the first of them has waited the coalescing
  // window: the cycle that would have taken them along did not come (collection stopped or
  // slowed). Returns how long until that would be due (InfiniteDuration when nothing is held),
  // for the caller's next look.
  absl::Duration FlushCoalescedIfDue() {
    {
      absl::MutexLock lock(&mu_);
      if (held_.empty()) {
        return absl::InfiniteDuration();
      }
      const absl::Duration left = coalescing_since_ + client_.options_.coalesce - absl::Now();
      if (left > absl::ZeroDuration()) {
        return left;
      }
      if (finishing_) {
        return absl::InfiniteDuration();  // the call is ending; its batches are replayed
      }
      release_held_ = true;
    }
    Pump();
    return absl::InfiniteDuration();
  }

  // Sends no further cycles (what is queued still goes): the stream is about to be ended, and
  // what the aggregator acknowledges before that is not sent to the next one again.
  void Drain() {
    {
      absl::MutexLock lock(&mu_);
      draining_ = true;  // Pump sends the held batches first: they must reach this aggregator
    }
    Pump();
    RequestAck();
  }
  // The last cycle this stream sent (0 before the first).
  uint64_t sent_through() {
    absl::MutexLock lock(&mu_);
    return cursor_;
  }

  void WaitDone() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }
  // Whether the stream ended within `timeout`. Returns sooner (false) when a batch began to be
  // held for coalescing, so that the caller times its flush (FlushCoalescedIfDue).
  bool WaitDoneFor(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &Reactor::DoneOrHoldBeganLocked), timeout);
    hold_began_ = false;
    return done_;
  }

  bool established() {
    absl::MutexLock lock(&mu_);
    return established_;
  }
  grpc::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  // Puts the batches held at the front of the queue, as one SampleBatches message: with the batch
  // at the front if there is one (the cycle that ends the window), else before whatever is
  // there (declarations, a layout, an inventory, an AckRequest: the held batches came first).
  // Released without a batch to go with them (the window passed, the stream drains, another
  // message came first), the last asks for its ack: it may be the stream's tail. Not while a
  // write is in flight (Pump's caller checks): the front is that write's message.
  void ReleaseHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool with_next = !queue_.empty() && queue_.front().has_batch();
    if (with_next) {
      held_.push_back(std::move(*queue_.front().mutable_batch()));
      queue_.pop_front();
    } else if (held_.back().ack_later()) {
      held_.back().set_ack_later(false);
      tail_unasked_ = false;
    }
    v1::AgentMessage message;
    v1::SampleBatches& batches = *message.mutable_batches();
    batches.mutable_batch()->Reserve(static_cast<int>(held_.size()));
    for (v1::SampleBatch& batch : held_) {
      *batches.add_batch() = std::move(batch);
    }
    held_.clear();
    queue_.push_front(std::move(message));
    release_held_ = false;
  }
  bool DoneOrHoldBeganLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ || hold_began_;
  }
  // Whether `message`, about to be written, is to be held and go out in one SampleBatches
  // message with the batches after it (each message costs the aggregator a read, a flow-control
  // write and a wake-up, and the agent a write and a wake-up for its completion, whatever its
  // size). Only a live batch with nothing queued behind it, on a stream whose aggregator takes
  // SampleBatches (and AckRequest), while the message would stay within its batch bound, and only
  // while the next cycle of the agent's fastest collector (the hello's min_interval_ms), due one
  // interval from now, still falls within `coalesce` of the first batch held: an agent whose
  // collectors all run slower than the window never holds one. Not the time since the last batch:
  // collectors running at the same interval send their batches back to back, and a 500 ms agent's
  // second batch of such a burst, held, would have waited for the window with no cycle to take it
  // along (a detection test caught its lateness). Whatever is written next takes the held
  // batches along (ReleaseHeldLocked), and FlushCoalescedIfDue sends them when nothing comes.
  bool CoalesceLocked(const v1::AgentMessage& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!message.has_batch() || client_.options_.coalesce <= absl::ZeroDuration() ||
        !defers_acks_ || held_.size() + 2 > max_batches_per_message_ || draining_ ||
        client_.flushing_.load(std::memory_order_relaxed) || !live_batch_ || queue_.size() != 1 ||
        cycle_interval_ <= absl::ZeroDuration()) {
      return false;
    }
    const absl::Time now = absl::Now();
    const absl::Time first = held_.empty() ? now : coalescing_since_;
    if ((now - first) + cycle_interval_ > client_.options_.coalesce) {
      return false;
    }
    hold_began_ = hold_began_ || held_.empty();
    coalescing_since_ = first;
    absl::MutexLock stats_lock(&client_.stats_mu_);
    ++client_.stats_.coalesced_batches;
    return true;
  }

  void EncodeNextCycleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    uint64_t dropped_before = 0;
    std::shared_ptr<const Cycle> cycle = client_.buffer_.NextAfter(cursor_, &dropped_before);
    if (cycle == nullptr) {
      return;
    }
    std::vector<v1::AgentMessage> messages;
    encoder_.Encode(cycle->sequence, cycle->timestamp_unix_nanos, cycle->collect_duration_us,
                    dropped_before, cycle->layout, cycle->values, &messages);
    // A batch from a backlog (a replay after a reconnect, a stream catching up) asks for its
    // ack: that is when the buffer is under pressure, and each acknowledged batch it releases
    // is one that a new cycle need not evict, or a next aggregator be sent again.
    const absl::Time now = absl::Now();
    const bool backlog = cycle->sequence < client_.buffer_.last_sequence();
    live_batch_ = !backlog;
    const bool ack_later = defers_acks_ && !backlog &&
                           !client_.flushing_.load(std::memory_order_relaxed) &&
                           now - last_ack_asked_ < kAckInterval;
    if (!ack_later) {
      last_ack_asked_ = now;
    }
    tail_unasked_ = ack_later;
    for (auto& message : messages) {
      if (ack_later && message.has_batch()) {
        message.mutable_batch()->set_ack_later(true);
      }
      queue_.push_back(std::move(message));
    }
    cursor_ = cycle->sequence;
    absl::MutexLock stats_lock(&client_.stats_mu_);
    ++client_.stats_.batches_sent;
    if (cycle->sequence <= client_.highest_sent_) {
      ++client_.stats_.replayed_batches;
    } else {
      client_.highest_sent_ = cycle->sequence;
    }
  }

  StreamClient& client_;
  grpc::ClientContext context_;
  v1::AggregatorMessage incoming_;
  wire::StreamEncoder encoder_;  // touched only under mu_

  absl::Mutex mu_;
  std::deque<v1::AgentMessage> queue_ ABSL_GUARDED_BY(mu_);  // front is in flight when writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool established_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // The aggregator's HelloAck said it defers acks: batches may be sent with ack_later, and an
  // AckRequest may be sent (an older aggregator would end the stream on one).
  bool defers_acks_ ABSL_GUARDED_BY(mu_) = false;
  // The most batches a SampleBatches message may hold for this aggregator (0: it takes none).
  size_t max_batches_per_message_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_ack_asked_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Coalescing (CoalesceLocked): the batches held, in order; when the first of them was held
  // (read only while some are); whether they are to go out with no cycle after them
  // (FlushCoalescedIfDue); the agent's fastest collector interval (from its hello; zero:
  // unknown, nothing is held); and whether the cycle last encoded was the newest (not a
  // backlog's).
  std::vector<v1::SampleBatch> held_ ABSL_GUARDED_BY(mu_);
  absl::Time coalescing_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool release_held_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration cycle_interval_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  bool live_batch_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_began_ ABSL_GUARDED_BY(mu_) = false;    // wakes WaitDoneFor
  bool tail_unasked_ ABSL_GUARDED_BY(mu_) = false;  // the last batch sent had ack_later
  uint64_t cursor_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

StreamClient::StreamClient(StreamClientOptions options, ReplayBuffer& buffer,
                           const SeriesTable& series, HelloProvider hello)
    : options_(std::move(options)),
      buffer_(buffer),
      series_(series),
      hello_(std::move(hello)),
      rng_state_(options_.jitter_seed ? options_.jitter_seed : (options_.agent_instance_id | 1)) {}

StreamClient::~StreamClient() { Stop(absl::ZeroDuration()); }

void StreamClient::Start() {
  thread_ = std::thread([this] { ConnectionLoop(); });
}

void StreamClient::Notify() {
  absl::MutexLock lock(&mu_);
  if (active_ != nullptr) {
    active_->Pump();
  }
}

void StreamClient::ForgetSeries(absl::Span<const uint32_t> ids) {
  absl::MutexLock lock(&mu_);
  if (active_ != nullptr) {
    active_->ForgetSeries(ids);
  }
}

void StreamClient::SendInventory(const v1::Inventory& inventory) {
  absl::MutexLock lock(&mu_);
  if (active_ != nullptr) {
    active_->QueueInventory(inventory);
  }
}

absl::Duration StreamClient::NextBackoff(absl::Duration current) {
  // Full jitter (AWS architecture blog): sleep uniformly in [0, current].
  absl::MutexLock lock(&stats_mu_);
  rng_state_ ^= rng_state_ << 13;
  rng_state_ ^= rng_state_ >> 7;
  rng_state_ ^= rng_state_ << 17;
  const double fraction = static_cast<double>(rng_state_ >> 11) / static_cast<double>(1ull << 53);
  return current * fraction;
}

std::vector<AggregatorTarget> StreamClient::Targets() {
  if (options_.directory != nullptr) {
    return options_.directory->Refresh();
  }
  return {AggregatorTarget{"", 0, options_.channel}};
}

namespace {

size_t IndexOf(const std::vector<AggregatorTarget>& targets, const std::string& address) {
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].address == address) {
      return i;
    }
  }
  return targets.size();
}

}  // namespace

std::optional<std::string> StreamClient::Supervise(Reactor& reactor,
                                                   std::vector<AggregatorTarget>& targets,
                                                   const std::string& current,
                                                   absl::Time failover_deadline) {
  // Probing often enough that failover and failback land within a small fraction of their
  // delays, seldom enough to cost nothing (a channel state read; DNS only every failback_after).
  const absl::Duration probe =
      std::clamp(std::min(options_.failover_after, options_.failback_after) / 8,
                 absl::Milliseconds(10), absl::Seconds(1));
  absl::flat_hash_map<std::string, absl::Time> reachable_since;
  absl::Time next_refresh = absl::Now() + options_.failback_after;
  bool cancelled = false;
  // A batch held for coalescing is sent within its window even when no cycle follows it.
  while (!reactor.WaitDoneFor(std::min(probe, reactor.FlushCoalescedIfDue()))) {
    // At once on waking, before the checks below (a DNS refresh may take a while); the call in
    // the condition only times the next wait.
    reactor.FlushCoalescedIfDue();
    reactor.RequestAck(/*only_after=*/kAckInterval);
    if (cancelled || targets.size() < 2) {
      continue;
    }
    const absl::Time now = absl::Now();
    if (!reactor.established()) {
      if (now >= failover_deadline) {
        reactor.Cancel();  // an address that swallows packets never fails the attempt itself
        cancelled = true;
      }
      continue;
    }
    size_t index = IndexOf(targets, current);
    if (index == 0) {
      continue;  // on the primary: nothing better to return to
    }
    if (options_.directory != nullptr && options_.directory->resolves() && now >= next_refresh) {
      // A returning aggregator may come back under a new address (a rescheduled pod).
      targets = options_.directory->Refresh();
      next_refresh = now + options_.failback_after;
      index = IndexOf(targets, current);
    }
    for (size_t better = 0; better < index && better < targets.size(); ++better) {
      const std::string& address = targets[better].address;
      if (targets[better].channel->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY) {
        reachable_since.erase(address);
        continue;
      }
      const absl::Time since = reachable_since.emplace(address, now).first->second;
      if (now - since < options_.failback_after) {
        continue;
      }
      // Let the fallback acknowledge what it has been sent (bounded), so that the better one is
      // not sent it again, then end the stream.
      reactor.Drain();
      const absl::Time drain_deadline = now + std::max(probe * 8, absl::Seconds(1));
      while (absl::Now() < drain_deadline && buffer_.acked_sequence() < reactor.sent_through()) {
        if (reactor.WaitDoneFor(absl::Milliseconds(5))) {
          break;
        }
      }
      reactor.Cancel();
      reactor.WaitDone();
      return address;
    }
  }
  return std::nullopt;
}

void StreamClient::ConnectionLoop() {
  NameThisThread("stream_client");
  absl::Duration backoff = options_.initial_backoff;
  std::string current;  // the aggregator in use; "" before the first attempt
  // Since when the aggregator in use has held no stream (unset while one is established or
  // before the first attempt ends).
  std::optional<absl::Time> unreachable_since;
  // How long this outage may last before the next aggregator in rank takes over: failover_after,
  // plus up to a quarter of it drawn anew for each outage, so that the nodes of a dead aggregator
  // (thousands at once) reach the survivors spread over a few seconds, not in the same instant.
  absl::Duration failover_delay = options_.failover_after;
  const auto start_outage = [&](absl::Time since) {
    unreachable_since = since;
    failover_delay = options_.failover_after + NextBackoff(options_.failover_after / 4);
  };
  for (;;) {
    std::vector<AggregatorTarget> targets = Targets();
    size_t index = IndexOf(targets, current);
    if (index == targets.size()) {
      if (!current.empty()) {
        FABRICMON_LOG(Info) << "aggregator " << current << " is no longer listed";
      }
      index = 0;
      unreachable_since.reset();
    }
    const absl::Time attempt_start = absl::Now();
    if (unreachable_since.has_value() && targets.size() > 1 &&
        attempt_start - *unreachable_since >= failover_delay) {
      const size_t next = (index + 1) % targets.size();
      FABRICMON_LOG(Warning) << "aggregator " << targets[index].address << " (rank " << index
                             << ") unreachable for "
                             << absl::FormatDuration(attempt_start - *unreachable_since)
                             << "; failing over to " << targets[next].address << " (rank " << next
                             << ")";
      index = next;
      unreachable_since.reset();
      backoff = options_.initial_backoff;
      absl::MutexLock lock(&stats_mu_);
      ++stats_.failovers;
    }
    current = targets[index].address;
    {
      absl::MutexLock lock(&stats_mu_);
      stats_.aggregator = current;
      stats_.aggregator_rank = static_cast<int>(index);
    }
    auto reactor = std::make_unique<Reactor>(*this);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        return;
      }
      active_ = reactor.get();
    }
    {
      absl::MutexLock lock(&stats_mu_);
      ++stats_.connect_attempts;
    }
    std::unique_ptr<v1::Telemetry::Stub> stub = v1::Telemetry::NewStub(targets[index].channel);
    reactor->Start(*stub);
    const std::optional<std::string> failback = Supervise(
        *reactor, targets, current, unreachable_since.value_or(attempt_start) + failover_delay);
    const bool established = reactor->established();
    const grpc::Status status = reactor->status();
    {
      absl::MutexLock lock(&stats_mu_);
      stats_.connected = false;
      if (!status.ok() && !failback.has_value()) {
        stats_.last_error = status.error_message();
      }
    }
    {
      // After this no Notify() can reach the reactor, so it may be destroyed.
      absl::MutexLock lock(&mu_);
      active_ = nullptr;
      if (stopping_) {
        return;
      }
    }
    if (failback.has_value()) {
      FABRICMON_LOG(Warning) << "aggregator " << *failback << " reachable again for "
                             << absl::FormatDuration(options_.failback_after)
                             << "; returning to it from " << current;
      current = *failback;
      unreachable_since.reset();
      backoff = options_.initial_backoff;
      absl::MutexLock lock(&stats_mu_);
      ++stats_.failbacks;
      continue;
    }
    if (!status.ok()) {
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "telemetry stream" << (current.empty() ? "" : " to ") << current
          << " ended: " << status.error_code() << " " << status.error_message();
    }
    const absl::Time now = absl::Now();
    if (established) {
      backoff = options_.initial_backoff;
      start_outage(now);
    } else if (!unreachable_since.has_value()) {
      start_outage(attempt_start);
    }
    absl::Duration sleep = NextBackoff(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
    if (targets.size() > 1) {
      // Wake in time to fail over when the failover delay runs out during the backoff.
      sleep = std::min(sleep,
                       std::max(absl::ZeroDuration(), *unreachable_since + failover_delay - now));
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), sleep);
    if (stopping_) {
      return;
    }
  }
}

void StreamClient::Stop(absl::Duration flush) {
  const absl::Time deadline = absl::Now() + flush;
  // From here every batch asks for its ack, and so does the stream for the batches already sent.
  flushing_.store(true, std::memory_order_relaxed);
  while (absl::Now() < deadline && buffer_.acked_sequence() < buffer_.last_sequence()) {
    {
      absl::MutexLock lock(&mu_);
      if (active_ != nullptr) {
        active_->RequestAck();
      }
    }
    Notify();
    absl::SleepFor(absl::Milliseconds(10));
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (active_ != nullptr) {
      active_->Cancel();
    }
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

StreamClientStats StreamClient::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

grpc::ChannelArguments AgentChannelArguments(std::optional<absl::Duration> initial_backoff,
                                             std::optional<absl::Duration> max_backoff) {
  grpc::ChannelArguments args;
  // Detect a dead aggregator or a silent partition within ~30 s even with no RPC traffic.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // gRPC stops pinging after 2 pings without a data frame by default, so a node with a long
  // collection interval would find a silent partition only at its next write. Keep pinging: the
  // aggregator accepts a ping every 10 s on a quiet stream.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // The agent receives only small acks, so estimating the link's bandwidth-delay product for
  // them is pure cost: a ping and its ack (a write and a wakeup) every second or so.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // The channel has its own connection backoff (gRPC default: 1 s growing ×1.6 to 120 s) and
  // fails every stream attempt at once while it waits, so after a long aggregator outage the
  // agent would stay away up to 120 s whatever reconnect_max_backoff_ms says. Bound it by the
  // same policy; StreamClient's jittered backoff keeps restarts from stampeding.
  if (initial_backoff.has_value()) {
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(*initial_backoff)));
  }
  if (max_backoff.has_value()) {
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(*max_backoff)));
  }
  return args;
}

uint64_t NewAgentInstanceId() {
  uint64_t id = 0;
  std::ifstream random("/dev/urandom", std::ios::binary);
  if (random.read(reinterpret_cast<char*>(&id), sizeof(id)) && id != 0) {
    return id;
  }
  return static_cast<uint64_t>(RealClock::Get().NowUnixNanos()) ^
         (static_cast<uint64_t>(getpid()) << 32);
}

std::string ReadBootId() {
  absl::StatusOr<std::string> id = ReadTrimmed("/proc/sys/kernel/random/boot_id");
  return id.ok() ? *id : std::string();
}

}  // namespace fabricmon::agent
