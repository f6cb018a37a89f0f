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
      labels_(external_labels, aggregator_labels) {}

size_t Shard::RoomLocked(size_t count) const {
  const size_t room = queued_samples_ < capacity_ ? capacity_ - queued_samples_ : 0;
  return std::min(room, count);
}

size_t Shard::Push(const EncodedSamples& samples, Hold hold) {
  const size_t count = samples.size();
  size_t room;
  {
    absl::MutexLock lock(&mu_);
    room = RoomLocked(count);  // only what fits now is compressed
  }
  // Compressed on the pushing thread, outside the lock: the queue holds a seventh of the bytes,
  // and a request only joins them (encoder.h).
  thread_local std::string scratch;
  std::vector<CompressedSamples> runs;
  for (size_t begin = 0; begin < room; begin += options_.max_samples_per_send) {
    const size_t end = std::min<size_t>(room, begin + options_.max_samples_per_send);
    runs.push_back(CompressSamples(samples, begin, end, scratch));
  }
  size_t taken;
  {
    absl::MutexLock lock(&mu_);
    taken = EnqueueLocked(absl::MakeSpan(runs), std::move(hold));
  }
  const size_t dropped = count - taken;
  if (dropped > 0) {
    stats_.samples_dropped_queue_full += dropped;
  }
  return dropped;
}

bool Shard::PushCompressed(CompressedSamples& run, Hold hold) {
  absl::MutexLock lock(&mu_);
  if (RoomLocked(run.samples) < run.samples) {
    return false;
  }
  stats_.samples_templated += run.samples;
  EnqueueLocked(absl::MakeSpan(&run, 1), std::move(hold));
  return true;
}

size_t Shard::EnqueueLocked(absl::Span<CompressedSamples> runs, Hold hold) {
  size_t taken = 0;
  const bool was_below_batch = queued_samples_ < options_.max_samples_per_send;
  const bool was_empty = queued_samples_ == 0;
  for (CompressedSamples& run : runs) {
    if (RoomLocked(run.samples) < run.samples) {
      break;  // others filled the queue meanwhile: this run and the rest are dropped
    }
    taken += run.samples;
    queued_samples_ += run.samples;
    queue_.push_back(std::move(run));
  }
  queued_ += taken;
  if (taken > 0 && hold != nullptr) {
    holds_.push_back({queued_, std::move(hold)});  // what was dropped needs no hold: counted
  }
  // The thread sleeps until the oldest sample's deadline, or for ever when nothing is queued:
  // wake it for a first sample and for a full batch.
  if (taken > 0 &&
      (was_empty || (was_below_batch && queued_samples_ >= options_.max_samples_per_send))) {
    woken_ = true;
    work_.Signal();
  }
  return taken;
}

size_t Shard::Push(absl::Span<const PendingSample> samples, Hold hold) {
  size_t room;
  {
    absl::MutexLock lock(&mu_);
    room = RoomLocked(samples.size());  // a full queue encodes nothing for nothing
  }
  const size_t skipped = samples.size() - room;
  stats_.samples_dropped_queue_full += skipped;
  EncodedSamples encoded;
  if (!samples.empty()) {
    encoded.enqueued_monotonic_nanos = samples.front().enqueued_monotonic_nanos;
  }
  EncodeSamples(samples.first(room), labels_, encoded);
  return Push(encoded, std::move(hold)) + skipped;
}

size_t Shard::Push(absl::Span<const PendingSample> samples, absl::Span<const size_t> indices,
                   Hold hold) {
  std::vector<PendingSample> picked;
  picked.reserve(indices.size());
  for (const size_t i : indices) {
    picked.push_back(samples[i]);
  }
  return Push(absl::MakeConstSpan(picked), std::move(hold));
}

