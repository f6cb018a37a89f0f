#include "daemon/remote_write/shard.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/common/logging.h"

namespace fabricmon::remote_write {

void EndpointStats::CountRequest(int http_status) {
  absl::MutexLock lock(&mu);
  ++requests[http_status];
}

std::map<std::string, uint64_t> EndpointStats::Requests() const {
  absl::MutexLock lock(&mu);
  std::map<std::string, uint64_t> out;
  for (const auto& [code, count] : requests) {
    out[code == 0 ? std::string("error") : absl::StrCat(code)] += count;
  }
  return out;
}

Shard::Shard(const QueueOptions& options, uint64_t capacity, const LabelPairs& external_labels,
             const LabelPairs& aggregator_labels, Sender& sender, EndpointStats& stats,
             const Clock& clock, uint64_t seed, std::string endpoint_name)
    : options_(options),
      capacity_(capacity),
      sender_(sender),
      stats_(stats),
      clock_(clock),
      endpoint_name_(std::move(endpoint_name)),
      backoff_(options.min_backoff_nanos, options.max_backoff_nanos, seed),
      encoder_(external_labels, aggregator_labels) {}

size_t Shard::Push(absl::Span<const PendingSample> samples, Hold hold) {
  absl::MutexLock lock(&mu_);
  return PushLocked(
      samples.size(), [&](size_t i) -> const PendingSample& { return samples[i]; },
      std::move(hold));
}

size_t Shard::Push(absl::Span<const PendingSample> samples, absl::Span<const size_t> indices,
                   Hold hold) {
  absl::MutexLock lock(&mu_);
  return PushLocked(
      indices.size(), [&](size_t i) -> const PendingSample& { return samples[indices[i]]; },
      std::move(hold));
}

template <typename SampleAt>
size_t Shard::PushLocked(size_t count, SampleAt sample_at, Hold hold) {
  const size_t queued = QueuedLocked();
  const size_t room = queued < capacity_ ? capacity_ - queued : 0;
  const size_t taken = std::min(room, count);
  const bool was_below_batch = queued < options_.max_samples_per_send;
  const bool was_empty = queued == 0;
  for (size_t i = 0; i < taken; ++i) {
    queue_.push_back(sample_at(i));
  }
  queued_ += taken;
  if (taken > 0 && hold != nullptr) {
    holds_.push_back({queued_, std::move(hold)});  // what was dropped needs no hold: counted
  }
  // The thread sleeps until the oldest sample's deadline, or for ever when nothing is queued:
  // wake it for a first sample and for a full batch.
  if (taken > 0 &&
      (was_empty || (was_below_batch && QueuedLocked() >= options_.max_samples_per_send))) {
    woken_ = true;
    work_.Signal();
  }
  const size_t dropped = count - taken;
  if (dropped > 0) {
    stats_.samples_dropped_queue_full += dropped;
  }
  return dropped;
}

void Shard::TakeBatchLocked(size_t n) {
  if (queue_head_ == 0 && n == queue_.size()) {
    batch_.swap(queue_);  // the common case at a deadline: no sample moves
    return;
  }
  const auto first = queue_.begin() + static_cast<ptrdiff_t>(queue_head_);
  batch_.assign(std::make_move_iterator(first),
                std::make_move_iterator(first + static_cast<ptrdiff_t>(n)));
  queue_head_ += n;
  if (queue_head_ == queue_.size()) {
    queue_.clear();
    queue_head_ = 0;
  } else if (queue_head_ >= queue_.size() - queue_head_) {
    // More taken than left: the rest moves to the front, so each sample moves at most once
    // more in its life and the buffer never grows past twice the queue.
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(queue_head_));
    queue_head_ = 0;
  }
}

