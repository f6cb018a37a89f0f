// Acks and messages at the agent's cadence. An agent sending several batches a second marks most
// of them ack_later; an aggregator that says so in its HelloAck (defers_acks) folds their acks
// into the next one a batch or an AckRequest asks for. Such an agent also sends the batches of a
// coalescing window in one SampleBatches message to an aggregator that takes them
// (takes_batches). Checked here from both ends, against the real aggregator (raw streams and the
// real agent over loopback TCP) and, for compatibility, the real agent against older aggregators:
// one that acknowledges every batch and knows no AckRequest, and one that defers acks but knows
// no SampleBatches.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/aggregator/ack_flusher.h"
#include "daemon/aggregator/batch_observer.h"
#include "daemon/common/clock.h"
#include "daemon/common/logging.h"
#include "daemon/wire/batch_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/metrics_text.h"
#include "tests/integration/stream_harness.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

constexpr char kRawNode[] = "raw-node";
constexpr int64_t kSecond = 1'000'000'000;

v1::AgentMessage AckLater(v1::AgentMessage batch) {
  batch.mutable_batch()->set_ack_later(true);
  return batch;
}

v1::AgentMessage Batches(const std::vector<v1::AgentMessage>& batches) {
  v1::AgentMessage message;
  message.mutable_batches();  // set even with no batch
  for (const v1::AgentMessage& batch : batches) {
    *message.mutable_batches()->add_batch() = batch.batch();
  }
  return message;
}

v1::AgentMessage AckRequestMessage() {
  v1::AgentMessage message;
  message.mutable_ack_request();
  return message;
}

// An aggregator from before acks were deferred: a HelloAck without defers_acks, an Ack for
// every batch. It notes what such an aggregator must never be sent: batches marked ack_later
// (whose acks it would not defer anyway, harmless) and AckRequest, a body it would not know and
// end the stream on (this one ends it too). With `defers_acks`, one release later: it answers
// AckRequest (and still acknowledges every batch, which an agent takes as well), but knows no
// SampleBatches and ends the stream on one.
class OlderTelemetry final : public v1::Telemetry::Service {
 public:
  explicit OlderTelemetry(bool defers_acks = false) : defers_acks_(defers_acks) {}

  grpc::Status Stream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::AggregatorMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage message;
    while (stream->Read(&message)) {
      v1::AggregatorMessage answer;
      switch (message.body_case()) {
        case v1::AgentMessage::kHello:
          answer.mutable_hello_ack()->set_last_stored_sequence(acked_.load());
          answer.mutable_hello_ack()->set_max_message_bytes(4 << 20);
          answer.mutable_hello_ack()->set_defers_acks(defers_acks_);
          break;
        case v1::AgentMessage::kBatch:
          ++batches_;
          if (message.batch().ack_later()) {
            ++ack_later_;
          }
          acked_ = message.batch().sequence();
          answer.mutable_ack()->set_sequence(message.batch().sequence());
          break;
        case v1::AgentMessage::kAckRequest:
          ++ack_requests_;
          if (!defers_acks_) {
            return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty or unknown message");
          }
          answer.mutable_ack()->set_sequence(acked_.load());
          break;
        case v1::AgentMessage::kBatches:
          ++batches_messages_;
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty or unknown message");
        default:
          continue;
      }
      if (!stream->Write(answer)) {
        break;
      }
    }
    return grpc::Status::OK;
  }

  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> ack_later_{0};
  std::atomic<uint64_t> ack_requests_{0};
  std::atomic<uint64_t> batches_messages_{0};
  std::atomic<uint64_t> acked_{0};

 private:
  const bool defers_acks_;
};

// Keeps every stored batch's settlement until the test lets go of them, from its own thread, as
// a remote_write queue's thread does once the receiver has the samples.
class HoldingObserver final : public aggregator::BatchObserver {
 public:
  std::unique_ptr<Stream> OpenStream() override { return std::make_unique<HoldingStream>(*this); }
  void ReleaseAll() {
    std::vector<std::shared_ptr<store::Settlement>> released;
    {
      absl::MutexLock lock(&mu_);
      released.swap(held_);
    }
    // Released here, outside the lock: the last reference settles the batch.
  }
  size_t held() {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }

