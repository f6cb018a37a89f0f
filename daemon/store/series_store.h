#pragma once

// The aggregator's state: per node, its identity and inventory, its series and a small ring of
// samples per series. Rates are computed from two retained samples and their timestamps with the
// counter's width and overflow semantics: a wrap of a wrapping counter is unwound, a counter that
// goes down otherwise was reset (new baseline, counted, never a negative rate), and a saturating
// counter pinned at its maximum is flagged instead of read as a zero rate.
//
// Series retirement: a series that got no sample for the store's retention while its node kept
// sending is retired (memory freed, slot reused). Processes, container veths and ethtool keys
// come and go for as long as the aggregator runs; without this their series would pile up until
// the node hit its series cap. A slot carries a generation bumped at retirement, and writers
// address slots by (index, generation), so a value for a retired series can never land in the
// series that reused its slot: it is dropped, counted, and reported back so the stream can ask
// its agent to declare the series again.
//
// Bounded memory: the store holds at most max_nodes nodes and max_series_total series over all
// of them (a store-wide count reserved when a series is declared and released when it is retired
// or its node forgotten), and forgets a node silent for node_retention (its series freed).
//
// Clocks: a node's timestamps are its agent's wall clock, so they step when that clock is set.
// The store keeps each node's stored timeline monotonic and near its own clock instead of
// refusing samples: see NodeState::AppendBatchToSlots.
//
// Thread-safety: the store and every NodeState are thread-safe. Ingest (one stream per node)
// takes the node's own mutex; scrapes and detectors take it briefly per node.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "collectors/core/sample.h"
#include "daemon/common/rate_limiter.h"
#include "daemon/store/family_registry.h"
#include "daemon/store/settlement_ledger.h"
#include "fabricmon/v1/inventory.pb.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::store {

struct StoredSample {
  int64_t timestamp_unix_nanos = 0;
  uint64_t raw = 0;
};

// Outcome of a rate computation.
struct Rate {
  enum class Kind {
    kOk,            // per_second is valid
    kInsufficient,  // fewer than two samples since the last reset
    kSaturated,     // latest value pinned at the counter's maximum: true rate unknown (≥ 0)
    kReset,         // the latest sample started a new baseline
    kNotCounter,
  };
  Kind kind = Kind::kInsufficient;
  double per_second = 0;  // in exported units (raw × scale) per second
};

// Computes the rate between two raw samples of a counter. Exposed for tests and detectors.
Rate CounterRate(const collectors::SeriesDesc& desc, const StoredSample& previous,
                 const StoredSample& latest);

// A writer's handle on a series slot: valid while the slot's generation is unchanged.
struct SlotRef {
  // A stream's series the store refused to hold (a series cap was reached): its values are
  // dropped and counted (AppendResult::unstored_samples), and the rest of the batch is stored.
  static constexpr uint32_t kUnstored = 0xffffffffu;

  uint32_t index = 0;
  uint32_t generation = 0;
};

// A series' description, shared by every series of the store that has the same one: nodes of
// one kind declare the same names, labels, HELP and semantics, and a description (a few hundred
// bytes of strings) held once per node would be most of a series' memory. Immutable; reads as
// the description itself (`const SeriesDesc&`, or `->` for a field).
class SharedDesc {
 public:
  SharedDesc();  // the empty description (a retired slot's)
  explicit SharedDesc(std::shared_ptr<const collectors::SeriesDesc> desc)
      : desc_(std::move(desc)) {}
  operator const collectors::SeriesDesc&() const { return *desc_; }  // NOLINT: reads as one
  const collectors::SeriesDesc* operator->() const { return desc_.get(); }
  const collectors::SeriesDesc& get() const { return *desc_; }

 private:
  std::shared_ptr<const collectors::SeriesDesc> desc_;  // never null
};

// A metric family looked up once for a pass over many nodes (NodeState::KeyOfFamily).
class DescTable;
struct FamilyKey {
  absl::string_view name;
  const DescTable* table = nullptr;  // whose numbers: a node of another store looks up by name
  std::optional<uint32_t> number;    // the table's number for it, when it has one
  bool held_nowhere = false;         // no node of that store has declared it (nothing to visit)
};

