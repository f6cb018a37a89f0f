#include "daemon/aggregator/ack_flusher.h"

#include <utility>

#include "absl/time/clock.h"
#include "daemon/common/thread_name.h"

namespace fabricmon::aggregator {

AckFlusher::AckFlusher(absl::Duration max_delay, absl::Duration granularity)
    : max_delay_(max_delay), granularity_(granularity), thread_([this] { Run(); }) {}

AckFlusher::~AckFlusher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void AckFlusher::DeferUntil(absl::Time due, std::function<void()> flush) {
  absl::MutexLock lock(&mu_);
  // An entry of an earlier round than the one the thread waits for: it waits again.
  if (RoundOf(due) < waiting_for_) {
    rewait_ = true;
  }
  pending_.push({due, std::move(flush)});
}

uint64_t AckFlusher::rounds() const {
  absl::MutexLock lock(&mu_);
  return rounds_;
}

absl::Time AckFlusher::RoundOf(absl::Time due) const {
  if (due == absl::InfiniteFuture() || due == absl::InfinitePast()) {
    return due;
  }
  return absl::UnixEpoch() + absl::Ceil(due - absl::UnixEpoch(), granularity_);
}

void AckFlusher::RunEarliestLocked() {
  std::function<void()> flush = pending_.top().flush;
  pending_.pop();
  mu_.Unlock();
  flush();
  mu_.Lock();
}

bool AckFlusher::WakeLocked() const { return stopping_ || rewait_; }

void AckFlusher::Run() {
  NameThisThread("ack_flusher");
  absl::MutexLock lock(&mu_);
  while (true) {
    rewait_ = false;
    waiting_for_ = pending_.empty() ? absl::InfiniteFuture() : RoundOf(pending_.top().due);
    mu_.AwaitWithDeadline(absl::Condition(this, &AckFlusher::WakeLocked), waiting_for_);
    if (stopping_) {
      // Everything still waiting runs now, due or not: an ack is never dropped here.
      while (!pending_.empty()) {
        RunEarliestLocked();
      }
      return;
    }
    // The clock read once: a flush that defers again (a later ack waits) goes to a later round
    // even if it is due before this one ends, so a round always ends.
    const absl::Time now = absl::Now();
    if (pending_.empty() || RoundOf(pending_.top().due) > now) {
      continue;  // an earlier entry came, or the wait ended early: wait for its round
    }
    ++rounds_;
    waiting_for_ = absl::InfinitePast();  // entries deferred meanwhile wait for the next wait
    while (!pending_.empty() && pending_.top().due <= now) {
      RunEarliestLocked();
    }
  }
}

}  // namespace fabricmon::aggregator
