// The aggregator's recording end to end: raw agent streams through the real ingest path with a
// recorder, then the recording read back, exported and replayed.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "daemon/cli/record_export.h"
#include "daemon/cli/replay.h"
#include "daemon/recording/recorder.h"
#include "daemon/recording/recording_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/stream_harness.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

constexpr int64_t kMillis = 1'000'000;

class RecordingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PreferMemoryForTempTrees();
    tree_ = std::make_unique<TempTree>();
    recording::RecorderOptions options;
    options.directory = tree_->root() + "/recording";
    absl::StatusOr<std::unique_ptr<recording::Recorder>> recorder =
        recording::Recorder::Start(options, clock_);
    ASSERT_THAT(recorder.status(), IsOk());
    recorder_ = *std::move(recorder);
    AggregatorOptions aggregator;
    aggregator.clock = &clock_;
    aggregator.stream.recorder = recorder_.get();
    harness_ = std::make_unique<AggregatorHarness>(Transport::kInProcess, aggregator);
    ASSERT_TRUE(harness_->Start());
  }

  // Sends `messages` on a fresh stream, each 100 ms of the clock after the last, and ends it.
  // After each hello and batch, waits for its ack and for it (and what came before it) to be
  // recorded, so that each record is stamped before the clock moves on.
  RawStream::End Send(const std::vector<v1::AgentMessage>& messages) {
    RawStream raw(harness_->channel());
    const uint64_t base = recorder_->records_queued();
    for (size_t i = 0; i < messages.size(); ++i) {
      clock_.AdvanceNanos(100 * kMillis);
      if (!raw.Write(messages[i])) break;
      if (messages[i].has_batch() || messages[i].has_batches() || messages[i].has_hello()) {
        std::optional<v1::AggregatorMessage> reply = raw.Read();
        if (!reply.has_value() || reply->has_reject()) break;
        EXPECT_TRUE(WaitFor([&] { return recorder_->records_queued() >= base + i + 1; }));
      }
    }
    return raw.Finish();
  }

  std::vector<recording::Record> Recorded() {
    harness_->StopServing();  // every stream has ended: their ends are queued
    recorder_->Flush();
    std::vector<recording::Record> out;
    EXPECT_THAT(recording::ReadRecording(recorder_->options().directory,
                                         [&](const recording::Record& r) {
                                           out.push_back(r);
                                           return true;
                                         })
                    .status(),
                IsOk());
    return out;
  }

  static v1::AgentMessage::BodyCase Kind(const recording::Record& record) {
    v1::AgentMessage message;
    EXPECT_TRUE(message.ParseFromString(record.payload));
    return message.body_case();
  }

  FakeClock clock_;
  std::unique_ptr<TempTree> tree_;
  std::unique_ptr<recording::Recorder> recorder_;
  std::unique_ptr<AggregatorHarness> harness_;
};

// What the aggregator refused is not recorded; what it accepted is, in order, with the stream's
// end.
TEST_F(RecordingTest, RecordsAcceptedMessagesOnly) {
  Send({HelloMessage("node01", "boot-1", 1), CounterDeclarations(1, 2), LayoutMessage(1, {1, 2}),
        BatchMessage(1, 1000, 1, {5, 7}), BatchMessage(2, 2000, 9, {1, 1})});  // unknown layout
  std::vector<recording::Record> records = Recorded();
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(Kind(records[0]), v1::AgentMessage::kHello);
  EXPECT_EQ(Kind(records[1]), v1::AgentMessage::kDeclarations);
  EXPECT_EQ(Kind(records[2]), v1::AgentMessage::kLayouts);
  EXPECT_EQ(Kind(records[3]), v1::AgentMessage::kBatch);
  EXPECT_EQ(records[4].type, recording::RecordType::kStreamEnd);
  for (const recording::Record& r : records) {
    EXPECT_EQ(r.node, "node01");
    EXPECT_EQ(r.stream, records[0].stream);
  }
  EXPECT_EQ(records[3].receive_unix_nanos - records[0].receive_unix_nanos, 300 * kMillis);
  for (size_t i = 1; i < records.size(); ++i) {
    EXPECT_GE(records[i].receive_unix_nanos, records[i - 1].receive_unix_nanos);
  }
}

