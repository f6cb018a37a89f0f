#include "daemon/common/clock.h"

#include <time.h>

namespace fabricmon {
namespace {
int64_t Read(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace

int64_t RealClock::NowUnixNanos() const { return Read(CLOCK_REALTIME); }
int64_t RealClock::MonotonicNanos() const { return Read(CLOCK_MONOTONIC); }

RealClock& RealClock::Get() {
  static RealClock* clock = new RealClock();
  return *clock;
}

}  // namespace fabricmon
