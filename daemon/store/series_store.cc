#include "daemon/store/series_store.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::store {
namespace {

// Series::id. Starts at 1: 0 is a Series never declared.
std::atomic<uint64_t> next_series_id{1};

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) {
    return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return sum;
}

int64_t SaturatingSub(int64_t a, int64_t b) {
  int64_t difference;
  if (__builtin_sub_overflow(a, b, &difference)) {
    return b < 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return difference;
}

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

namespace {

bool SameDesc(const collectors::SeriesDesc& a, const collectors::SeriesDesc& b) {
  return a.fingerprint == b.fingerprint && a.type == b.type && a.unit == b.unit &&
         a.width_bits == b.width_bits && a.overflow == b.overflow && a.scale == b.scale &&
         a.collector == b.collector && a.name == b.name && a.help == b.help && a.labels == b.labels;
}

}  // namespace

SharedDesc::SharedDesc() {
  static const auto* const kEmpty = new std::shared_ptr<const collectors::SeriesDesc>(
      std::make_shared<const collectors::SeriesDesc>());
  desc_ = *kEmpty;
}

SharedDesc DescTable::Intern(const collectors::SeriesDesc& desc) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = by_fingerprint_.try_emplace(desc.fingerprint);
  if (!inserted) {
    if (std::shared_ptr<const collectors::SeriesDesc> held = it->second.lock()) {
      if (SameDesc(*held, desc)) {
        return SharedDesc(std::move(held));
      }
      // A fingerprint collision (or a forged one): this description is kept on its own, and
      // the one already shared stays as it is.
      return SharedDesc(std::make_shared<const collectors::SeriesDesc>(desc));
    }
  }
  auto made = std::make_shared<const collectors::SeriesDesc>(desc);
  it->second = made;
  if (by_fingerprint_.size() >= purge_at_) {
    for (auto entry = by_fingerprint_.begin(); entry != by_fingerprint_.end();) {
      if (entry->second.expired()) {
        by_fingerprint_.erase(entry++);
      } else {
        ++entry;
      }
    }
    purge_at_ = std::max<size_t>(1024, 2 * by_fingerprint_.size());
  }
  return SharedDesc(std::move(made));
}

std::optional<uint32_t> DescTable::NumberFamily(absl::string_view family) {
  absl::MutexLock lock(&mu_);
  if (auto it = family_numbers_.find(family); it != family_numbers_.end()) {
    return it->second;
  }
  if (family_numbers_.size() >= kMaxFamilyNumbers) {
    return std::nullopt;
  }
  const auto number = static_cast<uint32_t>(family_numbers_.size());
  family_numbers_.emplace(family, number);
  return number;
}

FamilyKey DescTable::KeyOfFamily(absl::string_view family) const {
  absl::MutexLock lock(&mu_);
  FamilyKey key;
  key.name = family;
  key.table = this;
  if (auto it = family_numbers_.find(family); it != family_numbers_.end()) {
    key.number = it->second;
  } else if (family_numbers_.size() < kMaxFamilyNumbers) {
    // Every name declared while the table had room was numbered, and it still has room.
    key.held_nowhere = true;
  }
  return key;
}

size_t DescTable::size() const {
  absl::MutexLock lock(&mu_);
  return by_fingerprint_.size();
}

Rate Series::CurrentRate() const {
  const StoredSample* latest = Latest();
  const StoredSample* previous = Previous();
  if (latest == nullptr || previous == nullptr) {
    Rate rate;
    rate.kind =
        desc->type == MetricType::kCounter ? Rate::Kind::kInsufficient : Rate::Kind::kNotCounter;
    return rate;
  }
  return CounterRate(desc, *previous, *latest);
}

NodeState::NodeState(std::string name, size_t samples_per_series, size_t max_series,
                     NewSeriesLimit new_series, int64_t series_retention_nanos,
                     std::shared_ptr<SeriesBudget> budget, std::shared_ptr<DescTable> descs)
    : name_(std::move(name)),
      samples_per_series_(samples_per_series < 2 ? 2 : samples_per_series),
      max_series_(max_series),
      retention_(series_retention_nanos),
      budget_(std::move(budget)),
      descs_(std::move(descs)),
      new_series_(new_series.per_second, new_series.burst),
      inventory_stamp_(NextInventoryStamp()) {}

