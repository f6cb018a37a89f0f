#pragma once

// The remote-write request body: a prompb WriteRequest (proto/fabricmon/v1/remote_write.proto)
// serialized and compressed in snappy's block format (not its framed format), as remote-write
// 1.0 requires. Pure functions, thread-safe.

#include <cstdint>
#include <memory>
#include <string>

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

// Builds the request for `samples`: one TimeSeries per distinct series (first-seen order), its
// samples in the order given. `external_labels` (sorted by name, as ValidateEndpoint leaves
// them) are added to every series that lacks a label of that name: a series' own label is never
// overridden.
v1::prompb::WriteRequest BuildWriteRequest(absl::Span<const PendingSample> samples,
                                           const LabelPairs& external_labels);

// BuildWriteRequest, serialized and snappy-compressed: the HTTP body.
std::string EncodeWriteRequest(absl::Span<const PendingSample> samples,
                               const LabelPairs& external_labels);

// The inverse (tests, the benchmark's receiver): DataLoss when `body` is not snappy's block
// format or not a WriteRequest.
absl::StatusOr<v1::prompb::WriteRequest> DecodeWriteRequest(absl::string_view body);

}  // namespace fabricmon::remote_write
