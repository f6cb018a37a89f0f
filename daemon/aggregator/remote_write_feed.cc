#include "daemon/aggregator/remote_write_feed.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"
#include "collectors/core/sample.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/wire/aggregator_families.h"

namespace fabricmon::aggregator {
namespace {

using remote_write::LabelPairs;
using remote_write::LabelSet;
using remote_write::PendingSample;

int64_t ToMillis(int64_t unix_nanos) {
  // Floor, also for times before 1970 (a broken clock must not round towards the epoch).
  return unix_nanos >= 0 ? unix_nanos / 1000000 : -((-unix_nanos + 999999) / 1000000);
}

}  // namespace

// Per agent stream: the label set of each slot it saw, built once per series (and again when the
// slot was retired and reused: its generation changed).
class RemoteWriteFeed::StreamFeed final : public BatchObserver::Stream {
 public:
  explicit StreamFeed(RemoteWriteFeed& feed) : feed_(feed) {}

  void OnStored(const store::NodeState& node, absl::Span<const store::SlotRef> slots,
                const std::vector<bool>& present,
                const std::shared_ptr<store::Settlement>& settlement) override {
    samples_.clear();
    const int64_t now = feed_.clock_.MonotonicNanos();
    node.WithSeries([&](const std::vector<store::Series>& all) {
      for (size_t i = 0; i < slots.size() && i < present.size(); ++i) {
        const store::SlotRef slot = slots[i];
        if (!present[i] || slot.index >= all.size()) {
          continue;
        }
        const store::Series& series = all[slot.index];
        const store::StoredSample* latest = series.Latest();
        if (series.retired || series.generation != slot.generation || latest == nullptr) {
          continue;  // retired since the stream declared it: the store dropped the value too
        }
        if (slot.index >= labels_.size()) {
          labels_.resize(slot.index + 1);
        }
        Cached& cached = labels_[slot.index];
        if (cached.set == nullptr || cached.generation != slot.generation) {
          LabelPairs pairs;
          pairs.reserve(series.desc->labels.size() + 1);
          pairs.emplace_back("node", node.name());
          pairs.insert(pairs.end(), series.desc->labels.begin(), series.desc->labels.end());
          cached.set = Keep(remote_write::MakeLabelSet(series.desc->name, std::move(pairs),
                                                       remote_write::SeriesOrigin::kAgent));
          cached.generation = slot.generation;
          cached.saturated_set.reset();
          cached.flagged = false;
        }
        const int64_t timestamp_ms = ToMillis(latest->timestamp_unix_nanos);
        samples_.push_back({Queued(cached.set), timestamp_ms,
                            collectors::ExportedValue(series.desc, latest->raw), now});
        // The saturation flag /metrics shows beside a pinned saturating counter: 1 while it is
        // pinned, then a staleness marker when it moves again (a reset).
        const bool saturated = series.desc->IsSaturated(latest->raw);
        if (saturated || cached.flagged) {
          if (cached.saturated_set == nullptr) {
            LabelPairs pairs = {{"node", node.name()}, {"metric", series.desc->name}};
            pairs.insert(pairs.end(), series.desc->labels.begin(), series.desc->labels.end());
            cached.saturated_set =
                Keep(remote_write::MakeLabelSet(exposition::kSaturatedFamily, std::move(pairs),
                                                remote_write::SeriesOrigin::kAgent));
          }
          samples_.push_back({Queued(cached.saturated_set), timestamp_ms,
                              saturated ? 1.0 : remote_write::StaleNaN(), now});
          cached.flagged = saturated;
        }
      }
    });
    if (!samples_.empty()) {
      feed_.Append(samples_, settlement);  // outside the node's lock
    }
  }

 private:
  struct Cached {
    std::shared_ptr<const LabelSet> set;
    uint32_t generation = 0;
    std::shared_ptr<const LabelSet> saturated_set;  // its fabricmon_series_saturated series
    bool flagged = false;                           // the flag was sent as 1 last
  };
  // Every label set this stream's queued samples may point to. A queued sample holds a
  // reference to this table (std::shared_ptr's aliasing constructor), not to its own label set:
  // a label set's own count, touched by the ingest thread when queued and by a remote_write
  // thread when sent, moved its cache line between their cores for every sample, where this
  // count is one line per stream. A set replaced in labels_ (its slot retired and reused) stays
  // here until the table is replaced (see Keep) and the last sample holding it has left the
  // queues.
  struct LabelTable {
    std::vector<std::shared_ptr<const LabelSet>> sets;
  };

