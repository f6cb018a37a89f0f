#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

namespace fabricmon::detectors {

// Identifies one series of one node in detector state (node name + series fingerprint).
struct SeriesKey {
  std::string node;
  uint64_t fingerprint = 0;
  bool operator==(const SeriesKey& other) const {
    return fingerprint == other.fingerprint && node == other.node;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SeriesKey& key) {
    return H::combine(std::move(h), key.node, key.fingerprint);
  }
};

// Per-series detector state (cursors, streaks) that forgets series gone from the store: the
// aggregator retires series (processes, container veths), and state kept for them forever would
// grow for as long as the aggregator runs. An entry not looked up between two sweeps (every
// kSweepEveryTicks evaluations: ten minutes at the default tick) is dropped; a series that is
// still there is looked up every tick. A series that comes back starts fresh, as a new one does.
//
// Stored per node, then per fingerprint: detectors visit a node's series one after another, so the
// node's table is found by comparing its name with the previous lookup's, and only the fingerprint
// is hashed per series (hashing the node name for every lookup cost ~9 % of a tick).
template <typename V>
class SeriesStates {
 public:
  static constexpr uint32_t kSweepEveryTicks = 600;

  V& operator[](const SeriesKey& key) {
    if (last_table_ == nullptr || key.node != last_node_) {
      std::unique_ptr<NodeTable>& table = tables_[key.node];
      if (table == nullptr) {
        table = std::make_unique<NodeTable>();
      }
      last_table_ = table.get();
      last_node_ = key.node;
    }
    Entry& entry = (*last_table_)[key.fingerprint];
    entry.generation = generation_;
    return entry.value;
  }
  // Call once per evaluation, before the lookups.
  void StartTick() {
    if (++ticks_ < kSweepEveryTicks) {
      return;
    }
    ticks_ = 0;
    last_table_ = nullptr;  // its table may go below
    for (auto node = tables_.begin(); node != tables_.end();) {
      NodeTable& table = *node->second;
      for (auto it = table.begin(); it != table.end();) {
        if (it->second.generation != generation_) {
          table.erase(it++);
        } else {
          ++it;
        }
      }
      if (table.empty()) {
        tables_.erase(node++);
      } else {
        ++node;
      }
    }
    ++generation_;
  }
  size_t size() const {
    size_t entries = 0;
    for (const auto& [node, table] : tables_) {
      entries += table->size();
    }
    return entries;
  }

 private:
  struct Entry {
    V value{};
    uint64_t generation = 0;
  };
  using NodeTable = absl::flat_hash_map<uint64_t, Entry>;  // by fingerprint
  // Tables behind pointers: last_table_ stays valid while tables_ grows.
  absl::flat_hash_map<std::string, std::unique_ptr<NodeTable>> tables_;
  NodeTable* last_table_ = nullptr;
  std::string last_node_;  // whose table last_table_ is
  uint64_t generation_ = 0;
  uint32_t ticks_ = 0;
};

}  // namespace fabricmon::detectors
