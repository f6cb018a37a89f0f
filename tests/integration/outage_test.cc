// What the agent does when its aggregator hangs, dies in the middle of a replay, or stays away
// longer than the replay buffer lasts. A real agent (agent::Agent with the ib_sysfs collector on
// a copy of a captured 8×H100 sysfs tree whose counters keep moving, and the StreamClient)
// streams over loopback TCP to the real fabricmon-aggregator process, which the test stops
// (SIGSTOP), resumes and kills (SIGKILL); where the test must stop the aggregator at an exact
// batch, the aggregator is the in-process one of stream_harness.h behind a real TCP server that
// is shut down and started again on the same port.
//
// What must hold, however the outage falls: nothing within the replay buffer's bound is lost,
// nothing is stored twice by one aggregator, and what the buffer dropped beyond its bound is
// counted exactly: the agent's dropped count equals the sum of what the aggregators were told
// (fabricmon_node_agent_dropped_batches_total).
//
// No test asserts a duration: they wait, bounded in count and time, for states.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/clock.h"
#include "daemon/common/logging.h"
#include "gtest/gtest.h"
#include "tests/integration/aggregator_process.h"
#include "tests/integration/metrics_text.h"
#include "tests/integration/stream_harness.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

constexpr char kNode[] = "gpu-node-1";
const std::vector<std::pair<std::string, std::string>> kNodeLabel = {{"node", kNode}};

// A channel to `target` that finds a restarted aggregator within a few cycles (gRPC's own
// reconnect backoff starts at 1 s).
std::shared_ptr<grpc::Channel> AgentChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

// The real clock, except that NowUnixNanos() can be told to let `n` more calls through and hold
// the next one until Release(). The aggregator reads the time once per hello and once per stored
// batch (AgentStream), so this stops a live aggregator in the middle of a batch, at an exact
// point of a replay, without any hook in production code.
class GateClock final : public Clock {
 public:
  int64_t NowUnixNanos() const override {
    absl::MutexLock lock(&mu_);
    if (armed_) {
      if (allowed_ > 0) {
        --allowed_;
      } else {
        ++held_;
        mu_.Await(absl::Condition(this, &GateClock::Open));
        --held_;
      }
    }
    return RealClock::Get().NowUnixNanos();
  }
  int64_t MonotonicNanos() const override { return RealClock::Get().MonotonicNanos(); }

  void HoldAfter(int calls) {
    absl::MutexLock lock(&mu_);
    armed_ = true;
    allowed_ = calls;
  }
  int held() const {
    absl::MutexLock lock(&mu_);
    return held_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    armed_ = false;
  }

 private:
  bool Open() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !armed_; }

  mutable absl::Mutex mu_;
  mutable bool armed_ ABSL_GUARDED_BY(mu_) = false;
  mutable int allowed_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int held_ ABSL_GUARDED_BY(mu_) = 0;
};

class OutageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetMinLogLevel(LogLevel::kWarning);
    PreferMemoryForTempTrees();
    tree_ = new TempTree();
    tree_->CopyTree(SharedFixture("sysfs/gpud-h100/sys"), "sys");
  }
  static void TearDownTestSuite() {
    delete tree_;
    tree_ = nullptr;
  }

  void SetUp() override {
    sysfs_root_ = tree_->root() + "/sys";
    mutator_ = std::make_unique<CounterMutator>(sysfs_root_);
    mutator_->Start();
  }

  void TearDown() override {
    // A batch still held (a failed assertion mid-test) would keep the server from shutting down.
    gate_.Release();
    // The agent first: its stream must not outlive the server it talks to.
    mutator_->Stop();
    agent_.reset();
    harness_.reset();
    process_.reset();
  }

  // The real aggregator process on loopback.
  void StartProcess() {
    if (process_ == nullptr) {
      process_ = std::make_unique<AggregatorProcess>(work_.root());
    }
    ASSERT_TRUE(process_->Start()) << process_->Log();
  }

  // The agent, streaming to `channel`; waits until the aggregator acknowledged `batches`.
  void StartAgent(std::shared_ptr<grpc::Channel> channel, AgentHarnessOptions options = {},
                  uint64_t batches = 3) {
    agent_ = std::make_unique<AgentHarness>(sysfs_root_, std::move(channel), options);
    ASSERT_TRUE(agent_->Start());
    ASSERT_TRUE(WaitFor([&] { return buffer().acked_sequence() >= batches; }))
        << "the aggregator did not acknowledge the agent's first batches";
  }

  agent::ReplayBuffer& buffer() { return agent_->agent().buffer(); }
  bool connected() { return agent_->stream().stats().connected; }

  // Stops collecting and waits until the aggregator acknowledged every batch; the last sequence.
  uint64_t Quiesce() {
    agent_->StopCollecting();
    const uint64_t pushed = buffer().last_sequence();
    EXPECT_TRUE(WaitFor([&] { return buffer().acked_sequence() == pushed; }))
        << "acknowledged " << buffer().acked_sequence() << " of " << pushed;
    return pushed;
  }

  // The process's /metrics, parsed.
  std::vector<TextSample> ScrapeProcess() {
    absl::StatusOr<std::string> text = process_->Scrape();
    EXPECT_TRUE(text.ok()) << text.status() << "\n" << process_->Log();
    absl::StatusOr<std::vector<TextSample>> samples = ParseText(text.ok() ? *text : "");
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.ok() ? *samples : std::vector<TextSample>();
  }

  // The agent's own fabricmon_agent_replay_buffer_bytes as its /metrics would show it.
  std::optional<uint64_t> ExportedBufferBytes() {
    for (const exposition::SampleRef& sample : agent_->agent().LatestSamples()) {
      if (sample.series->name == "fabricmon_agent_replay_buffer_bytes") {
        return sample.raw_value;
      }
    }
    return std::nullopt;
  }

  static TempTree* tree_;
  std::string sysfs_root_;
  TempTree work_;
  GateClock gate_;  // outlives the harness (declared before it)
  std::unique_ptr<CounterMutator> mutator_;
  std::unique_ptr<AggregatorProcess> process_;
  std::unique_ptr<AggregatorHarness> harness_;
  std::unique_ptr<AgentHarness> agent_;
};

TempTree* OutageTest::tree_ = nullptr;

// (a) The aggregator process hangs (SIGSTOP) for some thirty collection cycles: the connection
// stays open, nothing is read or acknowledged, the agent keeps collecting into its buffer. When
// the process resumes, every batch arrives on the same stream, in sequence, each stored once.
TEST_F(OutageTest, HungAggregatorLosesNothingAfterItResumes) {
  StartProcess();
  StartAgent(AgentChannel(absl::StrCat("127.0.0.1:", process_->grpc_port())));

  process_->Hang();
  const uint64_t pushed_at_hang = buffer().last_sequence();
  // Nothing is acknowledged any more: the backlog grows, held unacknowledged in the buffer.
  ASSERT_TRUE(
      WaitFor([&] { return buffer().last_sequence() >= pushed_at_hang + 30; }, absl::Seconds(30)))
      << "the agent stopped collecting while the aggregator hung";
  EXPECT_GE(buffer().size(), 30u) << "a hung aggregator acknowledged";
  EXPECT_TRUE(connected()) << "the agent gave up a stream that only stalled";
  process_->Continue();

  const uint64_t pushed = Quiesce();
  const std::vector<TextSample> samples = ScrapeProcess();
  // Sequences 1..pushed, each stored exactly once: no gap, no duplicate, nothing dropped.
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_batches_total"),
            static_cast<double>(pushed));
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_sequence_gaps_total", kNodeLabel), 0.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_duplicate_batches_total", kNodeLabel), 0.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_agent_dropped_batches_total", kNodeLabel), 0.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_up", kNodeLabel), 1.0);
  EXPECT_EQ(buffer().dropped_cycles(), 0u);
  // Ridden out on the first stream: nothing was sent twice.
  const agent::StreamClientStats stats = agent_->stream().stats();
  EXPECT_EQ(stats.connects, 1u);
  EXPECT_EQ(stats.replayed_batches, 0u);
}

