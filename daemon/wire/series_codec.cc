#include "daemon/wire/series_codec.h"

#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::wire {
namespace {

// Largest accepted SeriesDeclaration.scale (raw 2^64 × 1e12 is still a finite double).
constexpr double kMaxScale = 1e12;

using collectors::MetricType;
using collectors::Overflow;
using collectors::Unit;

bool IsNameChar(char c, bool first, bool allow_colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
    return true;
  }
  if (allow_colon && c == ':') {
    return true;
  }
  return !first && c >= '0' && c <= '9';
}

}  // namespace

// Well-formed UTF-8 (Unicode 15 table 3-7): no overlong forms, no surrogates, nothing above
// U+10FFFF. Prometheus checks label values with Go's utf8.Valid, which refuses all of those, and
// one bad value fails the whole scrape of the aggregator, every node included.
bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t extra;
    unsigned char low = 0x80;  // range of the second byte; later bytes are always 80..BF
    unsigned char high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) {
        low = 0xA0;  // overlong below U+0800
      } else if (c == 0xED) {
        high = 0x9F;  // surrogates D800..DFFF
      }
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) {
        low = 0x90;  // overlong below U+10000
      } else if (c == 0xF4) {
        high = 0x8F;  // above U+10FFFF
      }
    } else {
      return false;  // continuation byte, C0/C1 (overlong ASCII) or F5..FF
    }
    if (s.size() - i <= extra) {
      return false;
    }
    for (size_t k = 1; k <= extra; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? low : 0x80) || b > (k == 1 ? high : 0xBF)) {
        return false;
      }
    }
    i += extra + 1;
  }
  return true;
}

bool IsValidMetricName(absl::string_view name) {
  if (name.empty()) {
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, /*allow_colon=*/true)) {
      return false;
    }
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || absl::StartsWith(name, "__")) {
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, /*allow_colon=*/false)) {
      return false;
    }
  }
  return true;
}

v1::SeriesDeclaration ToDeclaration(const collectors::SeriesDesc& desc, uint32_t id) {
  v1::SeriesDeclaration out;
  out.set_id(id);
  out.set_collector(desc.collector);
  out.set_name(desc.name);
  for (const auto& [name, value] : desc.labels) {
    v1::Label* label = out.add_labels();
    label->set_name(name);
    label->set_value(value);
  }
  switch (desc.type) {
    case MetricType::kCounter:
      out.set_type(v1::METRIC_TYPE_COUNTER);
      break;
    case MetricType::kGauge:
      out.set_type(v1::METRIC_TYPE_GAUGE);
      break;
    case MetricType::kInfo:
      out.set_type(v1::METRIC_TYPE_INFO);
      break;
  }
  out.set_width_bits(desc.width_bits);
  switch (desc.overflow) {
    case Overflow::kNotApplicable:
      out.set_overflow(v1::OVERFLOW_UNSPECIFIED);
      break;
    case Overflow::kWraps:
      out.set_overflow(v1::OVERFLOW_WRAPS);
      break;
    case Overflow::kSaturates:
      out.set_overflow(v1::OVERFLOW_SATURATES);
      break;
  }
  out.set_unit(static_cast<v1::Unit>(desc.unit));
  out.set_scale(desc.scale == 1.0 ? 0.0 : desc.scale);
  out.set_help(desc.help);
  return out;
}

absl::StatusOr<collectors::SeriesDesc> FromDeclaration(const v1::SeriesDeclaration& d,
                                                       const DeclarationLimits& limits) {
  if (d.id() == 0) {
    return absl::InvalidArgumentError("series id 0 is reserved");
  }
  if (d.name().size() > limits.max_name_bytes || !IsValidMetricName(d.name())) {
    return absl::InvalidArgumentError(absl::StrCat("series ", d.id(), ": invalid metric name"));
  }
  if (static_cast<size_t>(d.labels_size()) > limits.max_labels) {
    return absl::InvalidArgumentError(absl::StrCat("series ", d.id(), ": too many labels"));
  }
  collectors::SeriesDesc desc;
  // Refused rather than cut: a truncated text would be stored as if the agent had sent it.
  if (d.collector().size() > limits.max_collector_bytes || !IsValidUtf8(d.collector())) {
    return absl::InvalidArgumentError(
        absl::StrCat("series ", d.id(), ": collector name too long or not UTF-8"));
  }
  if (d.help().size() > limits.max_help_bytes || !IsValidUtf8(d.help())) {
    return absl::InvalidArgumentError(
        absl::StrCat("series ", d.id(), " (", d.name(), "): HELP too long or not UTF-8"));
  }
  desc.collector = d.collector();
  desc.name = d.name();
  desc.help = d.help();
  absl::flat_hash_set<std::string> seen;
  for (const v1::Label& label : d.labels()) {
    if (label.name().size() > limits.max_label_name_bytes || !IsValidLabelName(label.name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("series ", d.id(), " (", d.name(), "): invalid label name"));
    }
    if (label.name() == "node") {
      return absl::InvalidArgumentError(
          absl::StrCat("series ", d.id(), ": label 'node' is reserved for the aggregator"));
    }
    if (!seen.insert(label.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("series ", d.id(), ": duplicate label ", label.name()));
    }
    if (label.value().size() > limits.max_label_value_bytes || !IsValidUtf8(label.value())) {
      return absl::InvalidArgumentError(absl::StrCat("series ", d.id(), ": label ", label.name(),
                                                     " value too long or not UTF-8"));
    }
    desc.labels.emplace_back(label.name(), label.value());
  }
  switch (d.type()) {
    case v1::METRIC_TYPE_COUNTER:
      desc.type = MetricType::kCounter;
      if (d.width_bits() == 0 || d.width_bits() > 64) {
        return absl::InvalidArgumentError(
            absl::StrCat("series ", d.id(), ": counter width must be 1..64 bits"));
      }
      desc.width_bits = static_cast<uint8_t>(d.width_bits());
      desc.overflow =
          d.overflow() == v1::OVERFLOW_SATURATES ? Overflow::kSaturates : Overflow::kWraps;
      break;
    case v1::METRIC_TYPE_GAUGE:
      desc.type = MetricType::kGauge;
      break;
    case v1::METRIC_TYPE_INFO:
      desc.type = MetricType::kInfo;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("series ", d.id(), ": unknown metric type"));
  }
  const double scale = d.scale() == 0.0 ? 1.0 : d.scale();
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError(absl::StrCat("series ", d.id(), ": scale not finite"));
  }
  // exported = raw × scale: a negative scale turns a counter's growth into a negative rate (the
  // detectors read it as traffic going backwards), and a huge one overflows to infinity.
  if (scale <= 0 || scale > kMaxScale) {
    return absl::InvalidArgumentError(
        absl::StrCat("series ", d.id(), ": scale must be positive and at most 1e12"));
  }
  desc.scale = scale;
  const int unit = static_cast<int>(d.unit());
  desc.unit = (unit >= 1 && unit <= 10) ? static_cast<Unit>(unit) : Unit::kNone;
  desc.Finalize();
  return desc;
}

}  // namespace fabricmon::wire
