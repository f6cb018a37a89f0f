#pragma once

// One queue shard of a remote-write endpoint: a bounded FIFO of samples, already encoded and
// compressed as the request will carry them (CompressedSamples, in runs of at most
// max_samples_per_send), and the one batch it is sending. A series always maps
// to the same shard (Endpoint routes an aggregator series by its label hash and an agent's whole
// batch by its node), and a shard sends one batch at a time and retries it until it is delivered
// or refused, so each series' samples reach the receiver in order, as remote write requires.
//
// A refusal that may be of a part only (MayBeRefusalOfAPart: Prometheus rolls a whole request
// back for one out-of-order sample) splits a request of several runs in two halves, sent in
// order, each split again if refused, so that a refused run costs its own samples, not the
// request's: a run is one agent batch, or up to max_samples_per_send of the aggregator's own.
//
// No thread of its own: Step() does whatever is due and says when it wants to run next, so tests
// drive it on a fake clock; Endpoint gives each shard a thread that calls it.
//
// Thread-safety: Push(), Pending() and OldestEnqueued() from any thread; Step() from one
// thread at a time (it calls the Sender, which is not thread-safe).

#include <atomic>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "daemon/common/clock.h"
#include "daemon/remote_write/encoder.h"
#include "daemon/remote_write/retry.h"
#include "daemon/remote_write/sender.h"

namespace fabricmon::remote_write {

// Kept by a shard until every sample pushed with it has left the shard: delivered, refused by
// the receiver, or dropped and counted (a full queue, shutdown). Its owner learns from its release
// that remote_write is done with those samples (the agent's batch may then be acknowledged).
using Hold = std::shared_ptr<const void>;

// A request's samples at most unless configured (config.cc says why this many).
inline constexpr uint32_t kDefaultMaxSamplesPerSend = 10000;

struct QueueOptions {
  uint32_t shards = 4;
  uint32_t max_samples_per_send = kDefaultMaxSamplesPerSend;
  int64_t batch_send_deadline_nanos = int64_t{1000} * 1000000;
  uint64_t capacity_samples = 1000000;  // queued per endpoint (shared equally by its shards)
  int64_t min_backoff_nanos = int64_t{30} * 1000000;
  int64_t max_backoff_nanos = int64_t{5000} * 1000000;
  int64_t request_timeout_nanos = int64_t{30000} * 1000000;
};

// An endpoint's counters, shared by its shards. Thread-safe.
struct EndpointStats {
  std::atomic<uint64_t> samples_sent{0};
  std::atomic<uint64_t> bytes_sent{0};  // request bodies accepted (2xx)
  // Queued as a layout's template compressed them (KeyedBatchWriter), not compressed as they came.
  std::atomic<uint64_t> samples_templated{0};
  std::atomic<uint64_t> samples_failed{0};              // refused by the receiver (not retried)
  std::atomic<uint64_t> samples_dropped_queue_full{0};  // never queued: the buffer was full
  std::atomic<uint64_t> samples_dropped_shutdown{0};    // still queued at the flush deadline
  std::atomic<uint64_t> retries{0};

  void CountRequest(int http_status) ABSL_LOCKS_EXCLUDED(mu);
  // Requests by status code ("200", "429", ...; "error" for no response).
  std::map<std::string, uint64_t> Requests() const ABSL_LOCKS_EXCLUDED(mu);

  mutable absl::Mutex mu;
  std::map<int, uint64_t> requests ABSL_GUARDED_BY(mu);
};

class Shard {
 public:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  // Keeps references to everything; all must outlive the shard. `capacity` samples at most wait
  // in the queue (the batch being sent is apart from them). `external_labels` (every series) and
  // `aggregator_labels` (the aggregator's own series only) sorted by name: LabelMerger.
  Shard(const QueueOptions& options, uint64_t capacity, const LabelPairs& external_labels,
        const LabelPairs& aggregator_labels, Sender& sender, EndpointStats& stats,
        const Clock& clock, uint64_t seed, std::string endpoint_name);

