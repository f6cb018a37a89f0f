#include "collectors/netdev/proc_net_snmp_parser.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace fabricmon::collectors::netdev {
namespace {

std::vector<absl::string_view> SplitFields(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

// Kernel field names are identifiers ("InSegs", "TCPTimeouts", "InType3"): a line whose fields
// start with a digit or '-' is a value line, not a header.
bool LooksLikeHeader(const std::vector<absl::string_view>& fields) {
  return std::all_of(fields.begin(), fields.end(), [](absl::string_view field) {
    return !field.empty() && absl::ascii_isalpha(static_cast<unsigned char>(field[0]));
  });
}

}  // namespace

int SnmpSection::IndexOf(absl::string_view key, int hint) const {
  if (hint >= 0 && static_cast<size_t>(hint) < keys.size() && keys[hint] == key) {
    return hint;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

const SnmpSection* SnmpTable::Find(absl::string_view section) const {
  for (const SnmpSection& s : sections) {
    if (s.name == section) {
      return &s;
    }
  }
  return nullptr;
}

std::optional<uint64_t> SnmpTable::Value(absl::string_view section, absl::string_view key) const {
  const SnmpSection* s = Find(section);
  if (s == nullptr) {
    return std::nullopt;
  }
  const int index = s->IndexOf(key);
  if (index < 0) {
    return std::nullopt;
  }
  return s->values[index];
}

std::optional<uint64_t> ParseKernelInteger(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) {
    text.remove_prefix(1);
  }
  if (text.empty()) {
    return std::nullopt;
  }
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) {
      return std::nullopt;
    }
    value = value * 10 + digit;
  }
  if (negative) {
    // %ld of a signed long: the magnitude fits int64 (INT64_MIN's magnitude is 2^63).
    if (value > uint64_t{1} << 63) {
      return std::nullopt;
    }
    return ~value + 1;  // two's complement negation, defined for unsigned
  }
  return value;
}

SnmpTable ParseSnmpTable(absl::string_view content) {
  SnmpTable table;
  struct Pending {
    std::string name;
    std::vector<absl::string_view> keys;
  };
  std::optional<Pending> pending;

  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) {
      continue;
    }
    const size_t colon = line.find(':');
    absl::string_view name =
        colon == absl::string_view::npos ? absl::string_view() : line.substr(0, colon);
    if (name.empty() || name.find_first_of(" \t") != absl::string_view::npos) {
      // Not "Name: ...": garbage; the pending header (if any) may still get its value line.
      ++table.malformed_sections;
      continue;
    }
    std::vector<absl::string_view> fields = SplitFields(line.substr(colon + 1));

    if (pending.has_value() && pending->name == name) {
      // The value line of the pending header.
      const bool duplicate = table.Find(name) != nullptr;
      if (fields.size() != pending->keys.size() || duplicate) {
        // A count mismatch means positions cannot be trusted: drop the whole section rather than
        // export a value under the wrong name.
        ++table.malformed_sections;
      } else {
        SnmpSection section;
        section.name = std::string(name);
        section.keys.reserve(fields.size());
        section.values.reserve(fields.size());
        for (size_t i = 0; i < fields.size(); ++i) {
          std::optional<uint64_t> value = ParseKernelInteger(fields[i]);
          if (!value.has_value()) {
            ++table.malformed_values;
            continue;
          }
          section.keys.emplace_back(pending->keys[i]);
          section.values.push_back(*value);
        }
        table.sections.push_back(std::move(section));
      }
      pending.reset();
      continue;
    }

    if (pending.has_value()) {
      ++table.malformed_sections;  // header without its value line
      pending.reset();
    }
    if (LooksLikeHeader(fields)) {
      pending = Pending{std::string(name), std::move(fields)};
    } else {
      ++table.malformed_sections;  // value line without a header
    }
  }
  if (pending.has_value()) {
    ++table.malformed_sections;  // truncated file: last header has no values
  }
  return table;
}

}  // namespace fabricmon::collectors::netdev
