// AgentDaemon, the object fabricmon-agent runs, in process: configured as an operator configures
// the agent (an aggregator address, plaintext, listen_metrics, the ib_sysfs collector on a copy of
// a captured 8×H100 sysfs tree), streaming over loopback TCP to a real aggregator
// (AggregatorServer behind the harness's gRPC server). Nothing is mocked.
//
// No test asserts a duration: they wait (bounded) for states.

#include "daemon/agent/agent_daemon.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "fabricmon/v1/config.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/metrics_text.h"
#include "tests/integration/stream_harness.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kNode[] = "daemon-node";

std::vector<TextSample> Parse(const std::string& text) {
  absl::StatusOr<std::vector<TextSample>> samples = ParseText(text);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::vector<TextSample>();
}

class AgentDaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetMinLogLevel(LogLevel::kWarning);
    PreferMemoryForTempTrees();
  }

  void SetUp() override {
    tree_.CopyTree(SharedFixture("sysfs/gpud-h100/sys"), "sys");
    aggregator_ = std::make_unique<AggregatorHarness>(Transport::kTcp, AggregatorOptions{});
    ASSERT_TRUE(aggregator_->Start());
  }

  void TearDown() override {
    daemon_.reset();  // its stream must not outlive the server it talks to
    aggregator_.reset();
  }

  // The agent's configuration: only ib_sysfs, on the copied tree, every 100 ms; the collectors
  // that would read this host are off.
  v1::AgentConfig Config() const {
    v1::AgentConfig config;
    config.set_node_name(kNode);
    config.mutable_tls()->set_insecure_plaintext(true);
    config.set_listen_metrics("127.0.0.1:0");
    config.set_reconnect_initial_backoff_ms(20);
    config.set_reconnect_max_backoff_ms(200);
    v1::CollectorsConfig& collectors = *config.mutable_collectors();
    collectors.mutable_ib_sysfs()->set_enabled(true);
    collectors.mutable_ib_sysfs()->set_interval_ms(100);
    collectors.mutable_ib_sysfs()->set_sysfs_root(tree_.root() + "/sys");
    collectors.mutable_ethtool()->set_enabled(false);
    collectors.mutable_netdev()->set_enabled(false);
    collectors.mutable_nvml()->set_enabled(false);
    collectors.mutable_ib_fabric()->set_enabled(false);
    collectors.mutable_rdma_qp()->set_enabled(false);
    config.add_aggregator(aggregator_->address());
    return config;
  }

  TempTree tree_;
  std::unique_ptr<AggregatorHarness> aggregator_;
  std::unique_ptr<agent::AgentDaemon> daemon_;
};

