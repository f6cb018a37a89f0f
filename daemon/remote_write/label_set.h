#pragma once

// A series' identity as remote write sends it: label pairs sorted by name in byte order, as
// receivers require, and a hash that picks the series' queue shard. `__name__` comes first for
// every label name in lower case ('_' sorts before 'a'), which all of fabricmon's are; an
// operator's external label starting with an upper-case letter sorts before it, as it would in
// Prometheus. Built once per series and shared by every sample queued for it (and by every
// endpoint), so a queued sample costs no label copies, and its labels are kept only encoded to
// protobuf, once, so a request copies bytes rather than building messages for every sample it
// carries.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace fabricmon::remote_write {

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

// Who a series belongs to, which decides the external labels it gets (LabelMerger). A node's
// series (its agent's counters and gauges, their saturation flags) must be one series whatever
// aggregator shard wrote it, so that a batch replayed to another shard after a failover is an
// exact duplicate the receiver deduplicates; the aggregator's own series (findings,
// fabricmon_aggregator_*, ...) are per shard and carry its `shard` label.
enum class SeriesOrigin : uint8_t { kAggregator, kAgent };

struct LabelSet {
  // The labels, sorted by name, names unique, no empty value, as the prompb.TimeSeries fields
  // that carry them (field 1, one Label message each), concatenated in that order: all a
  // request needs, and all that is kept (the pairs themselves would double a series' memory;
  // DecodeLabels gives them back). First, with `hash` and `origin`: what queueing and encoding a
  // sample read, so that they share the cache line std::make_shared puts the reference count in.
  std::string encoded;
  uint64_t hash = 0;  // of names and values: same labels, same hash, same shard
  SeriesOrigin origin = SeriesOrigin::kAggregator;
};

// Appends `name`=`value` to `out` as a prompb.TimeSeries.labels field (tag, length, Label),
// byte for byte what protobuf writes for it (an empty string field is left out, as proto3 does).
void AppendEncodedLabel(absl::string_view name, absl::string_view value, std::string& out);

// `name` becomes `__name__`; `labels` may come in any order. A label with an empty value is left
// out (Prometheus' rule: an empty label is no label). A name given twice keeps its first value
// (the caller's labels are unique already; this only makes the result well-formed).
std::shared_ptr<const LabelSet> MakeLabelSet(absl::string_view name, LabelPairs labels,
                                             SeriesOrigin origin = SeriesOrigin::kAggregator);

// The bytes MakeLabelSet(name, labels) keeps as `encoded`, into `out` (replacing what it held),
// from label pairs that refer to the caller's strings; `labels` is reordered. Allocates nothing
// once `out` and `labels` have grown (up to 16 labels): for looking a series up by its labels
// before deciding to build a set.
using LabelRefs = std::vector<std::pair<absl::string_view, absl::string_view>>;
void EncodeLabelsInto(absl::string_view name, LabelRefs& labels, std::string& out);

// The label pairs of `set`, in order, read back from its encoded bytes (tests, tools).
LabelPairs DecodeLabels(const LabelSet& set);

// Whether `name` is a valid Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*).
bool IsValidLabelName(absl::string_view name);

}  // namespace fabricmon::remote_write
