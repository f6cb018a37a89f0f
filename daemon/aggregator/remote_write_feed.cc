#include "daemon/aggregator/remote_write_feed.h"

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>
#include <utility>

#include "absl/time/time.h"
#include "collectors/core/sample.h"
#include "daemon/common/thread_name.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/remote_write/keyed_batch_writer.h"
#include "daemon/remote_write/protobuf_wire.h"
#include "daemon/wire/aggregator_families.h"

namespace fabricmon::aggregator {
namespace {

using remote_write::LabelPairs;

int64_t ToMillis(int64_t unix_nanos) {
  // Floor, also for times before 1970 (a broken clock must not round towards the epoch).
  return unix_nanos >= 0 ? unix_nanos / 1000000 : -((-unix_nanos + 999999) / 1000000);
}

}  // namespace

// Per agent stream: each slot's series labels (and its saturation flag's) are named by a key
// (LabelsKey) and read from the slot's description when a writer needs them (a template built, a
// batch no template matches), so the feed keeps no labels of its own. A stored batch becomes one
// compressed run per endpoint, queued on the shard of the stream's node: nothing per sample is
// queued, counted or looked up again. A batch of a layout the stream sent before (each collector
// sends its own) is compressed by that layout's template (KeyedBatchWriter); another is encoded
// and compressed by the shard.
class RemoteWriteFeed::StreamFeed final : public BatchObserver::Stream,
                                          private remote_write::LabelSource {
 public:
  explicit StreamFeed(RemoteWriteFeed& feed) : feed_(feed), writer_(feed.Endpoints(), *this) {}

  void OnStored(const store::NodeState& node, absl::Span<const store::SlotRef> slots,
                const std::vector<bool>& present,
                const std::shared_ptr<store::Settlement>& settlement) override {
    const int64_t now = feed_.clock_.MonotonicNanos();
    // The batch's samples, each naming its labels by slot and kind (LabelsKey): written into
    // requests after the node's lock is released. One buffer per ingest thread serves every
    // stream.
    // Sized for the most a batch can hold (a sample and a saturation flag per slot) and written
    // field by field: a KeyedSample built apart and copied in whole was read back before its
    // fields' stores had landed (a store-forwarding stall on every sample).
    thread_local std::vector<remote_write::KeyedSample> buffer;
    if (buffer.size() < 2 * slots.size()) {
      buffer.resize(2 * slots.size());
    }
    if (node.name() != node_name_) {
      // Every label set names the node: each key changes as its slot is next stored.
      node_name_ = node.name();
      for (Cached& cached : slots_) {
        cached.known = false;
      }
    }
    size_t count = 0;
    auto add = [&](size_t slot, size_t kind, int64_t timestamp_ms, double value) {
      remote_write::KeyedSample& sample = buffer[count++];
      sample.labels_key = LabelsKey(slot, kind);
      sample.timestamp_ms = timestamp_ms;
      sample.value = value;
    };
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
        if (slot.index >= slots_.size()) {
          slots_.resize(slot.index + 1);
        }
        Cached& cached = slots_[slot.index];
        // The description is read only when it changed (a declaration, a re-declaration with
        // other semantics): at 1 Hz from a thousand nodes each series' description is a cache
        // miss of its own, and everything a sample needs from it is kept here or in the series.
        if (&cached.desc.get() != &series.desc.get()) {
          if (cached.known && (cached.desc->name != series.desc->name ||
                               cached.desc->labels != series.desc->labels)) {
            cached.known = false;  // the slot names another series (its labels come from here)
          }
          cached.desc = series.desc;
          cached.scale = series.desc->scale;
        }
        if (!cached.known || cached.generation != slot.generation) {
          writer_.Changed(LabelsKey(slot.index, kSeriesLabels));
          writer_.Changed(LabelsKey(slot.index, kFlagLabels));
          cached.generation = slot.generation;
          cached.known = true;
          cached.flagged = false;
        }
        const int64_t timestamp_ms = ToMillis(latest->timestamp_unix_nanos);
        add(slot.index, kSeriesLabels, timestamp_ms,
            collectors::ExportedValue(series.type, cached.scale, latest->raw));
        // The saturation flag /metrics shows beside a pinned saturating counter: 1 while it is
        // pinned, then a staleness marker when it moves again (a reset).
        const bool saturated = series.IsSaturated(latest->raw);
        if (saturated || cached.flagged) {
          add(slot.index, kFlagLabels, timestamp_ms, saturated ? 1.0 : remote_write::StaleNaN());
          cached.flagged = saturated;
        }
      }
    });
    if (count == 0) {
      return;
    }
    // Every batch of a node to the same shard of each endpoint.
    writer_.Write(absl::MakeConstSpan(buffer.data(), count),
                  std::hash<std::string_view>()(node.name()), now, settlement);
  }

 private:
  struct Cached {
    uint32_t generation = 0;
    bool known = false;    // the writer knows its keys' labels changed last (this generation)
    bool flagged = false;  // the flag was sent as 1 last
    // The series' description when `scale` was read from it, compared by address: a
    // re-declaration with other semantics gives the series another one, and holding this one
    // keeps its address from being reused by a later description meanwhile. Its name and
    // labels are the series' labels (LabelSource).
    store::SharedDesc desc;
    double scale = 1.0;
  };
  static constexpr size_t kSeriesLabels = 0;
  static constexpr size_t kFlagLabels = 1;
  // A batch's sample names its labels by slot and kind.
  static uint32_t LabelsKey(size_t slot, size_t kind) {
    return static_cast<uint32_t>(2 * slot + kind);
  }

  // LabelSource: a slot's series, `node` first (a series' own label of that name is dropped, as
  // /metrics drops it), or its saturation flag (the series' name as `metric`).
  std::optional<remote_write::SeriesOrigin> EncodeLabels(uint32_t key,
                                                         std::string& out) const override {
    const size_t slot = key / 2;
    if (slot >= slots_.size() || !slots_[slot].known) {
      return std::nullopt;
    }
    const collectors::SeriesDesc& desc = slots_[slot].desc;
    refs_.clear();
    refs_.emplace_back("node", node_name_);
    absl::string_view name = desc.name;
    if (key % 2 == kFlagLabels) {
      refs_.emplace_back("metric", desc.name);
      name = exposition::kSaturatedFamily;
    }
    for (const auto& [label, value] : desc.labels) {
      refs_.emplace_back(label, value);
    }
    remote_write::EncodeLabelsInto(name, refs_, out);
    return remote_write::SeriesOrigin::kAgent;
  }

  RemoteWriteFeed& feed_;
  std::string node_name_;
  std::vector<Cached> slots_;             // by slot index
  mutable remote_write::LabelRefs refs_;  // EncodeLabels' (kept: no allocation once grown)
  // The templates of the stream's layouts, per endpoint.
  remote_write::KeyedBatchWriter writer_;
};

