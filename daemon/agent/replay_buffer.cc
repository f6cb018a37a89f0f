#include "daemon/agent/replay_buffer.h"

#include <algorithm>

namespace fabricmon::agent {

uint64_t ReplayBuffer::Push(Cycle cycle, std::shared_ptr<const Cycle>* stored) {
  absl::MutexLock lock(&mu_);
  cycle.sequence = next_sequence_++;
  auto shared = std::make_shared<const Cycle>(std::move(cycle));
  bytes_ += shared->ByteSize();
  cycles_.push_back(shared);
  // Keep at least the newest cycle even if it alone exceeds the bound.
  while (bytes_ > max_bytes_ && cycles_.size() > 1) {
    const Cycle& oldest = *cycles_.front();
    bytes_ -= oldest.ByteSize();
    unconfirmed_.push_back({oldest.sequence, oldest.values.size()});
    cycles_.pop_front();
    if (unconfirmed_.size() > kMaxUnconfirmed) {
      ConfirmLostLocked(0, unconfirmed_.front().sequence);
    }
  }
  const uint64_t sequence = shared->sequence;
  if (stored != nullptr) {
    *stored = std::move(shared);
  }
  return sequence;
}

void ReplayBuffer::Ack(uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (sequence > acked_) {
    acked_ = sequence;
  }
  while (!cycles_.empty() && cycles_.front()->sequence <= sequence) {
    bytes_ -= cycles_.front()->ByteSize();
    cycles_.pop_front();
  }
  // Evicted but acknowledged: the aggregator stored them after all.
  while (!unconfirmed_.empty() && unconfirmed_.front().sequence <= sequence) {
    unconfirmed_.pop_front();
  }
}

void ReplayBuffer::ConfirmLostLocked(uint64_t from, uint64_t to) {
  auto first = std::lower_bound(
      unconfirmed_.begin(), unconfirmed_.end(), from,
      [](const Eviction& eviction, uint64_t sequence) { return eviction.sequence < sequence; });
  auto last = first;
  for (; last != unconfirmed_.end() && last->sequence <= to; ++last) {
    ++dropped_cycles_;
    dropped_samples_ += last->samples;
  }
  unconfirmed_.erase(first, last);
}

std::shared_ptr<const Cycle> ReplayBuffer::NextAfter(uint64_t after, uint64_t* dropped_before) {
  absl::MutexLock lock(&mu_);
  *dropped_before = 0;
  if (cycles_.empty() || cycles_.back()->sequence <= after) {
    return nullptr;
  }
  // Sequences in the deque are contiguous, so the position is arithmetic.
  const uint64_t first = cycles_.front()->sequence;
  if (after + 1 < first) {
    // The gap holds cycles acknowledged earlier (delivered, maybe to a previous aggregator
    // process) and cycles dropped unacknowledged; only the latter are losses.
    const uint64_t delivered_up_to = std::max(after, acked_);
    *dropped_before = first > delivered_up_to + 1 ? first - 1 - delivered_up_to : 0;
    if (*dropped_before > 0) {
      ConfirmLostLocked(delivered_up_to + 1, first - 1);
    }
    return cycles_.front();
  }
  return cycles_[after + 1 - first];
}

uint64_t ReplayBuffer::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_ - 1;
}
uint64_t ReplayBuffer::acked_sequence() const {
  absl::MutexLock lock(&mu_);
  return acked_;
}
uint64_t ReplayBuffer::dropped_cycles() const {
  absl::MutexLock lock(&mu_);
  return dropped_cycles_;
}
uint64_t ReplayBuffer::dropped_samples() const {
  absl::MutexLock lock(&mu_);
  return dropped_samples_;
}
size_t ReplayBuffer::unconfirmed_evictions() const {
  absl::MutexLock lock(&mu_);
  return unconfirmed_.size();
}
size_t ReplayBuffer::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}
size_t ReplayBuffer::size() const {
  absl::MutexLock lock(&mu_);
  return cycles_.size();
}

}  // namespace fabricmon::agent
