#include "daemon/aggregator/series_store.h"

#include <algorithm>
#include <atomic>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::aggregator {
namespace {

uint64_t NextInventoryStamp() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

using collectors::MetricType;
using collectors::Overflow;

Rate CounterRate(const collectors::SeriesDesc& desc, const StoredSample& previous,
                 const StoredSample& latest) {
  Rate rate;
  if (desc.type != MetricType::kCounter) {
    rate.kind = Rate::Kind::kNotCounter;
    return rate;
  }
  if (desc.IsSaturated(latest.raw)) {
    rate.kind = Rate::Kind::kSaturated;
    return rate;
  }
  const int64_t dt = latest.timestamp_unix_nanos - previous.timestamp_unix_nanos;
  if (dt <= 0) {
    rate.kind = Rate::Kind::kInsufficient;
    return rate;
  }
  uint64_t delta;
  if (latest.raw >= previous.raw) {
    delta = latest.raw - previous.raw;
  } else if (desc.overflow == Overflow::kWraps && desc.width_bits < 64 &&
             previous.raw > desc.MaxRaw() / 2) {
    // A wrapping counter that was in its upper half came around: unwind modulo 2^width.
    delta = (desc.MaxRaw() - previous.raw) + latest.raw + 1;
  } else {
    rate.kind = Rate::Kind::kReset;
    return rate;
  }
  rate.kind = Rate::Kind::kOk;
  rate.per_second = static_cast<double>(delta) * desc.scale * 1e9 / static_cast<double>(dt);
  return rate;
}

Rate Series::CurrentRate() const {
  const StoredSample* latest = Latest();
  const StoredSample* previous = Previous();
  if (latest == nullptr || previous == nullptr) {
    Rate rate;
    rate.kind = desc.type == MetricType::kCounter ? Rate::Kind::kInsufficient
                                                  : Rate::Kind::kNotCounter;
    return rate;
  }
  return CounterRate(desc, *previous, *latest);
}

NodeState::NodeState(std::string name, size_t samples_per_series, size_t max_series,
                     NewSeriesLimit new_series, int64_t series_retention_nanos)
    : name_(std::move(name)),
      samples_per_series_(samples_per_series < 2 ? 2 : samples_per_series),
      max_series_(max_series),
      retention_(series_retention_nanos),
      new_series_(new_series.per_second, new_series.burst),
      inventory_stamp_(NextInventoryStamp()) {}

absl::StatusOr<uint32_t> NodeState::Declare(const collectors::SeriesDesc& desc) {
  absl::MutexLock lock(&mu_);
  return DeclareLocked(desc, nullptr);
}

absl::StatusOr<uint32_t> NodeState::Declare(const collectors::SeriesDesc& desc,
                                            int64_t now_monotonic_nanos) {
  absl::MutexLock lock(&mu_);
  return DeclareLocked(desc, &now_monotonic_nanos);
}

absl::StatusOr<SlotRef> NodeState::DeclareSlot(const collectors::SeriesDesc& desc,
                                               int64_t now_monotonic_nanos) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<uint32_t> index = DeclareLocked(desc, &now_monotonic_nanos);
  if (!index.ok()) {
    return index.status();
  }
  return SlotRef{*index, series_[*index].generation};
}

absl::StatusOr<uint32_t> NodeState::DeclareLocked(const collectors::SeriesDesc& desc,
                                                  const int64_t* now_monotonic_nanos) {
  const uint64_t identity = collectors::SeriesIdentity(desc);
  auto it = by_fingerprint_.find(identity);
  if (it != by_fingerprint_.end()) {
    Series& existing = series_[it->second];
    if (existing.desc.type != desc.type || existing.desc.width_bits != desc.width_bits ||
        existing.desc.scale != desc.scale) {
      // Same name and labels, new semantics (agent upgrade): restart the series.
      existing.desc = desc;
      existing.count = 0;
    }
    return it->second;
  }
  if (series_.size() - free_slots_.size() >= max_series_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node ", name_, " exceeds its cap of ", max_series_, " series"));
  }
  if (now_monotonic_nanos != nullptr && !new_series_.TryTake(*now_monotonic_nanos)) {
    return absl::UnavailableError(absl::StrCat(
        "node ", name_, " declares new series faster than ", new_series_.rate_per_second(),
        " per second after a burst of ", new_series_.burst(), " (label churn?)"));
  }
  uint32_t index;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<uint32_t>(series_.size());
    series_.emplace_back();
  }
  Series& series = series_[index];
  series.desc = desc;
  series.ring.resize(samples_per_series_);
  series.retired = false;
  series.absent = false;
  series.last_stored_unix_nanos = last_seen_;
  by_fingerprint_.emplace(identity, index);
  by_family_[desc.name].push_back(index);
  by_collector_[desc.collector].push_back(index);
  return index;
}

