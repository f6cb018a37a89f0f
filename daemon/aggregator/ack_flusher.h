#pragma once

// Writes the acks that settle away from their stream's read, once they have waited `max_delay`
// (and at most one `granularity` more).
//
// With remote_write on, a batch settles on a remote_write queue's thread when the receiver has
// it. An ack written from there goes out in a send of its own (gRPC writes it at once, on that
// thread); written from the stream's next read it goes out with the flow-control update gRPC
// sends for the read anyway. At 1,000 agents × 1 Hz that halved the aggregator's sends (2,046
// to 1,013 a second) and took about 6 % off its CPU per sample (fabricmon_load_generator with a
// local receiver, medians of 3 alternated runs). So an ack settled off the read waits for the
// stream's next read, and for at most `max_delay`: an agent that sends no more (it is stopping, it
// is failing back, a slow collector) gets it from here. The agent holds an unacknowledged batch a
// little longer, and a failover replays it: an exact duplicate remote storage keeps once.
//
// Flushes run in rounds: the thread wakes when the earliest is due, rounded up to a multiple of
// `granularity` (a fixed grid of wall time), and runs everything due by then. Each stream's flush
// comes due at its own moment, and a stream whose ack a read wrote defers again (a steady 1 Hz
// stream does every `max_delay`), so the thread woke for each flush that no other was due with:
// 33-43 times a second at 1,000 streams from the load generator, whose agents start together,
// and up to one wake-up per flush (~570 a second) where agents are out of step, as in a fleet.
// In rounds it wakes at most 1 / granularity times a second (1-2 measured).
//
// Thread-safety: everything, from any thread. A flush runs on the flusher's own thread, never
// under its lock, so it may take the stream's locks.

#include <cstdint>
#include <functional>
#include <queue>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fabricmon::aggregator {

class AckFlusher {
 public:
  // `granularity` > 0; flushes never run before they are due, and at most `granularity` after
  // (load permitting).
  AckFlusher(absl::Duration max_delay, absl::Duration granularity);
  // Stops the thread; flushes still waiting are run first (an ack is never silently lost; the
  // stream may be gone by then, which the flush checks).
  ~AckFlusher();
  AckFlusher(const AckFlusher&) = delete;
  AckFlusher& operator=(const AckFlusher&) = delete;

  // Runs `flush` at `due` (at once when it has passed). A stream keeps at most one flush here
  // (a flag of its own): when it runs and finds the ack it was for already written by a read and
  // a later one waiting, it defers again for that one's due time.
  void DeferUntil(absl::Time due, std::function<void()> flush) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Duration max_delay() const { return max_delay_; }

  // Rounds that ran at least one flush so far (tests).
  uint64_t rounds() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // The thread's wake-up: the stop, or an entry whose round comes before the one the thread
  // waits for.
  bool WakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the earliest entry's flush (removed) without the lock.
  void RunEarliestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the round that runs an entry due at `due` starts: `due` rounded up to the grid.
  absl::Time RoundOf(absl::Time due) const;

  const absl::Duration max_delay_;
  const absl::Duration granularity_;
  mutable absl::Mutex mu_;
  struct Pending {
    absl::Time due;
    std::function<void()> flush;
    bool operator>(const Pending& other) const { return due > other.due; }
  };
  // The earliest due first.
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> pending_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool rewait_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time waiting_for_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();  // the next round
  uint64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace fabricmon::aggregator
