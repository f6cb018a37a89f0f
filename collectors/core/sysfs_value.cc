#include "collectors/core/sysfs_value.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace fabricmon::collectors {

std::string SanitizeName(absl::string_view name) {
  std::string out;
  out.reserve(name.size());
  bool pending_underscore = false;
  for (char c : name) {
    const char lower = absl::ascii_tolower(static_cast<unsigned char>(c));
    if ((lower >= 'a' && lower <= 'z') || (lower >= '0' && lower <= '9')) {
      if (pending_underscore && !out.empty()) {
        out.push_back('_');
      }
      pending_underscore = false;
      out.push_back(lower);
    } else {
      pending_underscore = true;
    }
  }
  return out;
}

ParsedCounter ParseCounter(absl::string_view content) {
  ParsedCounter result;
  content = absl::StripAsciiWhitespace(content);
  if (content.empty()) {
    result.error = ErrorKind::kEmpty;
    return result;
  }
  if (absl::StartsWith(content, "N/A")) {
    result.error = ErrorKind::kNoPma;
    return result;
  }
  int base = 10;
  if (content.size() > 2 && content[0] == '0' && (content[1] == 'x' || content[1] == 'X')) {
    base = 16;
    content.remove_prefix(2);
  }
  uint64_t value = 0;
  for (char c : content) {
    unsigned digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      digit = static_cast<unsigned>(c - 'A' + 10);
    } else {
      result.error = ErrorKind::kNotNumeric;
      return result;
    }
    // Overflow check: value * base + digit must fit in 64 bits.
    if (value > (UINT64_MAX - digit) / static_cast<uint64_t>(base)) {
      result.error = ErrorKind::kNotNumeric;
      return result;
    }
    value = value * static_cast<uint64_t>(base) + digit;
  }
  result.ok = true;
  result.value = value;
  return result;
}

}  // namespace fabricmon::collectors
