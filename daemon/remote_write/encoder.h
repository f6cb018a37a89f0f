#pragma once

// The remote-write request body: a prompb WriteRequest (proto/fabricmon/v1/remote_write.proto)
// serialized and compressed in snappy's block format (not its framed format), as remote-write
// 1.0 requires. Pure functions, thread-safe.

#include <cstdint>
#include <memory>
#include <string>
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

// Builds request bodies for `samples`: one TimeSeries per distinct series (first-seen order),
// its samples in the order given. The external labels (sorted by name, as ValidateEndpoint
// leaves them) are added to every series that lacks a label of that name, and the
// aggregator labels (the `shard` name) to the aggregator's own series only (LabelSet::origin
// kAggregator), never to an agent's: a series' own label is never overridden. The protobuf
// bytes are written by hand, exactly what protobuf would serialize for the same WriteRequest,
// straight into one reused buffer: each series' pre-encoded labels (LabelSet::encoded) are
// copied once, with the external labels spliced in where they sort; then snappy compresses them
// once.
//
// At 1 Hz every series of a request was last touched a second ago, so its label bytes are cold:
// reading them, not copying them, is what a request costs. The first pass (grouping the samples
// by series and sizing every part) prefetches each series' label bytes a few samples ahead, so
// their cache misses overlap rather than queue, and the second pass copies them from cache.
//
// Keeps its buffers between requests, so a shard's steady state allocates nothing. Not
// thread-safe: one per shard.
class RequestEncoder {
 public:
  // Both sorted by name, with no name in common.
  explicit RequestEncoder(const LabelPairs& external_labels,
                          const LabelPairs& aggregator_labels = {});

  // The HTTP body for `samples` (serialized, snappy block-compressed) into `body`.
  void Encode(absl::Span<const PendingSample> samples, std::string& body);
  // The uncompressed WriteRequest of the last Encode() (tests).
  absl::string_view raw() const { return absl::string_view(raw_.data(), raw_size_); }

 private:
  struct ExternalLabel {
    std::string name;
    std::string encoded;  // as in LabelSet::encoded
  };
  // Where an external label goes into a series' own encoded labels.
  struct Splice {
    size_t own_offset;  // before the own label that starts here (own.size(): after all)
    size_t external;    // index into the series' external list
  };
  // One TimeSeries of the request being built.
  struct Series {
    const LabelSet* set;
    const std::vector<ExternalLabel>* external;
    size_t splices_begin;  // its splices in splices_
    size_t splices_end;
    size_t labels_size;   // bytes of its merged labels
    size_t first_sample;  // index into the samples; next_ links the rest
    size_t last_sample;
    size_t samples_size;  // bytes of its encoded Sample fields
  };

  // Records where `external` goes into `set`'s own labels; returns the merged labels' size.
  size_t PlanSplices(const LabelSet& set, const std::vector<ExternalLabel>& external);
  char* WriteLabels(const Series& series, char* out) const;

  // Sorted by name: what an agent's series gets (the external labels), and what the aggregator's
  // own series get (those and the aggregator labels).
  std::vector<ExternalLabel> agent_external_;
  std::vector<ExternalLabel> aggregator_external_;

  // Series by their LabelSet: open addressing on the pointer (a request holds a few thousand
  // series; a general hash map cost a rehash chain per request once cleared).
  std::vector<std::pair<const LabelSet*, size_t>> table_;
  std::vector<Series> series_;
  std::vector<Splice> splices_;
  std::vector<size_t> next_;  // by sample: the next sample of the same series
  std::string raw_;           // the serialized request in its first raw_size_ bytes
  size_t raw_size_ = 0;
  std::string compressed_;  // snappy's output, before it is copied to the body
};

// One request's body (a RequestEncoder used once): tests and tools.
std::string EncodeWriteRequest(absl::Span<const PendingSample> samples,
                               const LabelPairs& external_labels,
                               const LabelPairs& aggregator_labels = {});

// The inverse (tests, the benchmark's receiver): DataLoss when `body` is not snappy's block
// format or not a WriteRequest.
absl::StatusOr<v1::prompb::WriteRequest> DecodeWriteRequest(absl::string_view body);

}  // namespace fabricmon::remote_write
