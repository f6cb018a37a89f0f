// Several aggregators: an agent with three real aggregators (the telemetry service over loopback
// TCP, as aggregator_main.cc builds it) streams to its rendezvous primary; the primary dies and
// the agent's data appears on its second choice, from the first batch the primary had not
// acknowledged; the primary returns and the agent goes back to it; it dies again and the second
// choice, which remembers the node, takes it back. What each aggregator stored is
// read from its own batch observer (the remote_write seam): the agent's sequence numbers make the
// stored streams checkable for gaps and duplicates, and the batch timestamps for whether a batch
// stored twice (in flight when the primary died) is an exact duplicate, as a remote-write
// receiver deduplicates it.

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/agent/aggregator_directory.h"
#include "daemon/agent/aggregator_ranking.h"
#include "daemon/aggregator/batch_observer.h"
#include "daemon/common/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/stream_harness.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

using ::testing::HasSubstr;

// What one aggregator stored of the node: each batch's sequence and timestamp, in order, and the
// agent's newest sequence when the first one arrived.
class RecordingObserver final : public aggregator::BatchObserver {
 public:
  explicit RecordingObserver(std::function<uint64_t()> agent_sequence)
      : agent_sequence_(std::move(agent_sequence)) {}

  struct Stored {
    uint64_t sequence;
    int64_t timestamp_unix_nanos;
  };

  std::unique_ptr<Stream> OpenStream() override { return std::make_unique<Feed>(*this); }

  std::vector<Stored> Take() {
    absl::MutexLock lock(&mu_);
    std::vector<Stored> taken = std::move(stored_);
    stored_.clear();
    first_at_agent_sequence_ = 0;
    return taken;
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return stored_.size();
  }
  uint64_t first_at_agent_sequence() {
    absl::MutexLock lock(&mu_);
    return first_at_agent_sequence_;
  }

 private:
  class Feed final : public Stream {
   public:
    explicit Feed(RecordingObserver& owner) : owner_(owner) {}
    void OnStored(const store::NodeState& node, absl::Span<const store::SlotRef> slots,
                  const std::vector<bool>& present,
                  const std::shared_ptr<store::Settlement>& /*settlement*/) override {
      int64_t timestamp = 0;
      node.WithSeries([&](const std::vector<store::Series>& all) {
        for (size_t i = 0; i < slots.size() && timestamp == 0; ++i) {
          if (present[i] && slots[i].index < all.size() && all[slots[i].index].Latest()) {
            timestamp = all[slots[i].index].Latest()->timestamp_unix_nanos;
          }
        }
      });
      const uint64_t sequence = node.GetSummary(false).last_stored_sequence;
      absl::MutexLock lock(&owner_.mu_);
      if (owner_.stored_.empty()) {
        owner_.first_at_agent_sequence_ = owner_.agent_sequence_();
      }
      owner_.stored_.push_back({sequence, timestamp});
    }

   private:
    RecordingObserver& owner_;
  };

  const std::function<uint64_t()> agent_sequence_;
  absl::Mutex mu_;
  std::vector<Stored> stored_ ABSL_GUARDED_BY(mu_);
  uint64_t first_at_agent_sequence_ ABSL_GUARDED_BY(mu_) = 0;
};

class FailoverTest : public ::testing::Test {
 protected:
  static constexpr int kAggregators = 3;
  static constexpr const char* kNode = "dgx-7-3";

  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    PreferMemoryForTempTrees();
    tree_.CopyTree(SharedFixture("sysfs/gpud-h100/sys"), "sys");
    for (int i = 0; i < kAggregators; ++i) {
      observers_.push_back(std::make_shared<RecordingObserver>([this] {
        const agent::ReplayBuffer* buffer = agent_buffer_.load();
        return buffer != nullptr ? buffer->last_sequence() : 0;
      }));
      AggregatorOptions options;
      options.stream.batch_observer = observers_.back();
      aggregators_.push_back(std::make_unique<AggregatorHarness>(Transport::kTcp, options));
      ASSERT_TRUE(aggregators_.back()->Start());
      addresses_.push_back(aggregators_.back()->address());
    }
    auto directory = agent::AggregatorDirectory::Create(
        {absl::StrJoin(addresses_, ",")}, kNode,
        [](const std::string& address, const std::string&) {
          grpc::ChannelArguments args;  // as the agent's main sets them, scaled to the test
          args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
          args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
          return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
        });
    ASSERT_TRUE(directory.ok()) << directory.status();
    directory_ = *std::move(directory);
    ranked_ = agent::RankAggregators(kNode, addresses_);
  }

  void TearDown() override {
    if (agent_ != nullptr) {
      agent_->Stop();
    }
  }

  // The harness index of the aggregator at `rank` in the node's ranking.
  int AtRank(int rank) {
    return static_cast<int>(std::find(addresses_.begin(), addresses_.end(), ranked_[rank]) -
                            addresses_.begin());
  }

  TempTree tree_;
  std::vector<std::shared_ptr<RecordingObserver>> observers_;
  std::vector<std::unique_ptr<AggregatorHarness>> aggregators_;
  std::vector<std::string> addresses_;
  std::vector<std::string> ranked_;
  std::unique_ptr<agent::AggregatorDirectory> directory_;
  std::unique_ptr<AgentHarness> agent_;
  // The agent's buffer for the observers (aggregator threads), once the agent runs.
  std::atomic<const agent::ReplayBuffer*> agent_buffer_{nullptr};
};

