#pragma once

// Cycles the aggregator has not acknowledged yet, bounded in bytes. After a reconnect everything
// after the aggregator's last stored sequence is sent again, so an aggregator restart or network
// blip loses nothing within the bound; beyond it the oldest cycles go first and are counted
// exactly (and announced to the aggregator in the next batch's dropped_before).
//
// "Exactly" needs care: a cycle evicted after it was sent but before its ack may still have been
// stored by the aggregator (in flight when the connection broke, or acked a moment later). Such
// an eviction is held as *unconfirmed* until its fate is known: an ack covering it means it was
// delivered (not a drop); being announced as a gap in dropped_before means it was lost. Only
// then does dropped_cycles() count it, so the agent's count equals the aggregator's and never
// goes down.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "daemon/agent/cycle.h"

namespace fabricmon::agent {

class ReplayBuffer {
 public:
  explicit ReplayBuffer(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Assigns the next sequence number (1, 2, ...) and stores the cycle, dropping the oldest
  // unacknowledged cycles while over the byte bound. Returns the sequence; `stored`, when given,
  // receives the stored cycle itself (shared, never copied). Thread-safe.
  uint64_t Push(Cycle cycle, std::shared_ptr<const Cycle>* stored = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets every cycle with sequence ≤ `sequence` (cumulative ack).
  void Ack(uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);

  // The first buffered cycle with sequence > `after` (the last cycle this stream sent, or the
  // aggregator's last stored one after a hello), or null. Shared, not copied: a stored cycle is
  // never modified. `dropped_before` is set to
  // the number of cycles dropped between `after` and it (0 when contiguous); announcing them
  // confirms them lost (counted once, however often a reconnect announces them again).
  std::shared_ptr<const Cycle> NextAfter(uint64_t after, uint64_t* dropped_before)
      ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t last_sequence() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t acked_sequence() const ABSL_LOCKS_EXCLUDED(mu_);
  // Cycles (and their samples) evicted unacknowledged and confirmed lost.
  uint64_t dropped_cycles() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t dropped_samples() const ABSL_LOCKS_EXCLUDED(mu_);
  // Cycles evicted whose fate the next ack or announcement decides.
  size_t unconfirmed_evictions() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<const Cycle>> cycles_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_cycles_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_samples_ ABSL_GUARDED_BY(mu_) = 0;

  // Evicted, unconfirmed cycles in sequence order (gaps where a range was confirmed lost or
  // acknowledged out of the middle): sequence and sample count, 16 bytes each.
  struct Eviction {
    uint64_t sequence;
    uint64_t samples;
  };
  // Bound on held evictions (16 MiB): past it the oldest counts as lost. Only cycles in flight
  // at a disconnect can turn out delivered, and they are the oldest evictions, so this can
  // overcount only after a million evictions in one outage (days at a few cycles per second).
  static constexpr size_t kMaxUnconfirmed = 1 << 20;
  void ConfirmLostLocked(uint64_t from, uint64_t to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::deque<Eviction> unconfirmed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricmon::agent
