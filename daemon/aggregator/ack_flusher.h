#pragma once

// Writes the acks that settle away from their stream's read, once they have waited `max_delay`.
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
// Thread-safety: everything, from any thread. A flush runs on the flusher's own thread, never
// under its lock, so it may take the stream's locks.

#include <functional>
#include <queue>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fabricmon::aggregator {

class AckFlusher {
 public:
  explicit AckFlusher(absl::Duration max_delay);
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

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // The thread's wake-up: the stop, the earliest entry's due time, or an entry due before the
  // time the thread waits for.
  bool WakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration max_delay_;
  absl::Mutex mu_;
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
  std::thread thread_;
};

}  // namespace fabricmon::aggregator