// The store's shared descriptions, by fingerprint. A description is shared only when equal in
// every field (a fingerprint is a hash: two different descriptions that collide are each kept
// on their own). Entries are weak: a description lives while a series holds it. Thread-safe.
//
// It also numbers metric family names, so that a reader visiting one family on every node (the
// detectors, dozens of families a tick) finds each node's list by index instead of hashing and
// comparing the name on every node. The first kMaxFamilyNumbers names get a number, kept for the
// process's life (agents' names are untrusted: the table stops growing there, and families
// beyond it are looked up by name).
class DescTable {
 public:
  static constexpr size_t kMaxFamilyNumbers = 4096;

  SharedDesc Intern(const collectors::SeriesDesc& desc) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);  // entries, expired ones included

  // The family's number, given now if it has none and the table is not full.
  std::optional<uint32_t> NumberFamily(absl::string_view family) ABSL_LOCKS_EXCLUDED(mu_);
  FamilyKey KeyOfFamily(absl::string_view family) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::weak_ptr<const collectors::SeriesDesc>> by_fingerprint_
      ABSL_GUARDED_BY(mu_);
  size_t purge_at_ ABSL_GUARDED_BY(mu_) = 1024;  // drop expired entries beyond this size
  absl::flat_hash_map<std::string, uint32_t> family_numbers_ ABSL_GUARDED_BY(mu_);
};

// One series of one node. What every stored sample reads and writes comes first, so that a
// batch touches few cache lines per series (a node's series are cold by its next batch).
struct Series {
  Series() : retired(false), absent(false), saturated(false) {}

  uint32_t generation = 0;  // bumped at each retirement of this slot
  uint32_t head = 0;        // index of the latest sample
  uint32_t count = 0;       // samples held (≤ capacity)
  // Retired slots hold nothing (empty desc and ring, absent) until a declaration reuses them.
  bool retired : 1;
  // The last batch of this series' collector did not carry it (a process gone, a netdev or an
  // ethtool key vanished): its latest sample is history, not the present, and /metrics leaves it
  // out until it comes back. A batch is one collector's cycle, so what a batch of collector C
  // lacks of C's series is absent now.
  bool absent : 1;
  bool saturated : 1;
  // desc's type, width and overflow, copied in by SetDesc: appending a batch reads them for
  // every value, and here they share the cache line of `generation` (at 1 Hz from a thousand
  // nodes, each series' description is a cache miss of its own).
  collectors::MetricType type = collectors::MetricType::kGauge;
  collectors::Overflow overflow = collectors::Overflow::kNotApplicable;
  uint8_t width_bits = 0;
  uint32_t collector_id = 0;  // the node's number for desc.collector (NodeState's own)
  // A reader's memo, written under the node's lock by whoever visits the series (the detectors
  // keep the series' slot in their cache here: a hash lookup per series per tick missed the
  // CPU cache more often than not). `memo_epoch` says whose it is; 0: nobody's.
  mutable uint32_t memo_epoch = 0;
  uint64_t last_sequence = 0;  // the batch that last carried a value
  // Aggregator clock time of the last stored sample (or of the declaration): what retirement
  // measures, so an agent's clock jump cannot retire anything.
  int64_t last_stored_unix_nanos = 0;
  // Capacity fixed at creation (samples_per_series); the default 4 are held inline, without an
  // allocation of their own.
  absl::InlinedVector<StoredSample, 4> ring;
  // Counter resets seen. 32 bits: a counter reset every second would take 136 years to wrap,
  // and the bytes keep Series at 144 with memo and id added.
  uint32_t resets = 0;
  mutable uint32_t memo = 0;  // see memo_epoch
  SharedDesc desc;
  // Unique in the process for as long as it runs: a declaration that creates the series (or
  // reuses a retired slot) takes a new one. Readers that keep state per series (the detectors)
  // tell series apart by this number, not by node name and fingerprint, so a series declared
  // again starts fresh, as a new one does.
  uint64_t id = 0;

  void SetDesc(SharedDesc shared) {
    type = shared->type;
    overflow = shared->overflow;
    width_bits = shared->width_bits;
    desc = std::move(shared);
  }
  bool IsCounter() const { return type == collectors::MetricType::kCounter; }
  // desc->MaxRaw() and desc->IsSaturated(), from the copied fields.
  uint64_t MaxRaw() const { return collectors::MaxRawOfWidth(width_bits); }
  bool IsSaturated(uint64_t raw) const {
    return collectors::IsSaturatedValue(type, overflow, width_bits, raw);
  }

