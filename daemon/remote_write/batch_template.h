#pragma once

// A stream's batches compressed without compressing them again. An agent sends the same series in
// the same order every cycle; in a request, each sample is its series' labels (the same bytes every
// cycle) followed by its value and timestamp. So the labels are compressed once per layout, with
// back-references that reach only other labels (whose positions the layout fixes), and each later
// batch of that layout is written as those stored elements with its values and timestamps between
// them: a literal, or a back-reference to an earlier sample of the batch with the same value, the
// same low or high bytes of its value, or the same timestamp. What comes out is snappy's block
// format (CompressedSamples, encoder.h), as a queue keeps it, and decompresses to a WriteRequest
// with one TimeSeries per sample, as EncodedSamples writes it — except that a value of +0.0 is
// written out rather than left to its default, so that every sample of a layout has the same size
// (protobuf parsers read both).
//
// snappy spent ~70 ns per sample of ~110 bytes finding matches (perf, the aggregator at 1,000
// nodes × 1 Hz); this spends a copy of the stored elements (about a tenth of the bytes) and a few
// comparisons, and writes no more bytes (tests/bench/remote_write prints both).
//
// Thread-compatible: one per agent stream and endpoint, used by that stream's thread.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/remote_write/encoder.h"

namespace fabricmon::remote_write {

// One sample of a batch: its series' labels named by the caller's key (which labels a key stands
// for is the caller's to keep constant while the template's labels version is), and its sample.
struct KeyedSample {
  uint32_t labels_key = 0;
  int64_t timestamp_ms = 0;
  double value = 0;
};

class BatchTemplate {
 public:
  // Whether `samples` has the layout the template was built for: built at `labels_version`, the
  // same labels keys in the same order, each timestamp of the same encoded size.
  bool Matches(uint64_t labels_version, absl::Span<const KeyedSample> samples) const;

  // Builds the template for the layout of `samples`, whose labels (merged, as LabelMerger writes
  // them) are labels(labels_key). False, and the template empty, when the layout is too large
  // for it (over 4 GiB uncompressed).
  bool Build(uint64_t labels_version, absl::Span<const KeyedSample> samples,
             absl::FunctionRef<absl::string_view(uint32_t labels_key)> labels);

  // `samples` (Matches() is true) compressed into `out` (its elements replaced, its counts set;
  // enqueued_monotonic_nanos left to the caller).
  void Compress(absl::Span<const KeyedSample> samples, CompressedSamples& out) const;
  // Matches() and Compress() in one pass over the samples: false, and `out` unspecified, when
  // `samples` is not of the layout. A stream's steady batches are checked and compressed at once
  // rather than read twice (and hashed to find their template: KeyedBatchWriter).
  bool CompressIfMatches(uint64_t labels_version, absl::Span<const KeyedSample> samples,
                         CompressedSamples& out) const;

  // Forgets the layout: Matches() is false until the next Build().
  void Clear();

  // Samples in the layout (0: none built), and the labels key of its first.
  size_t size() const { return keys_.size(); }
  uint32_t first_key() const { return keys_.empty() ? 0 : keys_.front(); }

  // Heap bytes held.
  size_t MemoryBytes() const;

 private:
  // Compress(); with kCheck, confirming the layout sample by sample as Matches() does (false as
  // soon as it does not).
  template <bool kCheck>
  bool CompressLayout(absl::Span<const KeyedSample> samples, CompressedSamples& out) const;

  bool built_ = false;
  uint64_t labels_version_ = 0;
  // Per sample of the layout: its labels key and its timestamp's encoded size; where its value
  // lies in the uncompressed run; where its stored elements end in `elements_`.
  std::vector<uint32_t> keys_;
  std::vector<uint8_t> timestamp_sizes_;
  std::vector<uint32_t> value_offsets_;
  std::vector<uint32_t> elements_ends_;
  // A copy a sample's elements begin with (its lead) or end with (its trail) is kept here, not
  // in `elements_`: a lead can join the copy before it, and a trail can go on over the value.
  struct HeldCopy {
    uint16_t offset = 0;
    uint16_t length = 0;  // 0: none
    // A trail whose source ends where sample `source`'s elements end (its value follows).
    uint32_t source = std::numeric_limits<uint32_t>::max();
  };
  std::vector<HeldCopy> leads_;
  std::vector<HeldCopy> trails_;
  // Each sample's elements up to its value: the TimeSeries tag and length, its labels, the
  // Sample's tag and length and the value's tag.
  std::string elements_;
  size_t raw_size_ = 0;
};

}  // namespace fabricmon::remote_write