NodeState::~NodeState() {
  if (budget_ != nullptr) {
    absl::MutexLock lock(&mu_);
    budget_->Release(series_.size() - free_slots_.size());
  }
}

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
                                               int64_t now_monotonic_nanos, PeerBudget* peer) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<uint32_t> index = DeclareLocked(desc, &now_monotonic_nanos, peer);
  if (!index.ok()) {
    return index.status();
  }
  return SlotRef{*index, series_[*index].generation};
}

absl::StatusOr<uint32_t> NodeState::DeclareLocked(const collectors::SeriesDesc& desc,
                                                  const int64_t* now_monotonic_nanos,
                                                  PeerBudget* peer) {
  const uint64_t identity = collectors::SeriesIdentity(desc);
  auto it = by_fingerprint_.find(identity);
  if (it != by_fingerprint_.end()) {
    Series& existing = series_[it->second];
    if (existing.desc->type != desc.type || existing.desc->width_bits != desc.width_bits ||
        existing.desc->scale != desc.scale || existing.desc->overflow != desc.overflow ||
        existing.desc->unit != desc.unit) {
      // Same name and labels, new semantics (agent upgrade): restart the series. Any of these
      // changes how a raw value reads (a counter that now saturates instead of wrapping: its
      // all-ones value is a pinned counter, not a value before a wrap), so no delta or rate is
      // taken across the change.
      existing.SetDesc(ShareDesc(desc));
      existing.count = 0;
      appends_until_steady_[it->second] = 0;
    }
    return it->second;
  }
  if (series_.size() - free_slots_.size() >= max_series_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node ", name_, " exceeds its cap of ", max_series_, " series"));
  }
  if (now_monotonic_nanos != nullptr) {
    // Both buckets must hold a token. The node's is checked first and taken last (its lock is
    // held throughout); the peer's is shared by streams of other nodes, so it is taken at once
    // (a series then refused by the store-wide cap costs its peer that token).
    if (new_series_.Available(*now_monotonic_nanos) < 1) {
      return absl::UnavailableError(absl::StrCat(
          "node ", name_, " declares new series faster than ", new_series_.rate_per_second(),
          " per second after a burst of ", new_series_.burst(), " (label churn?)"));
    }
    if (peer != nullptr) {
      absl::MutexLock peer_lock(&peer->mu);
      if (!peer->bucket.TryTake(*now_monotonic_nanos)) {
        return absl::UnavailableError(absl::StrCat(
            "peer ", peer->key, " declares new series faster than ", peer->bucket.rate_per_second(),
            " per second after a burst of ", peer->bucket.burst(),
            " over all the node names it streams as (label churn?)"));
      }
    }
  }
  if (budget_ != nullptr && !budget_->TryReserve()) {
    absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
        "the aggregator holds its cap of ", budget_->max(),
        " series over all nodes (max_series_total); node ", name_, " gets no new series"));
    status.SetPayload(kSeriesTotalLimitPayload, absl::Cord("1"));
    return status;
  }
  if (now_monotonic_nanos != nullptr) {
    new_series_.TryTake(*now_monotonic_nanos);
  }
  uint32_t index;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<uint32_t>(series_.size());
    series_.emplace_back();
    appends_until_steady_.push_back(0);
  }
  appends_until_steady_[index] = 0;
  Series& series = series_[index];
  series.SetDesc(ShareDesc(desc));
  series.id = next_series_id.fetch_add(1, std::memory_order_relaxed);
  series.ring.resize(samples_per_series_);
  series.retired = false;
  series.absent = false;
  series.last_stored_unix_nanos = last_seen_;
  by_fingerprint_.emplace(identity, index);
  auto [family, new_family] = by_family_.try_emplace(desc.name);
  family->second.indices.push_back(index);
  if (new_family && descs_ != nullptr) {
    family->second.number = descs_->NumberFamily(desc.name);
  }
  RepointFamilyLocked(family->second);
  // Collector numbers are never reused within a node: a node has a handful of collectors.
  auto [collector, added] =
      collector_ids_.try_emplace(desc.collector, static_cast<uint32_t>(by_collector_.size()));
  if (added) {
    by_collector_.emplace_back();
  }
  series.collector_id = collector->second;
  by_collector_[collector->second].push_back(index);
  return index;
}