// Every sequence from 1 to the highest stored anywhere is stored somewhere (no gap); returns the
// sequences stored more than once, checking that each copy carries the same timestamp.
std::set<uint64_t> CheckContinuous(
    const std::vector<std::vector<RecordingObserver::Stored>>& parts) {
  std::map<uint64_t, std::vector<int64_t>> by_sequence;
  for (const auto& part : parts) {
    for (const RecordingObserver::Stored& stored : part) {
      by_sequence[stored.sequence].push_back(stored.timestamp_unix_nanos);
    }
  }
  std::set<uint64_t> twice;
  if (by_sequence.empty()) {
    ADD_FAILURE() << "nothing stored";
    return twice;
  }
  EXPECT_EQ(by_sequence.begin()->first, 1u) << "the first batch was lost";
  uint64_t expected = by_sequence.begin()->first;
  for (const auto& [sequence, timestamps] : by_sequence) {
    EXPECT_EQ(sequence, expected) << "batches " << expected << ".." << sequence - 1
                                  << " were stored nowhere";
    expected = sequence + 1;
    if (timestamps.size() > 1) {
      twice.insert(sequence);
      for (int64_t timestamp : timestamps) {
        EXPECT_EQ(timestamp, timestamps.front())
            << "batch " << sequence << " stored twice with different timestamps: a receiver "
            << "would keep both";
      }
    }
  }
  return twice;
}