  const StoredSample* Latest() const { return count ? &ring[head] : nullptr; }
  const StoredSample* Previous() const {
    return count >= 2 ? &ring[(head + ring.size() - 1) % ring.size()] : nullptr;
  }
  // Rate between the two most recent samples.
  Rate CurrentRate() const;
};

struct NodeCounters {
  uint64_t samples = 0;
  uint64_t batches = 0;
  uint64_t duplicate_batches = 0;      // replayed batches already stored
  uint64_t sequence_gaps = 0;          // batches missing between stored ones
  uint64_t agent_dropped_batches = 0;  // of those, dropped by the agent's full buffer
  uint64_t resets = 0;
  uint64_t timestamps_backwards = 0;  // batches re-based: older than their series' latest
  uint64_t clock_steps = 0;           // batches re-based (clock stepped back or ahead)
  uint64_t values_out_of_range = 0;   // batches refused: a counter value beyond its width
  uint64_t identity_conflicts = 0;    // streams refused: another boot holds the node
  uint64_t streams = 0;               // streams accepted for this node
  uint64_t retired_series = 0;        // series retired after series_retention without samples
  uint64_t retired_samples = 0;       // values that arrived for a retired series (dropped)
};

// How fast a node may gain series it does not hold yet (AggregatorConfig's
// max_new_series_per_second and new_series_burst): a token bucket per node.
struct NewSeriesLimit {
  double per_second = 100;
  double burst = 50000;
};