SharedDesc NodeState::ShareDesc(const collectors::SeriesDesc& desc) const {
  if (descs_ == nullptr) {
    return SharedDesc(std::make_shared<const collectors::SeriesDesc>(desc));
  }
  return descs_->Intern(desc);
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
  if (forgotten_) {
    result.forgotten = true;
    return result;
  }
  last_seen_ = now_unix_nanos;
  if (sequence <= last_stored_sequence_) {
    ++counters_.duplicate_batches;
    return result;
  }
  // Before anything changes: refuse the batch whole if a counter is beyond its width (its next
  // value would read as a wrap, an absurd rate), and find the newest sample of its series.
  int64_t newest = std::numeric_limits<int64_t>::min();
  int64_t newest_received = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!present[i] || !Holds(slots[i])) {
      continue;
    }
    const Series& series = series_[slots[i].index];
    if (series.IsCounter() && values[i] > series.MaxRaw()) {
      ++counters_.values_out_of_range;
      result.out_of_range_position = static_cast<uint32_t>(i);
      result.out_of_range_width = series.width_bits;
      return result;
    }
    if (series.count > 0 && series.ring[series.head].timestamp_unix_nanos > newest) {
      newest = series.ring[series.head].timestamp_unix_nanos;
      newest_received = series.last_stored_unix_nanos;
    }
  }
  int64_t stored_at = SaturatingAdd(timestamp_unix_nanos, clock_offset_);
  if (stored_at > SaturatingAdd(now_unix_nanos, kClockAheadToleranceNanos)) {
    // The agent's clock is ahead of ours (stepped forward, or never set): land on our clock.
    stored_at = std::max(now_unix_nanos, newest);
    result.clock_step = true;
  } else if (stored_at < newest) {
    // The clock stepped back: go on after the newest sample by the time we saw pass since it.
    stored_at = SaturatingAdd(newest, std::max<int64_t>(1, now_unix_nanos - newest_received));
    result.clock_step = true;
    result.timestamps_backwards = 1;
    ++counters_.timestamps_backwards;
  }
  if (result.clock_step) {
    ++counters_.clock_steps;
    clock_offset_ = SaturatingSub(stored_at, timestamp_unix_nanos);
  }
  result.stored = true;
  if (last_stored_sequence_ != 0 && sequence > last_stored_sequence_ + 1) {
    counters_.sequence_gaps += sequence - last_stored_sequence_ - 1;
  }
  counters_.agent_dropped_batches += dropped_before;
  last_stored_sequence_ = sequence;
  ++counters_.batches;
  BatchCollectors collectors;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!present[i]) {
      if (Holds(slots[i])) {
        collectors.Note(series_[slots[i].index].collector_id, /*carried=*/false);
      }
      continue;
    }
    if (slots[i].index == SlotRef::kUnstored) {
      ++result.unstored_samples;
      continue;
    }
    if (!Holds(slots[i])) {
      // Retired since the writer declared it (and maybe reused by another series).
      result.retired_positions.push_back(static_cast<uint32_t>(i));
      ++counters_.retired_samples;
      continue;
    }
    Series& series = series_[slots[i].index];
    // A series named twice in one batch counts once (its last value is the one kept).
    collectors.Note(series.collector_id, /*carried=*/series.last_sequence != sequence);
    series.last_sequence = sequence;
    series.last_stored_unix_nanos = now_unix_nanos;
    series.absent = false;
    const uint64_t raw = values[i];
    uint32_t& until_steady = appends_until_steady_[slots[i].index];
    if (series.count > 0) {
      const StoredSample& last = series.ring[series.head];
      if (raw == last.raw) {
        until_steady -= until_steady > 0 ? 1 : 0;
      } else {
        until_steady = static_cast<uint32_t>(series.ring.size() - 1);
      }
      if (series.IsCounter() && raw < last.raw) {
        const bool wrapped = series.overflow == Overflow::kWraps && series.width_bits < 64 &&
                             last.raw > series.MaxRaw() / 2;
        if (!wrapped) {
          // Reset (driver reload, perfquery -R, reboot): the new value is a new baseline.
          ++series.resets;
          ++counters_.resets;
          series.count = 0;
          until_steady = 0;
        }
      }
    }
    series.head = series.count == 0 ? 0 : (series.head + 1) % series.ring.size();
    series.ring[series.head] = {stored_at, raw};
    if (series.count < series.ring.size()) {
      ++series.count;
    }
    series.saturated = series.IsSaturated(raw);
    ++counters_.samples;
    ++result.samples;
  }
  MarkAbsentLocked(sequence, collectors);
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
  absl::flat_hash_set<uint32_t> collectors;
  for (uint32_t index : stale) {
    const collectors::SeriesDesc& desc = series_[index].desc;
    by_fingerprint_.erase(collectors::SeriesIdentity(desc));
    families.insert(desc.name);
    collectors.insert(series_[index].collector_id);
  }
  auto drop_stale = [&](std::vector<uint32_t>& list) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](uint32_t index) { return stale.contains(index); }),
               list.end());
  };
  for (const std::string& family : families) {
    auto it = by_family_.find(family);
    if (it == by_family_.end()) {
      continue;
    }
    drop_stale(it->second.indices);
    RepointFamilyLocked(it->second);
    if (it->second.indices.empty()) {
      by_family_.erase(it);
    }
  }
  for (uint32_t collector : collectors) {
    drop_stale(by_collector_[collector]);  // an emptied list keeps its number
  }
  if (budget_ != nullptr) {
    budget_->Release(stale.size());
  }
  for (uint32_t index : stale) {
    Series& series = series_[index];
    const uint32_t generation = series.generation + 1;
    series = Series{};  // frees the description and the ring
    appends_until_steady_[index] = 0;
    series.retired = true;
    series.absent = true;
    series.generation = generation;
    free_slots_.push_back(index);
  }
  counters_.retired_series += stale.size();
  return stale.size();
}

