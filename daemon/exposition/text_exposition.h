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
// fabricmon_counter_saturated{metric=...} = 1: their true value is "at least this", and a rate()
// over them reads 0 although traffic or errors continue.
std::vector<prometheus::MetricFamily> BuildFamilies(
    const std::vector<collectors::RecordedSample>& samples,
    const collectors::Labels& extra_labels = {});

// Prometheus text format 0.0.4.
std::string SerializeText(const std::vector<prometheus::MetricFamily>& families);

}  // namespace fabricmon::exposition