 private:
  class HoldingStream final : public Stream {
   public:
    explicit HoldingStream(HoldingObserver& owner) : owner_(owner) {}
    void OnStored(const store::NodeState&, absl::Span<const store::SlotRef>,
                  const std::vector<bool>&,
                  const std::shared_ptr<store::Settlement>& settlement) override {
      if (settlement != nullptr) {
        absl::MutexLock lock(&owner_.mu_);
        owner_.held_.push_back(settlement);
      }
    }

   private:
    HoldingObserver& owner_;
  };
  absl::Mutex mu_;
  std::vector<std::shared_ptr<store::Settlement>> held_ ABSL_GUARDED_BY(mu_);
};

class AckCadenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetMinLogLevel(LogLevel::kWarning);
    PreferMemoryForTempTrees();
  }

  void SetUp() override {
    tree_.CopyTree(SharedFixture("sysfs/gpud-h100/sys"), "sys");
    sysfs_root_ = tree_.root() + "/sys";
  }

  void TearDown() override {
    agent_.reset();  // its stream must not outlive the server it talks to
    aggregator_.reset();
    if (older_server_ != nullptr) {
      older_server_->Shutdown();
    }
  }

  void StartAggregator(AggregatorOptions options = {}) {
    aggregator_ = std::make_unique<AggregatorHarness>(Transport::kTcp, std::move(options));
    ASSERT_TRUE(aggregator_->Start());
  }

  // An aggregator whose batches settle when the test says, on the test's thread, and whose acks
  // settled so wait for a read or for `max_delay` (ack_flusher.h; its rounds of 50 ms). Returns
  // the raw stream after its hello, declarations and layout.
  std::unique_ptr<RawStream> StartHeldAggregator(absl::Duration max_delay) {
    flusher_ = std::make_unique<aggregator::AckFlusher>(max_delay, absl::Milliseconds(50));
    observer_ = std::make_shared<HoldingObserver>();
    AggregatorOptions options;
    options.stream.batch_observer = observer_;
    options.stream.ack_flusher = flusher_.get();
    StartAggregator(std::move(options));
    auto raw = std::make_unique<RawStream>(aggregator_->channel(), absl::Seconds(60));
    EXPECT_TRUE(raw->Write(HelloMessage(kRawNode, "boot-h", 9)));
    std::optional<v1::AggregatorMessage> hello_ack = raw->Read();
    EXPECT_TRUE(hello_ack.has_value() && hello_ack->has_hello_ack());
    EXPECT_TRUE(raw->Write(CounterDeclarations(1, 2)));
    EXPECT_TRUE(raw->Write(LayoutMessage(1, {1, 2})));
    return raw;
  }

  // A real agent sending a cycle every 100 ms (the shortest interval a collector takes) to
  // `channel`, holding batches for up to `coalesce` to write them together.
  void StartFastAgent(std::shared_ptr<grpc::Channel> channel,
                      absl::Duration coalesce = absl::Milliseconds(200)) {
    AgentHarnessOptions options;
    options.interval_ms = 100;
    options.coalesce = coalesce;
    agent_ = std::make_unique<AgentHarness>(sysfs_root_, std::move(channel), options);
    ASSERT_TRUE(agent_->Start());
  }

  // A fast agent (StartFastAgent) streaming to `older`, served on a loopback port.
  void StartFastAgentWith(OlderTelemetry& older) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&older);
    older_server_ = builder.BuildAndStart();
    ASSERT_NE(older_server_, nullptr);
    ASSERT_NE(port, 0);
    StartFastAgent(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  // Stops collection and the stream; every batch collected must have been acknowledged.
  void StopAndExpectEveryBatchAcknowledged() {
    agent_->StopCollecting();
    const uint64_t pushed = buffer().last_sequence();
    agent_->stream().Stop(absl::Seconds(30));
    EXPECT_EQ(buffer().acked_sequence(), pushed);
  }

  agent::ReplayBuffer& buffer() { return agent_->agent().buffer(); }

  uint64_t RawBatches(const std::string& name = kRawNode) {
    std::optional<store::NodeState::Summary> node = aggregator_->Node(name);
    return node.has_value() ? node->counters.batches : 0;
  }

  TempTree tree_;
  std::string sysfs_root_;
  std::unique_ptr<aggregator::AckFlusher> flusher_;  // outlives the aggregator's streams
  std::shared_ptr<HoldingObserver> observer_;
  std::unique_ptr<AggregatorHarness> aggregator_;
  std::unique_ptr<grpc::Server> older_server_;
  std::unique_ptr<AgentHarness> agent_;
};