TEST_F(FailoverTest, PrimaryDiesSecondTakesOverWithoutGapAndPrimaryGetsItsNodeBack) {
  constexpr int64_t kIntervalMs = 100;
  const absl::Duration failover_after = absl::Seconds(1);
  AgentHarnessOptions options;
  options.node_name = kNode;
  options.interval_ms = kIntervalMs;
  options.directory = directory_.get();
  options.failover_after = failover_after;
  options.failback_after = absl::Seconds(1);
  agent_ = std::make_unique<AgentHarness>(tree_.root() + "/sys", nullptr, options);
  ASSERT_TRUE(agent_->Start());
  agent_buffer_.store(&agent_->agent().buffer());

  const int primary = AtRank(0);
  const int second = AtRank(1);
  const int third = AtRank(2);
  ASSERT_TRUE(WaitFor([&] { return observers_[primary]->count() >= 10; }))
      << "the primary " << ranked_[0] << " never stored 10 batches";
  EXPECT_EQ(observers_[second]->count(), 0u);
  EXPECT_EQ(agent_->stream().stats().aggregator, ranked_[0]);
  EXPECT_EQ(agent_->stream().stats().aggregator_rank, 0);

  // The primary dies (its server cancels every call at once, as a killed process's would).
  const uint64_t at_kill = agent_->agent().buffer().last_sequence();
  aggregators_[primary]->StopServing();
  ASSERT_TRUE(WaitFor([&] { return observers_[second]->count() > 0; }, absl::Seconds(20)))
      << "the second choice " << ranked_[1] << " never received the node";
  // Measured in the agent's own cycles (ib_sysfs every 100 ms plus its health cycle every
  // second): the second choice stored its first batch before the agent had produced more than
  // 2 × failover_after worth of cycles since the kill.
  const uint64_t cycles_per_failover = absl::ToInt64Milliseconds(failover_after) / kIntervalMs +
                                       absl::ToInt64Milliseconds(failover_after) / 1000 + 1;
  EXPECT_LE(observers_[second]->first_at_agent_sequence() - at_kill, 2 * cycles_per_failover);
  EXPECT_EQ(agent_->stream().stats().failovers, 1u);
  EXPECT_EQ(agent_->stream().stats().aggregator, ranked_[1]);
  EXPECT_EQ(agent_->stream().stats().aggregator_rank, 1);
  // The move reaches the fleet view: the second choice exports the agent's own account of it.
  EXPECT_TRUE(WaitFor([&] {
    const std::string text = aggregators_[second]->Scrape();
    return text.find(absl::StrCat("fabricmon_agent_aggregator_info{node=\"", kNode, "\",address=\"",
                                  ranked_[1], "\",rank=\"1\"} 1")) != std::string::npos &&
           text.find(absl::StrCat("fabricmon_agent_aggregator_failovers_total{node=\"", kNode,
                                  "\"} 1")) != std::string::npos;
  })) << aggregators_[second]->Scrape();

  // Let the second choice store a while, then the primary comes back (a fresh process on the
  // same port) and, reachable for failback_after, gets its node back.
  const size_t on_second = observers_[second]->count();
  ASSERT_TRUE(WaitFor([&] { return observers_[second]->count() >= on_second + 10; }));
  std::vector<RecordingObserver::Stored> before_kill = observers_[primary]->Take();
  ASSERT_TRUE(aggregators_[primary]->Start());
  ASSERT_TRUE(WaitFor([&] { return observers_[primary]->count() >= 10; }, absl::Seconds(20)))
      << "the agent never returned to its primary";
  EXPECT_EQ(agent_->stream().stats().failbacks, 1u);
  EXPECT_EQ(agent_->stream().stats().aggregator, ranked_[0]);

  const std::vector<RecordingObserver::Stored> on_second_choice = observers_[second]->Take();

  // The primary dies again: the second choice, which remembers the node from its first stay,
  // takes it back; the batches the primary acknowledged meanwhile are not a gap there.
  const uint64_t at_second_kill = agent_->agent().buffer().last_sequence();
  aggregators_[primary]->StopServing();
  ASSERT_TRUE(WaitFor([&] { return observers_[second]->count() >= 10; }, absl::Seconds(20)))
      << "the second choice never received the node again";
  EXPECT_EQ(agent_->stream().stats().failovers, 2u);

  agent_->StopCollecting();
  ASSERT_TRUE(WaitFor([&] {
    return agent_->agent().buffer().acked_sequence() == agent_->agent().buffer().last_sequence();
  }));
  agent_->Stop();
  const std::vector<RecordingObserver::Stored> after_return = observers_[primary]->Take();
  const std::vector<RecordingObserver::Stored> second_stay = observers_[second]->Take();
  EXPECT_TRUE(observers_[third]->Take().empty()) << "the third choice was never needed";

  // No gap over the four phases, and the last batch the agent made is stored.
  const std::set<uint64_t> twice =
      CheckContinuous({before_kill, on_second_choice, after_return, second_stay});
  ASSERT_FALSE(after_return.empty());
  ASSERT_FALSE(second_stay.empty());
  EXPECT_EQ(second_stay.back().sequence, agent_->agent().buffer().last_sequence());
  // The return was orderly (the second choice acknowledged what it had been sent before the
  // agent left it): nothing stored by both.
  std::set<uint64_t> first_stay;
  for (const auto& stored : on_second_choice) {
    first_stay.insert(stored.sequence);
  }
  for (const auto& stored : after_return) {
    EXPECT_EQ(first_stay.count(stored.sequence), 0u)
        << "batch " << stored.sequence << " stored by the second choice and again after the return";
  }
  // The kills were not: only what was in flight when the primary died may be stored twice (and
  // then as an exact duplicate, checked above).
  for (uint64_t sequence : twice) {
    EXPECT_TRUE(sequence <= at_kill + 2 ||
                (sequence > after_return.front().sequence && sequence <= at_second_kill + 2))
        << "batch " << sequence << " stored twice, not in flight at a kill";
  }
  // Each aggregator counts no gap: what the other held is not a loss.
  EXPECT_EQ(aggregators_[second]->Node(kNode)->counters.sequence_gaps, 0u);
}

}  // namespace
}  // namespace fabricmon::testing
