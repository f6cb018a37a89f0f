#pragma once

// Parsing of single-value kernel files ("12345\n"). Hot path: no allocation, no exceptions.

#include <cstdint>

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

}  // namespace fabricmon::collectors
