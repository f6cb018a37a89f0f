#include "collectors/core/sample.h"

#include "absl/hash/hash.h"
#include "collectors/core/family_spec.h"

namespace fabricmon::collectors {

void SeriesDesc::Finalize() {
  // Semantics are part of the identity on the agent: a series whose width or scale changes (a
  // counter proven wider than first inferred) is a new series there and is declared again.
  fingerprint = absl::HashOf(name, labels, static_cast<int>(type), width_bits,
                             static_cast<int>(overflow), static_cast<int>(unit), scale);
}

uint64_t SeriesIdentity(const SeriesDesc& desc) { return absl::HashOf(desc.name, desc.labels); }

SeriesDesc CounterSeries(absl::string_view collector, std::string name, std::string help, Unit unit,
                         uint8_t width_bits, Overflow overflow, double scale, Labels labels) {
  SeriesDesc desc;
  desc.collector = std::string(collector);
  desc.name = std::move(name);
  desc.help = std::move(help);
  desc.type = MetricType::kCounter;
  desc.unit = unit;
  desc.width_bits = width_bits;
  desc.overflow = overflow;
  desc.scale = scale;
  desc.labels = std::move(labels);
  desc.Finalize();
  return desc;
}

SeriesDesc GaugeSeries(absl::string_view collector, std::string name, std::string help, Unit unit,
                       double scale, Labels labels) {
  SeriesDesc desc;
  desc.collector = std::string(collector);
  desc.name = std::move(name);
  desc.help = std::move(help);
  desc.type = MetricType::kGauge;
  desc.unit = unit;
  desc.scale = scale;
  desc.labels = std::move(labels);
  desc.Finalize();
  return desc;
}

SeriesDesc InfoSeries(absl::string_view collector, std::string name, std::string help,
                      Labels labels) {
  SeriesDesc desc;
  desc.collector = std::string(collector);
  desc.name = std::move(name);
  desc.help = std::move(help);
  desc.type = MetricType::kInfo;
  desc.unit = Unit::kNone;
  desc.labels = std::move(labels);
  desc.Finalize();
  return desc;
}

SeriesDesc SeriesFromSpec(const FamilySpec& spec, absl::string_view collector, Labels labels,
                          uint8_t width_bits) {
  SeriesDesc desc;
  desc.collector = std::string(collector);
  desc.name = spec.name;
  desc.help = spec.help;
  desc.type = spec.type;
  desc.unit = spec.unit;
  desc.scale = spec.scale;
  if (spec.type == MetricType::kCounter) {
    desc.width_bits = width_bits != 0 ? width_bits : spec.width_bits;
    desc.overflow = spec.overflow;
  }
  desc.labels = std::move(labels);
  desc.Finalize();
  return desc;
}

void AppendFamilies(absl::string_view collector, const FamilySpec* specs, size_t count,
                    std::vector<SeriesDesc>* out) {
  for (size_t i = 0; i < count; ++i) {
    out->push_back(SeriesFromSpec(specs[i], collector, {}));
  }
}

absl::string_view LabelValue(const SeriesDesc& desc, absl::string_view name) {
  for (const auto& [label, value] : desc.labels) {
    if (label == name) {
      return value;
    }
  }
  return {};
}

}  // namespace fabricmon::collectors