TEST_F(AckCadenceTest, AnAckLaterBatchRidesOnTheNextAckAskedFor) {
  StartAggregator();
  RawStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
  std::optional<v1::AggregatorMessage> hello_ack = raw.Read();
  ASSERT_TRUE(hello_ack.has_value() && hello_ack->has_hello_ack());
  EXPECT_TRUE(hello_ack->hello_ack().defers_acks());

  const int64_t now = RealClock::Get().NowUnixNanos();
  ASSERT_TRUE(raw.Write(CounterDeclarations(1, 2)));
  ASSERT_TRUE(raw.Write(LayoutMessage(1, {1, 2})));
  ASSERT_TRUE(raw.Write(AckLater(BatchMessage(1, now, 1, {5, 9}))));
  ASSERT_TRUE(raw.Write(AckLater(BatchMessage(2, now + kSecond, 1, {1, 1}))));
  // Both stored (and settled: no remote_write here) before a batch asks for an ack: an
  // aggregator acknowledging them on their own would have sent ack 1 by now.
  ASSERT_TRUE(WaitFor([&] { return RawBatches() >= 2; }));
  ASSERT_TRUE(raw.Write(BatchMessage(3, now + 2 * kSecond, 1, {1, 1})));
  std::optional<v1::AggregatorMessage> first = raw.Read();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(first->has_ack()) << first->ShortDebugString();
  EXPECT_EQ(first->ack().sequence(), 3u) << "the first ack must be the one batch 3 asked for";

  // A quiet tail: an AckRequest acknowledges the last batch; a second one, with nothing new,
  // sends nothing.
  ASSERT_TRUE(raw.Write(AckLater(BatchMessage(4, now + 3 * kSecond, 1, {1, 1}))));
  ASSERT_TRUE(WaitFor([&] { return RawBatches() >= 4; }));
  ASSERT_TRUE(raw.Write(AckRequestMessage()));
  std::optional<v1::AggregatorMessage> second = raw.Read();
  ASSERT_TRUE(second.has_value());
  ASSERT_TRUE(second->has_ack()) << second->ShortDebugString();
  EXPECT_EQ(second->ack().sequence(), 4u);
  ASSERT_TRUE(raw.Write(AckRequestMessage()));

  const RawStream::End end = raw.Finish();
  EXPECT_TRUE(end.status.ok()) << end.status.error_message();
  for (const v1::AggregatorMessage& message : end.messages) {
    ADD_FAILURE() << "nothing more was due: " << message.ShortDebugString();
  }
  EXPECT_EQ(RawBatches(), 4u);
}

// A batch settled away from the stream's read (a remote_write queue's thread) is acknowledged
// with the stream's next read, not on its own: here the flusher would wait an hour, so the ack
// can only have come with the read of batch 2.
TEST_F(AckCadenceTest, AnAckSettledAwayFromTheReadGoesWithTheNextRead) {
  std::unique_ptr<RawStream> raw = StartHeldAggregator(absl::Hours(1));
  const int64_t now = RealClock::Get().NowUnixNanos();
  ASSERT_TRUE(raw->Write(BatchMessage(1, now, 1, {5, 9})));
  ASSERT_TRUE(WaitFor([&] { return observer_->held() >= 1; }));
  observer_->ReleaseAll();  // settled on this thread
  ASSERT_TRUE(raw->Write(AckLater(BatchMessage(2, now + kSecond, 1, {1, 1}))));
  std::optional<v1::AggregatorMessage> ack = raw->Read();
  ASSERT_TRUE(ack.has_value());
  ASSERT_TRUE(ack->has_ack()) << ack->ShortDebugString();
  EXPECT_EQ(ack->ack().sequence(), 1u) << "batch 2 is held: only batch 1 settled";
  observer_->ReleaseAll();
  ASSERT_TRUE(raw->Write(AckRequestMessage()));
  ack = raw->Read();
  ASSERT_TRUE(ack.has_value() && ack->has_ack()) << (ack ? ack->ShortDebugString() : "none");
  EXPECT_EQ(ack->ack().sequence(), 2u);
}

