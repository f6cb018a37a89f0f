#pragma once

// When a node's batches may be acknowledged to its agent. A batch is *settled* once the store
// holds it and everything downstream that took its samples (remote_write's queues) is done with
// them: delivered, refused by the receiver, or dropped and counted. The agent forgets a batch
// when it is acknowledged, so acknowledging on store alone would lose what a shard had stored but
// not yet forwarded when it died (a SIGKILL, an OOM kill); acknowledging on settlement makes the
// agent replay it to the next shard instead. Samples that were forwarded and then replayed are
// exact duplicates (same labels, timestamp and value), which receivers deduplicate.
//
// Acks are cumulative, so the ledger acknowledges sequence S only when every batch it tracked
// up to S is settled: queues progress independently, and batch 7 may settle before batch 6.
//
// How it is used: the stream that owns the node binds its ack sink (Bind, after the store's
// attach); each batch the stream handles is tracked (Track) and the returned Settlement handed
// to whatever takes the batch's samples, which keeps a reference until it is done with them; the
// last reference released settles the batch. Nothing holding one: settled at once, as before.
// The ledger lives as long as its node or its last outstanding Settlement, whichever is later,
// so a settlement after the node was forgotten or the stream ended is harmless.
//
// Thread-safety: everything is thread-safe. The ack sink is called without the ledger's lock,
// from whichever thread settled a batch (a remote_write queue's, or the stream's own).

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/synchronization/mutex.h"

namespace fabricmon::store {

class SettlementLedger;

// One tracked batch: settled when the last reference is released.
class Settlement {
 public:
  Settlement(std::shared_ptr<SettlementLedger> ledger, uint64_t epoch, uint64_t sequence)
      : ledger_(std::move(ledger)), epoch_(epoch), sequence_(sequence) {}
  ~Settlement();
  Settlement(const Settlement&) = delete;
  Settlement& operator=(const Settlement&) = delete;

  uint64_t sequence() const { return sequence_; }

 private:
  const std::shared_ptr<SettlementLedger> ledger_;
  const uint64_t epoch_;
  const uint64_t sequence_;
};

class SettlementLedger : public std::enable_shared_from_this<SettlementLedger> {
 public:
  using AckSink = std::function<void(uint64_t sequence)>;

  // Binds the stream `stream_token` (which the store just attached to the node) and its ack sink
  // (nullable: a replay acknowledges nothing). `agent_instance_id` starts a new sequence space
  // when it differs from the last bound stream's (a restarted agent numbers from 1 again);
  // batches up to `agent_acked` are settled elsewhere (another shard acknowledged them while the
  // agent was failed over) and no longer hold anything back. Returns what the hello's answer
  // should report as stored: `stored` (the store's), or less while batches up to it are still
  // unsettled, so that a stream ending before they settle leaves them with the agent.
  uint64_t Bind(uint64_t agent_instance_id, uint64_t agent_acked, uint64_t stored,
                uint64_t stream_token, AckSink sink) ABSL_LOCKS_EXCLUDED(mu_);
  // The stream ended: its sink is no longer called (a later stream's Bind replaces it anyway).
  void Unbind(uint64_t stream_token) ABSL_LOCKS_EXCLUDED(mu_);

  // Batch `sequence` of agent instance `agent_instance_id` was stored, or was a duplicate of a
  // stored one. Returns its settlement, or null when there is nothing new to track: a sequence
  // at or before one already tracked (it settles, and is acknowledged, with that one; one
  // already settled is acknowledged again), or an instance other than the bound stream's (a
  // stream a restarted agent superseded: another sequence space). A stream of the same instance
  // that a takeover superseded is tracked like the bound one, whose sink then acknowledges it.
  std::shared_ptr<Settlement> Track(uint64_t agent_instance_id, uint64_t sequence)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The highest sequence acknowledged (every tracked batch up to it settled).
  uint64_t settled_through() const ABSL_LOCKS_EXCLUDED(mu_);
  // Batches tracked and not yet acknowledged (settled ones behind an unsettled one included).
  size_t unsettled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class Settlement;
  void Settle(uint64_t epoch, uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);
  // Moves settled_through_ over the settled batches at the front; whether it moved.
  bool AdvanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Tracked {
    uint64_t sequence;
    bool settled;
  };

  mutable absl::Mutex mu_;
  uint64_t agent_instance_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // moves with each new sequence space
  uint64_t settled_through_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Tracked> tracked_ ABSL_GUARDED_BY(mu_);  // increasing sequences, front unsettled
  uint64_t bound_token_ ABSL_GUARDED_BY(mu_) = 0;
  // Shared so that a settler copies it cheaply and calls it after releasing mu_.
  std::shared_ptr<const AckSink> sink_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricmon::store
