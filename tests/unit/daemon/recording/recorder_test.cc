#include "daemon/recording/recorder.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/recording/record_format.h"
#include "daemon/recording/recording_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::recording {
namespace {

using ::fabricmon::testing::FakeClock;
using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;

constexpr int64_t kSecond = 1'000'000'000;

RecorderOptions Options(const std::string& dir) {
  RecorderOptions options;
  options.directory = dir;
  options.max_bytes = 1 << 20;
  options.max_age_nanos = 3600 * kSecond;
  return options;
}

std::vector<Record> ReadBack(const std::string& path, ReadSummary* summary = nullptr) {
  std::vector<Record> out;
  absl::StatusOr<ReadSummary> read = ReadRecording(path, [&](const Record& r) {
    out.push_back(r);
    return true;
  });
  EXPECT_THAT(read.status(), IsOk());
  if (summary != nullptr && read.ok()) *summary = *read;
  return out;
}

TEST(RecorderTest, RecordsWhatItIsGivenInOrder) {
  testing::TempTree tree;
  FakeClock clock;
  const std::string dir = tree.root() + "/rec/sub";  // created with its parent
  {
    absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Start(Options(dir), clock);
    ASSERT_THAT(recorder.status(), IsOk());
    (*recorder)->RecordMessage(7, "node01", "hello bytes");
    clock.AdvanceMillis(10);
    (*recorder)->RecordMessage(7, "node01", "batch bytes");
    (*recorder)->RecordStreamEnd(7, "node01");
    (*recorder)->Flush();
    EXPECT_TRUE((*recorder)->active());
    EXPECT_EQ((*recorder)->segments(), 1u);
    EXPECT_EQ((*recorder)->oldest_unix_nanos(), clock.NowUnixNanos() - 10'000'000);
    EXPECT_GT((*recorder)->bytes_written(), 0u);
  }
  std::vector<Record> read = ReadBack(dir);
  ASSERT_EQ(read.size(), 3u);
  EXPECT_EQ(read[0].payload, "hello bytes");
  EXPECT_EQ(read[0].node, "node01");
  EXPECT_EQ(read[0].stream, 7u);
  EXPECT_EQ(read[1].receive_unix_nanos - read[0].receive_unix_nanos, 10'000'000);
  EXPECT_EQ(read[2].type, RecordType::kStreamEnd);
}

TEST(RecorderTest, RotatesBySizeAndDropsOldestOverMaxBytes) {
  testing::TempTree tree;
  FakeClock clock;
  RecorderOptions options = Options(tree.root());
  options.segment_bytes = 64 << 10;
  options.zstd_level = 0;  // the payloads below would compress to nothing
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Start(options, clock);
  ASSERT_THAT(recorder.status(), IsOk());
  const std::string payload(10'000, 'x');
  for (int i = 0; i < 400; ++i) {  // 4 MB through a 1 MiB budget
    (*recorder)->RecordMessage(1, "node01", absl::StrCat(i, ":", payload));
    (*recorder)->Flush();  // one write per record: rotation sees every size
    clock.AdvanceMillis(1);
  }
  EXPECT_GT((*recorder)->bytes_written(), 4'000'000u);
  EXPECT_LE((*recorder)->bytes_on_disk(), options.max_bytes);
  EXPECT_GE((*recorder)->segments(), 14u);
  absl::StatusOr<std::vector<std::string>> segments = ListSegments(tree.root());
  ASSERT_THAT(segments.status(), IsOk());
  EXPECT_EQ(segments->size(), (*recorder)->segments());
  uint64_t on_disk = 0;
  for (const std::string& s : *segments) {
    struct stat st;
    ASSERT_EQ(stat(s.c_str(), &st), 0);
    on_disk += st.st_size;
  }
  EXPECT_EQ(on_disk, (*recorder)->bytes_on_disk());
  // What is left is the newest records, contiguous up to the last.
  std::vector<Record> read = ReadBack(tree.root());
  ASSERT_FALSE(read.empty());
  EXPECT_EQ(read.back().payload.substr(0, 4), "399:");
  const int first = std::stoi(read.front().payload);
  EXPECT_GT(first, 0);
  EXPECT_EQ(read.size(), static_cast<size_t>(400 - first));
  EXPECT_EQ((*recorder)->oldest_unix_nanos(), read.front().receive_unix_nanos);
}

TEST(RecorderTest, DropsSegmentsOlderThanMaxAge) {
  testing::TempTree tree;
  FakeClock clock;
  RecorderOptions options = Options(tree.root());
  options.max_age_nanos = 120 * kSecond;
  options.segment_age_nanos = 10 * kSecond;
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Start(options, clock);
  ASSERT_THAT(recorder.status(), IsOk());
  const int64_t start = clock.NowUnixNanos();
  for (int i = 0; i < 60; ++i) {  // a record every 5 s for 5 minutes
    (*recorder)->RecordMessage(1, "node01", absl::StrCat(i));
    (*recorder)->Flush();
    clock.AdvanceNanos(5 * kSecond);
  }
  (*recorder)->RecordMessage(1, "node01", "last");
  (*recorder)->Flush();
  std::vector<Record> read = ReadBack(tree.root());
  ASSERT_FALSE(read.empty());
  const int64_t now = clock.NowUnixNanos();
  // Nothing older than max_age plus one segment's span is kept, and the last two minutes are.
  EXPECT_GE(read.front().receive_unix_nanos, now - 120 * kSecond - 15 * kSecond);
  EXPECT_LE(read.front().receive_unix_nanos, now - 120 * kSecond);
  EXPECT_GT((*recorder)->oldest_unix_nanos(), start);
}

TEST(RecorderTest, KeepsAndCountsSegmentsOfAnEarlierRun) {
  testing::TempTree tree;
  FakeClock clock;
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<std::unique_ptr<Recorder>> recorder =
        Recorder::Start(Options(tree.root()), clock);
    ASSERT_THAT(recorder.status(), IsOk());
    EXPECT_EQ((*recorder)->segments(), static_cast<uint64_t>(run));
    (*recorder)->RecordMessage(run + 1, "node01", absl::StrCat("run ", run));
    (*recorder)->Flush();
    EXPECT_EQ((*recorder)->segments(), static_cast<uint64_t>(run + 1));
    clock.AdvanceMillis(1);
  }
  std::vector<Record> read = ReadBack(tree.root());
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].payload, "run 0");
  EXPECT_EQ(read[1].payload, "run 1");
}

