#pragma once

// Per-collector error accounting: environment faults are handled, counted by kind and exported as
// fabricmon_collector_errors_total{collector,kind}, so a degraded collector is visible in metrics
// and not only in logs.

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collectors/core/family_spec.h"
#include "collectors/core/sample.h"

namespace fabricmon::collectors {

inline constexpr FamilySpec kCollectorErrorsFamily = CounterFamily(
    "fabricmon_collector_errors_total",
    "Read errors of a collector by kind (missing, empty, no_pma, not_numeric, unsupported, "
    "permission, io).",
    Unit::kNone, 64, Overflow::kWraps);

enum class ErrorKind : uint8_t {
  kMissing,      // file or device vanished (ENOENT/ENODEV)
  kEmpty,        // file read returned nothing
  kNoPma,        // "N/A (no PMA)": the driver has no PMA for this counter
  kNotNumeric,   // content is not a number
  kUnsupported,  // EINVAL/EOPNOTSUPP from the kernel (restricted firmware); not asked again
  kPermission,   // EACCES/EPERM
  kIo,           // other read errors
  kCount,
};

absl::string_view ErrorKindName(ErrorKind kind);

// Maps a read status to an error kind.
ErrorKind ErrorKindFromStatus(const absl::Status& status);

// Cumulative error counts of one collector. Not thread-safe: owned by the collector and touched
// only from Collect()/Discover().
class CollectorErrors {
 public:
  explicit CollectorErrors(absl::string_view collector);
  void Record(ErrorKind kind) { ++counts_[static_cast<size_t>(kind)]; }
  uint64_t count(ErrorKind kind) const { return counts_[static_cast<size_t>(kind)]; }
  uint64_t total() const;
  // Emits one counter per kind (all kinds, so rates work from the first error on).
  void Emit(SampleSink& sink) const;

 private:
  std::array<uint64_t, static_cast<size_t>(ErrorKind::kCount)> counts_{};
  std::array<SeriesDesc, static_cast<size_t>(ErrorKind::kCount)> series_;
};

}  // namespace fabricmon::collectors
