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

namespace {

// The C locale's isspace, inline: this runs for every value of every cycle.
constexpr bool IsSpace(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int DigitValue(char c, int base) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (base == 16 && c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (base == 16 && c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

}  // namespace

ParsedCounter ParseCounter(absl::string_view content) {
  ParsedCounter result;
  const char* begin = content.data();
  const char* end = begin + content.size();
  while (begin != end && IsSpace(*begin)) {
    ++begin;
  }
  while (end != begin && IsSpace(end[-1])) {
    --end;
  }
  content = absl::string_view(begin, static_cast<size_t>(end - begin));
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
    const int digit = DigitValue(c, base);
    // value * base + digit must fit in 64 bits (no division per digit: the builtins use the
    // multiply's overflow flag).
    if (digit < 0 || __builtin_mul_overflow(value, static_cast<uint64_t>(base), &value) ||
        __builtin_add_overflow(value, static_cast<uint64_t>(digit), &value)) {
      result.error = ErrorKind::kNotNumeric;
      return result;
    }
  }
  result.ok = true;
  result.value = value;
  return result;
}

}  // namespace fabricmon::collectors
