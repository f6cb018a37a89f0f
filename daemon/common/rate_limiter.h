#pragma once

// A token bucket over explicit times, so that the caller decides where time comes from (the
// injected Clock's MonotonicNanos()) and tests step it by hand.

#include <algorithm>
#include <cstdint>

namespace fabricmon {

// Holds up to `burst` tokens and gains `rate_per_second` tokens per second; starts full at the
// first call. Times are monotonic nanoseconds from one clock; a time earlier than the previous
// one adds nothing (and does not move the bucket back). Not thread-safe: the owner locks.
class TokenBucket {
 public:
  TokenBucket(double rate_per_second, double burst)
      : rate_per_nano_(std::max(rate_per_second, 0.0) / 1e9), burst_(std::max(burst, 0.0)) {}

  // Tokens available at `now_nanos`.
  double Available(int64_t now_nanos) {
    Refill(now_nanos);
    return tokens_;
  }

  // Takes `n` tokens if that many are available at `now_nanos`; otherwise takes none.
  bool TryTake(int64_t now_nanos, double n = 1) {
    Refill(now_nanos);
    if (tokens_ < n) {
      return false;
    }
    tokens_ -= n;
    return true;
  }

  double rate_per_second() const { return rate_per_nano_ * 1e9; }
  double burst() const { return burst_; }

 private:
  void Refill(int64_t now_nanos) {
    if (!started_) {
      started_ = true;
      last_nanos_ = now_nanos;
      tokens_ = burst_;
      return;
    }
    if (now_nanos <= last_nanos_) {
      return;
    }
    tokens_ =
        std::min(burst_, tokens_ + static_cast<double>(now_nanos - last_nanos_) * rate_per_nano_);
    last_nanos_ = now_nanos;
  }

  const double rate_per_nano_;
  const double burst_;
  bool started_ = false;
  int64_t last_nanos_ = 0;
  double tokens_ = 0;
};

}  // namespace fabricmon
