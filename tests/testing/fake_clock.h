#pragma once

#include <atomic>
#include <cstdint>

#include "daemon/common/clock.h"

namespace fabricmon::testing {

// A clock that moves only when told. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t unix_nanos = 1'700'000'000'000'000'000) : unix_(unix_nanos) {}
  int64_t NowUnixNanos() const override { return unix_.load(); }
  int64_t MonotonicNanos() const override { return mono_.load(); }
  void AdvanceNanos(int64_t nanos) {
    unix_ += nanos;
    mono_ += nanos;
  }
  void AdvanceMillis(int64_t ms) { AdvanceNanos(ms * 1'000'000); }

 private:
  std::atomic<int64_t> unix_;
  std::atomic<int64_t> mono_{1'000'000'000};
};

}  // namespace fabricmon::testing
