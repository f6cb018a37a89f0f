#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "collectors/core/sample.h"
#include "daemon/agent/cycle.h"
#include "daemon/agent/series_table.h"

namespace fabricmon::agent {

// A SampleSink that turns one collector run into a Cycle: interns series in the shared table and
// interns the resulting layout. One builder per collector; not thread-safe.
class CycleBuilder final : public collectors::SampleSink {
 public:
  // Keeps a reference to `table`, which must outlive the builder.
  explicit CycleBuilder(SeriesTable& table) : table_(table) {}

  void Add(const collectors::SeriesDesc& desc, uint64_t raw_value) override;
  // Completes the cycle (sequence is assigned by the replay buffer) and resets the builder.
  // Now and then (every kSweepNanos of cycle timestamps) it also lets go of the series it has not
  // produced for kReleaseAfterNanos (see TakeReleased).
  Cycle Finish(int64_t timestamp_unix_nanos, uint32_t collect_duration_us);
  // Ids of series this collector stopped producing, for SeriesTable::Release with the sequence
  // of the cycle just pushed. A series that comes back later is interned anew.
  std::vector<uint32_t> TakeReleased() { return std::move(released_); }
  static constexpr int64_t kReleaseAfterNanos = int64_t{600} * 1000000000;  // 10 minutes
  static constexpr int64_t kSweepNanos = int64_t{60} * 1000000000;
  // Distinct series left out because the aggregator would refuse their declaration
  // (wire::FromDeclaration: a name or label value too long, not UTF-8, a bad label name).
  // One such declaration would end the node's whole stream, again on every reconnect.
  size_t invalid_series() const { return invalid_series_; }

 private:
  // The id of `desc` through the map (validating and interning a series seen for the first time);
  // 0 when it is left out.
  uint32_t Lookup(const collectors::SeriesDesc& desc);

  SeriesTable& table_;
  // fingerprint → id, avoiding the table's lock; id 0: left out (invalid). Only consulted when
  // the positional cache below misses.
  absl::flat_hash_map<uint64_t, uint32_t> ids_;
  // A collector emits the same series in the same order cycle after cycle, so the previous
  // cycle's (fingerprint, id) sequence predicts each Add: one comparison per value instead of a
  // hash lookup. A miss (a series new, gone or re-declared) falls back to the map and re-aligns.
  struct Slot {
    uint64_t fingerprint;
    uint32_t id;
  };
  std::vector<Slot> expected_;  // the previous cycle's Adds
  size_t cursor_ = 0;           // next expected_ position
  std::vector<Slot> observed_;  // this cycle's Adds, the next cycle's expected_
  // By series id: cycle_ when last produced, for the release sweep.
  std::vector<uint64_t> last_cycle_;
  uint64_t cycle_ = 1;
  int64_t last_sweep_ = 0;
  // Cycle number at the last few sweeps' timestamps: a series not produced since the cycle of
  // kReleaseAfterNanos ago is let go (cycle numbers, not timestamps, per series: cheaper).
  std::deque<std::pair<int64_t, uint64_t>> sweep_marks_;
  std::vector<uint32_t> released_;
  size_t invalid_series_ = 0;
  std::vector<uint32_t> series_ids_;
  std::vector<uint64_t> values_;
  // Layouts of recent cycles, most recent first. A series set that flips between a few shapes
  // (a counter file that fails now and then) reuses their objects: the stream declares a layout
  // per object and keeps each one, and the aggregator ends a stream beyond 4096 layouts.
  static constexpr size_t kRecentLayouts = 8;
  std::deque<std::shared_ptr<const Layout>> recent_layouts_;
};

}  // namespace fabricmon::agent
