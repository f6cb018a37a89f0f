#include "daemon/common/rate_limiter.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace fabricmon {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kT0 = 5 * kSecond;  // any monotonic origin

TEST(TokenBucketTest, StartsFullAndRefillsAtTheRateUpToTheBurst) {
  TokenBucket bucket(/*rate_per_second=*/10, /*burst=*/100);
  EXPECT_DOUBLE_EQ(bucket.Available(kT0), 100);
  EXPECT_TRUE(bucket.TryTake(kT0, 100));
  EXPECT_FALSE(bucket.TryTake(kT0));
  // 10 per second: 0.35 s gives 3.5 tokens, so three takes and not a fourth.
  const int64_t t1 = kT0 + 350'000'000;
  EXPECT_TRUE(bucket.TryTake(t1));
  EXPECT_TRUE(bucket.TryTake(t1));
  EXPECT_TRUE(bucket.TryTake(t1));
  EXPECT_FALSE(bucket.TryTake(t1));
  EXPECT_DOUBLE_EQ(bucket.Available(t1), 0.5);
  // A long pause refills to the burst, never beyond.
  EXPECT_DOUBLE_EQ(bucket.Available(t1 + 3600 * kSecond), 100);
}

TEST(TokenBucketTest, AFailedTakeTakesNothing) {
  TokenBucket bucket(1, 5);
  EXPECT_FALSE(bucket.TryTake(kT0, 6));
  EXPECT_DOUBLE_EQ(bucket.Available(kT0), 5);
}

TEST(TokenBucketTest, TimeGoingBackAddsNothing) {
  TokenBucket bucket(10, 10);
  ASSERT_TRUE(bucket.TryTake(kT0 + kSecond, 10));
  EXPECT_DOUBLE_EQ(bucket.Available(kT0), 0);
  // Still measured from the latest time seen, not from the earlier one.
  EXPECT_DOUBLE_EQ(bucket.Available(kT0 + kSecond + 100'000'000), 1);
}

TEST(TokenBucketTest, ZeroRateNeverRefills) {
  TokenBucket bucket(0, 2);
  EXPECT_TRUE(bucket.TryTake(kT0, 2));
  EXPECT_FALSE(bucket.TryTake(kT0 + 1000 * kSecond));
}

}  // namespace
}  // namespace fabricmon
