// Every metric a dashboard (dashboards/grafana/*.json) or an alert rule (deploy/prometheus/
// rules.yml) names is one the project exports: a family of the metric catalogue (what the
// collectors and the agent stream, and what the aggregator writes itself: aggregator_families.h,
// which aggregator_server_test checks against its exporters), or a driver counter family of the
// ib_sysfs collector (one per hw_counters file, named by the collector's own rule: the file names
// vary by driver, so these are declared by the agent rather than catalogued), or a name documented
// below. A renamed or removed metric fails here, not as an empty panel or an alert that can never
// fire.

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "collectors/ib_sysfs/ib_counters_parser.h"
#include "daemon/wire/aggregator_families.h"
#include "daemon/wire/metric_catalogue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::aggregator {
namespace {

// Names in those files that are not metrics, each with the reason.
const std::map<std::string, std::string>& NotMetrics() {
  static const auto* const names = new std::map<std::string, std::string>{
      {"fabricmon_runbook_base", "a Prometheus external label the alerts' runbook_url reads"},
  };
  return *names;
}

std::string ReadSource(const std::string& relative) {
  std::ifstream in(fabricmon::testing::SourcePath(relative));
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// fabricmon_* names in `text`; YAML comment lines are skipped (they describe, they do not query).
std::set<std::string> NamesIn(const std::string& text, bool yaml) {
  static const std::regex kName(R"(\bfabricmon_[a-z0-9_]*[a-z0-9]\b)");
  std::set<std::string> names;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (yaml && absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) {
      continue;
    }
    for (auto it = std::sregex_iterator(line.begin(), line.end(), kName);
         it != std::sregex_iterator(); ++it) {
      names.insert(it->str());
    }
  }
  return names;
}

// Whether the ib_sysfs collector names a driver counter file's family `name`.
bool IsDriverCounterFamily(const std::string& name) {
  absl::string_view file = name;
  if (!absl::ConsumePrefix(&file, "fabricmon_ib_hw_") || !absl::ConsumeSuffix(&file, "_total")) {
    return false;
  }
  const collectors::ib_sysfs::CounterSpec spec = collectors::ib_sysfs::SpecForCounter(
      collectors::ib_sysfs::CounterGroup::kHwCounters, file, /*pma_extended=*/false, "mlx5");
  return !spec.skip && spec.metric == name;
}

bool Exported(const std::string& name) {
  return wire::FindProjectFamily(name) != nullptr || IsDriverCounterFamily(name);
}

TEST(MetricNamesTest, DashboardsAndAlertRulesNameOnlyExportedMetrics) {
  std::vector<std::string> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(fabricmon::testing::SourcePath("dashboards/grafana"))) {
    if (entry.path().extension() == ".json") {
      files.push_back("dashboards/grafana/" + entry.path().filename().string());
    }
  }
  ASSERT_FALSE(files.empty());
  files.push_back("deploy/prometheus/rules.yml");
  size_t checked = 0;
  for (const std::string& file : files) {
    std::vector<std::string> unknown;
    for (const std::string& name : NamesIn(ReadSource(file), absl::EndsWith(file, ".yml"))) {
      ++checked;
      if (!Exported(name) && NotMetrics().count(name) == 0) {
        unknown.push_back(name);
      }
    }
    EXPECT_THAT(unknown, ::testing::IsEmpty())
        << file << " names metrics nothing exports: " << absl::StrJoin(unknown, ", ");
  }
  EXPECT_GT(checked, 50u) << "the name extraction found too little to check";
}

// The check itself: an unknown name is caught, a catalogued one and an aggregator one are not.
TEST(MetricNamesTest, TheCheckTellsExportedFromUnknownNames) {
  EXPECT_TRUE(Exported("fabricmon_ib_symbol_error_total"));
  EXPECT_TRUE(Exported("fabricmon_node_up"));
  EXPECT_TRUE(Exported("fabricmon_finding_active"));
  EXPECT_TRUE(Exported("fabricmon_recording_active"));
  EXPECT_TRUE(Exported("fabricmon_remote_write_samples_sent_total"));
  EXPECT_TRUE(Exported("fabricmon_jobs"));
  EXPECT_TRUE(Exported("fabricmon_ib_hw_np_cnp_sent_total"));
  EXPECT_FALSE(Exported("fabricmon_ib_symbol_errors_total"));
  EXPECT_FALSE(Exported("fabricmon_ib_hw_np_cnp_sent"));
  EXPECT_THAT(NamesIn("# fabricmon_in_a_comment\nexpr: rate(fabricmon_x_total[5m])", true),
              ::testing::ElementsAre("fabricmon_x_total"));
}

}  // namespace
}  // namespace fabricmon::aggregator