TEST_F(AgentDaemonTest, StreamsTheNodeAndStopsWithEverythingAcknowledged) {
  absl::StatusOr<std::unique_ptr<agent::AgentDaemon>> created =
      agent::AgentDaemon::Create(Config());
  ASSERT_TRUE(created.ok()) << created.status();
  daemon_ = *std::move(created);
  ASSERT_TRUE(daemon_->Start().ok());
  ASSERT_GT(daemon_->metrics_port(), 0);

  // The node's counters arrive at the aggregator, and they are what the node serves itself (the
  // tree does not move, so both sides read the same values).
  const std::vector<std::pair<std::string, std::string>> node = {{"node", kNode}};
  std::map<std::string, std::string> local;
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<std::string> body = HttpGet(daemon_->metrics_port(), "/metrics");
    if (!body.ok()) {
      return false;
    }
    local = SelectSamples(Parse(*body), "fabricmon_ib_");
    return local.size() > 400;
  })) << "the node's own /metrics never served the tree's 9 devices";
  std::string difference;
  EXPECT_TRUE(WaitFor([&] {
    difference = DescribeDifference(
        local, SelectSamples(Parse(aggregator_->Scrape()), "fabricmon_ib_", node, {"node"}));
    return difference.empty();
  })) << difference;
  EXPECT_TRUE(WaitFor([&] { return daemon_->ready(); }));

  std::optional<agent::StreamClientStats> stats = daemon_->stream_stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_TRUE(stats->connected);
  EXPECT_EQ(stats->aggregator, aggregator_->address());
  EXPECT_EQ(stats->aggregator_rank, 0);
  EXPECT_EQ(stats->rejects, 0u) << stats->last_error;

  // Stop flushes: every batch collected is acknowledged before the stream ends (a Stop that gave
  // up at its deadline would leave some behind), and the aggregator sees the stream end.
  daemon_->Stop(absl::Seconds(30));
  EXPECT_EQ(daemon_->unacknowledged_batches(), 0u);
  stats = daemon_->stream_stats();
  EXPECT_FALSE(stats->connected);
  EXPECT_EQ(stats->rejects, 0u) << stats->last_error;
  EXPECT_TRUE(WaitFor([&] {
    std::optional<store::NodeState::Summary> summary = aggregator_->Node(kNode);
    return summary.has_value() && !summary->connected;
  }));
  const std::vector<TextSample> after = Parse(aggregator_->Scrape());
  EXPECT_EQ(SampleValue(after, "fabricmon_aggregator_streams"), 0.0);
  EXPECT_EQ(SampleValue(after, "fabricmon_node_up", node), 0.0);
  EXPECT_EQ(SampleValue(after, "fabricmon_node_sequence_gaps_total", node), 0.0);
  // /metrics is closed with the daemon.
  EXPECT_FALSE(HttpGet(daemon_->metrics_port(), "/metrics", absl::Seconds(2)).ok());
}

TEST_F(AgentDaemonTest, CreateRefusesWhatAStartRefuses) {
  v1::AgentConfig nothing = Config();
  nothing.clear_aggregator();
  nothing.clear_listen_metrics();
  absl::StatusOr<std::unique_ptr<agent::AgentDaemon>> created = agent::AgentDaemon::Create(nothing);
  ASSERT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr("nothing to do"));

  v1::AgentConfig no_tls = Config();
  no_tls.mutable_tls()->set_insecure_plaintext(false);
  EXPECT_FALSE(agent::AgentDaemon::Create(no_tls).ok()) << "streamed without TLS or the opt-in";

  v1::AgentConfig failover = Config();
  failover.set_failover_after_ms(50);
  created = agent::AgentDaemon::Create(failover);
  ASSERT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr("failover_after_ms must be within"));

  v1::AgentConfig coalesce = Config();
  coalesce.set_stream_coalesce_ms(1001);
  created = agent::AgentDaemon::Create(coalesce);
  ASSERT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr("stream_coalesce_ms must be within 0..1000"));
  coalesce.set_stream_coalesce_ms(0);  // off: every batch written at once
  EXPECT_TRUE(agent::AgentDaemon::Create(coalesce).ok());
}

TEST_F(AgentDaemonTest, StartFailsWhenMetricsCannotListenAndStartsNothing) {
  absl::StatusOr<std::unique_ptr<agent::AgentDaemon>> first = agent::AgentDaemon::Create(Config());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Start().ok());
  v1::AgentConfig taken = Config();
  taken.set_listen_metrics(absl::StrCat("127.0.0.1:", (*first)->metrics_port()));
  taken.set_node_name("daemon-node-2");
  absl::StatusOr<std::unique_ptr<agent::AgentDaemon>> second = agent::AgentDaemon::Create(taken);
  ASSERT_TRUE(second.ok()) << second.status();
  const absl::Status started = (*second)->Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kUnavailable) << started;
  EXPECT_EQ((*second)->metrics_port(), 0);
  // Nothing of the second daemon streams: only the first node reaches the aggregator.
  ASSERT_TRUE(WaitFor([&] { return aggregator_->Node(kNode).has_value(); }));
  EXPECT_FALSE(aggregator_->Node("daemon-node-2").has_value());
  EXPECT_EQ((*second)->stream_stats()->connect_attempts, 0u);
}

}  // namespace
}  // namespace fabricmon::testing
