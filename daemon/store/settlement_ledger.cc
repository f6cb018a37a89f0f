#include "daemon/store/settlement_ledger.h"

#include <algorithm>
#include <utility>

namespace fabricmon::store {

Settlement::~Settlement() { ledger_->Settle(epoch_, sequence_); }

uint64_t SettlementLedger::Bind(uint64_t agent_instance_id, uint64_t agent_acked, uint64_t stored,
                                uint64_t stream_token, AckSink sink) {
  absl::MutexLock lock(&mu_);
  if (agent_instance_id != agent_instance_id_) {
    // A new sequence space: what the old one still has outstanding settles into nothing.
    agent_instance_id_ = agent_instance_id;
    ++epoch_;
    tracked_.clear();
    settled_through_ = 0;
  }
  if (agent_acked > settled_through_) {
    // Acknowledged by another shard: the agent will not send these again, and whatever this
    // shard still forwards of them must not hold back the acks of later batches.
    while (!tracked_.empty() && tracked_.front().sequence <= agent_acked) {
      tracked_.pop_front();
    }
    settled_through_ = agent_acked;
    AdvanceLocked();
  }
  bound_token_ = stream_token;
  sink_ = sink ? std::make_shared<const AckSink>(std::move(sink)) : nullptr;
  if (tracked_.empty()) {
    return stored;
  }
  return std::min(stored, tracked_.front().sequence - 1);
}

void SettlementLedger::Unbind(uint64_t stream_token) {
  absl::MutexLock lock(&mu_);
  if (bound_token_ == stream_token) {
    bound_token_ = 0;
    sink_ = nullptr;
  }
}

std::shared_ptr<Settlement> SettlementLedger::Track(uint64_t agent_instance_id, uint64_t sequence) {
  std::shared_ptr<const AckSink> sink;
  uint64_t ack = 0;
  {
    absl::MutexLock lock(&mu_);
    if (agent_instance_id != agent_instance_id_) {
      return nullptr;
    }
    if (sequence <= settled_through_) {
      sink = sink_;  // the agent sent it again: its ack may have gone to an earlier stream
      ack = settled_through_;
    } else if (!tracked_.empty() && sequence <= tracked_.back().sequence) {
      return nullptr;  // acknowledged once the batch tracked for it settles
    } else {
      tracked_.push_back({sequence, false});
      return std::make_shared<Settlement>(shared_from_this(), epoch_, sequence);
    }
  }
  if (sink != nullptr) {
    (*sink)(ack);
  }
  return nullptr;
}

void SettlementLedger::Settle(uint64_t epoch, uint64_t sequence) {
  std::shared_ptr<const AckSink> sink;
  uint64_t ack = 0;
  {
    absl::MutexLock lock(&mu_);
    if (epoch != epoch_) {
      return;  // the agent restarted since: a sequence space that is gone
    }
    auto it = std::lower_bound(
        tracked_.begin(), tracked_.end(), sequence,
        [](const Tracked& tracked, uint64_t wanted) { return tracked.sequence < wanted; });
    if (it == tracked_.end() || it->sequence != sequence) {
      return;  // dropped when the agent said another shard acknowledged it
    }
    it->settled = true;
    if (!AdvanceLocked()) {
      return;
    }
    sink = sink_;
    ack = settled_through_;
  }
  if (sink != nullptr) {
    (*sink)(ack);
  }
}

bool SettlementLedger::AdvanceLocked() {
  bool moved = false;
  while (!tracked_.empty() && tracked_.front().settled) {
    settled_through_ = tracked_.front().sequence;
    tracked_.pop_front();
    moved = true;
  }
  return moved;
}

uint64_t SettlementLedger::settled_through() const {
  absl::MutexLock lock(&mu_);
  return settled_through_;
}

size_t SettlementLedger::unsettled() const {
  absl::MutexLock lock(&mu_);
  return tracked_.size();
}

}  // namespace fabricmon::store
