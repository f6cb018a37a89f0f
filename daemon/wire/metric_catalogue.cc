#include "daemon/wire/metric_catalogue.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectors/families.h"
#include "daemon/common/logging.h"
#include "daemon/wire/series_codec.h"

namespace fabricmon::wire {
namespace {

using collectors::MetricType;
using collectors::Overflow;

absl::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kInfo:
      return "info";
  }
  return "unknown";
}

absl::string_view OverflowName(Overflow overflow) {
  switch (overflow) {
    case Overflow::kNotApplicable:
      return "none";
    case Overflow::kWraps:
      return "wraps";
    case Overflow::kSaturates:
      return "saturates";
  }
  return "unknown";
}

std::string WidthList(uint64_t widths) {
  std::string out;
  for (int w = 1; w <= 64; ++w) {
    if ((widths >> (w - 1)) & 1) {
      absl::StrAppend(&out, out.empty() ? "" : " or ", w);
    }
  }
  return out;
}

bool IsLowerSnake(absl::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
    return false;
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

// promtool check metrics (Prometheus 2.42, client_golang promlint): unit names and the SI
// prefixes it knows, the abbreviations it refuses, and the metric type words.
constexpr absl::string_view kBaseUnits[] = {"amperes", "bytes",  "celsius", "grams",   "joules",
                                            "kelvin",  "meters", "metres",  "seconds", "volts"};
constexpr absl::string_view kNonBaseUnits[] = {
    "minutes", "hours", "days",  "weeks", "kelvins",  "fahrenheit", "rankine",
    "inches",  "yards", "miles", "bits",  "calories", "pounds",     "ounces"};
constexpr absl::string_view kUnitPrefixes[] = {"pico", "nano",  "micro", "milli", "centi", "deci",
                                               "deca", "hecto", "kilo",  "kibi",  "mega",  "mibi",
                                               "giga", "gibi",  "tera",  "tebi",  "peta",  "pebi"};
constexpr absl::string_view kUnitAbbreviations[] = {"s",  "ms", "us", "ns", "sec", "b", "kb",
                                                    "mb", "gb", "tb", "pb", "m",   "h", "d"};
constexpr absl::string_view kTypeWords[] = {"counter", "gauge",     "summary",
                                            "untyped", "histogram", "gauge_histogram"};

bool IsUnitWord(absl::string_view word) {
  for (absl::string_view unit : kNonBaseUnits) {
    if (word == unit) {
      return true;
    }
  }
  return false;
}

bool IsPrefixedUnit(absl::string_view word) {
  for (absl::string_view prefix : kUnitPrefixes) {
    if (absl::StartsWith(word, prefix)) {
      absl::string_view rest = word.substr(prefix.size());
      for (absl::string_view unit : kBaseUnits) {
        if (rest == unit) {
          return true;
        }
      }
      for (absl::string_view unit : kNonBaseUnits) {
        if (rest == unit) {
          return true;
        }
      }
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<MetricCatalogue> MetricCatalogue::FromSeries(
    const std::vector<collectors::SeriesDesc>& series) {
  MetricCatalogue catalogue;
  for (const collectors::SeriesDesc& desc : series) {
    if (IsReservedFamily(desc.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(desc.name, ": the aggregator writes this family itself"));
    }
    absl::Status name_ok = CheckFamilyName(desc.name, desc.type);
    if (!name_ok.ok()) {
      return name_ok;
    }
    auto [it, inserted] = catalogue.index_.try_emplace(desc.name, catalogue.families_.size());
    if (inserted) {
      CatalogueFamily family;
      family.name = desc.name;
      family.help = desc.help;
      family.type = desc.type;
      family.unit = desc.unit;
      family.scale = desc.scale;
      family.overflow =
          desc.type == MetricType::kCounter ? desc.overflow : Overflow::kNotApplicable;
      catalogue.families_.push_back(std::move(family));
    }
    CatalogueFamily& family = catalogue.families_[it->second];
    if (desc.type == MetricType::kCounter) {
      if (desc.width_bits < 1 || desc.width_bits > 64) {
        return absl::InvalidArgumentError(absl::StrCat(desc.name, ": counter without a width"));
      }
      family.widths |= uint64_t{1} << (desc.width_bits - 1);
    }
    absl::Status agrees = CheckAgainstCatalogue(family, desc);
    if (!agrees.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("collectors disagree on a family: ", agrees.message()));
    }
  }
  // Sorted by name, for listings; the index follows.
  std::sort(catalogue.families_.begin(), catalogue.families_.end(),
            [](const CatalogueFamily& a, const CatalogueFamily& b) { return a.name < b.name; });
  for (size_t i = 0; i < catalogue.families_.size(); ++i) {
    catalogue.index_[catalogue.families_[i].name] = i;
  }
  return catalogue;
}

const MetricCatalogue& MetricCatalogue::Project() {
  static const MetricCatalogue* const catalogue = [] {
    std::vector<collectors::SeriesDesc> series;
    collectors::AppendProjectFamilies(&series);
    absl::StatusOr<MetricCatalogue> built = FromSeries(series);
    FABRICMON_CHECK(built.ok()) << "metric catalogue: " << built.status().message();
    return new MetricCatalogue(*std::move(built));
  }();
  return *catalogue;
}

const CatalogueFamily* MetricCatalogue::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &families_[it->second];
}

absl::Status CheckAgainstCatalogue(const CatalogueFamily& family,
                                   const collectors::SeriesDesc& desc) {
  if (desc.type != family.type) {
    return absl::FailedPreconditionError(absl::StrCat(family.name, " is a ", TypeName(family.type),
                                                      ", declared as a ", TypeName(desc.type)));
  }
  if (desc.unit != family.unit) {
    return absl::FailedPreconditionError(
        absl::StrCat(family.name, " has unit ", static_cast<int>(family.unit),
                     ", declared with unit ", static_cast<int>(desc.unit)));
  }
  if (desc.scale != family.scale) {
    return absl::FailedPreconditionError(absl::StrCat(family.name, " has scale ", family.scale,
                                                      ", declared with scale ", desc.scale));
  }
  if (family.type == MetricType::kCounter) {
    if (!family.AllowsWidth(desc.width_bits)) {
      return absl::FailedPreconditionError(
          absl::StrCat(family.name, " is ", WidthList(family.widths), " bits wide, declared ",
                       static_cast<int>(desc.width_bits), " bits wide"));
    }
    if (desc.overflow != family.overflow) {
      return absl::FailedPreconditionError(
          absl::StrCat(family.name, " ", OverflowName(family.overflow), ", declared as one that ",
                       OverflowName(desc.overflow)));
    }
  }
  return absl::OkStatus();
}

bool IsReservedFamily(absl::string_view name) {
  // The aggregator's exporter (metrics_exporter.cc), the detection engine (engine.cc), the
  // saturated-counter flags (text_exposition.h), the recording (recording_metrics.cc), remote
  // write (remote_write_feed.cc) and jobs (job_registry.cc): every family of
  // AggregatorFamilies() (aggregator_families.h).
  constexpr absl::string_view kReservedPrefixes[] = {
      "fabricmon_node_",      "fabricmon_aggregator_",   "fabricmon_finding",
      "fabricmon_detector_",  "fabricmon_topology_",     "fabricmon_series_saturated",
      "fabricmon_recording_", "fabricmon_remote_write_", "fabricmon_job",
  };
  for (absl::string_view prefix : kReservedPrefixes) {
    if (absl::StartsWith(name, prefix)) {
      return true;
    }
  }
  return false;
}

absl::Status CheckFamilyName(absl::string_view name, MetricType type) {
  if (!absl::StartsWith(name, "fabricmon_") || name.size() == 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("family ", name, ": only fabricmon_ families may be declared"));
  }
  if (!IsLowerSnake(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("family ", name, ": not lower snake case ([a-z0-9_])"));
  }
  const bool total = absl::EndsWith(name, "_total");
  if (type == MetricType::kCounter && !total) {
    return absl::InvalidArgumentError(
        absl::StrCat("family ", name, ": a counter's name must end in _total"));
  }
  if (type != MetricType::kCounter &&
      (total || absl::EndsWith(name, "_count") || absl::EndsWith(name, "_sum") ||
       absl::EndsWith(name, "_bucket"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "family ", name, ": a gauge's name must not end in _total, _count, _sum or _bucket"));
  }
  for (absl::string_view word : kTypeWords) {
    if (absl::StrContains(name, absl::StrCat("_", word, "_")) ||
        absl::EndsWith(name, absl::StrCat("_", word))) {
      return absl::InvalidArgumentError(
          absl::StrCat("family ", name, ": the name must not hold the type word ", word));
    }
  }
  for (absl::string_view abbreviation : kUnitAbbreviations) {
    if (absl::StrContains(name, absl::StrCat("_", abbreviation, "_")) ||
        absl::EndsWith(name, absl::StrCat("_", abbreviation))) {
      return absl::InvalidArgumentError(absl::StrCat("family ", name, ": abbreviated unit _",
                                                     abbreviation, " (use a base unit)"));
    }
  }
  for (absl::string_view word : absl::StrSplit(name, '_')) {
    if (IsUnitWord(word) || IsPrefixedUnit(word)) {
      return absl::InvalidArgumentError(
          absl::StrCat("family ", name, ": ", word, " is not a base unit"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLabelName(absl::string_view name) {
  if (!IsLowerSnake(name) || absl::StartsWith(name, "__")) {
    return absl::InvalidArgumentError(absl::StrCat("label name '", name.substr(0, 64),
                                                   "' is not lower snake case or starts with __"));
  }
  // `shard` is what an aggregator stamps on everything it remote-writes (an external label, which
  // by the protocol's rule never overrides a series' own): an agent may not name its shard.
  if (name == "node" || name == "metric" || name == "le" || name == "quantile" || name == "shard") {
    return absl::InvalidArgumentError(
        absl::StrCat("label name '", name, "' is reserved for the aggregator"));
  }
  return absl::OkStatus();
}

absl::Status CheckExposable(const MetricCatalogue& catalogue, const collectors::SeriesDesc& desc) {
  if (IsReservedFamily(desc.name)) {
    return absl::PermissionDeniedError(
        absl::StrCat(desc.name, " is written by the aggregator itself; agents may not declare it"));
  }
  for (const auto& [name, value] : desc.labels) {
    absl::Status label = CheckLabelName(name);
    if (!label.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(desc.name, ": ", label.message()));
    }
  }
  if (const CatalogueFamily* family = catalogue.Find(desc.name)) {
    absl::Status agrees = CheckAgainstCatalogue(*family, desc);
    if (!agrees.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("declaration contradicts the metric catalogue: ", agrees.message()));
    }
    return absl::OkStatus();
  }
  absl::Status name_ok = CheckFamilyName(desc.name, desc.type);
  if (!name_ok.ok()) {
    return name_ok;
  }
  absl::Status help_ok = CheckHelp(desc.help);
  if (!help_ok.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(desc.name, ": ", help_ok.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckHelp(absl::string_view help) {
  if (help.empty()) {
    return absl::InvalidArgumentError("HELP text missing");
  }
  if (help.size() > kMaxHelpBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("HELP text of ", help.size(), " bytes (at most ", kMaxHelpBytes, ")"));
  }
  if (!IsValidUtf8(help)) {
    return absl::InvalidArgumentError("HELP text is not valid UTF-8");
  }
  return absl::OkStatus();
}

}  // namespace fabricmon::wire