uint64_t NodeState::SeriesRoom() const {
  uint64_t room;
  {
    absl::MutexLock lock(&mu_);
    const size_t held = series_.size() - free_slots_.size();
    room = held < max_series_ ? max_series_ - held : 0;
  }
  if (budget_ != nullptr && budget_->max() != 0) {
    const uint64_t held = budget_->held();
    room = std::min<uint64_t>(room, held < budget_->max() ? budget_->max() - held : 0);
  }
  return room;
}

void NodeState::MarkAbsentLocked(uint64_t sequence, const BatchCollectors& collectors) {
  if (collectors.overflowed) {
    return;  // not one collector's cycle; leave the others' presence as it was
  }
  for (const BatchCollectors::Tally& tally : collectors.tallies) {
    const std::vector<uint32_t>& indices = by_collector_[tally.collector];
    if (tally.carried == indices.size()) {
      continue;  // the batch carried every series of its collector: all marked present already
    }
    for (uint32_t index : indices) {
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

void NodeState::RepointFamilyLocked(const FamilyList& family) {
  if (!family.number.has_value()) {
    return;
  }
  if (*family.number >= by_family_number_.size()) {
    by_family_number_.resize(static_cast<size_t>(*family.number) + 1);
  }
  by_family_number_[*family.number] = family.indices;
}

void NodeState::VisitFamily(absl::string_view family,
                            const std::function<void(const Series&)>& visit) const {
  FamilyKey key;
  key.name = family;
  VisitFamily(key, visit);
}

absl::Span<const uint32_t> NodeState::FamilyIndicesLocked(const FamilyKey& family) const {
  if (family.table == descs_.get() && family.table != nullptr) {
    if (family.held_nowhere) {
      return {};
    }
    if (family.number.has_value()) {
      return *family.number < by_family_number_.size() ? by_family_number_[*family.number]
                                                       : absl::Span<const uint32_t>();
    }
  }
  // Another store's key, or a family past the store's numbered ones: by name.
  auto it = by_family_.find(family.name);
  return it != by_family_.end() ? absl::Span<const uint32_t>(it->second.indices)
                                : absl::Span<const uint32_t>();
}

void NodeState::VisitFamily(const FamilyKey& family,
                            const std::function<void(const Series&)>& visit,
                            bool only_changing) const {
  if (family.held_nowhere && family.table == descs_.get() && family.table != nullptr) {
    return;
  }
  absl::MutexLock lock(&mu_);
  for (uint32_t index : FamilyIndicesLocked(family)) {
    if (!only_changing || appends_until_steady_[index] != 0) {
      visit(series_[index]);
    }
  }
}

void NodeState::VisitFamilies(absl::Span<const FamilyKey> families,
                              const std::function<void(size_t, const Series&)>& visit,
                              bool only_changing) const {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < families.size(); ++i) {
    for (uint32_t index : FamilyIndicesLocked(families[i])) {
      if (!only_changing || appends_until_steady_[index] != 0) {
        visit(i, series_[index]);
      }
    }
  }
}

FamilyKey NodeState::KeyOfFamily(absl::string_view family) const {
  if (descs_ != nullptr) {
    return descs_->KeyOfFamily(family);
  }
  FamilyKey key;
  key.name = family;
  return key;
}

void NodeState::WithSeries(const std::function<void(const std::vector<Series>&)>& visit) const {
  absl::MutexLock lock(&mu_);
  visit(series_);
}

NodeState::Health NodeState::GetHealth() const {
  absl::MutexLock lock(&mu_);
  Health health;
  health.connected = connected_;
  health.last_seen_unix_nanos = last_seen_;
  health.series = series_.size() - free_slots_.size();
  health.counters = counters_;
  return health;
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
  summary.last_identity_conflict = last_identity_conflict_;
  summary.clock_offset_nanos = clock_offset_;
  summary.collectors = collectors_;
  if (with_inventory) {
    summary.inventory = inventory_;
  }
  return summary;
}

absl::StatusOr<SeriesStore::Attachment> SeriesStore::Attach(const v1::Hello& hello,
                                                            uint64_t stream_token,
                                                            std::function<void()> cancel,
                                                            int64_t now_unix_nanos,
                                                            const std::string& peer) {
  std::shared_ptr<NodeState> node;
  Attachment attachment;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(hello.node_name());
    if (it == nodes_.end()) {
      if (options_.max_nodes != 0 && nodes_.size() >= options_.max_nodes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the aggregator holds its cap of ", options_.max_nodes,
                         " nodes (max_nodes); node '", hello.node_name(), "' is not taken"));
      }
      it = nodes_
               .emplace(hello.node_name(), std::make_shared<NodeState>(
                                               hello.node_name(), options_.samples_per_series,
                                               options_.max_series_per_node, options_.new_series,
                                               options_.series_retention_nanos, budget_, descs_))
               .first;
    }
    node = it->second;
    if (options_.new_series_per_peer.has_value() && !peer.empty()) {
      std::shared_ptr<PeerBudget>& budget = peers_[peer];
      if (budget == nullptr) {
        budget = std::make_shared<PeerBudget>(peer, *options_.new_series_per_peer);
      }
      attachment.peer = budget;
    }
  }
  std::function<void()> cancel_previous;
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
    if (new_boot && !node->boot_id_.empty()) {
      // Forget replaced boots after a while (a restored VM snapshot resumes an old boot).
      while (!node->replaced_boots_.empty() &&
             now_unix_nanos - node->replaced_boots_.front().second >
                 options_.replaced_boot_memory_nanos) {
        node->replaced_boots_.pop_front();
      }
      const bool returning =
          std::any_of(node->replaced_boots_.begin(), node->replaced_boots_.end(),
                      [&](const auto& boot) { return boot.first == hello.boot_id(); });
      const int64_t silence = std::max<int64_t>(options_.boot_takeover_silence_nanos,
                                                int64_t{3} * node->min_interval_ms_ * 1000000);
      const bool owner_live = node->connected_ && now_unix_nanos - node->last_seen_ < silence;
      if (returning || owner_live) {
        ++node->counters_.identity_conflicts;
        node->last_identity_conflict_ = absl::StrCat(
            "boot ", node->boot_id_, " holds the node; boot ", hello.boot_id(), " refused");
        return absl::FailedPreconditionError(absl::StrCat(
            "identity conflict: node '", hello.node_name(), "' is held by boot ", node->boot_id_,
            returning ? ", which replaced boot " : " (streaming now), not boot ", hello.boot_id(),
            returning ? " (a boot never comes back)" : "",
            ": two machines use one identity (a copied certificate or --node_name)"));
      }
      node->replaced_boots_.emplace_back(node->boot_id_, now_unix_nanos);
      if (node->replaced_boots_.size() > 8) {
        node->replaced_boots_.pop_front();
      }
    }
    if (node->connected_) {
      cancel_previous = std::move(node->cancel_owner_);  // a half-open stream of this node
    }
    if (!same_instance) {
      // A restarted agent numbers its batches from 1 again.
      node->last_stored_sequence_ = 0;
    }
    if (hello.last_acked_sequence() > node->last_stored_sequence_) {
      // Acknowledged by another aggregator while the agent was failed over (or before this one
      // restarted): the agent will not send them again, so they are not a gap in the sequence.
      node->last_stored_sequence_ = hello.last_acked_sequence();
    }
    node->connected_ = true;
    node->stream_token_ = stream_token;
    node->cancel_owner_ = std::move(cancel);
    node->agent_instance_id_ = hello.agent_instance_id();
    node->boot_id_ = hello.boot_id();
    node->agent_version_ = hello.agent_version();
    node->min_interval_ms_ = hello.min_interval_ms();
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

