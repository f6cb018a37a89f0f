#pragma once

// Turns samples into Prometheus metric families. Shared by `fabricmon-agent --once`, the agent's
// local /metrics and the aggregator, so all three expose the same names, types and labels.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/core/family_spec.h"
#include "collectors/core/recording_sink.h"
#include "daemon/wire/aggregator_families.h"
#include "prometheus/metric_family.h"

namespace fabricmon::exposition {

// The family flagging saturated counters (see BuildFamilies); catalogued with the aggregator's.
inline constexpr const char* kSaturatedFamily = wire::kSeriesSaturatedFamily.name;
inline constexpr const char* kSaturatedFamilyHelp = wire::kSeriesSaturatedFamily.help;

// A family of `spec` with no series yet: how the aggregator's exporters start each family they
// write, so that its name, type and HELP come from the catalogue (daemon/wire/
// aggregator_families.h) and nowhere else. Counters become COUNTER, gauges and info GAUGE.
prometheus::MetricFamily EmptyFamily(const collectors::FamilySpec& spec);

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

// Appends the text format of `families` to `out`: byte for byte what prometheus-cpp 1.0.1's
// TextSerializer writes (every metric type, label escaping, "%.16g" values, timestamps), except
// that HELP is escaped as the text format requires (prometheus-cpp writes it raw), without
// iostreams; several times faster, which matters at a million series per scrape. SerializeText
// uses it.
void AppendText(const std::vector<prometheus::MetricFamily>& families, std::string* out);

// Pieces of the same format, for writers that skip MetricFamily (the aggregator's /metrics):
// "# HELP" (when `help` is not empty; backslash and newline escaped) and "# TYPE" lines of a
// family;
void AppendFamilyHeader(absl::string_view name, absl::string_view help, prometheus::MetricType type,
                        std::string* out);
// the sample lines of one family (what AppendText writes after its header);
void AppendMetricLines(const prometheus::MetricFamily& family, std::string* out);
// one sample line `name{extra_labels...,labels...} value` (no braces without labels);
void AppendSampleLine(absl::string_view name, const collectors::Labels& extra_labels,
                      const collectors::Labels& labels, double value, std::string* out);
// a value as prometheus-cpp writes it ("%.16g"; "Nan", "+Inf", "-Inf");
void AppendValue(double value, std::string* out);
// a label value with \\, \" and \n escaped;
void AppendLabelValue(absl::string_view value, std::string* out);
// a HELP text with \\ and \n escaped (the text format's rule for HELP).
void AppendHelp(absl::string_view help, std::string* out);

}  // namespace fabricmon::exposition
