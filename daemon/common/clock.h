#pragma once

#include <cstdint>

namespace fabricmon {

// Time source seam: production uses RealClock; tests inject tests/testing/fake_clock.h.
// Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, Unix epoch nanoseconds (sample timestamps).
  virtual int64_t NowUnixNanos() const = 0;
  // Monotonic time in nanoseconds (intervals, deadlines, rates).
  virtual int64_t MonotonicNanos() const = 0;
};

class RealClock final : public Clock {
 public:
  int64_t NowUnixNanos() const override;
  int64_t MonotonicNanos() const override;
  // A process-wide instance.
  static RealClock& Get();
};

}  // namespace fabricmon