RemoteWriteFeed::RemoteWriteFeed(std::vector<EndpointEntry> endpoints, const Clock& clock)
    : endpoints_(std::move(endpoints)),
      clock_(clock),
      forward_writer_(Endpoints(), forward_labels_) {
  for (EndpointEntry& entry : endpoints_) {
    entry.endpoint->Start();
  }
}

RemoteWriteFeed::~RemoteWriteFeed() { Shutdown(); }

std::vector<remote_write::Endpoint*> RemoteWriteFeed::Endpoints() const {
  std::vector<remote_write::Endpoint*> endpoints;
  for (const EndpointEntry& entry : endpoints_) {
    endpoints.push_back(entry.endpoint.get());
  }
  return endpoints;
}

std::unique_ptr<BatchObserver::Stream> RemoteWriteFeed::OpenStream() {
  return std::make_unique<StreamFeed>(*this);
}

void RemoteWriteFeed::ForwardEachTick(
    std::function<int64_t()> last_tick,
    std::function<std::vector<prometheus::MetricFamily>()> collect, int64_t poll_nanos) {
  tick_thread_ = std::thread(
      [this, last_tick = std::move(last_tick), collect = std::move(collect), poll_nanos] {
        NameThisThread("rw_forward");
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
  absl::MutexLock lock(&forward_mu_);
  ++forwardings_;
  forward_batch_.clear();
  next_order_.positions.clear();
  next_order_.bytes.clear();
  // Each tick forwards mostly the series of the tick before, in the same order: a series is
  // known by its encoded labels, built in buffers kept across ticks, compared with the series
  // at its position last time or else looked up, and is given a key (its labels merged for
  // every endpoint) only the first time.
  size_t position = 0;
  // Where the series at `position` was last time, relative to it: it moves when series came or
  // went before (a finding raised shifts every series after it), found at the first miss.
  ptrdiff_t shift = 0;
  for (const prometheus::MetricFamily& family : families) {
    const bool counter = family.type == prometheus::MetricType::Counter;
    for (const prometheus::ClientMetric& metric : family.metric) {
      label_refs_.clear();
      for (const auto& label : metric.label) {
        label_refs_.emplace_back(label.name, label.value);
      }
      remote_write::EncodeLabelsInto(family.name, label_refs_, key_);
      Forwarded* entry = nullptr;
      const ptrdiff_t guess = static_cast<ptrdiff_t>(position) + shift;
      if (guess >= 0 && static_cast<size_t>(guess) < order_.positions.size()) {
        const Position& last = order_.positions[guess];
        if (absl::string_view(order_.bytes).substr(last.offset, last.size) == key_) {
          entry = last.entry;
        }
      }
      if (entry == nullptr) {
        entry = &LookUpForwarded(family.name, metric);
        if (entry->forwarding != 0 && entry->forwarding + 1 == forwardings_) {
          // It was in the last forwarding: the series after it are compared from its place on.
          shift = static_cast<ptrdiff_t>(entry->position) - static_cast<ptrdiff_t>(position);
        }
      }
      next_order_.positions.push_back({next_order_.bytes.size(), key_.size(), entry});
      next_order_.bytes.append(key_);
      if (entry->forwarding == forwardings_) {
        // The same series twice in one forwarding: a receiver refuses a request with two
        // values at one timestamp whole, so the first one goes.
        ++position;
        continue;
      }
      entry->forwarding = forwardings_;
      entry->position = position++;
      forward_batch_.push_back(
          {entry->key, timestamp_ms, counter ? metric.counter.value : metric.gauge.value});
    }
  }
  // A series this forwarding lacks ends: a staleness marker, and it is forgotten (its key
  // once the marker is queued). None of them is in next_order_.
  ended_keys_.clear();
  for (auto it = last_forwarded_.begin(); it != last_forwarded_.end();) {
    if (it->second.forwarding != forwardings_) {
      forward_batch_.push_back({it->second.key, timestamp_ms, remote_write::StaleNaN()});
      ended_keys_.push_back(it->second.key);
      last_forwarded_.erase(it++);
    } else {
      ++it;
    }
  }
  std::swap(order_, next_order_);
  // All to one shard of each endpoint, so that each series stays in order.
  forward_writer_.Write(forward_batch_, /*route=*/0, now, nullptr);
  for (const uint32_t key : ended_keys_) {
    forward_labels_.Set(key, nullptr);
    forward_writer_.Changed(key);
    free_keys_.push_back(key);
  }
}

RemoteWriteFeed::Forwarded& RemoteWriteFeed::LookUpForwarded(
    const std::string& name, const prometheus::ClientMetric& metric) {
  ++looked_up_;
  auto it = last_forwarded_.find(key_);
  if (it != last_forwarded_.end()) {
    return it->second;
  }
  LabelPairs pairs;
  pairs.reserve(metric.label.size());
  for (const auto& label : metric.label) {
    pairs.emplace_back(label.name, label.value);
  }
  uint32_t key = next_key_;
  if (free_keys_.empty()) {
    ++next_key_;
  } else {
    key = free_keys_.back();
    free_keys_.pop_back();
  }
  forward_labels_.Set(key, remote_write::MakeLabelSet(name, std::move(pairs),
                                                      remote_write::SeriesOrigin::kAggregator));
  forward_writer_.Changed(key);
  return last_forwarded_.emplace(key_, Forwarded{key, 0}).first->second;
}

uint64_t RemoteWriteFeed::forwarded_series_looked_up() const {
  absl::MutexLock lock(&forward_mu_);
  return looked_up_;
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
  auto sent_bytes = exposition::EmptyFamily(wire::kRemoteWriteSentBytesTotalFamily);
  auto templated = exposition::EmptyFamily(wire::kRemoteWriteSamplesTemplatedTotalFamily);
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
    add(sent_bytes, {{"endpoint", name}}, static_cast<double>(stats.bytes_sent.load()));
    add(templated, {{"endpoint", name}}, static_cast<double>(stats.samples_templated.load()));
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
  for (auto* f : {&age, &requests, &retries, &dropped, &failed, &pending, &sent, &templated,
                  &sent_bytes, &token_reloads}) {
    if (!f->metric.empty()) {
      out.push_back(std::move(*f));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace fabricmon::aggregator
