#pragma once

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "daemon/store/series_store.h"

namespace fabricmon::detectors {

// Identifies one series in detector state: the store's Series::id, unique in the process. A
// series retired and declared again has a new id, so its state starts fresh.
struct SeriesKey {
  uint64_t series_id = 0;
  bool operator==(const SeriesKey& other) const { return series_id == other.series_id; }
  template <typename H>
  friend H AbslHashValue(H h, const SeriesKey& key) {
    return H::combine(std::move(h), key.series_id);
  }
};

inline SeriesKey KeyOf(const store::Series& series) { return SeriesKey{series.id}; }

// Per-series detector state (cursors, streaks) that forgets series gone from the store: the
// aggregator retires series (processes, container veths), and state kept for them forever would
// grow for as long as the aggregator runs. An entry not looked up between two sweeps (every
// kSweepEveryTicks evaluations: ten minutes at the default tick) is dropped; a series that is
// still there is looked up every tick. A series that comes back starts fresh, as a new one does.
template <typename V>
class SeriesStates {
 public:
  static constexpr uint32_t kSweepEveryTicks = 600;

  V& operator[](const SeriesKey& key) {
    Entry& entry = entries_[key];
    entry.generation = generation_;
    return entry.value;
  }
  // Call once per evaluation, before the lookups.
  void StartTick() {
    if (++ticks_ < kSweepEveryTicks) {
      return;
    }
    ticks_ = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.generation != generation_) {
        entries_.erase(it++);
      } else {
        ++it;
      }
    }
    ++generation_;
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    V value{};
    uint64_t generation = 0;
  };
  absl::flat_hash_map<SeriesKey, Entry> entries_;
  uint64_t generation_ = 0;
  uint32_t ticks_ = 0;
};

}  // namespace fabricmon::detectors