NodeState::AppendResult NodeState::AppendBatch(uint64_t sequence, uint64_t dropped_before,
                                               int64_t timestamp_unix_nanos,
                                               absl::Span<const uint32_t> indices,
                                               absl::Span<const uint64_t> values,
                                               const std::vector<bool>& present,
                                               int64_t now_unix_nanos) {
  absl::MutexLock lock(&mu_);
  std::vector<SlotRef> slots;
  slots.reserve(indices.size());
  for (uint32_t index : indices) {
    slots.push_back({index, index < series_.size() ? series_[index].generation : 0});
  }
  return AppendBatchLocked(sequence, dropped_before, timestamp_unix_nanos, slots, values, present,
                           now_unix_nanos);
}

NodeState::AppendResult NodeState::AppendBatchToSlots(uint64_t sequence, uint64_t dropped_before,
                                                      int64_t timestamp_unix_nanos,
                                                      absl::Span<const SlotRef> slots,
                                                      absl::Span<const uint64_t> values,
                                                      const std::vector<bool>& present,
                                                      int64_t now_unix_nanos) {
  absl::MutexLock lock(&mu_);
  return AppendBatchLocked(sequence, dropped_before, timestamp_unix_nanos, slots, values, present,
                           now_unix_nanos);
}

NodeState::AppendResult NodeState::AppendBatchLocked(uint64_t sequence, uint64_t dropped_before,
                                                     int64_t timestamp_unix_nanos,
                                                     absl::Span<const SlotRef> slots,
                                                     absl::Span<const uint64_t> values,
                                                     const std::vector<bool>& present,
                                                     int64_t now_unix_nanos) {
  AppendResult result;
  last_seen_ = now_unix_nanos;
  if (sequence <= last_stored_sequence_) {
    ++counters_.duplicate_batches;
    return result;
  }
  result.stored = true;
  if (last_stored_sequence_ != 0 && sequence > last_stored_sequence_ + 1) {
    counters_.sequence_gaps += sequence - last_stored_sequence_ - 1;
  }
  counters_.agent_dropped_batches += dropped_before;
  last_stored_sequence_ = sequence;
  ++counters_.batches;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!present[i]) {
      continue;
    }
    if (!Holds(slots[i])) {
      // Retired since the writer declared it (and maybe reused by another series).
      result.retired_positions.push_back(static_cast<uint32_t>(i));
      ++counters_.retired_samples;
      continue;
    }
    Series& series = series_[slots[i].index];
    series.last_sequence = sequence;
    series.last_stored_unix_nanos = now_unix_nanos;
    const uint64_t raw = values[i];
    if (series.count > 0) {
      const StoredSample& last = series.ring[series.head];
      if (timestamp_unix_nanos < last.timestamp_unix_nanos) {
        ++counters_.timestamps_backwards;
        ++result.timestamps_backwards;
        continue;
      }
      if (series.desc.type == MetricType::kCounter && raw < last.raw) {
        const bool wrapped = series.desc.overflow == Overflow::kWraps &&
                             series.desc.width_bits < 64 && last.raw > series.desc.MaxRaw() / 2;
        if (!wrapped) {
          // Reset (driver reload, perfquery -R, reboot): the new value is a new baseline.
          ++series.resets;
          ++counters_.resets;
          series.count = 0;
        }
      }
    }
    series.head = series.count == 0 ? 0 : (series.head + 1) % series.ring.size();
    series.ring[series.head] = {timestamp_unix_nanos, raw};
    if (series.count < series.ring.size()) {
      ++series.count;
    }
    series.saturated = series.desc.IsSaturated(raw);
    ++counters_.samples;
    ++result.samples;
  }
  MarkAbsentLocked(sequence, slots);
  // Sweep a few times per retention period; at least every minute keeps a retired series' stay
  // close to the retention.
  const int64_t sweep_every = std::min<int64_t>(retention_ / 4, 60'000'000'000);
  if (retention_ > 0 && now_unix_nanos - last_sweep_ >= sweep_every) {
    last_sweep_ = now_unix_nanos;
    result.retired_now = RetireStaleLocked(now_unix_nanos);
  }
  return result;
}

