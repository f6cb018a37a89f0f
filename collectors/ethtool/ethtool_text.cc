#include "collectors/ethtool/ethtool_text.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace fabricmon::collectors::ethtool {
namespace {

// Kernel stat names are at most ETH_GSTRING_LEN (32) bytes; allow generous room for other tools'
// captures but refuse pathological lines.
constexpr size_t kMaxKeyLength = 256;

// Unsigned decimal that fits 64 bits; no sign, no spaces inside, no suffix.
bool ParseU64(absl::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 20) {
    return false;
  }
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return false;
    }
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) {
      return false;  // past 2^64-1
    }
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

bool IsPrintableKey(absl::string_view key) {
  for (char c : key) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return false;  // NUL and control bytes never belong to a kernel stat name
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<ParsedEthtoolText> ParseEthtoolStatsText(absl::string_view text) {
  ParsedEthtoolText parsed;
  bool first_content_line = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    // Leading indentation is ethtool's; trailing whitespace after the value is noise.
    absl::string_view content =
        absl::StripTrailingAsciiWhitespace(absl::StripLeadingAsciiWhitespace(line));
    if (content.empty()) {
      continue;
    }
    if (first_content_line) {
      first_content_line = false;
      // `ethtool eth1` (link settings) starts with "Settings for eth1:"; `ethtool -i` starts
      // with "driver:". Neither is a statistics dump.
      if (absl::StartsWith(content, "Settings for ") && absl::EndsWith(content, ":")) {
        return absl::InvalidArgumentError(
            "not an `ethtool -S` capture: this is `ethtool <netdev>` settings output");
      }
    }
    const size_t colon = content.rfind(':');
    if (colon == absl::string_view::npos) {
      ++parsed.rejected_lines;
      continue;
    }
    // Key: everything before the last ':' with ethtool's indentation removed. Trailing spaces are
    // part of the kernel string (see NormalizeStatKey).
    absl::string_view key = content.substr(0, colon);
    absl::string_view value_text = absl::StripAsciiWhitespace(content.substr(colon + 1));
    if (value_text.empty()) {
      // "NIC statistics:" and other section headers.
      ++parsed.header_lines;
      continue;
    }
    uint64_t value = 0;
    if (absl::StripAsciiWhitespace(key).empty() || key.size() > kMaxKeyLength ||
        !IsPrintableKey(key) || !ParseU64(value_text, &value)) {
      ++parsed.rejected_lines;
      continue;
    }
    parsed.stats.push_back({std::string(key), value});
  }
  return parsed;
}

std::string NormalizeStatKey(absl::string_view raw) {
  const size_t nul = raw.find('\0');
  if (nul != absl::string_view::npos) {
    raw = raw.substr(0, nul);
  }
  return std::string(absl::StripAsciiWhitespace(raw));
}

std::string ParseEthtoolDriverText(absl::string_view text) {
  std::string first;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::string_view content = absl::StripAsciiWhitespace(line);
    if (content.empty()) {
      continue;
    }
    if (absl::StartsWith(content, "driver:")) {
      return std::string(absl::StripAsciiWhitespace(content.substr(7)));
    }
    if (first.empty()) {
      first = std::string(content);
    }
  }
  // A bare driver name; `ethtool -i` output without a driver line yields nothing useful.
  return first.find(':') == std::string::npos ? first : std::string();
}

}  // namespace fabricmon::collectors::ethtool