// (b) The aggregator dies, the agent's backlog overflows its buffer, the aggregator comes back
// and is killed again in the middle of the replay (after exactly three replayed batches, held
// at the fourth), the backlog overflows again, and a third aggregator takes the rest. Every
// sequence the agent produced is stored by one of the three or counted as dropped, each
// aggregator stored what it got once, and the agent's dropped count is the sum of theirs.
TEST_F(OutageTest, AggregatorKilledDuringReplayLosesNothingWithinTheBuffer) {
  AggregatorOptions options;
  options.clock = &gate_;
  harness_ = std::make_unique<AggregatorHarness>(Transport::kTcp, options);
  ASSERT_TRUE(harness_->Start());
  AgentHarnessOptions agent_options;
  // Eight ib_sysfs cycles (the agent's own 1 s health cycle is much smaller).
  agent_options.replay_buffer_bytes = 8 * IbSysfsCycleBytes(sysfs_root_);
  StartAgent(harness_->channel(), agent_options);
  auto node = [&] { return harness_->Node(kNode); };

  // Outage 1: the first aggregator goes, the backlog outgrows the buffer.
  harness_->StopServing();
  ASSERT_TRUE(WaitFor([&] { return !connected(); }));
  const uint64_t acked_1 = buffer().acked_sequence();  // no ack can arrive any more
  const store::NodeState::Summary first = *node();
  ASSERT_TRUE(WaitFor([&] { return buffer().unconfirmed_evictions() >= 3; }, absl::Seconds(30)));

  // The second aggregator stores the hello and three replayed batches; the fourth is held.
  gate_.HoldAfter(1 + 3);
  ASSERT_TRUE(harness_->Start());
  ASSERT_TRUE(WaitFor([&] { return gate_.held() == 1; }, absl::Seconds(30)))
      << "the second aggregator never reached its fourth batch";
  const uint64_t stored_before_kill = node()->last_stored_sequence;
  const uint64_t backlog_end = buffer().last_sequence();
  EXPECT_GT(backlog_end, stored_before_kill + 1) << "the replay was not in its middle";
  // The agent has the acks of what was stored, so the drop announced in the first replayed batch
  // is settled and will not be announced again.
  ASSERT_TRUE(WaitFor([&] { return buffer().acked_sequence() >= stored_before_kill; }))
      << "acked " << buffer().acked_sequence() << ", stored " << stored_before_kill;

  // Kill it: the server cancels the stream (the agent sees it end), then the held batch goes on
  // into the store of an aggregator that is going away, as a batch in flight would.
  std::thread stopper([&] { harness_->StopServing(); });
  const bool ended = WaitFor([&] { return !connected(); }, absl::Seconds(20));
  gate_.Release();
  stopper.join();
  ASSERT_TRUE(ended) << "the agent did not see the second aggregator go";
  const uint64_t acked_2 = buffer().acked_sequence();
  const store::NodeState::Summary second = *node();

  // Outage 2 overflows the buffer again; the third aggregator takes everything after acked_2.
  ASSERT_TRUE(WaitFor([&] { return buffer().unconfirmed_evictions() >= 3; }, absl::Seconds(30)));
  ASSERT_TRUE(harness_->Start());
  ASSERT_TRUE(WaitFor([&] {
    return agent_->stream().stats().connects >= 3 && buffer().acked_sequence() > backlog_end;
  })) << "no replay to the third aggregator";
  const uint64_t pushed = Quiesce();
  const store::NodeState::Summary third = *node();

  // First: 1..n, stored or announced dropped (nothing dropped before the outage).
  EXPECT_EQ(first.counters.batches + first.counters.agent_dropped_batches,
            first.last_stored_sequence);
  EXPECT_GE(first.last_stored_sequence, acked_1);
  // Second: from acked_1 on, three replayed batches and the held one, the first of them
  // announcing the first outage's drops.
  EXPECT_GT(second.last_stored_sequence, stored_before_kill);
  EXPECT_EQ(acked_1 + second.counters.batches + second.counters.agent_dropped_batches,
            second.last_stored_sequence);
  EXPECT_EQ(second.counters.batches, 4u);
  EXPECT_GE(second.counters.agent_dropped_batches, 3u);
  EXPECT_GE(second.last_stored_sequence, acked_2);
  EXPECT_LT(second.last_stored_sequence, backlog_end) << "killed after the replay, not during";
  // Third: everything after acked_2 up to the last sequence, stored or announced dropped.
  EXPECT_EQ(third.last_stored_sequence, pushed);
  EXPECT_EQ(acked_2 + third.counters.batches + third.counters.agent_dropped_batches, pushed);
  EXPECT_GE(third.counters.agent_dropped_batches, 3u);
  // Each stored what it got once.
  EXPECT_EQ(first.counters.duplicate_batches, 0u);
  EXPECT_EQ(second.counters.duplicate_batches, 0u);
  EXPECT_EQ(third.counters.duplicate_batches, 0u);
  // Since acked_1 ≤ first's last and acked_2 ≤ second's last, the three stored ranges and the
  // announced drops cover 1..pushed. The drops were counted once on each side.
  EXPECT_EQ(buffer().dropped_cycles(), first.counters.agent_dropped_batches +
                                           second.counters.agent_dropped_batches +
                                           third.counters.agent_dropped_batches);
  absl::StatusOr<std::vector<TextSample>> samples = ParseText(harness_->Scrape());
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(SampleValue(*samples, "fabricmon_node_agent_dropped_batches_total", kNodeLabel),
            static_cast<double>(third.counters.agent_dropped_batches));
}

