// HeapTrimmer: memory freed below the top of the heap, which free() keeps resident, goes back to
// the kernel when it trims; its thread trims on its interval and stops when asked.

#include "daemon/common/heap_trimmer.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace fabricmon {
namespace {

// ASan and TSan serve malloc from allocators of their own: glibc's arenas, which malloc_trim
// trims, then hold none of this test's blocks.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcMalloc = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kGlibcMalloc = false;
#else
constexpr bool kGlibcMalloc = true;
#endif
#else
constexpr bool kGlibcMalloc = true;
#endif

// Resident bytes of this process (/proc/self/statm's second field, in pages).
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0;
  int64_t resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(HeapTrimmerTest, FreedMemoryBelowTheTopGoesBackWhenItTrims) {
  if (!kGlibcMalloc) {
    GTEST_SKIP() << "a sanitizer's allocator serves malloc: glibc's arenas hold nothing to trim";
  }
  // 64 MiB in 64 KiB blocks (below glibc's mmap threshold: they come from the heap), touched so
  // that they are resident; then all but the last freed. The last keeps the top of the heap in
  // use, so free() alone gives nothing back.
  constexpr size_t kBlock = 64 * 1024;
  constexpr size_t kBlocks = 1024;
  std::vector<char*> blocks;
  blocks.reserve(kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) {
    char* block = static_cast<char*>(std::malloc(kBlock));
    ASSERT_NE(block, nullptr);
    std::memset(block, 1, kBlock);
    blocks.push_back(block);
  }
  for (size_t i = 0; i + 1 < kBlocks; ++i) {
    std::free(blocks[i]);
  }
  const int64_t before = ResidentBytes();
  EXPECT_TRUE(HeapTrimmer::TrimNow());
  const int64_t after = ResidentBytes();
  std::free(blocks.back());
  // Most of the 64 MiB freed: at least half of it, whatever else the process holds.
  EXPECT_GT(before - after, int64_t{32} * 1024 * 1024) << before << " -> " << after;
}

TEST(HeapTrimmerTest, TrimsOnItsIntervalAndStops) {
  HeapTrimmer trimmer(absl::Milliseconds(20));
  trimmer.Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (trimmer.trims() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_GE(trimmer.trims(), 2u);
  trimmer.Stop();
  const uint64_t stopped_at = trimmer.trims();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(trimmer.trims(), stopped_at);
  trimmer.Stop();  // idempotent
}

TEST(HeapTrimmerTest, AnIntervalOfZeroStartsNothing) {
  HeapTrimmer trimmer(absl::ZeroDuration());
  trimmer.Start();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(trimmer.trims(), 0u);
}

// Stop() returns at once, not after the interval: the aggregator stops it on SIGTERM.
TEST(HeapTrimmerTest, StopDoesNotWaitForTheInterval) {
  HeapTrimmer trimmer(absl::Hours(1));
  trimmer.Start();
  const absl::Time start = absl::Now();
  trimmer.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(trimmer.trims(), 0u);
}

}  // namespace
}  // namespace fabricmon
