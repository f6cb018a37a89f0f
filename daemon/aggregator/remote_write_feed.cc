#include "daemon/aggregator/remote_write_feed.h"

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>
#include <utility>

#include "absl/time/time.h"
#include "collectors/core/sample.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/remote_write/batch_template.h"
#include "daemon/remote_write/protobuf_wire.h"
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

// Per agent stream: for each endpoint, the merged labels (LabelMerger) of each slot's series as a
// request carries them, built once per series (and again when the slot was retired and reused:
// its generation changed). A stored batch becomes one compressed run per endpoint, queued on the
// shard of the stream's node: nothing per sample is queued, counted or looked up again. A batch
// of the layout the stream sent last is compressed by that layout's template (BatchTemplate: its
// labels were compressed once); another is encoded (EncodedSamples), its labels read from one
// buffer per stream in slot order, and compressed by the shard.
class RemoteWriteFeed::StreamFeed final : public BatchObserver::Stream {
 public:
  explicit StreamFeed(RemoteWriteFeed& feed) : feed_(feed), labels_(feed.endpoints_.size()) {}

  void OnStored(const store::NodeState& node, absl::Span<const store::SlotRef> slots,
                const std::vector<bool>& present,
                const std::shared_ptr<store::Settlement>& settlement) override {
    const int64_t now = feed_.clock_.MonotonicNanos();
    // The batch's samples, each naming its labels by slot and kind (LabelsKey): written into
    // requests after the node's lock is released. One buffer per ingest thread serves every
    // stream.
    thread_local std::vector<remote_write::KeyedSample> batch;
    batch.clear();
    uint64_t layout = 0;  // a hash of the batch's layout (BatchTemplate::Matches)
    auto add = [&](size_t slot, size_t kind, int64_t timestamp_ms, double value) {
      const uint32_t key = LabelsKey(slot, kind);
      batch.push_back({key, timestamp_ms, value});
      layout =
          (layout ^
           (key | (uint64_t{remote_write::wire::VarintSize(static_cast<uint64_t>(timestamp_ms))}
                   << 32))) *
          0x9e3779b97f4a7c15ULL;
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
          cached.desc = series.desc;
          cached.scale = series.desc->scale;
        }
        if (!cached.known || cached.generation != slot.generation) {
          LabelPairs pairs;
          pairs.reserve(series.desc->labels.size() + 1);
          pairs.emplace_back("node", node.name());
          pairs.insert(pairs.end(), series.desc->labels.begin(), series.desc->labels.end());
          Remember(slot.index, kSeriesLabels,
                   *remote_write::MakeLabelSet(series.desc->name, std::move(pairs),
                                               remote_write::SeriesOrigin::kAgent));
          Forget(slot.index, kFlagLabels);
          cached.generation = slot.generation;
          cached.known = true;
          cached.flag_known = false;
          cached.flagged = false;
        }
        const int64_t timestamp_ms = ToMillis(latest->timestamp_unix_nanos);
        add(slot.index, kSeriesLabels, timestamp_ms,
            collectors::ExportedValue(series.type, cached.scale, latest->raw));
        // The saturation flag /metrics shows beside a pinned saturating counter: 1 while it is
        // pinned, then a staleness marker when it moves again (a reset).
        const bool saturated = series.IsSaturated(latest->raw);
        if (saturated || cached.flagged) {
          if (!cached.flag_known) {
            LabelPairs pairs = {{"node", node.name()}, {"metric", series.desc->name}};
            pairs.insert(pairs.end(), series.desc->labels.begin(), series.desc->labels.end());
            Remember(slot.index, kFlagLabels,
                     *remote_write::MakeLabelSet(exposition::kSaturatedFamily, std::move(pairs),
                                                 remote_write::SeriesOrigin::kAgent));
            cached.flag_known = true;
          }
          add(slot.index, kFlagLabels, timestamp_ms, saturated ? 1.0 : remote_write::StaleNaN());
          cached.flagged = saturated;
        }
      }
    });
    if (batch.empty()) {
      return;
    }
    // A layout seen twice running is worth a template: a stream whose batches alternate
    // between layouts (collectors on different intervals) is compressed as it comes.
    const bool repeated = layout == last_layout_;
    last_layout_ = layout;
    // Every batch of a node to the same shard of each endpoint.
    const uint64_t route = std::hash<std::string_view>()(node.name());
    for (size_t e = 0; e < labels_.size(); ++e) {
      remote_write::Endpoint& endpoint = *feed_.endpoints_[e].endpoint;
      remote_write::BatchTemplate& layout_template = labels_[e].layout_template;
      if (batch.size() <= endpoint.max_samples_per_send() &&
          (layout_template.Matches(labels_version_, batch) ||
           (repeated && layout_template.Build(labels_version_, batch, [&](uint32_t key) {
             return Labels(e, key / 2, key % 2);
           })))) {
        thread_local remote_write::CompressedSamples run;
        layout_template.Compress(batch, run);
        run.enqueued_monotonic_nanos = now;
        if (endpoint.AppendCompressed(route, run, settlement)) {
          continue;
        }
      }
      // Encoded as it comes; the shard compresses what fits and counts the rest.
      thread_local remote_write::EncodedSamples encoded;
      encoded.Clear();
      encoded.enqueued_monotonic_nanos = now;
      for (const remote_write::KeyedSample& sample : batch) {
        encoded.Add(Labels(e, sample.labels_key / 2, sample.labels_key % 2), sample.timestamp_ms,
                    sample.value);
      }
      endpoint.AppendEncoded(route, encoded, settlement);
    }
  }

 private:
  struct Cached {
    uint32_t generation = 0;
    bool known = false;       // its labels are remembered (for this generation)
    bool flag_known = false;  // its fabricmon_series_saturated series' labels are too
    bool flagged = false;     // the flag was sent as 1 last
    // The series' description when `scale` was read from it, compared by address: a
    // re-declaration with other semantics gives the series another one, and holding this one
    // keeps its address from being reused by a later description meanwhile.
    store::SharedDesc desc;
    double scale = 1.0;
  };
  // Where a slot's merged labels lie in an endpoint's buffer.
  struct LabelSpan {
    // 64 bits: the caps allow a node 200,000 series of up to 16 labels of 256 bytes each (and
    // their saturation flags' labels), past 4 GiB with the buffer's slack.
    uint64_t offset = 0;
    uint32_t size = 0;
  };
  static constexpr size_t kSeriesLabels = 0;
  static constexpr size_t kFlagLabels = 1;
  // One endpoint's merged labels of every slot, back to back in `bytes`; by_slot[slot][kind].
  struct EndpointLabels {
    std::string bytes;
    std::vector<std::array<LabelSpan, 2>> by_slot;
    size_t live = 0;  // bytes still referred to (the rest: labels of replaced series)
    // The stream's last repeated layout with these labels, compressed once.
    remote_write::BatchTemplate layout_template;
  };

  // A batch's sample names its labels by slot and kind.
  static uint32_t LabelsKey(size_t slot, size_t kind) {
    return static_cast<uint32_t>(2 * slot + kind);
  }

  absl::string_view Labels(size_t endpoint, size_t slot, size_t kind) const {
    const EndpointLabels& labels = labels_[endpoint];
    const LabelSpan span = labels.by_slot[slot][kind];
    return absl::string_view(labels.bytes.data() + span.offset, span.size);
  }

  // Merges `set` with each endpoint's external labels and keeps the result as the slot's.
  void Remember(size_t slot, size_t kind, const remote_write::LabelSet& set) {
    Forget(slot, kind);
    for (size_t e = 0; e < labels_.size(); ++e) {
      EndpointLabels& labels = labels_[e];
      if (slot >= labels.by_slot.size()) {
        labels.by_slot.resize(slot + 1);
      }
      // Series churn leaves replaced labels behind: past twice what is live, the buffer is
      // rebuilt from the live spans.
      if (labels.bytes.size() > 2 * labels.live + 65536) {
        Compact(labels);
      }
      const size_t offset = labels.bytes.size();
      feed_.endpoints_[e].endpoint->labels().Append(set, labels.bytes);
      const size_t size = labels.bytes.size() - offset;
      labels.by_slot[slot][kind] = {offset, static_cast<uint32_t>(size)};
      labels.live += size;
    }
  }

  void Forget(size_t slot, size_t kind) {
    ++labels_version_;  // a template built before may name other labels by this slot
    for (EndpointLabels& labels : labels_) {
      if (slot < labels.by_slot.size()) {
        labels.live -= labels.by_slot[slot][kind].size;
        labels.by_slot[slot][kind] = {};
      }
    }
  }

  static void Compact(EndpointLabels& labels) {
    std::string bytes;
    bytes.reserve(labels.live);
    for (auto& spans : labels.by_slot) {
      for (LabelSpan& span : spans) {
        const size_t offset = bytes.size();
        bytes.append(labels.bytes, span.offset, span.size);
        span.offset = offset;
      }
    }
    labels.bytes = std::move(bytes);
  }

  RemoteWriteFeed& feed_;
  std::vector<Cached> slots_;           // by slot index
  std::vector<EndpointLabels> labels_;  // by endpoint
  uint64_t labels_version_ = 0;         // moves whenever a slot's labels change
  uint64_t last_layout_ = 0;            // the last batch's layout hash
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
  ++forwardings_;
  // Each tick forwards mostly the series of the tick before: a series is looked up by its
  // encoded labels, built in buffers kept across ticks, and gets a label set of its own only
  // the first time (the same set each tick, so its shard does not depend on a fresh hash).
  for (const prometheus::MetricFamily& family : families) {
    const bool counter = family.type == prometheus::MetricType::Counter;
    for (const prometheus::ClientMetric& metric : family.metric) {
      label_refs_.clear();
      for (const auto& label : metric.label) {
        label_refs_.emplace_back(label.name, label.value);
      }
      remote_write::EncodeLabelsInto(family.name, label_refs_, key_);
      auto it = last_forwarded_.find(key_);
      if (it == last_forwarded_.end()) {
        LabelPairs pairs;
        pairs.reserve(metric.label.size());
        for (const auto& label : metric.label) {
          pairs.emplace_back(label.name, label.value);
        }
        std::shared_ptr<const LabelSet> set = remote_write::MakeLabelSet(
            family.name, std::move(pairs), remote_write::SeriesOrigin::kAggregator);
        it = last_forwarded_.emplace(key_, Forwarded{std::move(set), 0}).first;
      }
      it->second.forwarding = forwardings_;
      samples.push_back(
          {it->second.set, timestamp_ms, counter ? metric.counter.value : metric.gauge.value, now});
    }
  }
  // A series this forwarding lacks ends: a staleness marker, and it is forgotten.
  for (auto it = last_forwarded_.begin(); it != last_forwarded_.end();) {
    if (it->second.forwarding != forwardings_) {
      samples.push_back({it->second.set, timestamp_ms, remote_write::StaleNaN(), now});
      last_forwarded_.erase(it++);
    } else {
      ++it;
    }
  }
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
  auto sent_bytes = exposition::EmptyFamily(wire::kRemoteWriteSentBytesTotalFamily);
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
  for (auto* f : {&age, &requests, &retries, &dropped, &failed, &pending, &sent, &sent_bytes,
                  &token_reloads}) {
    if (!f->metric.empty()) {
      out.push_back(std::move(*f));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace fabricmon::aggregator