void Shard::TakeBatchLocked() {
  size_t taken = 0;
  while (!queue_.empty() &&
         (batch_.empty() || taken + queue_.front().samples <= options_.max_samples_per_send)) {
    taken += queue_.front().samples;
    batch_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  queued_samples_ -= taken;
  in_flight_ = taken;
}

int64_t Shard::Step(bool flush, int64_t send_deadline) {
  int64_t now = clock_.MonotonicNanos();
  if (part_samples_ == 0) {
    {
      absl::MutexLock lock(&mu_);
      if (queued_samples_ == 0) {
        return kNever;
      }
      const int64_t due =
          queue_.front().enqueued_monotonic_nanos + options_.batch_send_deadline_nanos;
      if (!flush && queued_samples_ < options_.max_samples_per_send && now < due) {
        return due;
      }
      in_flight_oldest_ = queue_.front().enqueued_monotonic_nanos;
      TakeBatchLocked();
    }
    // Outside the lock: Push(), on an ingest thread, must not wait for the request's bytes.
    StartPart(0, batch_.size(), now);
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
  now = clock_.MonotonicNanos();
  if (verdict == Verdict::kRetry) {
    ++stats_.retries;
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "remote_write " << endpoint_name_ << ": "
        << (result.http_status == 0 ? std::string("no response")
                                    : absl::StrCat("HTTP ", result.http_status))
        << " (" << result.error << "); retrying " << part_samples_ << " samples with backoff";
    retry_at_ = now + backoff_.Delay(attempt_++);
    return retry_at_;
  }
  const size_t runs = part_.end - part_.begin;
  if (verdict == Verdict::kReject && MayBeRefusalOfAPart(result.http_status) && runs > 1) {
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "remote_write " << endpoint_name_ << ": HTTP " << result.http_status << " ("
        << result.error << ") for " << part_samples_ << " samples in " << runs
        << " runs; sending them again in two requests, so that only the refused runs are lost";
    const size_t middle = part_.begin + runs / 2;
    later_.push_back({middle, part_.end});
    StartPart(part_.begin, middle, now);
    return now;
  }
  if (verdict == Verdict::kReject) {
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "remote_write " << endpoint_name_ << ": HTTP " << result.http_status << " ("
        << result.error << "): the receiver refused " << part_samples_
        << " samples; dropped, not retried";
  }
  const std::vector<Hold> released = FinishPart(verdict == Verdict::kDelivered, now);
  return now;  // more may be due at once (`released` goes first: it may acknowledge batches)
}

void Shard::StartPart(size_t begin, size_t end, int64_t now) {
  part_ = {begin, end};
  part_samples_ = 0;
  for (size_t i = begin; i < end; ++i) {
    part_samples_ += batch_[i].samples;
  }
  JoinRequest(absl::MakeConstSpan(batch_).subspan(begin, end - begin), body_);
  attempt_ = 0;
  retry_at_ = now;
}

std::vector<Hold> Shard::FinishPart(bool delivered, int64_t now) {
  (delivered ? stats_.samples_sent : stats_.samples_failed) += part_samples_;
  if (delivered) {
    stats_.bytes_sent += body_.size();
  }
  const uint64_t done = part_samples_;
  part_samples_ = 0;
  body_.clear();
  const bool batch_done = later_.empty();
  if (batch_done) {
    batch_.clear();
  } else {
    const Part next = later_.back();
    later_.pop_back();
    StartPart(next.begin, next.end, now);
  }
  absl::MutexLock lock(&mu_);
  in_flight_ -= done;
  if (batch_done) {
    in_flight_oldest_ = kNever;
  }
  // The parts leave in queue order, so the holds stay first in, first out.
  return ReleaseLocked(done);
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
  return queued_samples_ + in_flight_;
}

int64_t Shard::OldestEnqueued() const {
  absl::MutexLock lock(&mu_);
  int64_t oldest = in_flight_oldest_;
  if (!queue_.empty()) {
    oldest = std::min(oldest, queue_.front().enqueued_monotonic_nanos);
  }
  return oldest;
}

size_t Shard::DropAll() {
  std::vector<Hold> released;  // declared first: released after the lock
  absl::MutexLock lock(&mu_);
  const size_t dropped = queued_samples_ + in_flight_;
  queue_.clear();
  queued_samples_ = 0;
  batch_.clear();
  later_.clear();
  part_samples_ = 0;
  body_.clear();
  in_flight_ = 0;
  in_flight_oldest_ = kNever;
  stats_.samples_dropped_shutdown += dropped;
  released = ReleaseLocked(queued_ - left_);
  return dropped;
}

}  // namespace fabricmon::remote_write
