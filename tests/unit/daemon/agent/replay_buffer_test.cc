#include "daemon/agent/replay_buffer.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon::agent {
namespace {

// A cycle of `n` values; values encode the cycle's index so copies can be told apart.
Cycle MakeCycle(size_t n, uint64_t tag = 0) {
  Cycle cycle;
  cycle.timestamp_unix_nanos = static_cast<int64_t>(tag) * 1000;
  cycle.layout = std::make_shared<const Layout>(std::vector<uint32_t>(n, 1));
  cycle.values.assign(n, tag);
  return cycle;
}

// Bytes one cycle of `n` values accounts for (the bound is in the buffer's own unit).
size_t CycleBytes(size_t n) { return MakeCycle(n).ByteSize(); }

TEST(ReplayBufferTest, AssignsConsecutiveSequencesFromOne) {
  ReplayBuffer buffer(1 << 20);
  EXPECT_EQ(buffer.last_sequence(), 0u);
  EXPECT_EQ(buffer.Push(MakeCycle(4)), 1u);
  EXPECT_EQ(buffer.Push(MakeCycle(4)), 2u);
  EXPECT_EQ(buffer.Push(MakeCycle(4)), 3u);
  EXPECT_EQ(buffer.last_sequence(), 3u);
  EXPECT_EQ(buffer.size(), 3u);
  EXPECT_EQ(buffer.bytes(), 3 * CycleBytes(4));
  EXPECT_EQ(buffer.dropped_cycles(), 0u);
}

TEST(ReplayBufferTest, DropsOldestFirstAndCountsExactly) {
  constexpr size_t kValues = 10;
  ReplayBuffer buffer(3 * CycleBytes(kValues));
  for (uint64_t i = 1; i <= 7; ++i) {
    EXPECT_EQ(buffer.Push(MakeCycle(kValues, i)), i);
    EXPECT_LE(buffer.bytes(), 3 * CycleBytes(kValues));
  }
  EXPECT_EQ(buffer.size(), 3u);
  // Evicted, but not yet known to be lost (an ack may still cover them).
  EXPECT_EQ(buffer.unconfirmed_evictions(), 4u);
  EXPECT_EQ(buffer.dropped_cycles(), 0u);

  // The survivors are the newest three, in order, with their own values; announcing the gap
  // confirms the loss.
  uint64_t dropped_before = 99;
  std::shared_ptr<const Cycle> first = buffer.NextAfter(0, &dropped_before);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->sequence, 5u);
  EXPECT_EQ(first->values, std::vector<uint64_t>(kValues, 5));
  EXPECT_EQ(dropped_before, 4u);
  EXPECT_EQ(buffer.dropped_cycles(), 4u);
  EXPECT_EQ(buffer.dropped_samples(), 4 * kValues);
  EXPECT_EQ(buffer.unconfirmed_evictions(), 0u);
  std::shared_ptr<const Cycle> next = buffer.NextAfter(5, &dropped_before);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->sequence, 6u);
  EXPECT_EQ(dropped_before, 0u);
}

TEST(ReplayBufferTest, BoundCountsBytesNotCycles) {
  const size_t small = CycleBytes(10);
  const size_t big = CycleBytes(40);
  const size_t bound = 4 * small;
  ASSERT_GT(big, 2 * small);  // so the big cycle must push out more than one small one
  ReplayBuffer buffer(bound);
  for (int i = 0; i < 4; ++i) {
    buffer.Push(MakeCycle(10));
  }
  EXPECT_EQ(buffer.dropped_cycles(), 0u);
  buffer.Push(MakeCycle(40));
  size_t expected_drops = 0;
  for (size_t held = 4 * small + big; held > bound; held -= small) {
    ++expected_drops;
  }
  EXPECT_GE(expected_drops, 2u);
  EXPECT_EQ(buffer.unconfirmed_evictions(), expected_drops);
  uint64_t dropped_before = 0;
  ASSERT_TRUE((buffer.NextAfter(0, &dropped_before) != nullptr));
  EXPECT_EQ(dropped_before, expected_drops);
  EXPECT_EQ(buffer.dropped_cycles(), expected_drops);
  EXPECT_EQ(buffer.dropped_samples(), expected_drops * 10);
  EXPECT_EQ(buffer.size(), 5 - expected_drops);
  EXPECT_LE(buffer.bytes(), bound);
}