  // Queues what fits (the first samples of `samples`) and counts the rest as dropped
  // (queue_full); never blocks on the network. Returns how many were dropped. Wakes a Wait()
  // when there is work. `hold` (nullable) is kept until the samples queued here have left the
  // shard. The samples are compressed here, outside the queue's lock, in runs of at most
  // max_samples_per_send; a request takes whole runs.
  size_t Push(const EncodedSamples& samples, Hold hold = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues `run` (compressed already: BatchTemplate) whole if it fits, and returns true; false,
  // with nothing queued, taken or counted, when it does not (the caller pushes it another way).
  bool PushCompressed(CompressedSamples& run, Hold hold = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for samples not yet encoded (encoded here).
  size_t Push(absl::Span<const PendingSample> samples, Hold hold = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same for samples[i], for each i of `indices` in that order (Endpoint routes a batch
  // to its shards this way).
  size_t Push(absl::Span<const PendingSample> samples, absl::Span<const size_t> indices,
              Hold hold = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Does what is due at the clock's monotonic now: starts a batch when max_samples_per_send are
  // queued, or the oldest has waited batch_send_deadline (any queued sample when `flush`), and
  // sends it or retries it once its backoff has passed. A batch is the queue's first runs, as
  // many as fit in max_samples_per_send (at least one). Sends at most once per call. A request
  // may not outlast `send_deadline` (monotonic; kNever: request_timeout alone). Returns the
  // monotonic time it wants to run next: ≤ now for at once, kNever when only a Push can give it
  // work.
  int64_t Step(bool flush, int64_t send_deadline = kNever) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until `deadline` (monotonic, on the real clock) or until Push() or Wake() brings work.
  void Wait(int64_t deadline) ABSL_LOCKS_EXCLUDED(mu_);
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);

  // Samples queued plus those of the batch in flight.
  size_t Pending() const ABSL_LOCKS_EXCLUDED(mu_);
  // When the oldest pending sample was queued (monotonic); kNever when none is.
  int64_t OldestEnqueued() const ABSL_LOCKS_EXCLUDED(mu_);
  // Drops everything pending and counts it (dropped, reason shutdown). Returns how many.
  size_t DropAll() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const QueueOptions& options_;
  const uint64_t capacity_;
  Sender& sender_;
  EndpointStats& stats_;
  const Clock& clock_;
  const std::string endpoint_name_;
  Backoff backoff_;  // Step() only
  // How many of `count` samples the queue has room for now.
  size_t RoomLocked(size_t count) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `runs` in order until one does not fit (it and the rest are left to the caller to
  // count), with `hold` for what was queued, and wakes the sending thread when it has work.
  // Returns how many samples were queued.
  size_t EnqueueLocked(absl::Span<CompressedSamples> runs, Hold hold)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `count` more samples left the shard: returns the holds that no queued sample needs any more
  // (the caller releases them after mu_: a release may acknowledge an agent's batch).
  std::vector<Hold> ReleaseLocked(uint64_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the first runs of the queue into batch_ (empty), as many as fit in a request.
  void TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The request for batch_'s runs [begin, end) into body_, to send at `now`.
  void StartPart(size_t begin, size_t end, int64_t now);
  // The part in flight left the shard (`delivered` or refused): counted and its holds released;
  // the batch's next part starts, or the batch is done. Returns the holds to release.
  std::vector<Hold> FinishPart(bool delivered, int64_t now);

  const LabelMerger labels_;  // for Push(PendingSample); immutable

  // The batch being sent: Step() only, except the counts others read under mu_. Its runs are
  // sent as one request, or, after a refusal of a part, as parts of it in order.
  std::vector<CompressedSamples> batch_;  // the runs taken, until the batch is done
  struct Part {
    size_t begin = 0;  // runs [begin, end) of batch_
    size_t end = 0;
  };
  Part part_;                // in body_
  size_t part_samples_ = 0;  // in body_; 0: no request in flight
  std::vector<Part> later_;  // the batch's parts still to send, the next one last
  std::string body_;         // the part's request body (kept across its retries)
  uint32_t attempt_ = 0;
  int64_t retry_at_ = 0;

  mutable absl::Mutex mu_;
  absl::CondVar work_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  // The queued runs, in the order pushed.
  std::deque<CompressedSamples> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_samples_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // samples of batch_ not yet delivered or refused
  // Holds by position: released once `left_` (samples that left the shard, counted from the
  // first ever queued) reaches `until` (the count queued when the hold came). The queue is FIFO,
  // so holds release in order.
  struct HeldUntil {
    uint64_t until;
    Hold hold;
  };
  std::deque<HeldUntil> holds_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t left_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_oldest_ ABSL_GUARDED_BY(mu_) = kNever;
};

}  // namespace fabricmon::remote_write
