#include "daemon/agent/stream_client.h"

#include <unistd.h>

#include <deque>
#include <fstream>
#include <vector>

#include "daemon/common/file_reader.h"
#include "daemon/common/logging.h"
#include "daemon/wire/batch_codec.h"

namespace fabricmon::agent {

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
      case v1::AggregatorMessage::kAck:
        client_.buffer_.Ack(incoming_.ack().sequence());
        break;
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

  // Starts the next write if none is in flight: queued messages first, then the next cycle.
  void Pump() {
    absl::MutexLock lock(&mu_);
    if (writing_ || finishing_) {
      return;
    }
    if (queue_.empty() && established_) {
      EncodeNextCycleLocked();
    }
    if (queue_.empty()) {
      return;
    }
    writing_ = true;
    {
      absl::MutexLock stats_lock(&client_.stats_mu_);
      client_.stats_.bytes_sent += queue_.front().ByteSizeLong();
    }
    StartWrite(&queue_.front());
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

  void WaitDone() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
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
  void EncodeNextCycleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    uint64_t dropped_before = 0;
    std::optional<Cycle> cycle = client_.buffer_.NextAfter(cursor_, &dropped_before);
    if (!cycle.has_value()) {
      return;
    }
    std::vector<v1::AgentMessage> messages;
    encoder_.Encode(cycle->sequence, cycle->timestamp_unix_nanos, cycle->collect_duration_us,
                    dropped_before, cycle->layout, cycle->values, &messages);
    for (auto& message : messages) {
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
  uint64_t cursor_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

StreamClient::StreamClient(StreamClientOptions options, ReplayBuffer& buffer,
                           const SeriesTable& series, HelloProvider hello)
    : options_(std::move(options)),
      buffer_(buffer),
      series_(series),
      hello_(std::move(hello)),
      stub_(v1::Telemetry::NewStub(options_.channel)),
      rng_state_(options_.jitter_seed ? options_.jitter_seed
                                      : (options_.agent_instance_id | 1)) {}

StreamClient::~StreamClient() { Stop(absl::ZeroDuration()); }

void StreamClient::Start() { thread_ = std::thread([this] { ConnectionLoop(); }); }

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

void StreamClient::ConnectionLoop() {
  absl::Duration backoff = options_.initial_backoff;
  for (;;) {
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
    reactor->Start(*stub_);
    reactor->WaitDone();
    const bool established = reactor->established();
    const grpc::Status status = reactor->status();
    {
      absl::MutexLock lock(&stats_mu_);
      stats_.connected = false;
      if (!status.ok()) {
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
    if (!status.ok()) {
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "telemetry stream ended: " << status.error_code() << " " << status.error_message();
    }
    if (established) {
      backoff = options_.initial_backoff;
    }
    const absl::Duration sleep = NextBackoff(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), sleep);
    if (stopping_) {
      return;
    }
  }
}

void StreamClient::Stop(absl::Duration flush) {
  const absl::Time deadline = absl::Now() + flush;
  while (absl::Now() < deadline && buffer_.acked_sequence() < buffer_.last_sequence()) {
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
