#pragma once

// The sample model: what every collector emits and what the aggregator needs to compute rates
// correctly. Values travel as raw integers exactly as the hardware counts them; `scale` turns them
// into base units at export (IB data words × 4 → bytes, pause µs × 1e-6 → seconds), so counter
// arithmetic (wrap, saturation, resets) is done on the raw width the hardware uses.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace fabricmon::collectors {

enum class MetricType : uint8_t {
  kCounter,  // monotonic until it wraps, saturates or is reset
  kGauge,    // instantaneous; raw value is a signed int64 stored in the uint64
  kInfo,     // metadata in labels; value always 1
};

enum class Overflow : uint8_t {
  kNotApplicable,  // gauges and info
  kWraps,          // modulo 2^width (mlx5 q-counters, netdev counters)
  kSaturates,      // sticks at 2^width - 1 (IBA PortCounters "clamp at all ones")
};

// Matches fabricmon.v1.Unit.
enum class Unit : uint8_t {
  kNone = 1,
  kBytes = 2,
  kPackets = 3,
  kSeconds = 4,
  kRatio = 5,
  kBits = 6,
  kTicks = 7,
  kBytesPerSecond = 8,
  kState = 9,
  kCelsius = 10,
};

using Labels = std::vector<std::pair<std::string, std::string>>;

// Largest raw value a counter `width_bits` wide can hold: 2^width_bits - 1 (UINT64_MAX for 64 or
// 0, the width of a counter not declared narrower).
constexpr uint64_t MaxRawOfWidth(uint8_t width_bits) {
  return width_bits == 0 || width_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << width_bits) - 1;
}
// True if `raw` is a saturating counter's value pinned at its maximum.
constexpr bool IsSaturatedValue(MetricType type, Overflow overflow, uint8_t width_bits,
                                uint64_t raw) {
  return type == MetricType::kCounter && overflow == Overflow::kSaturates &&
         raw == MaxRawOfWidth(width_bits);
}

// Everything about a series except its value. Built once per discovery by the collector and
// passed by reference on every sample; sinks copy it the first time they see its fingerprint.
struct SeriesDesc {
  std::string collector;  // "ib_sysfs"
  std::string name;       // full family name: "fabricmon_ib_port_xmit_data_bytes_total"
  std::string help;
  MetricType type = MetricType::kGauge;
  Unit unit = Unit::kNone;
  uint8_t width_bits = 0;  // counters: 4, 8, 16, 32 or 64
  Overflow overflow = Overflow::kNotApplicable;
  double scale = 1.0;
  Labels labels;  // in a fixed order chosen by the collector
  // Hash of name, labels and semantics (type, width, overflow, unit, scale), set by Finalize().
  // Identifies the series and its meaning within a process.
  uint64_t fingerprint = 0;

  // Computes `fingerprint`. Call after the fields above are set, and again after changing any.
  void Finalize();
  // Largest raw value the counter can hold: 2^width_bits - 1 (UINT64_MAX for 64 or 0).
  uint64_t MaxRaw() const { return MaxRawOfWidth(width_bits); }
  // True if this is a saturating counter whose raw value is pinned at its maximum.
  bool IsSaturated(uint64_t raw) const { return IsSaturatedValue(type, overflow, width_bits, raw); }
};

// Hash of name and labels only: what a series *is*, whatever its declared semantics (the
// aggregator keys node series by it, so a re-declared width restarts the same series).
uint64_t SeriesIdentity(const SeriesDesc& desc);

// Helpers that build a finalized SeriesDesc.
SeriesDesc CounterSeries(absl::string_view collector, std::string name, std::string help, Unit unit,
                         uint8_t width_bits, Overflow overflow, double scale, Labels labels);
SeriesDesc GaugeSeries(absl::string_view collector, std::string name, std::string help, Unit unit,
                       double scale, Labels labels);
SeriesDesc InfoSeries(absl::string_view collector, std::string name, std::string help,
                      Labels labels);

// Receives samples from a collector's Collect(). Implementations: the agent's batch builder, the
// `--once` printer, test recorders. Called from one thread at a time per collector.
class SampleSink {
 public:
  virtual ~SampleSink() = default;
  // One value of one series for the current cycle. `desc` is valid only during the call.
  virtual void Add(const SeriesDesc& desc, uint64_t raw_value) = 0;
};

// The value of label `name`, or "" when the series has no such label.
absl::string_view LabelValue(const SeriesDesc& desc, absl::string_view name);

// Exported value of a raw sample: raw × scale, gauges read as signed, info series 1.
constexpr double ExportedValue(MetricType type, double scale, uint64_t raw_value) {
  switch (type) {
    case MetricType::kInfo:
      return 1.0;
    case MetricType::kGauge:
      return static_cast<double>(static_cast<int64_t>(raw_value)) * scale;
    case MetricType::kCounter:
      break;
  }
  return static_cast<double>(raw_value) * scale;
}
inline double ExportedValue(const SeriesDesc& desc, uint64_t raw_value) {
  return ExportedValue(desc.type, desc.scale, raw_value);
}

}  // namespace fabricmon::collectors
