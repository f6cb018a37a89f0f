#pragma once

// Reading Prometheus text exposition the way a scraper does: an HTTP GET over a plain socket
// (HttpGet, from tests/testing/loopback.h) and a small parser for format 0.0.4, so tests compare
// what Prometheus would see, not our structs.

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tests/testing/loopback.h"

namespace fabricmon::testing {

struct TextSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in exposition order, unescaped
  std::string value;                                        // as written

  // Value of label `name`, or nullopt.
  std::optional<std::string> Label(absl::string_view name) const;
};

// Parses every sample line (comments and blank lines skipped). Malformed lines are an error.
absl::StatusOr<std::vector<TextSample>> ParseText(absl::string_view text);

// A stable identity for a sample: name{label="value",...} with labels sorted, leaving out those
// named in `without` (e.g. "node", which the aggregator adds).
std::string SampleKey(const TextSample& sample, const std::vector<std::string>& without = {});

// The samples whose name starts with `prefix` and whose labels include every pair of `having`,
// keyed by SampleKey(sample, without) → value.
std::map<std::string, std::string> SelectSamples(
    const std::vector<TextSample>& samples, absl::string_view prefix,
    const std::vector<std::pair<std::string, std::string>>& having = {},
    const std::vector<std::string>& without = {});

// The value of the one sample named `name` with all of `having`, or nullopt (none or several).
std::optional<double> SampleValue(
    const std::vector<TextSample>& samples, absl::string_view name,
    const std::vector<std::pair<std::string, std::string>>& having = {});

// Lines describing how two selections differ ("" if equal); at most `limit` lines.
std::string DescribeDifference(const std::map<std::string, std::string>& expected,
                               const std::map<std::string, std::string>& actual, size_t limit = 20);

}  // namespace fabricmon::testing