  // `set`, now also owned by the table.
  std::shared_ptr<const LabelSet> Keep(std::shared_ptr<const LabelSet> set) {
    // Series churn (slots retired and reused) leaves replaced sets in the table: past twice
    // what the stream can use at once, a new table takes the live ones, and the old one goes
    // with its last queued sample.
    if (table_->sets.size() >= 2 * (2 * labels_.size()) + 64) {
      auto fresh = std::make_shared<LabelTable>();
      for (const Cached& cached : labels_) {
        for (const auto* live : {&cached.set, &cached.saturated_set}) {
          if (*live != nullptr) {
            fresh->sets.push_back(*live);
          }
        }
      }
      table_ = std::move(fresh);
    }
    table_->sets.push_back(set);
    return set;
  }
  // The reference a queued sample of `set` (in the table) holds.
  std::shared_ptr<const LabelSet> Queued(const std::shared_ptr<const LabelSet>& set) const {
    return std::shared_ptr<const LabelSet>(table_, set.get());
  }

  RemoteWriteFeed& feed_;
  std::vector<Cached> labels_;  // by slot index
  std::shared_ptr<LabelTable> table_ = std::make_shared<LabelTable>();
  std::vector<PendingSample> samples_;  // reused between batches
};

RemoteWriteFeed::RemoteWriteFeed(std::vector<EndpointEntry> endpoints, const Clock& clock)
    : endpoints_(std::move(endpoints)), clock_(clock) {
  for (EndpointEntry& entry : endpoints_) {
    entry.endpoint->Start();
  }
}

RemoteWriteFeed::~RemoteWriteFeed() { Shutdown(); }

std::unique_ptr<BatchObserver::Stream> RemoteWriteFeed::OpenStream() {
  return std::make_unique<StreamFeed>(*this);
}

void RemoteWriteFeed::Append(absl::Span<const PendingSample> samples,
                             const remote_write::Hold& hold) {
  for (EndpointEntry& entry : endpoints_) {
    entry.endpoint->Append(samples, hold);
  }
}

void RemoteWriteFeed::ForwardEachTick(
    std::function<int64_t()> last_tick,
    std::function<std::vector<prometheus::MetricFamily>()> collect, int64_t poll_nanos) {
  tick_thread_ = std::thread(
      [this, last_tick = std::move(last_tick), collect = std::move(collect), poll_nanos] {
        int64_t forwarded_tick = 0;
        while (true) {
          {
            absl::MutexLock lock(&stop_mu_);
            stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Nanoseconds(poll_nanos));
            if (stopping_) {
              return;
            }
          }
          const int64_t tick = last_tick();
          if (tick != 0 && tick != forwarded_tick) {
            forwarded_tick = tick;
            ForwardFamilies(collect(), clock_.NowUnixNanos());
          }
        }
      });
}

