// Series id reuse on the agent: ids of series a collector stopped producing go to new series,
// but only after every cycle that named them was acknowledged, and the stream declares a reused
// id again before its first value. Driven through the real table, builder, replay buffer,
// encoder and the aggregator's decoder, with processes coming and going for hours.

#include <cstdint>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/agent/replay_buffer.h"
#include "daemon/agent/series_table.h"
#include "daemon/wire/batch_codec.h"
#include "daemon/wire/series_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::agent {
namespace {

using collectors::GaugeSeries;
using collectors::SeriesDesc;
using collectors::Unit;
using ::fabricmon::testing::IsOk;

constexpr int64_t kSecond = 1'000'000'000;

SeriesDesc ProcessSeries(uint32_t pid, int device) {
  return GaugeSeries("rdma_qp", "fabricmon_rdma_process_qps", "h", Unit::kNone, 1.0,
                     {{"pid", absl::StrCat(pid)}, {"device", absl::StrCat("mlx5_", device)}});
}

TEST(SeriesTableTest, AReleasedIdIsReusedOnlyAfterItsCyclesAreAcknowledged) {
  SeriesTable table;
  const uint32_t gone = table.Intern(ProcessSeries(1, 0));
  const uint32_t kept = table.Intern(ProcessSeries(2, 0));
  table.Release({gone}, 5);
  table.Release({gone}, 6);  // twice is once
  EXPECT_EQ(table.size(), 1u);
  // Still readable: a buffered cycle may name it.
  ASSERT_NE(table.Find(gone), nullptr);
  EXPECT_EQ(table.Find(gone)->fingerprint, ProcessSeries(1, 0).fingerprint);
  EXPECT_TRUE(table.Reclaimable(4).empty());
  // Not reusable yet: a new series gets a fresh id.
  EXPECT_EQ(table.Intern(ProcessSeries(3, 0)), 3u);
  const std::vector<uint32_t> reclaimable = table.Reclaimable(5);
  ASSERT_THAT(reclaimable, ::testing::ElementsAre(gone));
  table.MakeReusable(reclaimable);
  const uint32_t reused = table.Intern(ProcessSeries(4, 0));
  EXPECT_EQ(reused, gone);
  EXPECT_EQ(table.Find(reused)->fingerprint, ProcessSeries(4, 0).fingerprint);
  EXPECT_EQ(table.Intern(ProcessSeries(2, 0)), kept);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.id_count(), 3u);
  // The series that left, back again, is a new series with a new id.
  EXPECT_EQ(table.Intern(ProcessSeries(1, 0)), 4u);
}

TEST(CycleBuilderReleaseTest, SeriesNotProducedForTenMinutesAreLetGo) {
  SeriesTable table;
  CycleBuilder builder(table);
  int64_t now = 1'700'000'000 * kSecond;
  uint32_t gone_id = 0;
  std::vector<uint32_t> released;
  for (int cycle = 0; cycle < 80; ++cycle) {  // 10 s apart: 13 minutes
    builder.Add(ProcessSeries(1, 0), 1);
    if (cycle == 0) {
      builder.Add(ProcessSeries(2, 0), 1);
    }
    const Cycle finished = builder.Finish(now, 0);
    if (cycle == 0) gone_id = (*finished.layout)[1];
    for (uint32_t id : builder.TakeReleased()) released.push_back(id);
    if (cycle < 60) {
      EXPECT_TRUE(released.empty()) << "released after " << cycle * 10 << " s";
    }
    now += 10 * kSecond;
  }
  EXPECT_THAT(released, ::testing::ElementsAre(gone_id));
}