// (d) A long outage with a small replay buffer: the buffer, as the agent's own
// fabricmon_agent_replay_buffer_bytes reports it and as held, never exceeds its bound while the
// oldest cycles go; after the aggregator process restarts, the agent's dropped count is exactly
// what the aggregator exports in fabricmon_node_agent_dropped_batches_total.
TEST_F(OutageTest, ReplayBufferStaysWithinItsBoundDuringALongOutage) {
  StartProcess();
  AgentHarnessOptions options;
  const size_t bound = 4 * IbSysfsCycleBytes(sysfs_root_);
  options.replay_buffer_bytes = bound;
  StartAgent(AgentChannel(absl::StrCat("127.0.0.1:", process_->grpc_port())), options);
  const std::vector<TextSample> before = ScrapeProcess();
  ASSERT_EQ(SampleValue(before, "fabricmon_node_agent_dropped_batches_total", kNodeLabel), 0.0);

  process_->Kill();
  ASSERT_TRUE(WaitFor([&] { return !connected(); }));
  const uint64_t acked_at_kill = buffer().acked_sequence();  // no ack can arrive any more
  // Sample for as long as forty cycles are evicted (the health collector reports every second,
  // so its gauge is read several times over): bounded in iterations and time.
  size_t max_held = 0;
  uint64_t max_exported = 0;
  int exported_readings = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int i = 0; i < 20000 && buffer().unconfirmed_evictions() < 40; ++i) {
    ASSERT_LT(absl::Now(), deadline) << "the agent stopped evicting";
    max_held = std::max(max_held, buffer().bytes());
    if (std::optional<uint64_t> exported = ExportedBufferBytes(); exported.has_value()) {
      max_exported = std::max(max_exported, *exported);
      ++exported_readings;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(buffer().unconfirmed_evictions(), 40u);
  EXPECT_LE(max_held, bound);
  EXPECT_LE(max_exported, bound);
  EXPECT_GT(max_exported, bound / 2) << "the gauge never showed the full buffer";
  EXPECT_GT(exported_readings, 0);

  StartProcess();
  ASSERT_TRUE(WaitFor([&] { return agent_->stream().stats().connects >= 2; }))
      << "the agent did not reconnect to the restarted aggregator";
  // The agent's own counter travels as a series like any other: once a cycle taken after the
  // reconnect is stored, the aggregator shows the agent's count.
  ASSERT_TRUE(WaitFor([&] {
    const std::optional<double> streamed =
        SampleValue(ScrapeProcess(), "fabricmon_agent_dropped_batches_total", kNodeLabel);
    return streamed.has_value() && *streamed == static_cast<double>(buffer().dropped_cycles());
  })) << "fabricmon_agent_dropped_batches_total{node} never showed the agent's count";
  const uint64_t pushed = Quiesce();
  EXPECT_LE(buffer().bytes(), bound);
  const uint64_t dropped = buffer().dropped_cycles();
  EXPECT_GE(dropped, 40u);
  const std::vector<TextSample> after = ScrapeProcess();
  EXPECT_EQ(SampleValue(after, "fabricmon_node_agent_dropped_batches_total", kNodeLabel),
            static_cast<double>(dropped));
  EXPECT_EQ(SampleValue(after, "fabricmon_aggregator_agent_dropped_batches_total"),
            static_cast<double>(dropped));
  // Everything after the last acknowledged sequence is stored by the new process or counted.
  const std::optional<double> stored = SampleValue(after, "fabricmon_aggregator_batches_total");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(static_cast<double>(acked_at_kill) + *stored + static_cast<double>(dropped),
            static_cast<double>(pushed));
  EXPECT_EQ(SampleValue(after, "fabricmon_node_duplicate_batches_total", kNodeLabel), 0.0);
}

}  // namespace
}  // namespace fabricmon::testing
