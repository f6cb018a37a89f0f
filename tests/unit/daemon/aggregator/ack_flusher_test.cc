#include "daemon/aggregator/ack_flusher.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon::aggregator {
namespace {

// What ran, in order, and when.
struct Log {
  absl::Mutex mu;
  std::vector<std::string> ran ABSL_GUARDED_BY(mu);
  std::vector<absl::Time> at ABSL_GUARDED_BY(mu);
  std::function<void()> Entry(std::string name) {
    return [this, name] {
      absl::MutexLock lock(&mu);
      ran.push_back(name);
      at.push_back(absl::Now());
    };
  }
  size_t size() {
    absl::MutexLock lock(&mu);
    return ran.size();
  }
  bool WaitFor(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return ran.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
};

// Flushes run when due, earliest first, whatever the order they were deferred in: one deferred
// later but due earlier wakes the thread from its wait for the other (here an hour away).
TEST(AckFlusherTest, RunsEachFlushWhenDueEarliestFirst) {
  Log log;  // before the flusher: it outlives the flusher's last flush
  AckFlusher flusher(absl::Seconds(1), absl::Milliseconds(10));
  const absl::Time start = absl::Now();
  flusher.DeferUntil(start + absl::Hours(1), log.Entry("late"));
  absl::SleepFor(absl::Milliseconds(50));  // the thread now waits for "late"
  flusher.DeferUntil(start + absl::Milliseconds(300), log.Entry("early"));
  flusher.DeferUntil(start + absl::Milliseconds(200), log.Entry("earliest"));
  ASSERT_TRUE(log.WaitFor(2, absl::Seconds(30)));
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.ran, ::testing::ElementsAre("earliest", "early"));
  EXPECT_GE(log.at[0], start + absl::Milliseconds(200));
  EXPECT_GE(log.at[1], start + absl::Milliseconds(300));
}

TEST(AckFlusherTest, AFlushAlreadyDueRunsAtOnceAndNothingRunsEarly) {
  Log log;
  AckFlusher flusher(absl::Seconds(1), absl::Milliseconds(10));
  flusher.DeferUntil(absl::Now() + absl::Hours(1), log.Entry("later"));
  flusher.DeferUntil(absl::Now() - absl::Seconds(1), log.Entry("past"));
  ASSERT_TRUE(log.WaitFor(1, absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(100));
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.ran, ::testing::ElementsAre("past"));
}

// A flush may defer again from inside itself (a stream whose ack was written by a read, with a
// later one waiting): the flusher's lock is not held while it runs.
TEST(AckFlusherTest, AFlushMayDeferAgain) {
  Log log;
  std::atomic<int> turns{0};
  std::function<void()> again;
  AckFlusher flusher(absl::Seconds(1), absl::Milliseconds(10));
  again = [&] {
    // Counted before it is logged: the test reads `turns` as soon as the log has three.
    const int turn = ++turns;
    log.Entry("turn")();
    if (turn < 3) {
      flusher.DeferUntil(absl::Now() + absl::Milliseconds(10), again);
    }
  };
  flusher.DeferUntil(absl::Now(), again);
  ASSERT_TRUE(log.WaitFor(3, absl::Seconds(10)));
  EXPECT_EQ(turns.load(), 3);
}

// Flushes due within one round run together, at its end: one wake-up of the thread for all of
// them, none before it is due.
TEST(AckFlusherTest, FlushesDueWithinOneRoundRunInOneWakeUp) {
  Log log;
  AckFlusher flusher(absl::Seconds(1), absl::Milliseconds(400));
  // Due from 100 ms from now over the next 38 ms: one round of 400 ms, or two where a line of
  // the grid falls between them; one each (20) if the thread woke for each.
  const absl::Time start = absl::Now() + absl::Milliseconds(100);
  std::vector<absl::Time> due;
  for (int i = 0; i < 20; ++i) {
    due.push_back(start + absl::Milliseconds(2 * i));
    flusher.DeferUntil(due.back(), log.Entry(std::to_string(i)));
  }
  ASSERT_TRUE(log.WaitFor(20, absl::Seconds(30)));
  EXPECT_LE(flusher.rounds(), 2u);
  absl::MutexLock lock(&log.mu);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(log.ran[i], std::to_string(i));
    EXPECT_GE(log.at[i], due[i]) << i;
  }
}

// Stopping runs what still waits, without waiting for it to be due: an ack is never dropped by
// the flusher (the stream it is for may be gone by then; the flush checks).
TEST(AckFlusherTest, StoppingRunsWhatWaits) {
  Log log;
  {
    AckFlusher flusher(absl::Seconds(1), absl::Milliseconds(10));
    flusher.DeferUntil(absl::Now() + absl::Hours(1), log.Entry("a"));
    flusher.DeferUntil(absl::Now() + absl::Hours(2), log.Entry("b"));
  }
  absl::MutexLock lock(&log.mu);
  EXPECT_THAT(log.ran, ::testing::ElementsAre("a", "b"));
}

}  // namespace
}  // namespace fabricmon::aggregator