TEST(RecorderTest, RefusesNonsenseOptions) {
  FakeClock clock;
  RecorderOptions options = Options("relative/dir");
  EXPECT_THAT(Recorder::Start(options, clock).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options = Options("/tmp/x");
  options.max_bytes = 1000;
  EXPECT_THAT(ValidateRecorderOptions(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = Options("/tmp/x");
  options.max_age_nanos = 5 * kSecond;
  EXPECT_THAT(ValidateRecorderOptions(options), StatusIs(absl::StatusCode::kInvalidArgument));
  testing::TempTree tree;
  tree.WriteFile("file", "not a directory");
  EXPECT_FALSE(Recorder::Start(Options(tree.root() + "/file"), clock).ok());
}

// A disk that fills up (here: a file size limit, which fails write(2) with EFBIG) stops the
// recording with a count; recording calls go on returning at once, and what was written before
// reads back, the torn tail skipped.
TEST(RecorderTest, WriteErrorStopsRecordingWithoutBlocking) {
  testing::TempTree tree;
  FakeClock clock;
  signal(SIGXFSZ, SIG_IGN);
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 100'000;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  RecorderOptions options = Options(tree.root());
  options.zstd_level = 0;  // raw records: the limit cuts one in the middle
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Start(options, clock);
  ASSERT_THAT(recorder.status(), IsOk());
  const std::string payload(1000, 'y');
  for (int i = 0; i < 300; ++i) {
    (*recorder)->RecordMessage(1, "node01", payload);
    (*recorder)->Flush();
  }
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  EXPECT_FALSE((*recorder)->active());
  EXPECT_EQ((*recorder)->errors(RecordingError::kWrite), 1u);
  EXPECT_LE((*recorder)->bytes_written(), 100'000u);
  (*recorder)->RecordMessage(1, "node01", payload);  // a no-op now
  (*recorder)->Flush();
  ReadSummary summary;
  std::vector<Record> read = ReadBack(tree.root(), &summary);
  EXPECT_GE(read.size(), 90u);
  EXPECT_LT(read.size(), 100u);
  EXPECT_TRUE(summary.damage.torn_tail);
  for (const Record& r : read) EXPECT_EQ(r.payload, payload);
}

// Blocks are compressed (zstd) and read back transparently; a write error inside a compressed
// segment stops the recording just the same.
TEST(RecorderCompressionTest, CompressedBlocksReadBack) {
  testing::TempTree tree;
  FakeClock clock;
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Start(Options(tree.root()), clock);
  ASSERT_THAT(recorder.status(), IsOk());
  uint64_t raw = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string payload = absl::StrCat("batch ", i, " of node01 with values ", i * 7);
    raw += kRecordPrefixBytes + kBodyFixedBytes + 6 + payload.size();
    (*recorder)->RecordMessage(1, "node01", payload);
    if (i % 100 == 99) (*recorder)->Flush();  // ten blocks
  }
  (*recorder)->Flush();
  EXPECT_LT((*recorder)->bytes_written(), raw / 4);
  std::vector<Record> read = ReadBack(tree.root());
  ASSERT_EQ(read.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(read[i].payload, absl::StrCat("batch ", i, " of node01 with values ", i * 7));
  }
}

// A writer that cannot keep up drops what does not fit the queue, counted; ingest never waits.
TEST(RecorderTest, FullQueueDropsAndCounts) {
  testing::TempTree tree;
  FakeClock clock;
  RecorderOptions options = Options(tree.root());
  options.queue_bytes = 4096;
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Start(options, clock);
  ASSERT_THAT(recorder.status(), IsOk());
  (*recorder)->RecordMessage(1, "node01", std::string(5000, 'z'));  // larger than the queue
  EXPECT_EQ((*recorder)->errors(RecordingError::kQueueFull), 1u);
  (*recorder)->RecordMessage(1, "node01", "fits");
  (*recorder)->Flush();
  EXPECT_TRUE((*recorder)->active());
  std::vector<Record> read = ReadBack(tree.root());
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].payload, "fits");
}

}  // namespace
}  // namespace fabricmon::recording
