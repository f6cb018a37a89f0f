#pragma once

// The remote-write request body: a prompb WriteRequest (proto/fabricmon/v1/remote_write.proto)
// serialized and compressed in snappy's block format (not its framed format), as remote-write
// 1.0 requires. Pure functions, thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/remote_write/label_set.h"
#include "fabricmon/v1/remote_write.pb.h"

namespace fabricmon::remote_write {

// One sample waiting in a queue.
struct PendingSample {
  std::shared_ptr<const LabelSet> series;  // never null
  int64_t timestamp_ms = 0;
  double value = 0;
  int64_t enqueued_monotonic_nanos = 0;  // for the oldest-pending-age metric
};

// Prometheus' staleness marker (a NaN with this bit pattern): the series ended at that sample.
// Sent when a finding clears, so that queries stop returning it at once instead of for the
// 5 minutes of lookback.
double StaleNaN();
bool IsStaleNaN(double value);

// The labels a series carries in a request: its own (LabelSet::encoded) with the external labels
// (sorted by name, as ValidateEndpoint leaves them) added where they sort, on every series that
// lacks a label of that name, and the aggregator labels (the `shard` name) on the aggregator's
// own series only (LabelSet::origin kAggregator), never on an agent's: a series' own label is
// never overridden. Immutable once built: thread-safe.
class LabelMerger {
 public:
  // Both sorted by name, with no name in common.
  explicit LabelMerger(const LabelPairs& external_labels, const LabelPairs& aggregator_labels = {});

  // Appends `set`'s merged labels to `out`, as TimeSeries.labels fields in name order.
  void Append(const LabelSet& set, std::string& out) const { Append(set.encoded, set.origin, out); }
  // The same for a series whose own labels are `own` (as LabelSet::encoded) from `origin`.
  void Append(std::string_view own, SeriesOrigin origin, std::string& out) const;

 private:
  struct ExternalLabel {
    std::string name;
    std::string encoded;  // as in LabelSet::encoded
  };
  std::vector<ExternalLabel> agent_external_;       // the external labels
  std::vector<ExternalLabel> aggregator_external_;  // those and the aggregator labels
};

// Samples already written as the WriteRequest they will be sent in: one `timeseries` field per
// sample (its merged labels, then one Sample), in the order added. A request is any run of these
// fields back to back, so a queue keeps them compressed in runs (CompressSamples) and a request
// body joins runs (JoinRequest): nothing about a queued sample is read or compressed again.
// One TimeSeries per sample is what Prometheus' own remote-write 1.0 sender writes; receivers
// append a series' samples in the order the request gives them.
//
// The bytes are protobuf's, exactly what it serializes for the same WriteRequest (encoder_test
// checks it), written by hand into one buffer.
class EncodedSamples {
 public:
  size_t size() const { return ends_.size(); }
  // The samples' fields back to back.
  absl::string_view bytes() const { return absl::string_view(buffer_.data(), used_); }
  // Where sample i begins in bytes() (it ends where sample i + 1 begins), so that a shard can
  // cut the run into request-sized parts.
  size_t begin(size_t i) const { return i == 0 ? 0 : ends_[i - 1]; }
  // Appends one sample of the series whose merged labels (LabelMerger) are `labels`.
  void Add(absl::string_view labels, int64_t timestamp_ms, double value);
  // Empties it, keeping its buffers.
  void Clear() {
    used_ = 0;
    ends_.clear();
  }

  int64_t enqueued_monotonic_nanos = 0;  // for the batch deadline and the oldest-pending age

 private:
  // bytes() is its first used_ bytes; the rest is room for the next samples, written in place
  // and never read. A sample is written straight into it, with no per-sample resize: the feed
  // keeps one EncodedSamples per ingest thread, so the room is grown (and zero-filled) only
  // while the largest batch grows.
  std::string buffer_;
  size_t used_ = 0;
  std::vector<size_t> ends_;  // ends_[i]: where sample i's field ends
};

// `samples` encoded with `labels` (LabelMerger) into `out` (appended), in the order given.
void EncodeSamples(absl::Span<const PendingSample> samples, const LabelMerger& labels,
                   EncodedSamples& out);

// Encoded samples as a queue keeps them: compressed, a seventh to a tenth of their size. snappy's
// block format is a length, then elements whose back-references never reach before the start of
// what was compressed with them; so runs compressed apart, their elements concatenated after one
// length of the whole, are one valid body (JoinRequest), and no request compresses anything.
// (snappy compresses in 64 KiB fragments anyway: runs of a few hundred samples lose nothing.)
struct CompressedSamples {
  std::string elements;  // snappy's block format without its length preamble
  size_t raw_size = 0;   // the uncompressed bytes they stand for
  size_t samples = 0;
  int64_t enqueued_monotonic_nanos = 0;
};

// Samples [begin, end) of `run`, compressed; `scratch` is the caller's buffer, kept between calls.
CompressedSamples CompressSamples(const EncodedSamples& run, size_t begin, size_t end,
                                  std::string& scratch);

// The request body for `runs`, in order, into `body`.
void JoinRequest(absl::Span<const CompressedSamples> runs, std::string& body);

// One request's body for `samples` (tests and tools).
std::string EncodeWriteRequest(absl::Span<const PendingSample> samples,
                               const LabelPairs& external_labels,
                               const LabelPairs& aggregator_labels = {});

// The inverse (tests, the benchmark's receiver): DataLoss when `body` is not snappy's block
// format or not a WriteRequest.
absl::StatusOr<v1::prompb::WriteRequest> DecodeWriteRequest(absl::string_view body);

}  // namespace fabricmon::remote_write