// With no read after it (the agent's last batch before it stops, or a slow collector), the ack
// comes from the flusher once it has waited its delay.
TEST_F(AckCadenceTest, AnAckSettledAwayFromTheReadComesWithoutAnotherRead) {
  std::unique_ptr<RawStream> raw = StartHeldAggregator(absl::Milliseconds(200));
  const int64_t now = RealClock::Get().NowUnixNanos();
  ASSERT_TRUE(raw->Write(BatchMessage(1, now, 1, {5, 9})));
  ASSERT_TRUE(WaitFor([&] { return observer_->held() >= 1; }));
  observer_->ReleaseAll();
  std::optional<v1::AggregatorMessage> ack = raw->Read();  // nothing else is written
  ASSERT_TRUE(ack.has_value());
  ASSERT_TRUE(ack->has_ack()) << ack->ShortDebugString();
  EXPECT_EQ(ack->ack().sequence(), 1u);
}

TEST_F(AckCadenceTest, AnAckRequestBeforeAnyBatchIsHarmless) {
  StartAggregator();
  RawStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
  ASSERT_TRUE(raw.Write(AckRequestMessage()));
  ASSERT_TRUE(raw.Write(CounterDeclarations(1, 2)));
  ASSERT_TRUE(raw.Write(LayoutMessage(1, {1, 2})));
  ASSERT_TRUE(raw.Write(BatchMessage(1, RealClock::Get().NowUnixNanos(), 1, {5, 9})));
  const RawStream::End end = raw.Finish();
  EXPECT_TRUE(end.status.ok()) << end.status.error_message();
  ASSERT_EQ(end.messages.size(), 2u);
  EXPECT_TRUE(end.messages[0].has_hello_ack());
  EXPECT_EQ(end.messages[1].ack().sequence(), 1u) << end.messages[1].ShortDebugString();
}

TEST_F(AckCadenceTest, AFastAgentAsksForFewerAcksAndLeavesNoTailUnacknowledged) {
  StartAggregator();
  StartFastAgent(aggregator_->channel());
  ASSERT_TRUE(
      WaitFor([&] { return agent_->stream().stats().batches_sent >= 60; }, absl::Seconds(60)));
  agent_->StopCollecting();
  const uint64_t pushed = buffer().last_sequence();
  // With collection stopped the last batches asked for nothing: the stream asks for their ack
  // itself once it has been quiet for a while.
  ASSERT_TRUE(WaitFor([&] { return buffer().acked_sequence() == pushed; }))
      << "acknowledged " << buffer().acked_sequence() << " of " << pushed;
  const agent::StreamClientStats stats = agent_->stream().stats();
  // One ack asked for every 500 ms at most, against a batch every 100 ms (or more often, when a
  // loaded machine bunches cycles): an agent asking for every ack would be close to 1:1.
  EXPECT_LE(stats.acks_received * 3, stats.batches_sent)
      << stats.acks_received << " acks for " << stats.batches_sent << " batches";
  EXPECT_GE(stats.acks_received, 1u);
  std::optional<store::NodeState::Summary> node = aggregator_->Node("gpu-node-1");
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(node->counters.batches, pushed) << "every batch stored once";
}

TEST_F(AckCadenceTest, StoppingFlushesAnUnaskedTail) {
  StartAggregator();
  StartFastAgent(aggregator_->channel());
  ASSERT_TRUE(
      WaitFor([&] { return agent_->stream().stats().batches_sent >= 30; }, absl::Seconds(60)));
  StopAndExpectEveryBatchAcknowledged();
}

