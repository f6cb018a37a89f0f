#pragma once

// Turns samples into Prometheus metric families. Shared by `fabricmon-agent --once`, the agent's
// local /metrics and the aggregator, so all three expose the same names, types and labels.

#include <string>
#include <vector>

#include "collectors/core/recording_sink.h"
#include "prometheus/metric_family.h"

namespace fabricmon::exposition {

// Groups samples into families (sorted by name; series keep their input order). Counters become
// COUNTER, gauges and _info series GAUGE. `extra_labels` are prepended to every series (the
// aggregator adds node="..."). Saturating counters pinned at their maximum are also listed in
// fabricmon_series_saturated{metric=...} = 1: their true value is "at least this", and a rate()
// over them reads 0 although traffic or errors continue.
struct SampleRef {
  const collectors::SeriesDesc* series;  // borrowed; valid for the BuildFamilies call
  uint64_t raw_value;
};
std::vector<prometheus::MetricFamily> BuildFamilies(const std::vector<SampleRef>& samples,
                                                    const collectors::Labels& extra_labels = {});
// Convenience for recorded samples (--once, tests).
std::vector<prometheus::MetricFamily> BuildFamilies(
    const std::vector<collectors::RecordedSample>& samples,
    const collectors::Labels& extra_labels = {});

// Appends the families of one source (e.g. one node) to `families`, merging into families of the
// same name that are already there. `families` must be sorted by name; it stays sorted.
void MergeFamilies(std::vector<prometheus::MetricFamily> source,
                   std::vector<prometheus::MetricFamily>* families);

// Prometheus text format 0.0.4.
std::string SerializeText(const std::vector<prometheus::MetricFamily>& families);

}  // namespace fabricmon::exposition
