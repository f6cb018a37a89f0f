#pragma once

// Cycles the aggregator has not acknowledged yet, bounded in bytes. After a reconnect everything
// after the aggregator's last stored sequence is sent again, so an aggregator restart or network
// blip loses nothing within the bound; beyond it the oldest cycles go first and are counted
// exactly (and announced to the aggregator in the next batch's dropped_before).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "daemon/agent/cycle.h"

namespace fabricmon::agent {

class ReplayBuffer {
 public:
  explicit ReplayBuffer(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Assigns the next sequence number (1, 2, ...) and stores the cycle, dropping the oldest
  // unacknowledged cycles while over the byte bound. Returns the sequence. Thread-safe.
  uint64_t Push(Cycle cycle) ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets every cycle with sequence ≤ `sequence` (cumulative ack).
  void Ack(uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);

  // A copy of the first buffered cycle with sequence > `after`, or nullopt. `dropped_before` is
  // set to the number of cycles dropped between `after` and it (0 when contiguous).
  std::optional<Cycle> NextAfter(uint64_t after, uint64_t* dropped_before) const
      ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t last_sequence() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t acked_sequence() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t dropped_cycles() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t dropped_samples() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  std::deque<Cycle> cycles_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_cycles_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_samples_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fabricmon::agent
