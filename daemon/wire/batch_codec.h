#pragma once

// Both ends of one stream's sample encoding (fabricmon.v1 SampleBatch): series declared once per
// stream, layouts (ordered id lists) declared once, then per batch only zigzag varint deltas
// against the previous value of the same series on the same stream. Either side resets with the
// stream, so replayed cycles are re-encoded from absolute values on the new stream.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectors/core/sample.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::wire {

// The most batches one SampleBatches message may hold (HelloAck.max_batches_per_message): an
// agent's coalescing window (1 s at most) over its fastest collector's interval, with room for a
// 10 ms one; a bound, so that no message makes a stream's read handle batches without end.
inline constexpr uint32_t kMaxBatchesPerMessage = 128;

// Looks up a series description by agent-wide id (the agent's SeriesTable).
class SeriesLookup {
 public:
  virtual ~SeriesLookup() = default;
  virtual const collectors::SeriesDesc* Find(uint32_t id) const = 0;
};

// Agent side. Not thread-safe; one per stream.
class StreamEncoder {
 public:
  // Keeps a reference to `series`, which must outlive the encoder.
  explicit StreamEncoder(const SeriesLookup& series) : series_(series) {}

  // Appends to `out` what the peer needs to decode this batch: declarations of series not yet
  // declared on this stream, the layout if new, then the batch. `layout` identifies the ordered
  // ids (the same shared object for consecutive cycles of a collector).
  void Encode(uint64_t sequence, int64_t timestamp_unix_nanos, uint32_t collect_duration_us,
              uint64_t dropped_before, const std::shared_ptr<const std::vector<uint32_t>>& layout,
              absl::Span<const uint64_t> values, std::vector<v1::AgentMessage>* out);
  // The peer asked for these ids' declarations again (Redeclare): the next batch carrying each
  // declares it anew. Delta state is kept (the peer's decoder kept it too).
  void Forget(absl::Span<const uint32_t> ids);

  // Layouts held on the stream. Churn (processes, veths, ethtool keys coming and going) makes a
  // new layout per change for as long as the stream lives, and the decoder ends a stream past
  // its layout bounds; so the encoder keeps at most kMaxLayouts layouts, naming at most
  // kMinLayoutEntryBudget + kLayoutEntriesPerSeries ids per declared series in all (half the
  // decoder's allowance), and makes room by redefining its least recently used layouts: their
  // ids are reused, and those not reused at once are redefined empty so the decoder frees them.
  // An evicted layout a later (replayed) cycle uses again is simply sent again.
  static constexpr size_t kMaxLayouts = 256;
  static constexpr size_t kLayoutEntriesPerSeries = 8;
  size_t layouts_held() const { return layout_ids_.size(); }
  size_t layout_entries() const { return layout_entries_; }

 private:
  // The wire id of `layout`, sending it (and the redefinitions that make room) when new.
  uint32_t LayoutId(const std::shared_ptr<const std::vector<uint32_t>>& layout,
                    std::vector<v1::AgentMessage>* out);

  const SeriesLookup& series_;
  std::vector<bool> declared_;        // by series id
  size_t declared_count_ = 0;         // ids declared now (as the decoder counts them)
  std::vector<uint64_t> last_value_;  // by series id
  struct HeldLayout {
    std::shared_ptr<const std::vector<uint32_t>> layout;  // null: the id is free
    uint64_t last_used = 0;
  };
  absl::flat_hash_map<const std::vector<uint32_t>*, uint32_t> layout_ids_;  // held, by object
  std::vector<HeldLayout> held_;  // by wire id - 1; keeps the keys alive
  std::vector<uint32_t> free_layout_ids_;
  size_t layout_entries_ = 0;
  uint64_t use_clock_ = 0;
};

// One decoded batch: values in layout order with their stream-scoped series ids.
struct DecodedBatch {
  uint64_t sequence = 0;
  int64_t timestamp_unix_nanos = 0;
  uint64_t dropped_before = 0;
  uint32_t collect_duration_us = 0;
  const std::vector<uint32_t>* series_ids = nullptr;  // valid until the decoder changes
  std::vector<uint64_t> values;
  std::vector<bool> present;  // same length as values
};

// Aggregator side. Not thread-safe; one per stream. Every error is InvalidArgument naming the
// offending id (ResourceExhausted for the layout entry budget), and leaves the decoder unchanged.
class StreamDecoder {
 public:
  // Registers a declared id (ids must be declared before layouts use them).
  absl::Status Declare(uint32_t id);
  bool IsDeclared(uint32_t id) const { return id < declared_.size() && declared_[id]; }
  absl::Status AddLayout(const v1::Layout& layout);
  bool HasLayout(uint32_t id) const { return layouts_.contains(id); }
  absl::Status Decode(const v1::SampleBatch& batch, DecodedBatch* out);
  size_t declared_count() const { return declared_count_; }

  // Upper bound on ids, so a hostile agent cannot make us allocate a huge table: tables are
  // dense by id (here 8 bytes per id, in AgentStream 4 more), so one declaration of id N costs
  // 12·N bytes: 50 MiB at this bound (it was 1 << 24: 200 MiB from a 50-byte message). Honest
  // ids stay far below: the agent numbers the series it has seen since it started, and the
  // aggregator holds at most max_series_per_node (200 000) of a node.
  static constexpr uint32_t kMaxSeriesId = 1u << 22;
  static constexpr size_t kMaxLayouts = 4096;
  // Entries held in all layouts of one stream together (each entry costs 8 bytes here and in
  // AgentStream, against 1 byte on the wire): at most this many plus 16 per declared series.
  // Honest agents keep a few layouts per collector (CycleBuilder::kRecentLayouts shapes), each
  // naming a series at most once. Without a bound, 4096 layouts of 4 MiB would hold ~128 GiB.
  static constexpr size_t kMinLayoutEntryBudget = 1 << 16;
  static constexpr size_t kLayoutEntriesPerSeries = 16;

 private:
  std::vector<bool> declared_;
  size_t declared_count_ = 0;
  std::vector<uint64_t> last_value_;
  absl::flat_hash_map<uint32_t, std::vector<uint32_t>> layouts_;
  size_t layout_entries_ = 0;  // sum of the sizes of layouts_
};

}  // namespace fabricmon::wire
