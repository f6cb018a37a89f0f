#include "daemon/agent/cycle_builder.h"

#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/agent/series_table.h"
#include "daemon/wire/batch_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::agent {
namespace {

using collectors::CounterSeries;
using collectors::Overflow;
using collectors::SeriesDesc;
using collectors::Unit;
using ::fabricmon::testing::IsOk;
using ::testing::ElementsAre;

std::vector<SeriesDesc> MakeSeries(int n) {
  std::vector<SeriesDesc> series;
  for (int i = 0; i < n; ++i) {
    series.push_back(CounterSeries("test", "fabricmon_test_total", "h", Unit::kNone, 64,
                                   Overflow::kWraps, 1.0, {{"index", absl::StrCat(i)}}));
  }
  return series;
}

TEST(CycleBuilderTest, InternsSeriesAndKeepsValuesInLayoutOrder) {
  SeriesTable table;
  CycleBuilder builder(table);
  const std::vector<SeriesDesc> series = MakeSeries(3);
  builder.Add(series[2], 30);
  builder.Add(series[0], 10);
  const Cycle cycle = builder.Finish(123, 45);
  EXPECT_EQ(cycle.timestamp_unix_nanos, 123);
  EXPECT_EQ(cycle.collect_duration_us, 45u);
  EXPECT_EQ(cycle.sequence, 0u);  // assigned by the replay buffer
  ASSERT_NE(cycle.layout, nullptr);
  ASSERT_EQ(cycle.layout->size(), 2u);
  EXPECT_EQ(table.Find((*cycle.layout)[0])->fingerprint, series[2].fingerprint);
  EXPECT_EQ(table.Find((*cycle.layout)[1])->fingerprint, series[0].fingerprint);
  EXPECT_THAT(cycle.values, ElementsAre(30, 10));
  // Ids are agent-wide and stable: another builder on the same table agrees.
  CycleBuilder other(table);
  other.Add(series[0], 1);
  EXPECT_EQ((*other.Finish(0, 0).layout)[0], (*cycle.layout)[1]);
}

// What the aggregator's exposition rules would refuse is left out here, so that one odd series
// costs that series, not the node's stream.
TEST(CycleBuilderTest, LeavesOutSeriesTheAggregatorsExpositionRulesRefuse) {
  SeriesTable table;
  CycleBuilder builder(table);
  const std::vector<SeriesDesc> refused = {
      collectors::GaugeSeries("test", "fabricmon_node_up", "h", Unit::kNone, 1.0, {}),
      CounterSeries("test", "fabricmon_test_total", "h", Unit::kNone, 64, Overflow::kWraps, 1.0,
                    {{"le", "1"}}),
      // A catalogued family with another unit.
      CounterSeries("test", "fabricmon_ib_port_xmit_data_bytes_total", "h", Unit::kPackets, 64,
                    Overflow::kSaturates, 4.0, {}),
      collectors::GaugeSeries("test", "fabricmon_test_total", "h", Unit::kNone, 1.0, {}),
  };
  for (const SeriesDesc& desc : refused) {
    builder.Add(desc, 1);
  }
  builder.Add(MakeSeries(1)[0], 7);
  const Cycle cycle = builder.Finish(1, 0);
  EXPECT_EQ(builder.invalid_series(), refused.size());
  EXPECT_THAT(cycle.values, ElementsAre(7));
}

TEST(CycleBuilderTest, ConsecutiveCyclesShareOneLayoutObject) {
  SeriesTable table;
  CycleBuilder builder(table);
  const std::vector<SeriesDesc> series = MakeSeries(4);
  std::shared_ptr<const Layout> first;
  for (int cycle = 0; cycle < 5; ++cycle) {
    for (const SeriesDesc& desc : series) {
      builder.Add(desc, static_cast<uint64_t>(cycle));
    }
    const Cycle built = builder.Finish(cycle, 0);
    if (first == nullptr) {
      first = built.layout;
    }
    EXPECT_EQ(built.layout, first) << "cycle " << cycle;
  }
}

// The builder predicts each series from the previous cycle's order; whatever the order does
// (series appearing in the middle, dropping out, reordering, a widened counter re-declared with
// a new fingerprint), every value must still land on its own series' id.
TEST(CycleBuilderTest, IdsFollowTheSeriesWhenTheOrderChanges) {
  SeriesTable table;
  CycleBuilder builder(table);
  const std::vector<SeriesDesc> series = MakeSeries(30);
  const std::vector<std::vector<int>> shapes = {
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
      {0, 1, 20, 2, 3, 4, 5, 6, 7, 8, 9},          // one new in the middle
      {0, 1, 20, 4, 5, 6, 7, 8, 9},                // two gone
      {0, 1, 20, 2, 3, 4, 5, 6, 7, 8, 9},          // back
      {9, 8, 7, 6, 5, 4, 3, 2, 1, 0},              // reversed
      {21, 22, 23, 24, 25, 26, 27, 28, 29, 0, 9},  // mostly new, gone ones beyond the window
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
  };
  for (size_t round = 0; round < shapes.size(); ++round) {
    for (int index : shapes[round]) {
      builder.Add(series[index], static_cast<uint64_t>(index) * 100 + round);
    }
    const Cycle cycle = builder.Finish(static_cast<int64_t>(round) + 1, 0);
    ASSERT_EQ(cycle.layout->size(), shapes[round].size()) << "round " << round;
    for (size_t i = 0; i < shapes[round].size(); ++i) {
      const int index = shapes[round][i];
      const SeriesDesc* desc = table.Find((*cycle.layout)[i]);
      ASSERT_NE(desc, nullptr);
      EXPECT_EQ(desc->fingerprint, series[index].fingerprint) << "round " << round << " at " << i;
      EXPECT_EQ(cycle.values[i], static_cast<uint64_t>(index) * 100 + round);
    }
  }
  EXPECT_EQ(table.size(), 20u);  // each series interned once

  // A series re-declared with other semantics (a counter widened from 32 to 64 bits) at the same
  // position is a new series: a new id, not the old one predicted by position.
  SeriesDesc widened = series[3];
  widened.width_bits = 32;
  widened.Finalize();
  for (int index : shapes.back()) {
    builder.Add(index == 3 ? widened : series[index], 1);
  }
  const Cycle cycle = builder.Finish(100, 0);
  EXPECT_EQ(table.Find((*cycle.layout)[3])->fingerprint, widened.fingerprint);
  EXPECT_NE((*cycle.layout)[3], table.Intern(series[3]));
}

// A counter file that fails to read now and then drops out of one cycle and is back in the
// next. Each shape of the series set must stay one layout: the stream declares layouts by
// object, keeps every one it declared, and the aggregator ends a stream beyond
// StreamDecoder::kMaxLayouts of them.
TEST(CycleBuilderTest, FlappingSeriesSetReusesItsLayouts) {
  SeriesTable table;
  CycleBuilder builder(table);
  const std::vector<SeriesDesc> series = MakeSeries(4);
  wire::StreamEncoder encoder(table);
  wire::StreamDecoder decoder;
  std::set<const Layout*> objects;
  int layouts_sent = 0;
  const int kFlaps = 2 * static_cast<int>(wire::StreamDecoder::kMaxLayouts) + 10;
  for (int cycle = 0; cycle < kFlaps; ++cycle) {
    for (size_t i = 0; i < series.size(); ++i) {
      if (cycle % 2 == 1 && i == 2) {
        continue;  // unreadable this cycle: absent, not zero
      }
      builder.Add(series[i], static_cast<uint64_t>(cycle));
    }
    const Cycle built = builder.Finish(cycle, 0);
    objects.insert(built.layout.get());
    std::vector<v1::AgentMessage> messages;
    encoder.Encode(cycle + 1, cycle, 0, 0, built.layout, built.values, &messages);
    for (const v1::AgentMessage& message : messages) {
      if (message.has_declarations()) {
        for (const v1::SeriesDeclaration& declaration : message.declarations().series()) {
          ASSERT_THAT(decoder.Declare(declaration.id()), IsOk());
        }
      } else if (message.has_layouts()) {
        for (const v1::Layout& layout : message.layouts().layouts()) {
          ++layouts_sent;
          ASSERT_THAT(decoder.AddLayout(layout), IsOk()) << "cycle " << cycle;
        }
      } else {
        wire::DecodedBatch batch;
        ASSERT_THAT(decoder.Decode(message.batch(), &batch), IsOk());
        ASSERT_EQ(batch.values, built.values);
      }
    }
  }
  EXPECT_EQ(objects.size(), 2u);
  EXPECT_EQ(layouts_sent, 2);
}

}  // namespace
}  // namespace fabricmon::agent