TEST(ReplayBufferTest, KeepsNewestCycleEvenWhenItAloneExceedsTheBound) {
  ReplayBuffer buffer(16);
  EXPECT_EQ(buffer.Push(MakeCycle(100)), 1u);
  EXPECT_EQ(buffer.size(), 1u);
  EXPECT_EQ(buffer.dropped_cycles(), 0u);
  EXPECT_EQ(buffer.Push(MakeCycle(100)), 2u);
  EXPECT_EQ(buffer.size(), 1u);
  EXPECT_EQ(buffer.unconfirmed_evictions(), 1u);
}

// A cycle sent but not yet acknowledged when the full buffer evicts it may still reach the
// aggregator: the ack that covers it proves delivery, and it is not a drop.
TEST(ReplayBufferTest, EvictedCycleThatIsAcknowledgedLaterIsNotADrop) {
  constexpr size_t kValues = 8;
  ReplayBuffer buffer(2 * CycleBytes(kValues));
  uint64_t dropped_before = 99;
  buffer.Push(MakeCycle(kValues));  // 1, sent
  ASSERT_TRUE((buffer.NextAfter(0, &dropped_before) != nullptr));
  buffer.Push(MakeCycle(kValues));  // 2, sent
  ASSERT_TRUE((buffer.NextAfter(1, &dropped_before) != nullptr));
  buffer.Push(MakeCycle(kValues));  // 3: evicts 1, in flight
  buffer.Push(MakeCycle(kValues));  // 4: evicts 2, in flight
  EXPECT_EQ(buffer.unconfirmed_evictions(), 2u);
  buffer.Ack(2);
  EXPECT_EQ(buffer.unconfirmed_evictions(), 0u);
  std::shared_ptr<const Cycle> next = buffer.NextAfter(2, &dropped_before);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->sequence, 3u);
  EXPECT_EQ(dropped_before, 0u);
  EXPECT_EQ(buffer.dropped_cycles(), 0u);
}

// A reconnect announces the same gap again (the batch that announced it may not have arrived);
// the agent counts the loss once, as the aggregator does.
TEST(ReplayBufferTest, GapAnnouncedOnEveryReconnectIsCountedOnce) {
  constexpr size_t kValues = 8;
  ReplayBuffer buffer(2 * CycleBytes(kValues));
  for (int i = 0; i < 5; ++i) {
    buffer.Push(MakeCycle(kValues));  // 1..3 evicted
  }
  for (int reconnect = 0; reconnect < 3; ++reconnect) {
    uint64_t dropped_before = 99;
    std::shared_ptr<const Cycle> next = buffer.NextAfter(0, &dropped_before);
    ASSERT_NE(next, nullptr);
    EXPECT_EQ(dropped_before, 3u);
    EXPECT_EQ(buffer.dropped_cycles(), 3u);
    EXPECT_EQ(buffer.dropped_samples(), 3 * kValues);
  }
}

TEST(ReplayBufferTest, AckForgetsCyclesUpToSequenceAndNeverGoesBack) {
  ReplayBuffer buffer(1 << 20);
  for (int i = 0; i < 5; ++i) {
    buffer.Push(MakeCycle(4));
  }
  buffer.Ack(3);
  EXPECT_EQ(buffer.acked_sequence(), 3u);
  EXPECT_EQ(buffer.size(), 2u);
  EXPECT_EQ(buffer.bytes(), 2 * CycleBytes(4));
  buffer.Ack(2);  // a late, older ack changes nothing
  EXPECT_EQ(buffer.acked_sequence(), 3u);
  EXPECT_EQ(buffer.size(), 2u);
  // Forgotten acknowledged cycles are not drops.
  EXPECT_EQ(buffer.dropped_cycles(), 0u);

  buffer.Ack(5);
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_EQ(buffer.bytes(), 0u);
  // Sequences keep counting after the buffer emptied.
  EXPECT_EQ(buffer.Push(MakeCycle(4)), 6u);
}