// The batches of a SampleBatches message are recorded one by one, each as the message it would
// have been alone: a recording reads the same whether an agent coalesced or not (and readers of
// older recordings need nothing new). Those after a refused one are not recorded.
TEST_F(RecordingTest, TheBatchesOfOneMessageAreRecordedOneByOne) {
  v1::AgentMessage batches;
  for (const v1::AgentMessage& batch :
       {BatchMessage(1, 1000, 1, {5, 7}), BatchMessage(2, 2000, 1, {1, 1}),
        BatchMessage(3, 3000, 9, {1, 1})}) {  // unknown layout
    *batches.mutable_batches()->add_batch() = batch.batch();
  }
  Send({HelloMessage("node01", "boot-1", 1), CounterDeclarations(1, 2), LayoutMessage(1, {1, 2}),
        batches});
  std::vector<recording::Record> records = Recorded();
  ASSERT_EQ(records.size(), 6u);
  for (size_t i = 3; i < 5; ++i) {
    v1::AgentMessage message;
    ASSERT_TRUE(message.ParseFromString(records[i].payload));
    ASSERT_EQ(message.body_case(), v1::AgentMessage::kBatch);
    EXPECT_EQ(message.batch().sequence(), i - 2);
    EXPECT_EQ(message.batch().timestamp_unix_nanos(), static_cast<int64_t>(1000 * (i - 2)));
  }
  EXPECT_EQ(records[5].type, recording::RecordType::kStreamEnd);
}

// A replay stores what the live store stored, and the same recording replays identically.
TEST_F(RecordingTest, ReplayStoresWhatLiveIngestStored) {
  for (const char* node : {"node01", "node02"}) {
    std::vector<v1::AgentMessage> messages = {
        HelloMessage(node, "boot-1", 1), CounterDeclarations(1, 3), LayoutMessage(1, {1, 2, 3})};
    for (int i = 1; i <= 20; ++i) {
      messages.push_back(
          BatchMessage(i, 1'700'000'000'000'000'000 + i * 100 * kMillis, 1, {i, 2 * i, 3}));
    }
    Send(messages);
  }
  const uint64_t live_samples = harness_->state().stats().samples;
  ASSERT_EQ(live_samples, 2u * 20 * 3);
  (void)Recorded();
  replay::ReplayOptions options;
  options.config.mutable_detectors()->set_tick_ms(250);
  std::vector<std::string> events[2];
  for (auto& timeline : events) {
    absl::StatusOr<replay::ReplaySummary> summary = replay::Replay(
        recorder_->options().directory, options, [&](const replay::TimelineEvent& event) {
          timeline.push_back(event.finding.ShortDebugString());
        });
    ASSERT_THAT(summary.status(), IsOk());
    EXPECT_EQ(summary->samples, live_samples);
    EXPECT_EQ(summary->batches, 40u);
    EXPECT_EQ(summary->streams, 2u);
    EXPECT_EQ(summary->refused_messages, 0u);
    EXPECT_GT(summary->ticks, 0u);
  }
  EXPECT_EQ(events[0], events[1]);
}

