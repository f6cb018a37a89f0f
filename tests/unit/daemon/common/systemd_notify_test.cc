// CheckProgress, the rule behind both daemons' WATCHDOG=1: ping only while every loop moved
// within its limit.

#include "daemon/common/systemd_notify.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSecond = 1'000'000'000;

TEST(CheckProgressTest, EveryLoopWithinItsLimitIsOk) {
  EXPECT_TRUE(CheckProgress({}, 100 * kSecond).ok());
  EXPECT_TRUE(
      CheckProgress({{"detector", 90 * kSecond, 10 * kSecond}, {"grpc", 95 * kSecond, 5 * kSecond}},
                    100 * kSecond)
          .ok());
}

TEST(CheckProgressTest, NamesEachStalledLoopAndOnlyThose) {
  absl::Status status = CheckProgress({{"detector", 80 * kSecond, 10 * kSecond},
                                       {"grpc", 99 * kSecond, 5 * kSecond},
                                       {"ingest", 10 * kSecond, 30 * kSecond}},
                                      100 * kSecond);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("detector made no progress for 20.0 s (limit 10.0 s)"),
                    HasSubstr("ingest made no progress for 90.0 s"), Not(HasSubstr("grpc"))));
}

TEST(CheckProgressTest, TheLimitItselfIsStillProgress) {
  EXPECT_TRUE(CheckProgress({{"detector", 90 * kSecond, 10 * kSecond}}, 100 * kSecond).ok());
  EXPECT_FALSE(CheckProgress({{"detector", 90 * kSecond, 10 * kSecond}}, 100 * kSecond + 1).ok());
}

}  // namespace
}  // namespace fabricmon
