#include "daemon/remote_write/endpoint.h"

#include <algorithm>
#include <utility>

#include "daemon/common/logging.h"
#include "daemon/common/thread_name.h"

namespace fabricmon::remote_write {

Endpoint::Endpoint(EndpointOptions options, const Clock& clock)
    : options_(std::move(options)),
      labels_(options_.external_labels, options_.aggregator_labels),
      clock_(clock) {}

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(EndpointOptions options,
                                                           const SenderFactory& make_sender,
                                                           const Clock& clock) {
  if (options.queue.shards == 0 || options.queue.max_samples_per_send == 0 ||
      options.queue.capacity_samples == 0 || options.queue.min_backoff_nanos <= 0 ||
      options.queue.max_backoff_nanos < options.queue.min_backoff_nanos) {
    return absl::InvalidArgumentError("remote_write queue: invalid options");
  }
  std::unique_ptr<Endpoint> endpoint(new Endpoint(std::move(options), clock));
  const QueueOptions& queue = endpoint->options_.queue;
  const uint64_t per_shard = (queue.capacity_samples + queue.shards - 1) / queue.shards;
  for (uint32_t i = 0; i < queue.shards; ++i) {
    absl::StatusOr<std::unique_ptr<Sender>> sender = make_sender();
    if (!sender.ok()) {
      return sender.status();
    }
    endpoint->senders_.push_back(*std::move(sender));
    endpoint->shards_.push_back(std::make_unique<Shard>(
        queue, per_shard, endpoint->options_.external_labels, endpoint->options_.aggregator_labels,
        *endpoint->senders_.back(), endpoint->stats_, clock,
        /*seed=*/0x9e3779b97f4a7c15ULL * (i + 1) ^ clock.MonotonicNanos(),
        endpoint->options_.name));
  }
  return endpoint;
}

Endpoint::~Endpoint() { Shutdown(0); }

void Endpoint::Start() {
  for (auto& shard : shards_) {
    threads_.emplace_back([this, s = shard.get()] { Run(*s); });
  }
}

void Endpoint::Run(Shard& shard) {
  NameThisThread("remote_write");
  while (true) {
    const bool stopping = stopping_.load();
    const int64_t deadline = stopping ? flush_deadline_.load() : Shard::kNever;
    const int64_t next = shard.Step(stopping, deadline);
    const int64_t now = clock_.MonotonicNanos();
    if (stopping && (shard.Pending() == 0 || now >= deadline || next == Shard::kNever)) {
      break;
    }
    if (next > now) {
      shard.Wait(stopping ? std::min(next, deadline) : next);
    }
  }
  if (const size_t dropped = shard.DropAll(); dropped > 0) {
    FABRICMON_LOG(Warning) << "remote_write " << options_.name << ": " << dropped
                           << " samples still pending at the shutdown deadline were dropped";
  }
}

void Endpoint::Shutdown(int64_t flush_nanos) {
  if (stopping_.exchange(true)) {
    return;
  }
  flush_deadline_ = clock_.MonotonicNanos() + std::max<int64_t>(0, flush_nanos);
  for (auto& shard : shards_) {
    shard->Wake();
  }
  for (std::thread& thread : threads_) {
    thread.join();
  }
  threads_.clear();
  for (auto& shard : shards_) {
    (void)shard->DropAll();  // never started: nothing sent
  }
}

void Endpoint::Append(absl::Span<const PendingSample> samples, const Hold& hold) {
  if (stopping_.load(std::memory_order_relaxed)) {
    stats_.samples_dropped_shutdown += samples.size();
    return;
  }
  const size_t n = shards_.size();
  if (n == 1) {
    shards_[0]->Push(samples, hold);
    return;
  }
  // One lock per shard per call, not per sample, and each sample copied once: the samples'
  // indices sorted by shard (a counting sort), in a buffer each calling thread keeps, so a
  // batch allocates nothing.
  thread_local std::vector<size_t> shard_of;
  thread_local std::vector<size_t> by_shard;
  thread_local std::vector<size_t> cursor;  // by shard: where its next index goes
  shard_of.resize(samples.size());
  by_shard.resize(samples.size());
  cursor.assign(n + 1, 0);
  // The label sets were last read by a remote_write thread a batch interval ago: fetched a few
  // samples ahead, their cache misses overlap rather than queue.
  constexpr size_t kPrefetchAhead = 8;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i + kPrefetchAhead < samples.size()) {
      __builtin_prefetch(&samples[i + kPrefetchAhead].series->hash);
    }
    shard_of[i] = samples[i].series->hash % n;
    ++cursor[shard_of[i] + 1];
  }
  for (size_t s = 0; s < n; ++s) {
    cursor[s + 1] += cursor[s];
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    by_shard[cursor[shard_of[i]]++] = i;
  }
  // Each cursor now stands where its shard's indices end, which is where the next one's begin.
  size_t begin = 0;
  for (size_t s = 0; s < n; ++s) {
    if (cursor[s] > begin) {
      shards_[s]->Push(samples, absl::MakeConstSpan(by_shard).subspan(begin, cursor[s] - begin),
                       hold);
    }
    begin = cursor[s];
  }
}

void Endpoint::AppendEncoded(uint64_t route, const EncodedSamples& samples, const Hold& hold) {
  if (stopping_.load(std::memory_order_relaxed)) {
    stats_.samples_dropped_shutdown += samples.size();
    return;
  }
  shards_[route % shards_.size()]->Push(samples, hold);
}

bool Endpoint::AppendCompressed(uint64_t route, CompressedSamples& run, const Hold& hold) {
  if (stopping_.load(std::memory_order_relaxed)) {
    stats_.samples_dropped_shutdown += run.samples;
    return true;
  }
  return shards_[route % shards_.size()]->PushCompressed(run, hold);
}

size_t Endpoint::Pending() const {
  size_t pending = 0;
  for (const auto& shard : shards_) {
    pending += shard->Pending();
  }
  return pending;
}

double Endpoint::OldestPendingAgeSeconds() const {
  int64_t oldest = Shard::kNever;
  for (const auto& shard : shards_) {
    oldest = std::min(oldest, shard->OldestEnqueued());
  }
  if (oldest == Shard::kNever) {
    return 0;
  }
  return static_cast<double>(std::max<int64_t>(0, clock_.MonotonicNanos() - oldest)) / 1e9;
}

}  // namespace fabricmon::remote_write
