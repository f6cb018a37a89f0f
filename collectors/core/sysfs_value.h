#pragma once

// Parsing of single-value kernel files ("12345\n"). Hot path: no allocation, no exceptions.
// Also the metric-name form of a kernel file name.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "collectors/core/collector_errors.h"

namespace fabricmon::collectors {

struct ParsedCounter {
  bool ok = false;
  uint64_t value = 0;
  ErrorKind error = ErrorKind::kNotNumeric;  // meaningful when !ok
};

// Accepts an unsigned decimal or 0x-hex integer with surrounding whitespace. Empty content →
// kEmpty; "N/A (no PMA)" → kNoPma (iWARP and other drivers without a PMA); anything else that is
// not a number that fits 64 bits → kNotNumeric.
ParsedCounter ParseCounter(absl::string_view content);

// Lower-case [a-z0-9_] form of a kernel counter or statistics file name, for a metric name: runs
// of other characters become one '_', none leads or trails (hfi1's "Pio Reserved 30" →
// pio_reserved_30, sysfs' VL15_dropped → vl15_dropped, "--" → "").
std::string SanitizeName(absl::string_view name);

}  // namespace fabricmon::collectors