void RemoteWriteFeed::ForwardFamilies(const std::vector<prometheus::MetricFamily>& families,
                                      int64_t timestamp_unix_nanos) {
  const int64_t timestamp_ms = ToMillis(timestamp_unix_nanos);
  const int64_t now = clock_.MonotonicNanos();
  std::vector<PendingSample> samples;
  absl::MutexLock lock(&forward_mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<const LabelSet>> current;
  for (const prometheus::MetricFamily& family : families) {
    const bool counter = family.type == prometheus::MetricType::Counter;
    for (const prometheus::ClientMetric& metric : family.metric) {
      LabelPairs pairs;
      pairs.reserve(metric.label.size());
      for (const auto& label : metric.label) {
        pairs.emplace_back(label.name, label.value);
      }
      std::shared_ptr<const LabelSet> set = remote_write::MakeLabelSet(
          family.name, std::move(pairs), remote_write::SeriesOrigin::kAggregator);
      std::string key = set->encoded;  // the sorted labels, length-prefixed: one per series
      // The same series keeps its label set, so its shard does not depend on a fresh hash.
      if (auto it = last_forwarded_.find(key); it != last_forwarded_.end()) {
        set = it->second;
      }
      samples.push_back(
          {set, timestamp_ms, counter ? metric.counter.value : metric.gauge.value, now});
      current.emplace(std::move(key), std::move(set));
    }
  }
  for (const auto& [key, set] : last_forwarded_) {
    if (!current.contains(key)) {
      samples.push_back({set, timestamp_ms, remote_write::StaleNaN(), now});
    }
  }
  last_forwarded_ = std::move(current);
  if (!samples.empty()) {
    Append(samples);
  }
}

void RemoteWriteFeed::Shutdown() {
  if (shut_down_.exchange(true)) {
    return;
  }
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  if (tick_thread_.joinable()) {
    tick_thread_.join();
  }
  // All endpoints flush at once, each within its own deadline.
  std::vector<std::thread> flushing;
  for (EndpointEntry& entry : endpoints_) {
    flushing.emplace_back([&entry] { entry.endpoint->Shutdown(entry.flush_deadline_nanos); });
  }
  for (std::thread& thread : flushing) {
    thread.join();
  }
}

std::vector<prometheus::MetricFamily> RemoteWriteFeed::Collect() const {
  using prometheus::MetricType;
  auto add = [](prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels,
                double value) {
    prometheus::ClientMetric metric;
    metric.label = std::move(labels);
    if (f.type == MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    f.metric.push_back(std::move(metric));
  };
  auto sent = exposition::EmptyFamily(wire::kRemoteWriteSamplesSentTotalFamily);
  auto failed = exposition::EmptyFamily(wire::kRemoteWriteSamplesFailedTotalFamily);
  auto dropped = exposition::EmptyFamily(wire::kRemoteWriteSamplesDroppedTotalFamily);
  auto pending = exposition::EmptyFamily(wire::kRemoteWriteSamplesPendingFamily);
  auto age = exposition::EmptyFamily(wire::kRemoteWriteOldestPendingAgeSecondsFamily);
  auto requests = exposition::EmptyFamily(wire::kRemoteWriteRequestsTotalFamily);
  auto retries = exposition::EmptyFamily(wire::kRemoteWriteRetriesTotalFamily);
  auto token_reloads = exposition::EmptyFamily(wire::kRemoteWriteBearerTokenReloadsTotalFamily);
  for (const EndpointEntry& entry : endpoints_) {
    const remote_write::Endpoint& endpoint = *entry.endpoint;
    if (entry.bearer_token != nullptr) {
      add(token_reloads, {{"endpoint", endpoint.name()}, {"result", "ok"}},
          static_cast<double>(entry.bearer_token->reloads()));
      add(token_reloads, {{"endpoint", endpoint.name()}, {"result", "error"}},
          static_cast<double>(entry.bearer_token->reload_failures()));
    }
    const remote_write::EndpointStats& stats = endpoint.stats();
    const std::string& name = endpoint.name();
    add(sent, {{"endpoint", name}}, static_cast<double>(stats.samples_sent.load()));
    add(failed, {{"endpoint", name}}, static_cast<double>(stats.samples_failed.load()));
    add(dropped, {{"endpoint", name}, {"reason", "queue_full"}},
        static_cast<double>(stats.samples_dropped_queue_full.load()));
    add(dropped, {{"endpoint", name}, {"reason", "shutdown"}},
        static_cast<double>(stats.samples_dropped_shutdown.load()));
    add(pending, {{"endpoint", name}}, static_cast<double>(endpoint.Pending()));
    add(age, {{"endpoint", name}}, endpoint.OldestPendingAgeSeconds());
    for (const auto& [code, count] : stats.Requests()) {
      add(requests, {{"code", code}, {"endpoint", name}}, static_cast<double>(count));
    }
    add(retries, {{"endpoint", name}}, static_cast<double>(stats.retries.load()));
  }
  std::vector<prometheus::MetricFamily> out;
  for (auto* f : {&age, &requests, &retries, &dropped, &failed, &pending, &sent, &token_reloads}) {
    if (!f->metric.empty()) {
      out.push_back(std::move(*f));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace fabricmon::aggregator
