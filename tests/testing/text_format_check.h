#pragma once

// A strict line-by-line reader of the Prometheus text format 0.0.4, for tests and fuzz targets
// that must prove an exposition cannot be forged: every line is a "# HELP", a "# TYPE" or a
// sample line of the family whose header came last, with only the escapes the format defines
// (HELP: \\ and \n; label values: \\, \" and \n), each family's header at most once. Header
// only, no dependencies beyond Abseil.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace fabricmon::testing {

// Names of the series (family name + labels as written) of a checked text, in order.
struct ParsedExposition {
  std::vector<std::string> families;  // in order of their TYPE lines
  std::vector<std::string> sample_names;
  std::vector<std::vector<std::pair<std::string, std::string>>> sample_labels;  // unescaped
};

namespace text_format_internal {

inline bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
inline bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// Reads a metric name at `pos`; empty when there is none.
inline absl::string_view ReadName(absl::string_view line, size_t& pos) {
  const size_t start = pos;
  if (pos < line.size() && IsNameStart(line[pos])) {
    while (pos < line.size() && IsNameChar(line[pos])) {
      ++pos;
    }
  }
  return line.substr(start, pos - start);
}

// A value: a float as Go's strconv.ParseFloat reads it, or NaN/Inf spellings.
inline bool IsValue(absl::string_view v) {
  if (v == "Nan" || v == "NaN" || v == "+Inf" || v == "-Inf" || v == "Inf") {
    return true;
  }
  if (v.empty()) {
    return false;
  }
  size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
  bool digits = false;
  bool dot = false;
  for (; i < v.size(); ++i) {
    const char c = v[i];
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else if ((c == 'e' || c == 'E') && digits) {
      size_t j = i + 1;
      if (j < v.size() && (v[j] == '-' || v[j] == '+')) {
        ++j;
      }
      if (j == v.size()) {
        return false;
      }
      for (; j < v.size(); ++j) {
        if (v[j] < '0' || v[j] > '9') {
          return false;
        }
      }
      return true;
    } else {
      return false;
    }
  }
  return digits;
}

}  // namespace text_format_internal

// Empty when `text` is a well-formed exposition; else the first problem and its line number.
inline std::string CheckTextFormat(absl::string_view text, ParsedExposition* parsed = nullptr) {
  using namespace text_format_internal;
  if (!text.empty() && text.back() != '\n') {
    return "text does not end with a newline";
  }
  absl::flat_hash_set<std::string> typed;
  absl::flat_hash_set<std::string> helped;
  std::string current;  // the family whose header came last
  size_t number = 0;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty()) {
    lines.pop_back();  // after the final newline
  }
  for (absl::string_view line : lines) {
    ++number;
    auto fail = [&](absl::string_view why) {
      return absl::StrCat("line ", number, ": ", why, ": ", line.substr(0, 200));
    };
    if (absl::StartsWith(line, "#")) {
      const bool help = absl::StartsWith(line, "# HELP ");
      const bool type = absl::StartsWith(line, "# TYPE ");
      if (!help && !type) {
        return fail("a comment that is neither HELP nor TYPE");
      }
      size_t pos = 7;
      const std::string name(ReadName(line, pos));
      if (name.empty() || pos >= line.size() || line[pos] != ' ') {
        return fail("header without a valid name");
      }
      const absl::string_view rest = line.substr(pos + 1);
      if (help) {
        if (!helped.insert(name).second) {
          return fail("second HELP for a family");
        }
        for (size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] == '\\') {
            if (i + 1 >= rest.size() || (rest[i + 1] != '\\' && rest[i + 1] != 'n')) {
              return fail("HELP with an escape the format does not define");
            }
            ++i;
          }
        }
      } else {
        if (rest != "counter" && rest != "gauge" && rest != "untyped" && rest != "summary" &&
            rest != "histogram") {
          return fail("unknown TYPE");
        }
        if (!typed.insert(name).second) {
          return fail("second TYPE for a family");
        }
        if (parsed != nullptr) {
          parsed->families.push_back(name);
        }
      }
      current = name;  // a HELP or TYPE line opens its family's block
      continue;
    }
    if (line.empty()) {
      return fail("empty line");
    }
    size_t pos = 0;
    const std::string name(ReadName(line, pos));
    if (name.empty()) {
      return fail("sample line without a metric name");
    }
    if (name != current) {
      return fail(absl::StrCat("sample of ", name, " outside its family's block (", current, ")"));
    }
    std::vector<std::pair<std::string, std::string>> labels;
    if (pos < line.size() && line[pos] == '{') {
      ++pos;
      absl::flat_hash_set<std::string> seen;
      while (pos < line.size() && line[pos] != '}') {
        const size_t start = pos;
        while (pos < line.size() && IsNameChar(line[pos]) && line[pos] != ':') {
          ++pos;
        }
        std::string label(line.substr(start, pos - start));
        if (label.empty() || (label[0] >= '0' && label[0] <= '9')) {
          return fail("invalid label name");
        }
        if (!seen.insert(label).second) {
          return fail(absl::StrCat("duplicate label ", label));
        }
        if (line.substr(pos, 2) != "=\"") {
          return fail("label without =\"");
        }
        pos += 2;
        std::string value;
        bool closed = false;
        while (pos < line.size()) {
          const char c = line[pos++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (pos >= line.size()) {
              return fail("dangling escape in a label value");
            }
            const char e = line[pos++];
            if (e == 'n') {
              value.push_back('\n');
            } else if (e == '\\' || e == '"') {
              value.push_back(e);
            } else {
              return fail("label value with an escape the format does not define");
            }
            continue;
          }
          value.push_back(c);
        }
        if (!closed) {
          return fail("unterminated label value");
        }
        labels.emplace_back(std::move(label), std::move(value));
        if (pos < line.size() && line[pos] == ',') {
          ++pos;
        } else if (pos < line.size() && line[pos] != '}') {
          return fail("labels not separated by ','");
        }
      }
      if (pos >= line.size()) {
        return fail("labels without '}'");
      }
      ++pos;
    }
    if (pos >= line.size() || line[pos] != ' ') {
      return fail("no space before the value");
    }
    std::vector<absl::string_view> fields = absl::StrSplit(line.substr(pos + 1), ' ');
    if (fields.empty() || fields.size() > 2 || !IsValue(fields[0])) {
      return fail("not a value (and an optional timestamp)");
    }
    if (parsed != nullptr) {
      parsed->sample_names.push_back(name);
      parsed->sample_labels.push_back(std::move(labels));
    }
  }
  return "";
}

}  // namespace fabricmon::testing