TEST(ReplayBufferTest, AckBeyondLastSequenceEmptiesTheBuffer) {
  ReplayBuffer buffer(1 << 20);
  buffer.Push(MakeCycle(4));
  buffer.Ack(100);
  EXPECT_EQ(buffer.size(), 0u);
  uint64_t dropped_before = 99;
  EXPECT_FALSE((buffer.NextAfter(0, &dropped_before) != nullptr));
  EXPECT_EQ(dropped_before, 0u);
}

TEST(ReplayBufferTest, NextAfterWalksTheBufferInOrder) {
  ReplayBuffer buffer(1 << 20);
  for (uint64_t i = 1; i <= 4; ++i) {
    buffer.Push(MakeCycle(2, i));
  }
  uint64_t after = 0;
  std::vector<uint64_t> seen;
  uint64_t dropped_before = 0;
  while (std::shared_ptr<const Cycle> cycle = buffer.NextAfter(after, &dropped_before)) {
    EXPECT_EQ(dropped_before, 0u);
    EXPECT_EQ(cycle->values[0], cycle->sequence);  // the right cycle
    ASSERT_NE(cycle->layout, nullptr);
    seen.push_back(cycle->sequence);
    after = cycle->sequence;
  }
  EXPECT_THAT(seen, ::testing::ElementsAre(1, 2, 3, 4));
  // NextAfter takes nothing out: the buffer still holds everything.
  EXPECT_EQ(buffer.size(), 4u);
}

// The agent keeps each collector's latest cycle for its local /metrics and the stream encodes
// buffered cycles: both share the stored cycle instead of copying its values.
TEST(ReplayBufferTest, PushAndNextAfterShareTheStoredCycle) {
  ReplayBuffer buffer(1 << 20);
  std::shared_ptr<const Cycle> stored;
  EXPECT_EQ(buffer.Push(MakeCycle(4, 7), &stored), 1u);
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(stored->sequence, 1u);
  EXPECT_EQ(stored->values[0], 7u);
  uint64_t dropped_before = 0;
  EXPECT_EQ(buffer.NextAfter(0, &dropped_before).get(), stored.get());
  buffer.Ack(1);  // the buffer lets go; the holder's cycle stays valid
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_EQ(stored->values[0], 7u);
}

// A reconnect to an aggregator that lost its state (it answers "stored 0") asks for everything
// after sequence 0. Cycles acknowledged by the previous aggregator process and then forgotten
// were delivered: they must not be reported as dropped.
TEST(ReplayBufferTest, AcknowledgedThenForgottenCyclesAreNotDrops) {
  ReplayBuffer buffer(1 << 20);
  for (int i = 0; i < 6; ++i) {
    buffer.Push(MakeCycle(4));
  }
  buffer.Ack(4);
  uint64_t dropped_before = 99;
  std::shared_ptr<const Cycle> next = buffer.NextAfter(0, &dropped_before);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->sequence, 5u);
  EXPECT_EQ(dropped_before, 0u);
}

// Acknowledged cycles and cycles dropped unacknowledged can both sit before the first buffered
// one: only the latter are losses, whichever `after` the stream resumes from.
TEST(ReplayBufferTest, DroppedBeforeCountsOnlyUnacknowledgedDrops) {
  constexpr size_t kValues = 8;
  ReplayBuffer buffer(3 * CycleBytes(kValues));
  buffer.Push(MakeCycle(kValues));  // 1
  buffer.Push(MakeCycle(kValues));  // 2
  buffer.Ack(2);
  for (int i = 0; i < 8; ++i) {  // 3..10; 3..7 are dropped unacknowledged
    buffer.Push(MakeCycle(kValues));
  }
  EXPECT_EQ(buffer.unconfirmed_evictions(), 5u);

  for (uint64_t after : {0u, 1u, 2u}) {
    SCOPED_TRACE(after);
    uint64_t dropped_before = 99;
    std::shared_ptr<const Cycle> next = buffer.NextAfter(after, &dropped_before);
    ASSERT_NE(next, nullptr);
    EXPECT_EQ(next->sequence, 8u);
    EXPECT_EQ(dropped_before, 5u);
  }
  // A stream that already sent up to 5 before they were dropped only misses 6 and 7.
  uint64_t dropped_before = 99;
  std::shared_ptr<const Cycle> next = buffer.NextAfter(5, &dropped_before);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->sequence, 8u);
  EXPECT_EQ(dropped_before, 2u);
  EXPECT_EQ(buffer.dropped_cycles(), 5u);
}

