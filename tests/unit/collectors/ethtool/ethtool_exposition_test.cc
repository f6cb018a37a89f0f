// The ethtool collector's samples as Prometheus text, checked by `promtool check metrics` (names,
// types, HELP, units, _total suffixes) — the same exposition path fabricmon-agent uses.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectors/core/recording_sink.h"
#include "daemon/exposition/text_exposition.h"
#include "gtest/gtest.h"
#include "tests/fakes/ethtool/fixture_ethtool_api.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/ethtool/ethtool_test_util.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::collectors::ethtool_testing::AddRoceNetdev;
using ::fabricmon::collectors::ethtool_testing::KnownCaptures;
using ::fabricmon::collectors::ethtool_testing::MakeCollector;
using ::fabricmon::testing::SharedFixture;
using ::fabricmon::testing::TempTree;

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    return result;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    result.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// All captures (plus an extra_keys selection and the error series) as one exposition.
std::string ExposeAllCaptures(const TempTree& tree) {
  auto api = std::make_unique<FixtureEthtoolApi>();
  int i = 0;
  for (const auto& capture : KnownCaptures()) {
    EXPECT_THAT(
        api->LoadCapture(capture.netdev, "mlx5_core", SharedFixture("ethtool/" + capture.file)),
        testing::IsOk());
    AddRoceNetdev(tree, capture.netdev, "mlx5_" + std::to_string(i++));
  }
  // PFC on priority 3 (no public capture has it, PROVENANCE.md §2) and the storm counters.
  api->SetStat("u1804", "rx_prio3_pause", 12);
  api->SetStat("u1804", "rx_prio3_pause_duration", 3000000);
  api->SetStat("u1804", "rx_prio3_pause_transition", 4);
  api->SetStat("u1804", "tx_prio3_pause", 1);
  api->SetStat("u1804", "tx_prio3_pause_duration", 5);
  api->SetStat("u1804", "tx_pause_storm_warning_events ", 2);
  api->SetStat("u1804", "tx_pause_storm_error_events", 0);
  api->SetStat("u1804", "rx_bits_phy", 1000000);
  api->SetStat("u1804", "rx_err_lane_0_phy", 0);
  v1::EthtoolCollectorConfig config;
  config.set_extra_keys("rx_xdp_.*|ch_.*");
  config.set_extra_keys_limit(5);
  auto collector = MakeCollector(tree, std::move(api), config);
  v1::Inventory inventory;
  EXPECT_THAT(collector->Discover(inventory), testing::IsOk());
  RecordingSink sink;
  EXPECT_THAT(collector->Collect(sink), testing::IsOk());
  return exposition::SerializeText(exposition::BuildFamilies(sink.samples()));
}

TEST(EthtoolExpositionTest, TypesAndValuesInTextFormat) {
  TempTree tree;
  const std::string text = ExposeAllCaptures(tree);
  EXPECT_TRUE(absl::StrContains(text, "# TYPE fabricmon_roce_pfc_pause_frames_total counter"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE fabricmon_roce_pcie_outbound_stalled_ratio gauge"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE fabricmon_roce_netdev_info gauge"));
  EXPECT_TRUE(absl::StrContains(
      text,
      "fabricmon_roce_pfc_pause_duration_seconds_total{netdev=\"k515\",direction=\"tx\","
      "priority=\"global\"} 771.10381"))
      << text.substr(0, 2000);
  EXPECT_TRUE(absl::StrContains(
      text,
      "fabricmon_roce_pfc_pause_duration_seconds_total{netdev=\"u1804\",direction=\"rx\","
      "priority=\"3\"} 3"));
  EXPECT_TRUE(absl::StrContains(
      text, "fabricmon_roce_pause_storm_warning_events_total{netdev=\"u1804\"} 2"));
}

TEST(EthtoolExpositionTest, PromtoolCheckMetricsAcceptsEveryFamily) {
  if (RunCommand("promtool --version").exit_code != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  }
  TempTree tree;
  const std::string text = ExposeAllCaptures(tree);
  tree.WriteFile("metrics.prom", text);
  CommandResult result =
      RunCommand(absl::StrCat("promtool check metrics < '", tree.root(), "/metrics.prom'"));
  EXPECT_EQ(result.exit_code, 0) << result.output << "\n" << text.substr(0, 1000);
  EXPECT_EQ(result.output, "");
}

}  // namespace
}  // namespace fabricmon::collectors