uint64_t NodeState::RetireStaleLocked(int64_t now_unix_nanos) {
  absl::flat_hash_set<uint32_t> stale;
  for (uint32_t index = 0; index < series_.size(); ++index) {
    Series& series = series_[index];
    if (series.retired) {
      continue;
    }
    if (series.last_stored_unix_nanos == 0) {
      series.last_stored_unix_nanos = now_unix_nanos;  // declared before the node's first batch
      continue;
    }
    if (now_unix_nanos - series.last_stored_unix_nanos > retention_) {
      stale.insert(index);
    }
  }
  if (stale.empty()) {
    return 0;
  }
  // Drop the stale indices from the lookup tables, each affected list filtered once.
  absl::flat_hash_set<std::string> families;
  absl::flat_hash_set<std::string> collectors;
  for (uint32_t index : stale) {
    const collectors::SeriesDesc& desc = series_[index].desc;
    by_fingerprint_.erase(collectors::SeriesIdentity(desc));
    families.insert(desc.name);
    collectors.insert(desc.collector);
  }
  auto filter = [&](absl::flat_hash_map<std::string, std::vector<uint32_t>>& lists,
                    const absl::flat_hash_set<std::string>& keys) {
    for (const std::string& key : keys) {
      auto it = lists.find(key);
      if (it == lists.end()) {
        continue;
      }
      std::vector<uint32_t>& list = it->second;
      list.erase(std::remove_if(list.begin(), list.end(),
                                [&](uint32_t index) { return stale.contains(index); }),
                 list.end());
      if (list.empty()) {
        lists.erase(it);
      }
    }
  };
  filter(by_family_, families);
  filter(by_collector_, collectors);
  for (uint32_t index : stale) {
    Series& series = series_[index];
    const uint32_t generation = series.generation + 1;
    series = Series{};  // frees the description and the ring
    series.retired = true;
    series.absent = true;
    series.generation = generation;
    free_slots_.push_back(index);
  }
  counters_.retired_series += stale.size();
  return stale.size();
}

void NodeState::MarkAbsentLocked(uint64_t sequence, absl::Span<const SlotRef> slots) {
  // The collectors of this batch (one, from an honest agent; a few at most).
  std::vector<const std::string*> collectors;
  for (const SlotRef& slot : slots) {
    if (!Holds(slot)) {
      continue;
    }
    const std::string& collector = series_[slot.index].desc.collector;
    if (!collectors.empty() && *collectors.back() == collector) {
      continue;  // the common case: the same collector as the previous series
    }
    if (std::none_of(collectors.begin(), collectors.end(),
                     [&](const std::string* seen) { return *seen == collector; })) {
      collectors.push_back(&collector);
      if (collectors.size() > 8) {
        return;  // not one collector's cycle; leave presence as it was
      }
    }
  }
  for (const std::string* collector : collectors) {
    auto it = by_collector_.find(*collector);
    if (it == by_collector_.end()) {
      continue;
    }
    for (uint32_t index : it->second) {
      series_[index].absent = series_[index].last_sequence != sequence;
    }
  }
}

void NodeState::SetInventory(v1::Inventory inventory) {
  absl::MutexLock lock(&mu_);
  inventory_ = std::move(inventory);
  inventory_stamp_ = NextInventoryStamp();
}

uint64_t NodeState::inventory_stamp() const {
  absl::MutexLock lock(&mu_);
  return inventory_stamp_;
}

