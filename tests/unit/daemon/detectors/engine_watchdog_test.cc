// The aggregator's watchdog pings systemd only while the detector thread makes progress
// (AggregatorServer::ServeUntilSignal): the engine's last-tick time feeds CheckProgress, so a
// detector that stops ticking (a stalled thread, a tick stuck on a lock) stops the pings, and
// ticking again resumes them. Driven by a fake clock; no thread, no sleep.

#include <string>

#include "daemon/common/systemd_notify.h"
#include "daemon/detectors/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

namespace fabricmon::detectors {
namespace {

using testing::FabricFixture;
using ::testing::HasSubstr;

constexpr int64_t kSecond = 1'000'000'000;

class EngineWatchdogTest : public ::testing::Test {
 protected:
  EngineWatchdogTest()
      : engine_(fabric_.store(), fabric_.clock(), v1::DetectorThresholds(), kSecond) {}

  // What WatchdogLoop asks before each ping: the detector may be silent 30 s.
  absl::Status Progress(int64_t started) {
    const int64_t last = engine_.last_tick_monotonic_nanos();
    return CheckProgress({{"detector thread", last > 0 ? last : started, 30 * kSecond}},
                         fabric_.clock().MonotonicNanos());
  }

  FabricFixture fabric_;
  DetectionEngine engine_;
};

TEST_F(EngineWatchdogTest, NoTickYetIsProgressOnlyUntilTheLimitSinceStart) {
  EXPECT_EQ(engine_.last_tick_monotonic_nanos(), 0);
  const int64_t started = fabric_.clock().MonotonicNanos();
  fabric_.clock().AdvanceMillis(30'000);
  EXPECT_TRUE(Progress(started).ok());
  fabric_.clock().AdvanceMillis(1);
  EXPECT_FALSE(Progress(started).ok());
}

TEST_F(EngineWatchdogTest, PingsStopWhenTicksStopAndResumeWhenTheyComeBack) {
  const int64_t started = fabric_.clock().MonotonicNanos();
  fabric_.Node("node1", v1::Inventory());
  for (int i = 0; i < 5; ++i) {
    fabric_.clock().AdvanceMillis(1'000);
    engine_.Tick();
    EXPECT_EQ(engine_.last_tick_monotonic_nanos(), fabric_.clock().MonotonicNanos());
    EXPECT_TRUE(Progress(started).ok()) << i;
  }
  // The detector thread stalls: no tick for longer than the limit.
  fabric_.clock().AdvanceMillis(30'001);
  absl::Status stalled = Progress(started);
  EXPECT_EQ(stalled.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(stalled.message()), HasSubstr("detector thread made no progress"));
  // It recovers: pings may resume.
  engine_.Tick();
  EXPECT_TRUE(Progress(started).ok());
}

}  // namespace
}  // namespace fabricmon::detectors
