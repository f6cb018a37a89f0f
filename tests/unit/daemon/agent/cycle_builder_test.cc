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
