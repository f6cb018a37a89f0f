#include "daemon/aggregator/ack_flusher.h"

#include <pthread.h>

#include <utility>

namespace fabricmon::aggregator {

AckFlusher::AckFlusher(absl::Duration max_delay)
    : max_delay_(max_delay), thread_([this] { Run(); }) {}

AckFlusher::~AckFlusher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void AckFlusher::DeferUntil(absl::Time due, std::function<void()> flush) {
  absl::MutexLock lock(&mu_);
  // A new earliest entry: the thread waits for a later time, or for ever (WakeLocked).
  if (pending_.empty() || due < pending_.top().due) {
    rewait_ = true;
  }
  pending_.push({due, std::move(flush)});
}

bool AckFlusher::WakeLocked() const {
  return stopping_ || rewait_ || (!pending_.empty() && pending_.top().due <= absl::Now());
}

void AckFlusher::Run() {
  pthread_setname_np(pthread_self(), "ack_flusher");
  absl::MutexLock lock(&mu_);
  while (true) {
    rewait_ = false;
    const absl::Time until = pending_.empty() ? absl::InfiniteFuture() : pending_.top().due;
    mu_.AwaitWithDeadline(absl::Condition(this, &AckFlusher::WakeLocked), until);
    if (pending_.empty()) {
      if (stopping_) {
        return;
      }
      continue;
    }
    if (!stopping_ && pending_.top().due > absl::Now()) {
      continue;  // an earlier entry came: wait for its due time
    }
    std::function<void()> flush = pending_.top().flush;
    pending_.pop();
    mu_.Unlock();
    flush();
    mu_.Lock();
  }
}

}  // namespace fabricmon::aggregator