// A 10 Hz agent sends its batches in groups (each held batch goes out in one SampleBatches message
// with the next), and the last one held, with no cycle after it, goes out within the window.
TEST_F(AckCadenceTest, AFastAgentWritesBatchesTogetherAndSendsTheLastHeldOneWithoutANextCycle) {
  StartAggregator();
  StartFastAgent(aggregator_->channel());
  ASSERT_TRUE(
      WaitFor([&] { return agent_->stream().stats().batches_sent >= 40; }, absl::Seconds(60)));
  const agent::StreamClientStats running = agent_->stream().stats();
  // At 100 ms a batch is held while the next one falls within 200 ms of the first held: groups
  // of two or three. A loaded machine bunches or stretches cycles, so only "most" is asserted.
  EXPECT_GE(running.coalesced_batches * 3, running.batches_sent)
      << running.coalesced_batches << " of " << running.batches_sent << " held";
  agent_->StopCollecting();
  const uint64_t pushed = buffer().last_sequence();
  // No cycle follows the last one: a batch held then is sent by the stream's own look within its
  // window plus one probe (a second at most), not when some later cycle would have come.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::optional<store::NodeState::Summary> node = aggregator_->Node("gpu-node-1");
        return node.has_value() && node->counters.batches == pushed;
      },
      absl::Seconds(5)))
      << "stored " << aggregator_->Node("gpu-node-1")->counters.batches << " of " << pushed;
  ASSERT_TRUE(WaitFor([&] { return buffer().acked_sequence() == pushed; }));
  EXPECT_EQ(agent_->stream().stats().connects, 1u) << "the stream never broke";
}

// What the agent's coalescing relies on, from the aggregator's end: the batches of a
// SampleBatches message are stored and acknowledged exactly as if each had come alone.
TEST_F(AckCadenceTest, TheBatchesOfOneMessageAreStoredAsIfEachCameAlone) {
  StartAggregator();
  RawStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-m", 11)));
  std::optional<v1::AggregatorMessage> hello_ack = raw.Read();
  ASSERT_TRUE(hello_ack.has_value() && hello_ack->has_hello_ack());
  EXPECT_TRUE(hello_ack->hello_ack().takes_batches());
  EXPECT_GE(hello_ack->hello_ack().max_batches_per_message(), 2u);
  const int64_t now = RealClock::Get().NowUnixNanos();
  ASSERT_TRUE(raw.Write(CounterDeclarations(1, 2)));
  ASSERT_TRUE(raw.Write(LayoutMessage(1, {1, 2})));
  ASSERT_TRUE(raw.Write(Batches({AckLater(BatchMessage(1, now, 1, {5, 9})),
                                 AckLater(BatchMessage(2, now + kSecond, 1, {1, 2})),
                                 BatchMessage(3, now + 2 * kSecond, 1, {3, 4})})));
  std::optional<v1::AggregatorMessage> ack = raw.Read();
  ASSERT_TRUE(ack.has_value());
  ASSERT_TRUE(ack->has_ack()) << ack->ShortDebugString();
  EXPECT_EQ(ack->ack().sequence(), 3u) << "one ack, asked for by the last batch, for all three";
  EXPECT_EQ(RawBatches(), 3u);
  // Each batch's deltas applied in order: 5+1+3 and 9+2+4.
  const std::string scraped = aggregator_->Scrape();
  absl::StatusOr<std::vector<TextSample>> samples = ParseText(scraped);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(SampleValue(*samples, "fabricmon_raw_0_total", {{"node", kRawNode}}), 9) << scraped;
  EXPECT_EQ(SampleValue(*samples, "fabricmon_raw_1_total", {{"node", kRawNode}}), 15) << scraped;
  // A replay of the same batches in one message (a reconnect) stores none twice.
  ASSERT_TRUE(raw.Write(Batches(
      {BatchMessage(2, now + kSecond, 1, {1, 2}), BatchMessage(3, now + 2 * kSecond, 1, {3, 4})})));
  ASSERT_TRUE(raw.Write(AckRequestMessage()));
  const RawStream::End end = raw.Finish();
  EXPECT_TRUE(end.status.ok()) << end.status.error_message();
  EXPECT_EQ(RawBatches(), 3u);
}

