#include "tests/integration/metrics_text.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/common/status.h"

namespace fabricmon::testing {

std::optional<std::string> TextSample::Label(absl::string_view name) const {
  for (const auto& [label, value] : labels) {
    if (label == name) {
      return value;
    }
  }
  return std::nullopt;
}

namespace {

absl::Status ParseLine(absl::string_view line, TextSample* out) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') {
    ++i;
  }
  out->name = std::string(line.substr(0, i));
  if (out->name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no metric name: ", line));
  }
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find('=', i);
      if (eq == absl::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
        return absl::InvalidArgumentError(absl::StrCat("bad label: ", line));
      }
      std::string name(line.substr(i, eq - i));
      std::string value;
      size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size()) {
          ++j;
          value.push_back(line[j] == 'n' ? '\n' : line[j]);
        } else {
          value.push_back(line[j]);
        }
      }
      if (j >= line.size()) {
        return absl::InvalidArgumentError(absl::StrCat("unterminated label value: ", line));
      }
      out->labels.emplace_back(std::move(name), std::move(value));
      i = j + 1;
      if (i < line.size() && line[i] == ',') {
        ++i;
      }
    }
    if (i >= line.size()) {
      return absl::InvalidArgumentError(absl::StrCat("unterminated labels: ", line));
    }
    ++i;  // '}'
  }
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(line.substr(i));
  const size_t space = rest.find(' ');  // an optional timestamp follows the value
  out->value = std::string(rest.substr(0, space));
  if (out->value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no value: ", line));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TextSample>> ParseText(absl::string_view text) {
  std::vector<TextSample> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') {
      continue;
    }
    TextSample sample;
    FABRICMON_RETURN_IF_ERROR(ParseLine(line, &sample));
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::string SampleKey(const TextSample& sample, const std::vector<std::string>& without) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : sample.labels) {
    if (std::find(without.begin(), without.end(), name) == without.end()) {
      parts.push_back(absl::StrCat(name, "=\"", value, "\""));
    }
  }
  std::sort(parts.begin(), parts.end());
  return absl::StrCat(sample.name, "{", absl::StrJoin(parts, ","), "}");
}

namespace {
bool HasAll(const TextSample& sample,
            const std::vector<std::pair<std::string, std::string>>& having) {
  for (const auto& [name, value] : having) {
    if (sample.Label(name) != value) {
      return false;
    }
  }
  return true;
}
}  // namespace

std::map<std::string, std::string> SelectSamples(
    const std::vector<TextSample>& samples, absl::string_view prefix,
    const std::vector<std::pair<std::string, std::string>>& having,
    const std::vector<std::string>& without) {
  std::map<std::string, std::string> out;
  for (const TextSample& sample : samples) {
    if (absl::StartsWith(sample.name, prefix) && HasAll(sample, having)) {
      out[SampleKey(sample, without)] = sample.value;
    }
  }
  return out;
}

std::optional<double> SampleValue(const std::vector<TextSample>& samples, absl::string_view name,
                                  const std::vector<std::pair<std::string, std::string>>& having) {
  std::optional<double> found;
  for (const TextSample& sample : samples) {
    if (sample.name != name || !HasAll(sample, having)) {
      continue;
    }
    double value = 0;
    if (found.has_value() || !absl::SimpleAtod(sample.value, &value)) {
      return std::nullopt;
    }
    found = value;
  }
  return found;
}

std::string DescribeDifference(const std::map<std::string, std::string>& expected,
                               const std::map<std::string, std::string>& actual, size_t limit) {
  std::vector<std::string> lines;
  for (const auto& [key, value] : expected) {
    auto it = actual.find(key);
    if (it == actual.end()) {
      lines.push_back(absl::StrCat("missing ", key, " ", value));
    } else if (it->second != value) {
      lines.push_back(absl::StrCat("differs ", key, ": expected ", value, ", got ", it->second));
    }
  }
  for (const auto& [key, value] : actual) {
    if (!expected.count(key)) {
      lines.push_back(absl::StrCat("unexpected ", key, " ", value));
    }
  }
  if (lines.size() > limit) {
    const size_t more = lines.size() - limit;
    lines.resize(limit);
    lines.push_back(absl::StrCat("... and ", more, " more"));
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace fabricmon::testing
