// The real `fabricmon` CLI against several aggregator shards (the telemetry and diagnostics
// services over loopback TCP, as aggregator_main.cc serves them), each carrying its own agent:
// --aggregator=a,b lists both shards' nodes as one fleet; a shard that does not answer is named
// and the command exits 1 after printing what the others answered. These shards run no detection
// engine (findings, diagnose and topology answer UNIMPLEMENTED), so `nodes` carries the fan-out
// here; the merges of the other answers are unit-tested (fan_out_test.cc).

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "fabricmon/v1/diagnostics.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/integration/stream_harness.h"
#include "tests/security/daemon_process.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ShardedCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    PreferMemoryForTempTrees();
    tree_.CopyTree(SharedFixture("sysfs/gpud-h100/sys"), "sys");
    for (const char* node : {"node-a", "node-b"}) {
      shards_.push_back(std::make_unique<AggregatorHarness>(Transport::kTcp, AggregatorOptions()));
      ASSERT_TRUE(shards_.back()->Start());
      AgentHarnessOptions options;
      options.node_name = node;
      agents_.push_back(std::make_unique<AgentHarness>(tree_.root() + "/sys",
                                                       shards_.back()->channel(), options));
      ASSERT_TRUE(agents_.back()->Start());
    }
    for (size_t i = 0; i < shards_.size(); ++i) {
      const std::string node = agents_[i]->options().node_name;
      ASSERT_TRUE(WaitFor([&] {
        auto summary = shards_[i]->Node(node);
        return summary.has_value() && summary->connected && summary->counters.batches > 0;
      })) << node;
    }
  }

  void TearDown() override {
    for (auto& agent : agents_) {
      agent->Stop();
    }
  }

  CommandResult Cli(const std::string& aggregators, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BuildPath("daemon/cli/fabricmon"),
                                     "--aggregator=" + aggregators, "--timeout_s=5"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, absl::Seconds(30));
  }

  std::string Both() { return absl::StrCat(shards_[0]->address(), ",", shards_[1]->address()); }

  TempTree tree_;
  std::vector<std::unique_ptr<AggregatorHarness>> shards_;
  std::vector<std::unique_ptr<AgentHarness>> agents_;
};

TEST_F(ShardedCliTest, NodesOfEveryShardAreOneFleet) {
  const CommandResult one = Cli(shards_[0]->address(), {"nodes"});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_THAT(one.output, HasSubstr("node-a"));
  EXPECT_THAT(one.output, Not(HasSubstr("node-b")));

  const CommandResult both = Cli(Both(), {"--json", "nodes"});
  ASSERT_EQ(both.exit_code, 0) << both.output;
  v1::ListNodesResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(both.output, &response).ok())
      << both.output;
  ASSERT_EQ(response.nodes_size(), 2) << both.output;
  EXPECT_EQ(response.nodes(0).name(), "node-a");
  EXPECT_EQ(response.nodes(1).name(), "node-b");
  EXPECT_TRUE(response.nodes(0).up() && response.nodes(1).up());

  // Findings of every shard are one answer (none here: nothing is wrong on either node).
  const CommandResult findings = Cli(Both(), {"findings"});
  EXPECT_EQ(findings.exit_code, 0) << findings.output;
  EXPECT_THAT(findings.output, HasSubstr("no active findings"));

  // Every shard failing says so for each, naming it.
  const std::vector<std::string> dead = {absl::StrCat("127.0.0.1:", FreePort()),
                                         absl::StrCat("127.0.0.1:", FreePort())};
  const CommandResult none = Cli(absl::StrCat(dead[0], ",", dead[1]), {"findings"});
  EXPECT_EQ(none.exit_code, 1) << none.output;
  for (const std::string& address : dead) {
    EXPECT_THAT(none.output, HasSubstr(absl::StrCat("shard ", address))) << none.output;
  }
}

TEST_F(ShardedCliTest, AShardThatDoesNotAnswerIsNamedAndTheRestIsPrinted) {
  const std::string dead = absl::StrCat("127.0.0.1:", FreePort());  // nothing listens there
  const CommandResult partial = Cli(absl::StrCat(Both(), ",", dead), {"nodes"});
  EXPECT_EQ(partial.exit_code, 1) << partial.output;
  EXPECT_THAT(partial.output, HasSubstr("node-a"));
  EXPECT_THAT(partial.output, HasSubstr("node-b"));
  EXPECT_THAT(partial.output, HasSubstr(absl::StrCat("shard ", dead, " did not answer")));

  // A shard going away mid-life: its nodes drop out of the answer, and the answer says so.
  shards_[1]->StopServing();
  const CommandResult one_left = Cli(Both(), {"nodes"});
  EXPECT_EQ(one_left.exit_code, 1) << one_left.output;
  EXPECT_THAT(one_left.output, HasSubstr("node-a"));
  EXPECT_THAT(one_left.output, Not(HasSubstr("node-b")));
  EXPECT_THAT(one_left.output,
              HasSubstr(absl::StrCat("shard ", shards_[1]->address(), " did not answer")));

  const CommandResult none = Cli(dead, {"nodes"});
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_THAT(none.output, HasSubstr("nothing listens at " + dead));
}

}  // namespace
}  // namespace fabricmon::testing