TEST(ReplayBufferTest, NextAfterTheNewestIsEmpty) {
  ReplayBuffer buffer(1 << 20);
  uint64_t dropped_before = 99;
  EXPECT_FALSE((buffer.NextAfter(0, &dropped_before) != nullptr));
  EXPECT_EQ(dropped_before, 0u);
  buffer.Push(MakeCycle(1));
  EXPECT_FALSE((buffer.NextAfter(1, &dropped_before) != nullptr));
  EXPECT_FALSE((buffer.NextAfter(7, &dropped_before) != nullptr));
}

// Collector threads push while the stream's callbacks read and ack: every push gets its own
// sequence, and what stays buffered is contiguous, ends at the newest and is byte-accounted.
TEST(ReplayBufferTest, ConcurrentPushReadAndAckStayConsistent) {
  constexpr size_t kValues = 4;
  constexpr int kPushers = 3;
  constexpr int kPerPusher = 2000;
  ReplayBuffer buffer(64 * CycleBytes(kValues));
  std::vector<std::vector<uint64_t>> assigned(kPushers);
  std::vector<std::thread> pushers;
  for (int p = 0; p < kPushers; ++p) {
    pushers.emplace_back([&buffer, &mine = assigned[p]] {
      for (int i = 0; i < kPerPusher; ++i) {
        mine.push_back(buffer.Push(MakeCycle(kValues)));
      }
    });
  }
  std::atomic<bool> done{false};
  std::thread acker([&] {
    uint64_t after = 0;
    while (!done.load()) {
      uint64_t dropped_before = 0;
      if (std::shared_ptr<const Cycle> cycle = buffer.NextAfter(after, &dropped_before)) {
        EXPECT_GT(cycle->sequence, after);
        after = cycle->sequence;
        buffer.Ack(after);
      }
    }
  });
  for (std::thread& thread : pushers) {
    thread.join();
  }
  done = true;
  acker.join();

  std::vector<uint64_t> all;
  for (const auto& mine : assigned) {
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  const uint64_t pushed = kPushers * kPerPusher;
  ASSERT_EQ(all.size(), pushed);
  for (uint64_t i = 0; i < pushed; ++i) {
    ASSERT_EQ(all[i], i + 1) << "sequence assigned twice or skipped";
  }
  EXPECT_EQ(buffer.last_sequence(), pushed);
  EXPECT_LE(buffer.dropped_cycles() + buffer.size(), pushed);
  EXPECT_EQ(buffer.dropped_samples(), buffer.dropped_cycles() * kValues);
  EXPECT_EQ(buffer.bytes(), buffer.size() * CycleBytes(kValues));
  EXPECT_LE(buffer.bytes(), 64 * CycleBytes(kValues));
  // The buffered cycles are exactly the newest ones after the acknowledged point.
  uint64_t after = buffer.acked_sequence();
  uint64_t dropped_before = 0;
  size_t walked = 0;
  while (std::shared_ptr<const Cycle> cycle = buffer.NextAfter(after, &dropped_before)) {
    after = cycle->sequence;
    ++walked;
  }
  EXPECT_EQ(walked, buffer.size());
  EXPECT_EQ(after, buffer.size() > 0 ? pushed : buffer.acked_sequence());
}

}  // namespace
}  // namespace fabricmon::agent
