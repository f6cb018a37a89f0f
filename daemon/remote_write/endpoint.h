#pragma once

// One remote_write endpoint: its shards (shard.h), one sender and one thread per shard, and its
// counters. Append() routes each sample to the shard of its series, AppendEncoded() a run of
// samples already encoded to the shard of its route, and both return at once: ingest never waits
// for the receiver. Shutdown() sends what is queued until a deadline and counts
// what it could not.
//
// Thread-safety: Append() and the readers from any thread; Start() and Shutdown() from the owner.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/common/clock.h"
#include "daemon/remote_write/encoder.h"
#include "daemon/remote_write/sender.h"
#include "daemon/remote_write/shard.h"

namespace fabricmon::remote_write {

struct EndpointOptions {
  std::string name;            // the `endpoint` label of its metrics (never holds credentials)
  LabelPairs external_labels;  // sorted by name; on every series
  QueueOptions queue;
  // Sorted by name, none in external_labels: on the aggregator's own series only (the `shard`
  // name), never on an agent's (LabelSet::origin).
  LabelPairs aggregator_labels;
};

class Endpoint {
 public:
  using SenderFactory = std::function<absl::StatusOr<std::unique_ptr<Sender>>()>;

  // One sender per shard from `make_sender` (its error is returned). Keeps a reference to
  // `clock`. Threads start with Start().
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(EndpointOptions options,
                                                          const SenderFactory& make_sender,
                                                          const Clock& clock);
  ~Endpoint();  // Shutdown(0) if still running

  void Start();
  // Stops taking samples, sends what is pending for at most `flush_nanos` (retrying as usual
  // within it), then counts what is left as dropped (reason shutdown) and joins the threads.
  void Shutdown(int64_t flush_nanos);

  // Queues copies of `samples` (each on its series' shard). Samples beyond a shard's capacity are
  // dropped and counted; after Shutdown() all are (reason shutdown). `hold` (nullable) is kept
  // until every sample queued of these has left its shard (shard.h).
  void Append(absl::Span<const PendingSample> samples, const Hold& hold = nullptr);
  // Queues `samples` whole on shard `route` % shards (an agent stream's batch: its node's
  // series, always the same route, so each series stays on one shard and in order), their
  // labels merged with labels() for this endpoint. The rest as Append().
  void AppendEncoded(uint64_t route, const EncodedSamples& samples, const Hold& hold = nullptr);
  // The same for a run compressed already (BatchTemplate), queued whole: true when it was
  // (or was counted as dropped at shutdown), false when the shard has no room for all of it and
  // nothing was done (the caller appends it encoded, to queue what fits and count the rest).
  // A run of more than queue.max_samples_per_send samples must go through AppendEncoded.
  bool AppendCompressed(uint64_t route, CompressedSamples& run, const Hold& hold = nullptr);
  // The most samples one request carries.
  size_t max_samples_per_send() const { return options_.queue.max_samples_per_send; }
  // What AppendEncoded's samples' labels must be merged with: this endpoint's external labels.
  const LabelMerger& labels() const { return labels_; }

  const std::string& name() const { return options_.name; }
  const EndpointStats& stats() const { return stats_; }
  size_t Pending() const;
  // Seconds since the oldest pending sample was queued; 0 when none is.
  double OldestPendingAgeSeconds() const;

 private:
  Endpoint(EndpointOptions options, const Clock& clock);
  void Run(Shard& shard);

  const EndpointOptions options_;
  const LabelMerger labels_;
  const Clock& clock_;
  EndpointStats stats_;
  std::vector<std::unique_ptr<Sender>> senders_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> flush_deadline_{Shard::kNever};
};

}  // namespace fabricmon::remote_write
