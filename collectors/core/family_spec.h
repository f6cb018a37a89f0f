#pragma once

// A metric family as a collector defines it: name, type, unit, counter width and overflow, scale
// and HELP. Collectors build their series from these specs (SeriesFromSpec) and list them in
// their `<collector>_families.h`, so the aggregator's metric catalogue (daemon/wire/
// metric_catalogue.h) is built from the very tables the collectors emit from. Pure data:
// constexpr, no I/O.

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/core/sample.h"

namespace fabricmon::collectors {

struct FamilySpec {
  const char* name;
  const char* help;
  MetricType type = MetricType::kGauge;
  Unit unit = Unit::kNone;
  double scale = 1.0;
  uint8_t width_bits = 0;  // counters only
  Overflow overflow = Overflow::kNotApplicable;
};

constexpr FamilySpec CounterFamily(const char* name, const char* help, Unit unit,
                                   uint8_t width_bits, Overflow overflow, double scale = 1.0) {
  return FamilySpec{name, help, MetricType::kCounter, unit, scale, width_bits, overflow};
}
constexpr FamilySpec GaugeFamily(const char* name, const char* help, Unit unit,
                                 double scale = 1.0) {
  return FamilySpec{name, help, MetricType::kGauge, unit, scale, 0, Overflow::kNotApplicable};
}
constexpr FamilySpec InfoFamily(const char* name, const char* help) {
  return FamilySpec{name, help, MetricType::kInfo, Unit::kNone, 1.0, 0, Overflow::kNotApplicable};
}

// A finalized series of `spec` with `labels`. `width_bits` overrides the spec's counter width
// where the hardware decides it at run time (0: the spec's).
SeriesDesc SeriesFromSpec(const FamilySpec& spec, absl::string_view collector, Labels labels,
                          uint8_t width_bits = 0);

// Appends one label-less example series per spec to `out` (what the catalogue is built from).
void AppendFamilies(absl::string_view collector, const FamilySpec* specs, size_t count,
                    std::vector<SeriesDesc>* out);
template <size_t N>
void AppendFamilies(absl::string_view collector, const FamilySpec (&specs)[N],
                    std::vector<SeriesDesc>* out) {
  AppendFamilies(collector, specs, N, out);
}

}  // namespace fabricmon::collectors