// A SampleBatches message with no batch or more than its bound is refused with a reason; a
// refused batch inside one ends the stream with the batches before it stored, as if each had
// come alone. A node per case: a node whose stream was just refused may still be attached when
// the next stream's hello comes (refused as a duplicate).
TEST_F(AckCadenceTest, ASampleBatchesMessageOutOfBoundsOrWithABadBatchIsRefused) {
  StartAggregator();
  const int64_t now = RealClock::Get().NowUnixNanos();
  auto refused = [&](const std::string& node, const v1::AgentMessage& message) {
    RawStream raw(aggregator_->channel());
    EXPECT_TRUE(raw.Write(HelloMessage(node, "boot-b", 1)));
    EXPECT_TRUE(raw.Write(CounterDeclarations(1, 2)));
    EXPECT_TRUE(raw.Write(LayoutMessage(1, {1, 2})));
    EXPECT_TRUE(raw.Write(message));
    return raw.Finish();
  };
  RawStream::End empty = refused("empty-node", Batches({}));
  EXPECT_EQ(empty.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(empty.status.error_message(), ::testing::HasSubstr("holds 0 batches"));
  ASSERT_FALSE(empty.messages.empty());
  EXPECT_EQ(empty.messages.back().reject().reason(), v1::Reject::REASON_MALFORMED);

  std::vector<v1::AgentMessage> too_many;
  for (uint64_t i = 1; i <= wire::kMaxBatchesPerMessage + 1; ++i) {
    too_many.push_back(BatchMessage(i, now + static_cast<int64_t>(i) * kSecond, 1, {1, 1}));
  }
  RawStream::End over = refused("over-node", Batches(too_many));
  EXPECT_EQ(over.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(
      over.status.error_message(),
      ::testing::HasSubstr(absl::StrCat("holds ", wire::kMaxBatchesPerMessage + 1, " batches")));
  EXPECT_EQ(RawBatches("over-node"), 0u) << "nothing of a message out of bounds is stored";

  // Batch 2 names a layout never declared.
  RawStream::End bad =
      refused("bad-node",
              Batches({BatchMessage(1, now, 1, {5, 9}), BatchMessage(2, now + kSecond, 7, {1, 1}),
                       BatchMessage(3, now + 2 * kSecond, 1, {1, 1})}));
  EXPECT_FALSE(bad.status.ok());
  EXPECT_EQ(RawBatches("bad-node"), 1u) << "the batch before the refused one is stored, none after";
}

TEST_F(AckCadenceTest, WithoutCoalescingEveryBatchIsWrittenAtOnce) {
  StartAggregator();
  StartFastAgent(aggregator_->channel(), absl::ZeroDuration());
  ASSERT_TRUE(
      WaitFor([&] { return agent_->stream().stats().batches_sent >= 20; }, absl::Seconds(60)));
  StopAndExpectEveryBatchAcknowledged();
  EXPECT_EQ(agent_->stream().stats().coalesced_batches, 0u);
}

TEST_F(AckCadenceTest, AnOlderAggregatorIsSentNeitherAckLaterNorAckRequest) {
  OlderTelemetry older;
  StartFastAgentWith(older);
  ASSERT_TRUE(WaitFor([&] { return older.batches_.load() >= 50; }, absl::Seconds(60)));
  StopAndExpectEveryBatchAcknowledged();
  EXPECT_EQ(older.ack_later_.load(), 0u);
  EXPECT_EQ(older.ack_requests_.load(), 0u);
  // Nor held batches: it takes no SampleBatches.
  EXPECT_EQ(older.batches_messages_.load(), 0u);
  EXPECT_EQ(agent_->stream().stats().coalesced_batches, 0u);
  EXPECT_EQ(agent_->stream().stats().connects, 1u) << "the stream never broke";
}

TEST_F(AckCadenceTest, AnAggregatorThatTakesNoSampleBatchesIsSentNone) {
  OlderTelemetry older(/*defers_acks=*/true);
  StartFastAgentWith(older);
  ASSERT_TRUE(WaitFor([&] { return older.batches_.load() >= 30; }, absl::Seconds(60)));
  StopAndExpectEveryBatchAcknowledged();
  EXPECT_EQ(older.batches_messages_.load(), 0u);
  EXPECT_EQ(agent_->stream().stats().coalesced_batches, 0u);
  EXPECT_EQ(agent_->stream().stats().connects, 1u) << "the stream never broke";
}

}  // namespace
}  // namespace fabricmon::testing
