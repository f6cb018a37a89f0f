#pragma once

// What the aggregator sends to its remote_write endpoints, and the endpoints' metrics:
//  - every sample an agent stream stores (BatchObserver), at its stored timestamp (the agent's
//    own, plus the node's clock-step offset: series_store.h) and full resolution, under the
//    same name and labels /metrics gives it (`__name__`, `node`, the series' labels) and the
//    same value (raw × scale; counters stay counters), so a remote series is the scraped one;
//  - the aggregator's own families (findings: fabricmon_finding_active and its companions;
//    node health: fabricmon_node_up, ...; fabricmon_aggregator_*, detector and topology
//    families) each time the detectors ticked, at the time of forwarding, with a staleness
//    marker for a series that a tick no longer has (a cleared finding stops matching queries
//    at once). So remote storage alone serves the dashboards and alert rules.
//  - beside a saturating counter pinned at its maximum, the fabricmon_series_saturated flag
//    /metrics shows (1, then a staleness marker once the counter moves again).
// The agents' series (the first and last kinds) are SeriesOrigin::kAgent: they get the
// endpoints' external labels but not the `shard` label, so a node's series stays one series
// whatever shard stored it; the aggregator's own families are kAggregator and carry `shard`.
//
// Thread-safety: everything is thread-safe; each endpoint has its own shards and threads
// (remote_write/endpoint.h), so nothing here waits for a receiver.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/aggregator/batch_observer.h"
#include "daemon/common/clock.h"
#include "daemon/remote_write/bearer_token_file.h"
#include "daemon/remote_write/endpoint.h"
#include "daemon/remote_write/keyed_batch_writer.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace fabricmon::aggregator {

class RemoteWriteFeed final : public BatchObserver, public prometheus::Collectable {
 public:
  struct EndpointEntry {
    std::unique_ptr<remote_write::Endpoint> endpoint;
    int64_t flush_deadline_nanos = 0;
    // The endpoint's bearer_token_file (null: none), for its reload counters.
    std::shared_ptr<const remote_write::BearerTokenFile> bearer_token;
  };
  // Keeps a reference to `clock`. The endpoints are started here.
  RemoteWriteFeed(std::vector<EndpointEntry> endpoints, const Clock& clock);
  ~RemoteWriteFeed() override;  // Shutdown()

  // BatchObserver.
  std::unique_ptr<Stream> OpenStream() override;

  // Forwards the families `collect()` returns (the detection engine's and the exporter's
  // health families) each time `last_tick()` (the engine's last_tick_monotonic_nanos) moved,
  // polled every `poll_nanos` on a thread owned by the feed. Call once.
  void ForwardEachTick(std::function<int64_t()> last_tick,
                       std::function<std::vector<prometheus::MetricFamily>()> collect,
                       int64_t poll_nanos);
  // One forwarding of `families` at `timestamp_unix_nanos` (what that thread does; tests call
  // it directly).
  void ForwardFamilies(const std::vector<prometheus::MetricFamily>& families,
                       int64_t timestamp_unix_nanos) ABSL_LOCKS_EXCLUDED(forward_mu_);

  // Forwarded series looked up by their labels so far, rather than found where the last
  // forwarding had them (a series new, or come or gone before them): for tests.
  uint64_t forwarded_series_looked_up() const ABSL_LOCKS_EXCLUDED(forward_mu_);

  // Stops the tick thread, then flushes each endpoint within its flush deadline (all at
  // once). Idempotent.
  void Shutdown();

  // fabricmon_remote_write_* per endpoint.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  class StreamFeed;

  std::vector<EndpointEntry> endpoints_;
  const Clock& clock_;

  // Each endpoint's entry's endpoint.
  std::vector<remote_write::Endpoint*> Endpoints() const;

  mutable absl::Mutex forward_mu_;
  struct Forwarded {
    uint32_t key = 0;         // its labels' key in forward_writer_
    uint64_t forwarding = 0;  // the last forwarding that had the series
    size_t position = 0;      // its place in that forwarding's order
  };
  // The entry of the series whose encoded labels are in `key_`, made (its key given, its labels
  // remembered) if it has none.
  Forwarded& LookUpForwarded(const std::string& name, const prometheus::ClientMetric& metric)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(forward_mu_);
  // The series of the last forwarding, by their encoded labels (LabelSet::encoded): a series
  // missing from the next one gets a staleness marker. Nodes, so that `order_` may point at them.
  absl::node_hash_map<std::string, Forwarded> last_forwarded_ ABSL_GUARDED_BY(forward_mu_);
  // The last forwarding's series in its order: each one's encoded labels (in `bytes`) and entry
  // of last_forwarded_. The families come in the same order every tick, so a series is compared
  // with the one where the series before it was followed last time, read in sequence, rather
  // than looked up; one that is not there (a series came or went before it) is looked up, and
  // the series after it are compared from its own place on. Built anew each forwarding
  // (`next_order_`, kept to reuse its buffers).
  struct Position {
    size_t offset = 0;
    size_t size = 0;
    Forwarded* entry = nullptr;
  };
  struct Order {
    std::vector<Position> positions;
    std::string bytes;
  };
  Order order_ ABSL_GUARDED_BY(forward_mu_);
  Order next_order_ ABSL_GUARDED_BY(forward_mu_);
  uint64_t forwardings_ ABSL_GUARDED_BY(forward_mu_) = 0;
  uint64_t looked_up_ ABSL_GUARDED_BY(forward_mu_) = 0;
  // The forwarded series' labels by key, and each tick's layout compressed once: the families
  // come in the same order every tick.
  remote_write::StoredLabels forward_labels_ ABSL_GUARDED_BY(forward_mu_);
  remote_write::KeyedBatchWriter forward_writer_ ABSL_GUARDED_BY(forward_mu_);
  std::vector<uint32_t> free_keys_ ABSL_GUARDED_BY(forward_mu_);  // keys of ended series
  uint32_t next_key_ ABSL_GUARDED_BY(forward_mu_) = 0;
  // One forwarding's samples, and the keys it ended (kept: no allocation per tick).
  std::vector<remote_write::KeyedSample> forward_batch_ ABSL_GUARDED_BY(forward_mu_);
  std::vector<uint32_t> ended_keys_ ABSL_GUARDED_BY(forward_mu_);
  // A series' labels while it is looked up (kept: no allocation per series once grown).
  remote_write::LabelRefs label_refs_ ABSL_GUARDED_BY(forward_mu_);
  std::string key_ ABSL_GUARDED_BY(forward_mu_);

  absl::Mutex stop_mu_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread tick_thread_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace fabricmon::aggregator