// The aggregator's side of the stream, as far as this test needs: the decoder and what each id
// was last declared as.
class Receiver {
 public:
  void Receive(const std::vector<v1::AgentMessage>& messages, wire::DecodedBatch* batch) {
    for (const v1::AgentMessage& message : messages) {
      if (message.has_declarations()) {
        for (const auto& declaration : message.declarations().series()) {
          absl::StatusOr<SeriesDesc> desc = wire::FromDeclaration(declaration);
          ASSERT_THAT(desc.status(), IsOk());
          ASSERT_THAT(decoder_.Declare(declaration.id()), IsOk());
          descs_[declaration.id()] = *desc;
        }
      } else if (message.has_layouts()) {
        for (const auto& layout : message.layouts().layouts()) {
          ASSERT_THAT(decoder_.AddLayout(layout), IsOk());
        }
      } else if (message.has_batch()) {
        ASSERT_THAT(decoder_.Decode(message.batch(), batch), IsOk());
      }
    }
  }
  const SeriesDesc& desc(uint32_t id) { return descs_.at(id); }

 private:
  wire::StreamDecoder decoder_;
  std::map<uint32_t, SeriesDesc> descs_;
};

TEST(SeriesReuseTest, ChurnKeepsIdsBoundedAndEveryValueNamesItsSeries) {
  SeriesTable table;
  CycleBuilder builder(table);
  ReplayBuffer buffer(64 << 20);
  wire::StreamEncoder encoder(table);
  Receiver receiver;
  wire::DecodedBatch batch;
  int64_t now = 1'700'000'000 * kSecond;
  uint64_t cursor = 0;
  size_t distinct = 0;
  // Six hours at one cycle per 10 s; a new 8-rank job (8 pids × 4 devices) every minute, each
  // running five minutes: 11,520 distinct series, 160 live at a time.
  for (int cycle = 0; cycle < 2160; ++cycle) {
    const int newest_job = cycle / 6;
    if (cycle % 6 == 0) distinct += 32;
    for (int job = std::max(0, newest_job - 4); job <= newest_job; ++job) {
      for (uint32_t rank = 0; rank < 8; ++rank) {
        const uint32_t pid = 1000 + static_cast<uint32_t>(job) * 8 + rank;
        for (int device = 0; device < 4; ++device) {
          // The value names its series: pid × 10 + device.
          builder.Add(ProcessSeries(pid, device), uint64_t{pid} * 10 + device);
        }
      }
    }
    const uint64_t sequence = buffer.Push(builder.Finish(now, 0));
    if (std::vector<uint32_t> released = builder.TakeReleased(); !released.empty()) {
      table.Release(released, sequence);
    }
    // The stream sends what is buffered; the aggregator stores and acknowledges it.
    uint64_t dropped = 0;
    while (std::shared_ptr<const Cycle> next = buffer.NextAfter(cursor, &dropped)) {
      std::vector<v1::AgentMessage> messages;
      encoder.Encode(next->sequence, next->timestamp_unix_nanos, 0, 0, next->layout, next->values,
                     &messages);
      receiver.Receive(messages, &batch);
      ASSERT_EQ(batch.values.size(), next->layout->size());
      for (size_t i = 0; i < batch.values.size(); ++i) {
        const SeriesDesc& desc = receiver.desc((*batch.series_ids)[i]);
        uint32_t pid = 0;
        ASSERT_TRUE(absl::SimpleAtoi(desc.labels[0].second, &pid));
        const int device = desc.labels[1].second.back() - '0';
        ASSERT_EQ(batch.values[i], uint64_t{pid} * 10 + device)
            << "cycle " << cycle << ": id " << (*batch.series_ids)[i] << " decoded as "
            << desc.labels[0].second << "/" << desc.labels[1].second;
      }
      cursor = next->sequence;
      buffer.Ack(next->sequence);
    }
    // The agent's reclaim step.
    const std::vector<uint32_t> reclaimable = table.Reclaimable(buffer.acked_sequence());
    encoder.Forget(reclaimable);
    table.MakeReusable(reclaimable);
    now += 10 * kSecond;
  }
  EXPECT_EQ(distinct, 11520u);
  // Live: 160; retained for ten minutes after their last cycle: 10 more jobs (320).
  EXPECT_LE(table.id_count(), 600u);
  EXPECT_LE(table.size(), 600u);
}

}  // namespace
}  // namespace fabricmon::agent