// An export of a window carries each open stream's hello, declarations and layouts to the
// window's start, keeps the window's batches only, and replays on its own.
TEST_F(RecordingTest, ExportIsSelfContained) {
  std::vector<v1::AgentMessage> messages = {HelloMessage("node01", "boot-1", 1),
                                            CounterDeclarations(1, 2), LayoutMessage(1, {1, 2})};
  for (int i = 1; i <= 10; ++i) {
    messages.push_back(BatchMessage(i, 1'700'000'000'000'000'000 + i * 100 * kMillis, 1, {i, i}));
  }
  Send(messages);
  Send({HelloMessage("node02", "boot-2", 1), CounterDeclarations(1, 1), LayoutMessage(1, {1}),
        BatchMessage(1, 1'700'000'000'000'000'000, 1, {4})});
  std::vector<recording::Record> records = Recorded();
  // The window: from node01's batch 6 to its batch 10 (records 3 + 5 and 3 + 9), and whatever
  // else of node01 was stamped then (its stream's end, stamped with batch 10 or later).
  ASSERT_GE(records.size(), 13u);
  replay::ExportOptions window;
  window.from_unix_nanos = records[8].receive_unix_nanos;
  window.to_unix_nanos = records[12].receive_unix_nanos;
  ASSERT_LT(records[7].receive_unix_nanos, window.from_unix_nanos);
  window.nodes = {"node01"};
  size_t in_window = 0;
  for (const recording::Record& r : records) {
    in_window += r.node == "node01" && r.receive_unix_nanos >= window.from_unix_nanos &&
                 r.receive_unix_nanos <= window.to_unix_nanos;
  }
  ASSERT_GE(in_window, 5u);
  const std::string file = tree_->root() + "/export.fmrec";
  std::FILE* out = std::fopen(file.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  absl::StatusOr<replay::ExportSummary> exported =
      replay::ExportRecording(recorder_->options().directory, window, out);
  std::fclose(out);
  ASSERT_THAT(exported.status(), IsOk());
  EXPECT_EQ(exported->carried_records, 3u);  // hello, declarations, layouts
  // Batch 6 carries both series' absolute values (their deltas before it are left out); the
  // later batches' deltas are right as recorded.
  EXPECT_EQ(exported->rebased_batches, 1u);
  EXPECT_EQ(exported->streams_left_out, 0u);
  std::vector<recording::Record> read;
  ASSERT_THAT(recording::ReadRecording(file,
                                       [&](const recording::Record& r) {
                                         read.push_back(r);
                                         return true;
                                       })
                  .status(),
              IsOk());
  ASSERT_EQ(read.size(), 3u + in_window);
  EXPECT_EQ(Kind(read[0]), v1::AgentMessage::kHello);
  EXPECT_EQ(read[0].receive_unix_nanos, window.from_unix_nanos);
  for (size_t i = 3; i < 3 + 5; ++i) {
    EXPECT_EQ(Kind(read[i]), v1::AgentMessage::kBatch);
  }
  // Deltas i, i for batch i: batch 6 now carries the values 1 + ... + 6 against the zero
  // baseline of the export's stream, and batch 7 its recorded delta.
  v1::AgentMessage batch;
  ASSERT_TRUE(batch.ParseFromString(read[3].payload));
  EXPECT_THAT(batch.batch().value_deltas(), ::testing::ElementsAre(21, 21));
  ASSERT_TRUE(batch.ParseFromString(read[4].payload));
  EXPECT_THAT(batch.batch().value_deltas(), ::testing::ElementsAre(7, 7));
  for (const recording::Record& r : read) {
    EXPECT_EQ(r.node, "node01");
  }
  absl::StatusOr<replay::ReplaySummary> summary =
      replay::Replay(file, replay::ReplayOptions(), [](const replay::TimelineEvent&) {});
  ASSERT_THAT(summary.status(), IsOk());
  EXPECT_EQ(summary->refused_messages, 0u);
  EXPECT_EQ(summary->batches, 5u);
  EXPECT_EQ(summary->samples, 10u);
}

// A recording is untrusted input: records that are not AgentMessages, or that come from no
// stream, are counted and skipped, never crash the replay.
TEST_F(RecordingTest, ReplaySkipsRecordsThatMakeNoSense) {
  const std::string file = tree_->root() + "/hostile.fmrec";
  std::string bytes(recording::kFileHeader);
  recording::AppendRecord(recording::RecordType::kMessage, 1, 1000, "node01", "\xff\xff garbage",
                          bytes);
  v1::AgentMessage batch = BatchMessage(1, 1, 1, {1});
  recording::AppendRecord(recording::RecordType::kMessage, 2, 2000, "node01",
                          batch.SerializeAsString(), bytes);  // a batch without a hello
  v1::AgentMessage hello = HelloMessage("node02", "b", 1);
  recording::AppendRecord(recording::RecordType::kMessage, 3, 3000, "node01",
                          hello.SerializeAsString(), bytes);  // a hello under another name
  recording::AppendRecord(recording::RecordType::kStreamEnd, 9, 4000, "node01", "", bytes);
  tree_->WriteFile("hostile.fmrec", bytes);
  absl::StatusOr<replay::ReplaySummary> summary =
      replay::Replay(file, replay::ReplayOptions(), [](const replay::TimelineEvent&) {});
  ASSERT_THAT(summary.status(), IsOk());
  EXPECT_EQ(summary->records, 4u);
  EXPECT_EQ(summary->refused_messages, 3u);
  EXPECT_EQ(summary->samples, 0u);
}

int64_t Parsed(const std::string& text) {
  absl::StatusOr<int64_t> parsed = replay::ParseTime(text);
  EXPECT_THAT(parsed.status(), IsOk()) << text;
  return parsed.ok() ? *parsed : -1;
}

TEST(ParseTimeTest, Rfc3339AndUnixSeconds) {
  constexpr int64_t kAt = int64_t{1772334720} * 1'000'000'000;  // 2026-03-01T03:12:00Z
  EXPECT_EQ(Parsed("1772334720"), kAt);
  EXPECT_EQ(Parsed("1772334720.5"), kAt + 500'000'000);
  EXPECT_EQ(Parsed("2026-03-01T03:12:00Z"), kAt);
  EXPECT_EQ(Parsed("2026-03-01T04:12:00+01:00"), kAt);
  EXPECT_FALSE(replay::ParseTime("yesterday").ok());
  EXPECT_FALSE(replay::ParseTime("-5").ok());
  EXPECT_FALSE(replay::ParseTime("nan").ok());
}

}  // namespace
}  // namespace fabricmon::testing