// The store-wide series count (max_series_total), shared by the store and its nodes: a series
// takes one unit when it is created and gives it back when it is retired or its node is freed.
// Lock-free, so that declarations of many nodes do not serialize on the store.
class SeriesBudget {
 public:
  explicit SeriesBudget(uint64_t max) : max_(max) {}
  // Takes one unit unless `max` are held; 0 means no cap.
  bool TryReserve() {
    const uint64_t held = held_.fetch_add(1, std::memory_order_relaxed);
    if (max_ != 0 && held >= max_) {
      held_.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  void Release(uint64_t n) { held_.fetch_sub(n, std::memory_order_relaxed); }
  uint64_t held() const { return held_.load(std::memory_order_relaxed); }
  uint64_t max() const { return max_; }

 private:
  const uint64_t max_;
  std::atomic<uint64_t> held_{0};
};

// The new-series bucket of one peer (certificate identity, or the address of a plaintext peer),
// shared by every node that peer streams as, so that a peer cycling node names gets no fresh
// budget with each name.
struct PeerBudget {
  PeerBudget(std::string key, NewSeriesLimit limit)
      : key(std::move(key)), bucket(limit.per_second, limit.burst) {}
  const std::string key;
  absl::Mutex mu;
  TokenBucket bucket ABSL_GUARDED_BY(mu);
};

// A status of the store-wide series cap carries this payload, so that a caller can tell it
// from the node's own cap (both are ResourceExhausted).
inline constexpr absl::string_view kSeriesTotalLimitPayload = "fabricmon.series_total_limit";
inline bool IsSeriesTotalLimit(const absl::Status& status) {
  return status.GetPayload(kSeriesTotalLimitPayload).has_value();
}

// A batch stamped further ahead of the aggregator's clock than this is a clock step forward.
inline constexpr int64_t kClockAheadToleranceNanos = int64_t{10} * 1000000000;

class NodeState {
 public:
  // `series_retention_nanos` 0 keeps series forever. `budget` (nullable) is the store-wide
  // series count the node's series take from.
  NodeState(std::string name, size_t samples_per_series, size_t max_series,
            NewSeriesLimit new_series = {}, int64_t series_retention_nanos = 0,
            std::shared_ptr<SeriesBudget> budget = nullptr,
            std::shared_ptr<DescTable> descs = nullptr);
  ~NodeState();  // gives the node's series back to the budget

  const std::string& name() const { return name_; }
  // When the node's batches may be acknowledged (settlement_ledger.h).
  SettlementLedger& ledger() const { return *ledger_; }

  // Declares a series (idempotent by name+labels); returns its node-level index.
  // ResourceExhausted beyond the node's series cap. No rate limit (tests, tools).
  absl::StatusOr<uint32_t> Declare(const collectors::SeriesDesc& desc) ABSL_LOCKS_EXCLUDED(mu_);
  // The same under the node's new-series limit (what a stream uses): a series the node does not
  // hold yet also takes a token from the node's bucket at `now_monotonic_nanos`, and without one
  // it is refused with Unavailable (the node unchanged; the bucket refills with time). Known
  // series take none. The bucket belongs to the node, so a reconnect does not refill it.
  absl::StatusOr<uint32_t> Declare(const collectors::SeriesDesc& desc, int64_t now_monotonic_nanos)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same, returning the slot with its generation (what a stream keeps). A new series also
  // takes a token from `peer`'s bucket when given (Unavailable without one, naming the peer),
  // and one unit of the store-wide budget (ResourceExhausted with kSeriesTotalLimitPayload).
  absl::StatusOr<SlotRef> DeclareSlot(const collectors::SeriesDesc& desc,
                                      int64_t now_monotonic_nanos, PeerBudget* peer = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Stores one batch. `indices` are node-level series indices (from Declare), `values` and
  // `present` run parallel to them. A sequence already stored is a duplicate (not stored again).
  // Stored batches also run the retirement sweep now and then (a quarter of the retention, at
  // most every minute), measured on `now_unix_nanos`.
  //
  // Refused whole (nothing stored, the sequence not taken: the writer must not acknowledge it):
  // a counter value above 2^width - 1 of its declaration (out_of_range_position), or a node the
  // store forgot (forgotten).
  //
  // Clock steps: the batch is stored at its timestamp plus the node's offset (0 until a step).
  // A stored time more than kClockAheadToleranceNanos ahead of `now_unix_nanos` is a step
  // forward: the offset is moved so that the batch lands at `now_unix_nanos`. A stored time
  // older than the newest sample of a series in the batch is a step back: the offset is moved so
  // that the batch lands after that sample by the time the aggregator saw pass since it stored
  // it. Either way the step is counted and every value stored, and each series' timestamps stay
  // monotonic and measure the real interval, so rates stay right. Replayed batches are old but
  // in order, so they are no step.
  struct AppendResult {
    bool stored = false;
    bool forgotten = false;
    std::optional<uint32_t> out_of_range_position;
    uint8_t out_of_range_width = 0;  // the declared width of that series
    uint64_t samples = 0;
    uint64_t timestamps_backwards = 0;  // 1 when the batch was re-based after a step back
    bool clock_step = false;
    // Positions in the batch whose slot was retired since the writer declared it: the values
    // were dropped (NodeCounters::retired_samples); the writer should declare them again.
    std::vector<uint32_t> retired_positions;
    uint64_t retired_now = 0;       // series the sweep of this call retired
    uint64_t unstored_samples = 0;  // values of SlotRef::kUnstored slots, dropped
  };
  AppendResult AppendBatchToSlots(uint64_t sequence, uint64_t dropped_before,
                                  int64_t timestamp_unix_nanos, absl::Span<const SlotRef> slots,
                                  absl::Span<const uint64_t> values,
                                  const std::vector<bool>& present, int64_t now_unix_nanos)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same by plain index, at the slots' current generations (tests, tools).
  AppendResult AppendBatch(uint64_t sequence, uint64_t dropped_before, int64_t timestamp_unix_nanos,
                           absl::Span<const uint32_t> indices, absl::Span<const uint64_t> values,
                           const std::vector<bool>& present, int64_t now_unix_nanos)
      ABSL_LOCKS_EXCLUDED(mu_);

  // How many more series the node may hold now: the lesser of its own cap's room and the
  // store-wide budget's.
  uint64_t SeriesRoom() const ABSL_LOCKS_EXCLUDED(mu_);

  void SetInventory(v1::Inventory inventory) ABSL_LOCKS_EXCLUDED(mu_);
  // Changes each time the inventory is replaced (a hello, an inventory update), to a value no
  // node in this process has had: equal stamps mean the same inventory of the same node, so a
  // reader can keep what it derived from it (the detectors' topology).
  uint64_t inventory_stamp() const ABSL_LOCKS_EXCLUDED(mu_);

  // Visits series under the node's lock. The visitor must not call back into the node, and
  // pointers into the series are valid only during the call. Retired slots are skipped.
  void ForEachSeries(const std::function<void(const Series&)>& visit) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Visits the series of one metric family (by exact name), under the node's lock.
  void VisitFamily(absl::string_view family, const std::function<void(const Series&)>& visit) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same for a family looked up once (KeyOfFamily) for a pass over many nodes of one store.
  // With `only_changing`, only the series whose retained samples do not all read the same raw
  // value: the few that can show an increase or a change. A reader looking for those (error
  // counters, link downs, port state) skips the many that stand still without touching them,
  // where visiting a series is a cache miss of its own (appends_until_steady_ below).
  void VisitFamily(const FamilyKey& family, const std::function<void(const Series&)>& visit,
                   bool only_changing = false) const ABSL_LOCKS_EXCLUDED(mu_);
  // The same for several families under one taking of the node's lock, `visit(i, series)` for
  // the series of families[i], family by family: a reader of a handful of families on every
  // node (a detector's error counters) reads each node's lock and lists once instead of once
  // per family, where each is a cache miss of its own.
  void VisitFamilies(absl::Span<const FamilyKey> families,
                     const std::function<void(size_t, const Series&)>& visit,
                     bool only_changing = false) const ABSL_LOCKS_EXCLUDED(mu_);
  // `family` as this node's store numbers it (by name only for a node outside a store).
  FamilyKey KeyOfFamily(absl::string_view family) const;
  // Calls `visit` once with all series, under the node's lock (same rules as ForEachSeries;
  // retired slots are in the vector: they are absent and hold no sample).
  void WithSeries(const std::function<void(const std::vector<Series>&)>& visit) const
      ABSL_LOCKS_EXCLUDED(mu_);

  struct Summary {
    std::string name;
    bool connected = false;
    int64_t last_seen_unix_nanos = 0;
    std::string agent_version;
    std::string boot_id;
    uint64_t agent_instance_id = 0;
    uint64_t last_stored_sequence = 0;
    size_t series = 0;                   // live series (retired slots not counted)
    std::string last_identity_conflict;  // "boot X holds the node; boot Y refused", or empty
    int64_t clock_offset_nanos = 0;      // added to the agent's timestamps after clock steps
    NodeCounters counters;
    v1::Inventory inventory;
    std::vector<v1::CollectorStatus> collectors;
  };
  Summary GetSummary(bool with_inventory) const ABSL_LOCKS_EXCLUDED(mu_);

  // What is read of every node on every tick (node health families, the topology's retention):
  // a Summary's numbers without its strings and collector statuses, which cost a tick at 1,000
  // nodes more in copies than in reading.
  struct Health {
    bool connected = false;
    int64_t last_seen_unix_nanos = 0;
    size_t series = 0;  // live series (retired slots not counted)
    NodeCounters counters;
  };
  Health GetHealth() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class SeriesStore;
  absl::StatusOr<uint32_t> DeclareLocked(const collectors::SeriesDesc& desc,
                                         const int64_t* now_monotonic_nanos,
                                         PeerBudget* peer = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `desc` as the store shares it (its own copy without a store).
  SharedDesc ShareDesc(const collectors::SeriesDesc& desc) const;
  // The collectors whose series a batch names (one, from an honest agent; a few at most), each
  // with how many of its series the batch carried a value for. Filled while the batch is stored.
  struct BatchCollectors {
    static constexpr size_t kMax = 8;
    struct Tally {
      uint32_t collector;
      uint32_t carried;
    };
    absl::InlinedVector<Tally, kMax> tallies;
    bool overflowed = false;  // more than kMax collectors: not one collector's cycle

    void Note(uint32_t collector, bool carried) {
      if (tallies.empty() || tallies.back().collector != collector) {  // rare: a new collector
        auto it = std::find_if(tallies.begin(), tallies.end(),
                               [collector](const Tally& t) { return t.collector == collector; });
        if (it == tallies.end()) {
          if (tallies.size() == kMax) {
            overflowed = true;
            return;
          }
          tallies.push_back({collector, 0});
        } else {
          std::swap(*it, tallies.back());  // the next series is most likely this one's again
        }
      }
      tallies.back().carried += carried ? 1 : 0;
    }
  };
  // After batch `sequence` is stored, the series it carried already marked present: marks the
  // series of its collectors that it did not carry as absent.
  void MarkAbsentLocked(uint64_t sequence, const BatchCollectors& collectors)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  AppendResult AppendBatchLocked(uint64_t sequence, uint64_t dropped_before,
                                 int64_t timestamp_unix_nanos, absl::Span<const SlotRef> slots,
                                 absl::Span<const uint64_t> values,
                                 const std::vector<bool>& present, int64_t now_unix_nanos)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct FamilyList;
  // The slots of `family`'s series on this node (empty: none).
  absl::Span<const uint32_t> FamilyIndicesLocked(const FamilyKey& family) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Points by_family_number_'s entry for `family` at its list as it is now.
  void RepointFamilyLocked(const FamilyList& family) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retires the series without a sample for the retention; returns how many.
  uint64_t RetireStaleLocked(int64_t now_unix_nanos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Holds(SlotRef slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return slot.index < series_.size() && series_[slot.index].generation == slot.generation &&
           !series_[slot.index].retired;
  }

  const std::string name_;
  const size_t samples_per_series_;
  const size_t max_series_;
  const int64_t retention_;
  const std::shared_ptr<SeriesBudget> budget_;
  // Shared: outstanding settlements keep it beyond the node (its own lock, never taken under mu_).
  const std::shared_ptr<SettlementLedger> ledger_ = std::make_shared<SettlementLedger>();
  // descs_ to series_ are kept together: a visit of one family (VisitFamily, dozens per node per
  // detector tick) reads them and nothing else of the node, and the node is not in the CPU's
  // cache at the time.
  const std::shared_ptr<DescTable> descs_;  // the store's (null: descriptions not shared)
  mutable absl::Mutex mu_;
  // By the store's family number (DescTable): each family's series, a view of its list in
  // by_family_, re-pointed whenever that list changes (empty: none on this node).
  std::vector<absl::Span<const uint32_t>> by_family_number_ ABSL_GUARDED_BY(mu_);
  std::vector<Series> series_ ABSL_GUARDED_BY(mu_);
  // By slot, beside series_: how many more appends of its latest value a series needs before
  // every sample it retains reads that value (0: it holds one value, or none). Set to the ring's
  // capacity less one when a value differs from the one before, counted down by each equal one,
  // so it says in a dense array what scanning the ring would (VisitFamily's only_changing).
  std::vector<uint32_t> appends_until_steady_ ABSL_GUARDED_BY(mu_);
  TokenBucket new_series_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);  // retired slots, reused first
  int64_t last_sweep_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, uint32_t> by_fingerprint_ ABSL_GUARDED_BY(mu_);
  struct FamilyList {
    std::vector<uint32_t> indices;
    std::optional<uint32_t> number;  // the store's number for the family (none: looked up by name)
  };
  absl::flat_hash_map<std::string, FamilyList> by_family_ ABSL_GUARDED_BY(mu_);
  // Collectors by the number their series carry (Series::collector_id), and their series: a
  // batch marks absence by number, without comparing names.
  absl::flat_hash_map<std::string, uint32_t> collector_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<uint32_t>> by_collector_ ABSL_GUARDED_BY(mu_);
  v1::Inventory inventory_ ABSL_GUARDED_BY(mu_);
  uint64_t inventory_stamp_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CollectorStatus> collectors_ ABSL_GUARDED_BY(mu_);
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t stream_token_ ABSL_GUARDED_BY(mu_) = 0;  // which stream owns the node
  std::function<void()> cancel_owner_ ABSL_GUARDED_BY(mu_);
  uint64_t agent_instance_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::string boot_id_ ABSL_GUARDED_BY(mu_);
  std::string agent_version_ ABSL_GUARDED_BY(mu_);
  uint64_t last_stored_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_seen_ ABSL_GUARDED_BY(mu_) = 0;
  NodeCounters counters_ ABSL_GUARDED_BY(mu_);
  int64_t clock_offset_ ABSL_GUARDED_BY(mu_) = 0;      // see AppendBatchToSlots
  uint32_t min_interval_ms_ ABSL_GUARDED_BY(mu_) = 0;  // the owning agent's, from its hello
  // Boot ids that held the node before the current one, with when they were replaced: a boot
  // never comes back, so a hello from one is a clone (SeriesStore::Attach).
  std::deque<std::pair<std::string, int64_t>> replaced_boots_ ABSL_GUARDED_BY(mu_);
  std::string last_identity_conflict_ ABSL_GUARDED_BY(mu_);
  bool forgotten_ ABSL_GUARDED_BY(mu_) = false;  // removed from the store; writes refused
};

struct StoreOptions {
  size_t samples_per_series = 4;
  size_t max_series_per_node = 200000;
  NewSeriesLimit new_series;
  int64_t series_retention_nanos = 0;  // 0: keep series forever (AggregatorConfig default 900 s)
  size_t max_nodes = 0;                // 0: no cap (AggregatorConfig default 20000)
  uint64_t max_series_total = 0;       // 0: no cap (AggregatorConfig default 10 M)
  // A node disconnected (or connected but silent) this long is forgotten. 0: never.
  int64_t node_retention_nanos = 0;
  // The new-series bucket of each peer (PeerBudget); unset: no per-peer bucket.
  std::optional<NewSeriesLimit> new_series_per_peer;
  // A new boot id takes a node over from a connected stream only when that stream has been
  // silent this long (or 3 of its agent's intervals, whichever is longer): the old machine
  // rebooted and its stream is half-open. A stream that still sends is another machine using
  // the same identity (a clone).
  int64_t boot_takeover_silence_nanos = int64_t{30} * 1000000000;
  // How long a replaced boot id is remembered as one that must not come back.
  int64_t replaced_boot_memory_nanos = int64_t{3600} * 1000000000;
};

class SeriesStore {
 public:
  explicit SeriesStore(StoreOptions options)
      : options_(options),
        budget_(std::make_shared<SeriesBudget>(options.max_series_total)),
        descs_(std::make_shared<DescTable>()) {}

  // Binds a stream to the node named in `hello`. Returns the node and the last sequence stored
  // for this agent instance (0 when it is a new instance: a new sequence space).
  // AlreadyExists when another live stream of a different agent instance on the same boot holds
  // the name (two agents claiming one node). FailedPrecondition (an identity conflict, counted
  // on the node) when a stream of another boot holds the name and sent something within
  // boot_takeover_silence, or when the hello's boot id is one that this node already left (a
  // boot never comes back: two machines share one identity). ResourceExhausted when the name is
  // new and the store holds max_nodes. A stream of the same instance, or of a new boot after
  // the old stream fell silent, takes over: `cancel` of the previous owner is called.
  // `peer` names the peer for the per-peer new-series bucket (empty: none).
  struct Attachment {
    std::shared_ptr<NodeState> node;
    uint64_t last_stored_sequence = 0;
    std::shared_ptr<PeerBudget> peer;  // null without a per-peer limit or peer name
  };
  absl::StatusOr<Attachment> Attach(const v1::Hello& hello, uint64_t stream_token,
                                    std::function<void()> cancel, int64_t now_unix_nanos,
                                    const std::string& peer = "") ABSL_LOCKS_EXCLUDED(mu_);
  // The stream ended; the node is marked disconnected if this stream still owns it.
  void Detach(NodeState& node, uint64_t stream_token, int64_t now_unix_nanos);

  std::vector<std::shared_ptr<NodeState>> Nodes() const ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<NodeState> Find(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets the nodes silent for node_retention at `now_unix_nanos`: removed from the store (so
  // from /metrics and the Diagnostics service); their series are freed once the last holder (a
  // detector mid-tick, a stream) lets go. A connected but silent node's stream is cancelled.
  // Also drops idle peers' full new-series buckets (`now_monotonic_nanos`). Returns how many
  // nodes it forgot. MaybeForget does the same at most every min(retention / 4, 1 min).
  size_t ForgetSilent(int64_t now_unix_nanos, int64_t now_monotonic_nanos) ABSL_LOCKS_EXCLUDED(mu_);
  void MaybeForget(int64_t now_unix_nanos, int64_t now_monotonic_nanos) ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t nodes_forgotten() const { return nodes_forgotten_.load(std::memory_order_relaxed); }
  uint64_t series_held() const { return budget_->held(); }
  const StoreOptions& options() const { return options_; }

  // What every node's declarations are admitted by (the metric catalogue and the families pinned
  // across nodes). Thread-safe.
  FamilyRegistry& families() { return families_; }

 private:
  const StoreOptions options_;
  const std::shared_ptr<SeriesBudget> budget_;
  const std::shared_ptr<DescTable> descs_;
  std::atomic<uint64_t> nodes_forgotten_{0};
  std::atomic<int64_t> last_forget_sweep_{0};
  FamilyRegistry families_{wire::MetricCatalogue::Project()};
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<NodeState>> nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<PeerBudget>> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricmon::store
