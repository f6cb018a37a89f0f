#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"

namespace fabricmon::detectors {

// Identifies one series in detector state (SeriesCache::KeyOf): its slot, a dense index that
// state is kept by, and the slot's serial, unique in the process. A slot freed and given to
// another series, or to the same series after it was forgotten, has a new serial, so the state
// found there starts fresh, as a new series' does.
struct SeriesKey {
  uint32_t slot = 0;
  uint64_t serial = 0;
  bool operator==(const SeriesKey& other) const { return serial == other.serial; }
  bool operator!=(const SeriesKey& other) const { return serial != other.serial; }
  template <typename H>
  friend H AbslHashValue(H h, const SeriesKey& key) {
    return H::combine(std::move(h), key.serial);
  }
};

// Per-series detector state (cursors, streaks): a vector indexed by the key's slot, each entry
// remembering whose it is. Its size is bounded by the slots the cache holds at once; the cache
// frees the slots of series no longer looked up (retired series, processes, container veths),
// and their entries are overwritten when the slots are given again.
template <typename V>
class SeriesStates {
 public:
  V& operator[](const SeriesKey& key) {
    if (key.slot >= entries_.size()) {
      entries_.resize(static_cast<size_t>(key.slot) + 1);
    }
    Entry& entry = entries_[key.slot];
    if (entry.serial != key.serial) {
      entry.serial = key.serial;
      entry.value = V{};
    }
    return entry.value;
  }

 private:
  struct Entry {
    uint64_t serial = 0;
    V value{};
  };
  std::vector<Entry> entries_;
};

}  // namespace fabricmon::detectors
