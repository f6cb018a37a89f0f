#include "daemon/store/settlement_ledger.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace fabricmon::store {
namespace {

constexpr uint64_t kInstance = 7;
constexpr uint64_t kStream = 1;

// Records every ack the ledger sends.
struct Acks {
  absl::Mutex mu;
  std::vector<uint64_t> seen;
  SettlementLedger::AckSink Sink() {
    return [this](uint64_t sequence) {
      absl::MutexLock lock(&mu);
      seen.push_back(sequence);
    };
  }
  uint64_t last() {
    absl::MutexLock lock(&mu);
    return seen.empty() ? 0 : seen.back();
  }
  size_t count() {
    absl::MutexLock lock(&mu);
    return seen.size();
  }
};

TEST(SettlementLedgerTest, AcknowledgesABatchNobodyHoldsAtOnce) {
  auto ledger = std::make_shared<SettlementLedger>();
  Acks acks;
  EXPECT_EQ(ledger->Bind(kInstance, 0, 0, kStream, acks.Sink()), 0u);
  std::shared_ptr<Settlement> first = ledger->Track(kInstance, 1);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(acks.count(), 0u);
  first.reset();
  EXPECT_EQ(acks.last(), 1u);
  EXPECT_EQ(ledger->settled_through(), 1u);
  EXPECT_EQ(ledger->unsettled(), 0u);
}

TEST(SettlementLedgerTest, WithholdsTheAckWhileAnyHolderKeepsTheBatch) {
  auto ledger = std::make_shared<SettlementLedger>();
  Acks acks;
  ledger->Bind(kInstance, 0, 0, kStream, acks.Sink());
  std::shared_ptr<Settlement> batch = ledger->Track(kInstance, 1);
  std::shared_ptr<const void> queue_a = batch;  // two remote_write queues took its samples
  std::shared_ptr<const void> queue_b = batch;
  batch.reset();
  queue_a.reset();
  EXPECT_EQ(acks.count(), 0u) << "one queue still holds the batch's samples";
  queue_b.reset();
  EXPECT_EQ(acks.last(), 1u);
}

TEST(SettlementLedgerTest, AcksAreCumulativeSoALaterBatchWaitsForAnEarlierOne) {
  auto ledger = std::make_shared<SettlementLedger>();
  Acks acks;
  ledger->Bind(kInstance, 0, 0, kStream, acks.Sink());
  std::shared_ptr<Settlement> one = ledger->Track(kInstance, 1);
  std::shared_ptr<Settlement> two = ledger->Track(kInstance, 2);
  std::shared_ptr<Settlement> four = ledger->Track(kInstance, 4);  // 3 the agent dropped
  two.reset();
  four.reset();
  EXPECT_EQ(acks.count(), 0u) << "acking 2 or 4 would acknowledge 1, still in a queue";
  EXPECT_EQ(ledger->unsettled(), 3u);
  one.reset();
  EXPECT_EQ(acks.last(), 4u);
  EXPECT_EQ(acks.count(), 1u);
  EXPECT_EQ(ledger->unsettled(), 0u);
}

TEST(SettlementLedgerTest, AHelloReportsOnlyWhatIsSettled) {
  auto ledger = std::make_shared<SettlementLedger>();
  Acks first_stream;
  ledger->Bind(kInstance, 0, 0, kStream, first_stream.Sink());
  std::shared_ptr<Settlement> one = ledger->Track(kInstance, 1);
  std::shared_ptr<Settlement> two = ledger->Track(kInstance, 2);
  std::shared_ptr<Settlement> three = ledger->Track(kInstance, 3);
  one.reset();
  ledger->Unbind(kStream);
  // The stream broke; the store holds 1..3 but 2 and 3 are still in remote_write's queues: the
  // agent must keep them (and send them again) in case this process dies before they leave.
  Acks second_stream;
  EXPECT_EQ(ledger->Bind(kInstance, 1, 3, /*stream_token=*/2, second_stream.Sink()), 1u);
  // Sent again, the store finds duplicates: nothing new to track, they settle with the first.
  EXPECT_EQ(ledger->Track(kInstance, 2), nullptr);
  EXPECT_EQ(ledger->Track(kInstance, 3), nullptr);
  EXPECT_EQ(second_stream.count(), 0u);
  two.reset();
  three.reset();
  EXPECT_EQ(second_stream.last(), 3u) << "the stream that owns the node now is acknowledged";
  EXPECT_EQ(first_stream.last(), 1u) << "an unbound stream hears nothing more";
  // Nothing unsettled: a later hello reports the store's own figure.
  EXPECT_EQ(ledger->Bind(kInstance, 3, 3, /*stream_token=*/3, nullptr), 3u);
}

TEST(SettlementLedgerTest, ABatchSentAgainAfterItSettledIsAcknowledgedAgain) {
  auto ledger = std::make_shared<SettlementLedger>();
  Acks acks;
  ledger->Bind(kInstance, 0, 0, kStream, acks.Sink());
  ledger->Track(kInstance, 1).reset();
  ledger->Track(kInstance, 2).reset();
  ASSERT_EQ(acks.count(), 2u);
  EXPECT_EQ(ledger->Track(kInstance, 1), nullptr);
  EXPECT_EQ(acks.count(), 3u);
  EXPECT_EQ(acks.last(), 2u);
}

TEST(SettlementLedgerTest, WhatAnotherShardAcknowledgedHoldsNothingBack) {
  auto ledger = std::make_shared<SettlementLedger>();
  Acks acks;
  ledger->Bind(kInstance, 0, 0, kStream, acks.Sink());
  std::shared_ptr<Settlement> five = ledger->Track(kInstance, 5);
  ledger->Unbind(kStream);
  // The agent failed over and back; the other shard acknowledged up to 9 meanwhile.
  EXPECT_EQ(ledger->Bind(kInstance, 9, 9, 2, acks.Sink()), 9u);
  ledger->Track(kInstance, 10).reset();
  EXPECT_EQ(acks.last(), 10u) << "5, still queued here, must not hold back 10";
  five.reset();  // settling a batch the ledger let go of changes nothing
  EXPECT_EQ(acks.last(), 10u);
  EXPECT_EQ(ledger->settled_through(), 10u);
}

TEST(SettlementLedgerTest, ARestartedAgentStartsANewSequenceSpace) {
  auto ledger = std::make_shared<SettlementLedger>();
  Acks old_agent;
  ledger->Bind(kInstance, 0, 0, kStream, old_agent.Sink());
  std::shared_ptr<Settlement> old_batch = ledger->Track(kInstance, 40);
  Acks new_agent;
  EXPECT_EQ(ledger->Bind(kInstance + 1, 0, 0, 2, new_agent.Sink()), 0u);
  EXPECT_EQ(ledger->Track(kInstance, 41), nullptr) << "the old instance's stream is superseded";
  std::shared_ptr<Settlement> first = ledger->Track(kInstance + 1, 1);
  old_batch.reset();
  EXPECT_EQ(new_agent.count(), 0u) << "sequence 40 of the old agent means nothing to the new one";
  first.reset();
  EXPECT_EQ(new_agent.last(), 1u);
}

TEST(SettlementLedgerTest, SettlementsOutliveTheNodeAndTheStream) {
  Acks acks;
  std::shared_ptr<Settlement> held;
  {
    auto ledger = std::make_shared<SettlementLedger>();
    ledger->Bind(kInstance, 0, 0, kStream, acks.Sink());
    held = ledger->Track(kInstance, 1);
    ledger->Unbind(kStream);
  }  // the node forgotten: only the settlement keeps its ledger
  held.reset();
  EXPECT_EQ(acks.count(), 0u);
}

TEST(SettlementLedgerTest, QueuesSettlingOnTheirOwnThreadsAckEveryBatchOnce) {
  auto ledger = std::make_shared<SettlementLedger>();
  Acks acks;
  ledger->Bind(kInstance, 0, 0, kStream, acks.Sink());
  constexpr uint64_t kBatches = 2000;
  std::vector<std::shared_ptr<const void>> queue_a, queue_b;
  for (uint64_t sequence = 1; sequence <= kBatches; ++sequence) {
    std::shared_ptr<Settlement> settlement = ledger->Track(kInstance, sequence);
    queue_a.push_back(settlement);
    queue_b.push_back(settlement);
  }
  std::thread a([&] { queue_a.clear(); });
  std::thread b([&] {
    while (!queue_b.empty()) {
      queue_b.pop_back();  // the other end first: out of order against queue a
    }
  });
  a.join();
  b.join();
  EXPECT_EQ(ledger->settled_through(), kBatches);
  EXPECT_EQ(ledger->unsettled(), 0u);
  absl::MutexLock lock(&acks.mu);
  uint64_t highest = 0;
  for (uint64_t ack : acks.seen) {
    highest = std::max(highest, ack);
  }
  EXPECT_EQ(highest, kBatches);
}

}  // namespace
}  // namespace fabricmon::store
