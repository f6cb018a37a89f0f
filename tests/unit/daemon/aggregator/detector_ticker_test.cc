#include "daemon/aggregator/detector_ticker.h"

#include "daemon/detectors/engine.h"
#include "gtest/gtest.h"
#include "tests/testing/thread_names.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

namespace fabricmon::aggregator {
namespace {

constexpr int64_t kHour = int64_t{3600} * 1000000000;

// The engine has no thread: the ticker's first tick comes at Start(), and Stop() does not wait
// out the engine's interval (an hour here) before it returns.
TEST(DetectorTickerTest, TicksAtStartAndStopsWithoutWaitingForTheInterval) {
  detectors::testing::FabricFixture fabric;
  detectors::DetectionEngine engine(fabric.store(), fabric.clock(), v1::DetectorThresholds(),
                                    kHour);
  EXPECT_EQ(engine.topology_builds(), 0u);
  DetectorTicker ticker(engine);
  ticker.Start();
  ticker.Stop();
  EXPECT_EQ(engine.topology_builds(), 1u);
  ticker.Stop();  // idempotent
}

// Its thread is named, so that `top -H` and profiles tell the detectors from the main thread.
TEST(DetectorTickerTest, ItsThreadIsNamed) {
  detectors::testing::FabricFixture fabric;
  detectors::DetectionEngine engine(fabric.store(), fabric.clock(), v1::DetectorThresholds(),
                                    kHour);
  DetectorTicker ticker(engine);
  ticker.Start();
  EXPECT_TRUE(fabricmon::testing::WaitForThreadNamed("detectors", absl::Seconds(10)));
  ticker.Stop();
}

// Without Start() there is no thread to join.
TEST(DetectorTickerTest, StopWithoutStartIsANoOp) {
  detectors::testing::FabricFixture fabric;
  detectors::DetectionEngine engine(fabric.store(), fabric.clock(), v1::DetectorThresholds(),
                                    kHour);
  DetectorTicker ticker(engine);
  ticker.Stop();
  EXPECT_EQ(engine.topology_builds(), 0u);
}

}  // namespace
}  // namespace fabricmon::aggregator