int64_t Shard::Step(bool flush, int64_t send_deadline) {
  int64_t now = clock_.MonotonicNanos();
  if (batch_samples_ == 0) {
    {
      absl::MutexLock lock(&mu_);
      const size_t queued = QueuedLocked();
      if (queued == 0) {
        return kNever;
      }
      const int64_t due =
          queue_[queue_head_].enqueued_monotonic_nanos + options_.batch_send_deadline_nanos;
      if (!flush && queued < options_.max_samples_per_send && now < due) {
        return due;
      }
      const size_t n = std::min<size_t>(queued, options_.max_samples_per_send);
      TakeBatchLocked(n);
      in_flight_ = n;
      in_flight_oldest_ = batch_.front().enqueued_monotonic_nanos;
    }
    // Outside the lock: Push(), on an ingest thread, must not wait for an encoding.
    encoder_.Encode(batch_, body_);
    batch_samples_ = batch_.size();
    // The body is all a retry needs. The samples' references go now, while their label sets are
    // still in this core's cache from the encoding: released after the send, each was a cache
    // miss.
    batch_.clear();
    if (batch_.capacity() > 4 * size_t{options_.max_samples_per_send}) {
      // A buffer the queue grew during a backlog (it came here by a swap): given back, so that
      // the memory of a receiver's outage is not kept for good.
      std::vector<PendingSample>().swap(batch_);
    }
    attempt_ = 0;
    retry_at_ = now;
  }
  if (now < retry_at_) {
    return retry_at_;
  }
  int64_t timeout = options_.request_timeout_nanos;
  if (send_deadline != kNever) {
    timeout = std::min(timeout, send_deadline - now);
    if (timeout <= 0) {
      return kNever;  // past the flush deadline: the caller drops what is left
    }
  }
  const SendResult result = sender_.Send(body_, timeout);
  stats_.CountRequest(result.http_status);
  const Verdict verdict = Classify(result.http_status);
  if (verdict == Verdict::kRetry) {
    ++stats_.retries;
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "remote_write " << endpoint_name_ << ": "
        << (result.http_status == 0 ? std::string("no response")
                                    : absl::StrCat("HTTP ", result.http_status))
        << " (" << result.error << "); retrying " << batch_samples_ << " samples with backoff";
    now = clock_.MonotonicNanos();
    retry_at_ = now + backoff_.Delay(attempt_++);
    return retry_at_;
  }
  if (verdict == Verdict::kDelivered) {
    stats_.samples_sent += batch_samples_;
  } else {
    stats_.samples_failed += batch_samples_;
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "remote_write " << endpoint_name_ << ": HTTP " << result.http_status << " ("
        << result.error << "): the receiver refused " << batch_samples_
        << " samples; dropped, not retried";
  }
  const uint64_t done = batch_samples_;
  batch_samples_ = 0;
  body_.clear();
  std::vector<Hold> released;
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = 0;
    in_flight_oldest_ = kNever;
    released = ReleaseLocked(done);
  }
  return now;  // more may be due at once (`released` goes first: it may acknowledge batches)
}

std::vector<Hold> Shard::ReleaseLocked(uint64_t count) {
  left_ += count;
  std::vector<Hold> released;
  while (!holds_.empty() && holds_.front().until <= left_) {
    released.push_back(std::move(holds_.front().hold));
    holds_.pop_front();
  }
  return released;
}

void Shard::Wait(int64_t deadline) {
  absl::MutexLock lock(&mu_);
  if (!woken_ && deadline > clock_.MonotonicNanos()) {
    const int64_t wait =
        deadline == kNever ? int64_t{3600} * 1000000000 : deadline - clock_.MonotonicNanos();
    work_.WaitWithTimeout(&mu_, absl::Nanoseconds(wait));
  }
  woken_ = false;
}

void Shard::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
  work_.Signal();
}

size_t Shard::Pending() const {
  absl::MutexLock lock(&mu_);
  return QueuedLocked() + in_flight_;
}

int64_t Shard::OldestEnqueued() const {
  absl::MutexLock lock(&mu_);
  int64_t oldest = in_flight_oldest_;
  if (QueuedLocked() > 0) {
    oldest = std::min(oldest, queue_[queue_head_].enqueued_monotonic_nanos);
  }
  return oldest;
}

size_t Shard::DropAll() {
  std::vector<Hold> released;  // declared first: released after the lock
  absl::MutexLock lock(&mu_);
  const size_t dropped = QueuedLocked() + in_flight_;
  queue_.clear();
  queue_head_ = 0;
  batch_.clear();
  batch_samples_ = 0;
  body_.clear();
  in_flight_ = 0;
  in_flight_oldest_ = kNever;
  stats_.samples_dropped_shutdown += dropped;
  released = ReleaseLocked(queued_ - left_);
  return dropped;
}

}  // namespace fabricmon::remote_write
