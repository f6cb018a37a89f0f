#pragma once

// The aggregator's metric catalogue and the rules for what an agent's declaration may put into
// /metrics. "Exposition is ours": HELP and TYPE of every family the project defines come from
// the catalogue, never from an agent; families outside it must pass the rules below, which are
// the Prometheus text format's and `promtool check metrics`' own, so that no agent can make a
// scrape fail or forge a line.
//
// The catalogue is built from the collectors' family tables (collectors/families.h), the same
// tables they emit from. Thread-safe after construction (read-only).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/core/sample.h"

namespace fabricmon::wire {

// Longest HELP text accepted from an agent (for families outside the catalogue).
inline constexpr size_t kMaxHelpBytes = 1024;

struct CatalogueFamily {
  std::string name;
  std::string help;
  collectors::MetricType type = collectors::MetricType::kGauge;
  collectors::Unit unit = collectors::Unit::kNone;
  double scale = 1.0;
  // Counters: bit (w - 1) set for every width w a collector declares the family with (hardware
  // decides some at run time: PortCounters vs PortCountersExtended).
  uint64_t widths = 0;
  collectors::Overflow overflow = collectors::Overflow::kNotApplicable;

  bool AllowsWidth(uint8_t width_bits) const {
    return width_bits >= 1 && width_bits <= 64 && (widths >> (width_bits - 1)) & 1;
  }
  // The widest width the family allows (0 for gauges and info).
  uint8_t WidestWidth() const {
    for (uint8_t w = 64; w >= 1; --w) {
      if (AllowsWidth(w)) {
        return w;
      }
    }
    return 0;
  }
  // A series of this family that the catalogue admits (no labels, no HELP): what tools and tests
  // start from to declare a family exactly, or to change one property of it.
  collectors::SeriesDesc ConformingSeries(std::string collector) const {
    collectors::SeriesDesc desc;
    desc.collector = std::move(collector);
    desc.name = name;
    desc.type = type;
    desc.unit = unit;
    desc.scale = scale;
    desc.overflow = overflow;
    desc.width_bits = WidestWidth();
    return desc;
  }
};

class MetricCatalogue {
 public:
  // From example series, one per family and width (collectors::AppendProjectFamilies). Series of
  // one name must agree on type, unit, scale and overflow (their widths are merged; the first
  // HELP is the family's); InvalidArgument naming the family and the difference otherwise, or
  // when a name is reserved (IsReservedFamily) or breaks CheckFamilyName.
  static absl::StatusOr<MetricCatalogue> FromSeries(
      const std::vector<collectors::SeriesDesc>& series);

  // The project's catalogue, built on first use from every collector's tables. Aborts if those
  // tables contradict each other (a build-time bug the catalogue test catches first).
  static const MetricCatalogue& Project();

  // The family named `name`, or null. The pointer lives as long as the catalogue.
  const CatalogueFamily* Find(absl::string_view name) const;
  // Sorted by name.
  const std::vector<CatalogueFamily>& families() const { return families_; }

 private:
  std::vector<CatalogueFamily> families_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// OK when `desc` has the family's type, unit, scale and (counters) one of its widths and its
// overflow; FailedPrecondition saying what differs otherwise.
absl::Status CheckAgainstCatalogue(const CatalogueFamily& family,
                                   const collectors::SeriesDesc& desc);

// Families the aggregator writes itself (node and aggregator health, findings, detectors,
// topology, saturated-counter flags, recording, remote write, jobs; aggregator_families.h): no
// agent may declare one, catalogued or not.
bool IsReservedFamily(absl::string_view name);

// A family name an agent may use outside the catalogue: "fabricmon_" then lower snake case
// ([a-z0-9_]), and what promtool's lint requires of the type: counters end in "_total", gauges
// and info do not (nor in _count, _sum, _bucket); no metric type word (_counter, _gauge, ...),
// no abbreviated unit (_ms, _s, _kb, ...), no non-base unit (minutes, bits, kilobytes, ...).
// InvalidArgument with the rule broken.
absl::Status CheckFamilyName(absl::string_view name, collectors::MetricType type);

// Label names an agent may use on any series: lower snake case [a-z_][a-z0-9_]*, no "__" prefix
// (reserved by Prometheus), and none of the names the aggregator adds or the text format gives
// a meaning to ("node", "metric", "le", "quantile"). InvalidArgument otherwise.
absl::Status CheckLabelName(absl::string_view name);

// Everything the aggregator checks of a declared series that needs no state (FamilyRegistry adds
// the pins): reserved family (PermissionDenied), label names and, outside the catalogue, family
// name and HELP (InvalidArgument), catalogue semantics (FailedPrecondition). The agent runs it
// once per series to leave out what the aggregator would refuse (a refusal ends its stream).
absl::Status CheckExposable(const MetricCatalogue& catalogue, const collectors::SeriesDesc& desc);

// HELP of a family outside the catalogue: not empty (promtool requires one), at most
// kMaxHelpBytes, valid UTF-8. Backslashes and newlines are allowed: the writer escapes them.
absl::Status CheckHelp(absl::string_view help);

}  // namespace fabricmon::wire