void NodeState::ForEachSeries(const std::function<void(const Series&)>& visit) const {
  absl::MutexLock lock(&mu_);
  for (const Series& series : series_) {
    if (!series.retired) {
      visit(series);
    }
  }
}

void NodeState::VisitFamily(absl::string_view family,
                            const std::function<void(const Series&)>& visit) const {
  absl::MutexLock lock(&mu_);
  auto it = by_family_.find(family);
  if (it == by_family_.end()) {
    return;
  }
  for (uint32_t index : it->second) {
    visit(series_[index]);
  }
}

void NodeState::WithSeries(const std::function<void(const std::vector<Series>&)>& visit) const {
  absl::MutexLock lock(&mu_);
  visit(series_);
}

NodeState::Summary NodeState::GetSummary(bool with_inventory) const {
  absl::MutexLock lock(&mu_);
  Summary summary;
  summary.name = name_;
  summary.connected = connected_;
  summary.last_seen_unix_nanos = last_seen_;
  summary.agent_version = agent_version_;
  summary.boot_id = boot_id_;
  summary.agent_instance_id = agent_instance_id_;
  summary.last_stored_sequence = last_stored_sequence_;
  summary.series = series_.size() - free_slots_.size();
  summary.counters = counters_;
  summary.collectors = collectors_;
  if (with_inventory) {
    summary.inventory = inventory_;
  }
  return summary;
}

absl::StatusOr<SeriesStore::Attachment> SeriesStore::Attach(const v1::Hello& hello,
                                                            uint64_t stream_token,
                                                            std::function<void()> cancel,
                                                            int64_t now_unix_nanos) {
  std::shared_ptr<NodeState> node;
  {
    absl::MutexLock lock(&mu_);
    auto& slot = nodes_[hello.node_name()];
    if (slot == nullptr) {
      slot = std::make_shared<NodeState>(hello.node_name(), options_.samples_per_series,
                                         options_.max_series_per_node, options_.new_series,
                                         options_.series_retention_nanos);
    }
    node = slot;
  }
  std::function<void()> cancel_previous;
  Attachment attachment;
  {
    absl::MutexLock lock(&node->mu_);
    const bool same_instance = node->agent_instance_id_ == hello.agent_instance_id();
    const bool new_boot = !hello.boot_id().empty() && hello.boot_id() != node->boot_id_;
    if (node->connected_ && !same_instance && !new_boot) {
      return absl::AlreadyExistsError(absl::StrCat(
          "node name '", hello.node_name(),
          "' is already streaming from another agent on the same boot (two agents, or a "
          "duplicated --node_name)"));
    }
    if (node->connected_) {
      cancel_previous = std::move(node->cancel_owner_);  // a half-open stream of this node
    }
    if (!same_instance) {
      // A restarted agent numbers its batches from 1 again.
      node->last_stored_sequence_ = 0;
    }
    node->connected_ = true;
    node->stream_token_ = stream_token;
    node->cancel_owner_ = std::move(cancel);
    node->agent_instance_id_ = hello.agent_instance_id();
    node->boot_id_ = hello.boot_id();
    node->agent_version_ = hello.agent_version();
    node->inventory_ = hello.inventory();
    node->inventory_stamp_ = NextInventoryStamp();
    node->collectors_.assign(hello.collectors().begin(), hello.collectors().end());
    node->last_seen_ = now_unix_nanos;
    ++node->counters_.streams;
    attachment.node = node;
    attachment.last_stored_sequence = node->last_stored_sequence_;
  }
  if (cancel_previous) {
    cancel_previous();
  }
  return attachment;
}

void SeriesStore::Detach(NodeState& node, uint64_t stream_token, int64_t now_unix_nanos) {
  absl::MutexLock lock(&node.mu_);
  if (node.stream_token_ != stream_token) {
    return;  // a newer stream took over
  }
  node.connected_ = false;
  node.cancel_owner_ = nullptr;
  node.last_seen_ = now_unix_nanos;
}

std::vector<std::shared_ptr<NodeState>> SeriesStore::Nodes() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<NodeState>> nodes;
  nodes.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) {
    nodes.push_back(node);
  }
  return nodes;
}

std::shared_ptr<NodeState> SeriesStore::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : it->second;
}

}  // namespace fabricmon::aggregator
