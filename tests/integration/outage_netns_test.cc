// A network partition between agent and aggregator over a real link (ctest label "netns"; needs
// root and iproute2, skips otherwise). Two network namespaces made for this test (fm-agg-<pid>,
// fm-agt-<pid>) are joined by a veth pair with TEST-NET-1 addresses (192.0.2.1/24 aggregator
// side, 192.0.2.2/24 agent side, RFC 5737) that exist only inside them, so nothing leaves them.
//
// The real fabricmon-aggregator runs in its namespace (`ip netns exec`). The agent is in this
// process, which moves itself into the agent's namespace before gRPC starts any thread: a network
// namespace belongs to a thread and is inherited by the threads it creates, so every socket of
// the agent is made there. That is why this test has its own binary with a single case.
//
// The partition: `ip link set <veth> down` on the aggregator's side for some twenty collection
// cycles (the peer loses carrier, packets go nowhere; neither end is told), then up. TCP
// retransmits or the agent reconnects; either way nothing within the replay buffer's bound may be
// lost, and nothing stored twice.
//
// Every wait is bounded in count and time; the namespaces (and with them the veth pair) are
// deleted on every path, the aggregator process is killed.

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "gtest/gtest.h"
#include "tests/integration/aggregator_process.h"
#include "tests/integration/metrics_text.h"
#include "tests/integration/stream_harness.h"
#include "tests/security/daemon_process.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

constexpr char kNode[] = "gpu-node-1";
constexpr char kAggregatorAddress[] = "192.0.2.1";

int ThreadCount() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) {
    return -1;
  }
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') {
      ++count;
    }
  }
  closedir(dir);
  return count;
}

class OutageNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (network namespaces, veth)";
    }
    if (Ip({"-V"}).exit_code != 0) {
      GTEST_SKIP() << "iproute2 `ip` is not installed";
    }
    if (ThreadCount() != 1) {
      GTEST_SKIP() << "the process already runs threads (" << ThreadCount()
                   << "); they would stay outside the agent's namespace. Run one case per "
                      "process, as ctest does.";
    }
    const std::string pid = absl::StrCat(getpid());
    ns_aggregator_ = "fm-agg-" + pid;
    ns_agent_ = "fm-agt-" + pid;
    veth_aggregator_ = "fmoa" + pid;  // IFNAMSIZ: at most 15 characters
    veth_agent_ = "fmob" + pid;
    const CommandResult added = Ip({"netns", "add", ns_aggregator_});
    if (added.exit_code != 0) {
      GTEST_SKIP() << "`ip netns add` failed (no CAP_SYS_ADMIN / netns support?): " << added.output;
    }
    created_aggregator_ = true;
    ASSERT_EQ(Ip({"netns", "add", ns_agent_}).exit_code, 0);
    created_agent_ = true;
    const std::vector<std::vector<std::string>> setup = {
        {"link", "add", veth_aggregator_, "netns", ns_aggregator_, "type", "veth", "peer", "name",
         veth_agent_, "netns", ns_agent_},
        {"-n", ns_aggregator_, "addr", "add", "192.0.2.1/24", "dev", veth_aggregator_},
        {"-n", ns_agent_, "addr", "add", "192.0.2.2/24", "dev", veth_agent_},
        {"-n", ns_aggregator_, "link", "set", veth_aggregator_, "up"},
        {"-n", ns_agent_, "link", "set", veth_agent_, "up"},
        {"-n", ns_aggregator_, "link", "set", "lo", "up"},
        {"-n", ns_agent_, "link", "set", "lo", "up"},
    };
    for (const std::vector<std::string>& args : setup) {
      const CommandResult result = Ip(args);
      ASSERT_EQ(result.exit_code, 0) << absl::StrJoin(args, " ") << ": " << result.output;
    }
    // Into the agent's namespace, before any thread exists (see the file comment).
    const std::string path = "/var/run/netns/" + ns_agent_;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
    const int joined = setns(fd, CLONE_NEWNET);
    const int error = errno;
    close(fd);
    ASSERT_EQ(joined, 0) << "setns " << path << ": " << strerror(error);

    PreferMemoryForTempTrees();
    tree_ = std::make_unique<TempTree>();
    tree_->CopyTree(SharedFixture("sysfs/gpud-h100/sys"), "sys");
    sysfs_root_ = tree_->root() + "/sys";
  }

  void TearDown() override {
    if (mutator_ != nullptr) {
      mutator_->Stop();
    }
    agent_.reset();
    aggregator_.reset();
    // Deleting a namespace deletes the veth pair with it. This process's threads keep the
    // agent's namespace alive (unnamed) until the process exits.
    if (created_aggregator_) {
      EXPECT_EQ(Ip({"netns", "del", ns_aggregator_}).exit_code, 0);
    }
    if (created_agent_) {
      EXPECT_EQ(Ip({"netns", "del", ns_agent_}).exit_code, 0);
    }
  }

  static CommandResult Ip(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/env", "ip"});
    return RunCommand(args, absl::Seconds(20));
  }

  std::vector<TextSample> Scrape() {
    absl::StatusOr<std::string> text = aggregator_->Scrape();
    EXPECT_TRUE(text.ok()) << text.status() << "\n" << aggregator_->Log();
    absl::StatusOr<std::vector<TextSample>> samples = ParseText(text.ok() ? *text : "");
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.ok() ? *samples : std::vector<TextSample>();
  }

  agent::ReplayBuffer& buffer() { return agent_->agent().buffer(); }

  std::string ns_aggregator_, ns_agent_, veth_aggregator_, veth_agent_;
  bool created_aggregator_ = false;
  bool created_agent_ = false;
  std::unique_ptr<TempTree> tree_;
  std::string sysfs_root_;
  TempTree work_;
  std::unique_ptr<AggregatorProcess> aggregator_;
  std::unique_ptr<CounterMutator> mutator_;
  std::unique_ptr<AgentHarness> agent_;
};

