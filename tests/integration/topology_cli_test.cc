// The real fabricmon-aggregator given a real ibnetdiscover file (--topology_file, PSMN "X5" from
// shared/fixtures/ib/ibnetdiscover) and the real `fabricmon topology` CLI against it over
// 127.0.0.1; and a damaged copy of the file stopping the aggregator with exit 2 and the line.

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/common/file_reader.h"
#include "fabricmon/v1/diagnostics.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/security/daemon_process.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kX5[] = "ib/ibnetdiscover/psmn_X5_voltaire-qdr_ibnetdiscover.topofile";

class TopologyCliTest : public ::testing::Test {
 protected:
  std::vector<std::string> AggregatorArgv(const std::string& topology_file) {
    return {BuildPath("daemon/aggregator/fabricmon-aggregator"),
            "--topology_file=" + topology_file,
            "--insecure_plaintext",
            "--grpc_listen=127.0.0.1:0",
            "--metrics_listen=127.0.0.1:0",
            "--port_file=" + tree_.root() + "/port",
            "--log_level=info"};
  }

  CommandResult Cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BuildPath("daemon/cli/fabricmon"),
                                     absl::StrCat("--aggregator=127.0.0.1:", port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, absl::Seconds(20));
  }

  TempTree tree_;
  DaemonProcess aggregator_;
  int port_ = 0;
};

TEST_F(TopologyCliTest, CliListsTheCablesOfTheAggregatorsTopologyFile) {
  ASSERT_TRUE(
      aggregator_.Start(AggregatorArgv(SharedFixture(kX5)), tree_.root() + "/aggregator.log"));
  port_ = WaitForPortFile(tree_.root() + "/port", aggregator_, absl::Seconds(20));
  ASSERT_NE(port_, 0) << aggregator_.Log();
  EXPECT_THAT(aggregator_.Log(), HasSubstr("100 nodes (11 switches), 159 links"));

  CommandResult text = Cli({"topology"});
  ASSERT_EQ(text.exit_code, 0) << text.output;
  // r510gluster1's HCA (H-0002c90300080e84; no agent, so a CA known by GUID) on port 27 of the
  // switch described "Voltaire 4036 # 4036-8BBA".
  std::string line;
  for (absl::string_view candidate : absl::StrSplit(text.output, '\n')) {
    if (absl::StartsWith(candidate, "ca:0x0002c90300080e84/1 ")) {
      line = std::string(candidate);
    }
  }
  EXPECT_THAT(line, HasSubstr("  <->  switch:Voltaire 4036 # 4036-8BBA/27  (topology file)"))
      << text.output;
  EXPECT_THAT(text.output,
              HasSubstr("159 links, 11 switches, 89 hosts (159 from topology file)\n"));

  CommandResult json = Cli({"--json", "topology"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  v1::GetTopologyResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.output, &response).ok())
      << json.output;
  EXPECT_EQ(response.links_size(), 159);
  bool found = false;
  for (const v1::TopologyLink& link : response.links()) {
    if (link.a().guid() == "0x0002c90300080e84") {
      found = true;
      EXPECT_EQ(link.b().guid(), "0x0008f10500108bba");
      EXPECT_EQ(link.b().port(), 27u);
      EXPECT_TRUE(link.b().is_switch());
      EXPECT_EQ(link.source(), v1::LINK_SOURCE_TOPOLOGY_FILE);
    }
  }
  EXPECT_TRUE(found) << json.output;
}

TEST_F(TopologyCliTest, AMalformedTopologyFileStopsTheAggregatorWithTheLine) {
  absl::StatusOr<std::string> text = ReadSmallFile(SharedFixture(kX5), 1 << 24);
  ASSERT_TRUE(text.ok()) << text.status();
  // Line 14 cut short, as a file written while the disk filled up.
  std::vector<std::string> lines = absl::StrSplit(*text, '\n');
  ASSERT_GT(lines.size(), 20u);
  ASSERT_TRUE(absl::StartsWith(lines[13], "[4]\t\"H-003048c749cd0000\"[1]")) << lines[13];
  lines[13] = "[4]\t\"H-003048c749cd0000\"[";
  const std::string damaged = tree_.root() + "/damaged.topo";
  std::ofstream(damaged) << absl::StrJoin(lines, "\n");

  ASSERT_TRUE(aggregator_.Start(AggregatorArgv(damaged), tree_.root() + "/aggregator.log"));
  std::optional<int> code = aggregator_.Wait(absl::Seconds(20));
  ASSERT_TRUE(code.has_value()) << "still running; log:\n" << aggregator_.Log();
  EXPECT_EQ(*code, 2) << aggregator_.Log();
  EXPECT_THAT(aggregator_.Log(),
              HasSubstr("topology_file " + damaged + ": INVALID_ARGUMENT: line 14:"));
}

// A series retention too short to be meant (seconds of absence would retire series between two
// slow collector cycles) stops the start instead of churning series.
TEST_F(TopologyCliTest, ASeriesRetentionUnderAMinuteStopsTheAggregator) {
  const std::string config = tree_.root() + "/aggregator.textproto";
  std::ofstream(config) << "series_retention_s: 5\n";
  std::vector<std::string> argv = AggregatorArgv(SharedFixture(kX5));
  argv.push_back("--config=" + config);
  ASSERT_TRUE(aggregator_.Start(argv, tree_.root() + "/aggregator.log"));
  std::optional<int> code = aggregator_.Wait(absl::Seconds(20));
  ASSERT_TRUE(code.has_value()) << "still running; log:\n" << aggregator_.Log();
  EXPECT_EQ(*code, 2) << aggregator_.Log();
  EXPECT_THAT(aggregator_.Log(), HasSubstr("series_retention_s must be 0 (keep forever) or at "
                                           "least 60, not 5"));
}

// A recording block that makes no sense stops the start (exit 2) and says what is wrong.
TEST_F(TopologyCliTest, NonsenseRecordingStopsTheAggregator) {
  tree_.WriteFile("a_file", "not a directory");
  const std::pair<std::string, std::string> cases[] = {
      {"recording { directory: \"relative/dir\" }", "must be an absolute path"},
      {"recording { directory: \"/tmp/x\" max_bytes: 1000 }", "at least 1048576"},
      {"recording { directory: \"/tmp/x\" max_age_s: 5 }", "at least 60, not 5"},
      {"recording { max_bytes: 10000000 }", "without a directory"},
      {"recording { directory: \"" + tree_.root() + "/a_file\" }", "not a directory"},
  };
  int n = 0;
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    const std::string config = tree_.root() + "/aggregator.textproto";
    std::ofstream(config) << text << "\n";
    std::vector<std::string> argv = AggregatorArgv(SharedFixture(kX5));
    argv.push_back("--config=" + config);
    DaemonProcess aggregator;  // one process per case
    ASSERT_TRUE(aggregator.Start(argv, absl::StrCat(tree_.root(), "/aggregator-", ++n, ".log")));
    std::optional<int> code = aggregator.Wait(absl::Seconds(20));
    ASSERT_TRUE(code.has_value()) << "still running; log:\n" << aggregator.Log();
    EXPECT_EQ(*code, 2) << aggregator.Log();
    EXPECT_THAT(aggregator.Log(), HasSubstr(message));
  }
}

}  // namespace
}  // namespace fabricmon::testing