size_t SeriesStore::ForgetSilent(int64_t now_unix_nanos, int64_t now_monotonic_nanos) {
  std::vector<std::shared_ptr<NodeState>> forgotten;  // freed outside the store's lock
  std::vector<std::function<void()>> cancels;
  {
    absl::MutexLock lock(&mu_);
    if (options_.node_retention_nanos > 0) {
      for (auto it = nodes_.begin(); it != nodes_.end();) {
        NodeState& node = *it->second;
        absl::MutexLock node_lock(&node.mu_);
        if (now_unix_nanos - node.last_seen_ <= options_.node_retention_nanos) {
          ++it;
          continue;
        }
        // A stream that still holds the node is half-open: end it; its writes are refused from
        // now on (not acknowledged), so its agent reconnects and replays them.
        if (node.connected_ && node.cancel_owner_) {
          cancels.push_back(std::move(node.cancel_owner_));
        }
        node.forgotten_ = true;
        node.connected_ = false;
        forgotten.push_back(std::move(it->second));
        it = nodes_.erase(it);
      }
    }
    // A peer's bucket says something only while it is not full (or a stream uses it).
    for (auto it = peers_.begin(); it != peers_.end();) {
      auto current = it++;
      if (current->second.use_count() > 1) {
        continue;
      }
      absl::MutexLock peer_lock(&current->second->mu);
      if (current->second->bucket.Available(now_monotonic_nanos) >=
          current->second->bucket.burst()) {
        peers_.erase(current);
      }
    }
  }
  for (const std::function<void()>& cancel : cancels) {
    cancel();
  }
  nodes_forgotten_.fetch_add(forgotten.size(), std::memory_order_relaxed);
  return forgotten.size();
}

void SeriesStore::MaybeForget(int64_t now_unix_nanos, int64_t now_monotonic_nanos) {
  const int64_t every =
      options_.node_retention_nanos > 0
          ? std::min<int64_t>(options_.node_retention_nanos / 4, int64_t{60} * 1000000000)
          : int64_t{60} * 1000000000;
  int64_t last = last_forget_sweep_.load(std::memory_order_relaxed);
  if (now_monotonic_nanos - last < every ||
      !last_forget_sweep_.compare_exchange_strong(last, now_monotonic_nanos)) {
    return;  // swept recently, or another thread sweeps now
  }
  ForgetSilent(now_unix_nanos, now_monotonic_nanos);
}

std::shared_ptr<NodeState> SeriesStore::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : it->second;
}

}  // namespace fabricmon::store