TEST_F(OutageNetnsTest, StreamRecoversFromALinkDownAndLosesNothing) {
  aggregator_ = std::make_unique<AggregatorProcess>(work_.root(), ns_aggregator_);
  ASSERT_TRUE(aggregator_->Start(kAggregatorAddress)) << aggregator_->Log();
  mutator_ = std::make_unique<CounterMutator>(sysfs_root_);
  mutator_->Start();
  // Production's keepalive (agent_daemon.cc): 20 s, 10 s to answer. The partition is shorter.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  agent_ = std::make_unique<AgentHarness>(
      sysfs_root_,
      grpc::CreateCustomChannel(absl::StrCat(kAggregatorAddress, ":", aggregator_->grpc_port()),
                                grpc::InsecureChannelCredentials(), args));
  ASSERT_TRUE(agent_->Start());
  ASSERT_TRUE(WaitFor([&] { return buffer().acked_sequence() >= 3; }, absl::Seconds(30)))
      << "the agent's batches did not cross the veth";

  // Partition: the aggregator's end goes down for some twenty cycles.
  ASSERT_EQ(Ip({"-n", ns_aggregator_, "link", "set", veth_aggregator_, "down"}).exit_code, 0);
  const uint64_t pushed_at_partition = buffer().last_sequence();
  const bool grew = WaitFor([&] { return buffer().last_sequence() >= pushed_at_partition + 20; },
                            absl::Seconds(30));
  const size_t held = buffer().size();
  ASSERT_EQ(Ip({"-n", ns_aggregator_, "link", "set", veth_aggregator_, "up"}).exit_code, 0);
  ASSERT_TRUE(grew) << "the agent stopped collecting during the partition";
  EXPECT_GE(held, 20u) << "batches were acknowledged across a link that was down";

  // Healed: everything arrives (TCP retransmission backs off to seconds; bounded generously).
  ASSERT_TRUE(WaitFor([&] { return buffer().acked_sequence() > pushed_at_partition + 20; },
                      absl::Seconds(90)))
      << "the stream did not recover: acked " << buffer().acked_sequence() << ", "
      << agent_->stream().stats().last_error;
  agent_->StopCollecting();
  const uint64_t pushed = buffer().last_sequence();
  ASSERT_TRUE(WaitFor([&] { return buffer().acked_sequence() == pushed; }, absl::Seconds(30)));

  const std::vector<TextSample> samples = Scrape();
  const std::vector<std::pair<std::string, std::string>> node = {{"node", kNode}};
  const agent::StreamClientStats stats = agent_->stream().stats();
  // 1..pushed stored, each once (one aggregator, one store): nothing lost, nothing dropped.
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_batches_total"), static_cast<double>(pushed))
      << "reconnects " << stats.connects;
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_sequence_gaps_total", node), 0.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_agent_dropped_batches_total", node), 0.0);
  EXPECT_EQ(buffer().dropped_cycles(), 0u);
  // A replay after a reconnect may resend what the aggregator stored but had not acknowledged;
  // the store recognises each (counted, not stored again).
  const std::optional<double> duplicates =
      SampleValue(samples, "fabricmon_node_duplicate_batches_total", node);
  ASSERT_TRUE(duplicates.has_value());
  EXPECT_LE(*duplicates, static_cast<double>(stats.replayed_batches));
  if (stats.connects == 1) {
    EXPECT_EQ(*duplicates, 0.0) << "one stream, yet a batch came twice";
  }
}

}  // namespace
}  // namespace fabricmon::testing
