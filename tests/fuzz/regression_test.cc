// Crashes and broken invariants the fuzz targets found, as readable tests of the functions that
// were fixed. The raw reproducers are in regressions/<target>/ and replay_test.cc runs them too.

#include <string>

#include "collectors/ib_sysfs/ib_counters_parser.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/agent/series_table.h"
#include "daemon/detectors/cable_graph.h"
#include "daemon/wire/batch_codec.h"
#include "daemon/wire/series_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::fuzz {
namespace {

using ::fabricmon::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// sysfs_value, regressions/sysfs_value/long_counter_name_refused_declaration: a hw_counters file
// with a long name (a capture, a test tree, an exotic driver) became a metric name over the
// aggregator's 200-byte limit; its declaration was refused and with it the node's whole stream,
// on every reconnect. The agent now leaves that one series out.
TEST(FuzzRegressionTest, LongCounterFileNameCostsOnlyItsSeries) {
  const std::string file(180, 'n');
  const collectors::ib_sysfs::CounterSpec spec = collectors::ib_sysfs::SpecForCounter(
      collectors::ib_sysfs::CounterGroup::kHwCounters, file, true, "mlx5_core");
  ASSERT_FALSE(spec.skip);
  const collectors::Labels labels = {{"device", "mlx5_0"}, {"port", "1"}};
  const collectors::SeriesDesc long_desc =
      collectors::CounterSeries("ib_sysfs", spec.metric, spec.help, spec.unit, spec.width_bits,
                                spec.overflow, spec.scale, labels);
  EXPECT_THAT(wire::FromDeclaration(wire::ToDeclaration(long_desc, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument));

  const collectors::SeriesDesc normal = collectors::CounterSeries(
      "ib_sysfs", "fabricmon_ib_hw_rx_write_requests_total",
      "Driver hardware counter hw_counters/rx_write_requests.", collectors::Unit::kNone, 32,
      collectors::Overflow::kWraps, 1.0, labels);
  agent::SeriesTable table;
  agent::CycleBuilder builder(table);
  for (int cycle = 0; cycle < 2; ++cycle) {
    builder.Add(long_desc, 7);
    builder.Add(normal, 9);
    const agent::Cycle built = builder.Finish(1, 1);
    ASSERT_EQ(built.layout->size(), 1u);
    EXPECT_EQ(table.Find((*built.layout)[0])->name, normal.name);
    EXPECT_THAT(built.values, ElementsAre(9u));
  }
  EXPECT_EQ(builder.invalid_series(), 1u);  // counted once, not per cycle
  EXPECT_EQ(table.size(), 1u);
}

// link_list, regressions/link_list/port_cabled_twice: a link list naming one port twice (directly,
// or once by netdev and once by RDMA port) left the graph asymmetric: the port pointed at its
// second peer while the first still pointed back at it, so detectors could walk a cable that the
// file had replaced. Now the last cable wins on both ends and the file is reported.
TEST(FuzzRegressionTest, PortCabledTwiceInALinkListStaysSymmetric) {
  detectors::CableGraph topology;
  const absl::Status status =
      topology.AddLinkList("n1/mlx5_0/1 switch:leaf/1\nn1/mlx5_0/1 switch:leaf/2\n");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status.message(), HasSubstr("line 2"));

  detectors::Endpoint host;
  host.node = "n1";
  host.device = "mlx5_0";
  host.port = 1;
  detectors::Endpoint first;
  first.node = "leaf";
  first.port = 1;
  first.is_switch = true;
  detectors::Endpoint second = first;
  second.port = 2;
  ASSERT_TRUE(topology.PeerOf(host).has_value());
  EXPECT_EQ(*topology.PeerOf(host), second);
  ASSERT_TRUE(topology.PeerOf(second).has_value());
  EXPECT_EQ(*topology.PeerOf(second), host);
  EXPECT_FALSE(topology.PeerOf(first).has_value());
  EXPECT_THAT(topology.PortsOf("leaf", true), ElementsAre(second));
  EXPECT_EQ(topology.link_count(), 1u);

  // Repeating a cable (either direction) is not a contradiction.
  detectors::CableGraph repeated;
  EXPECT_TRUE(repeated.AddLinkList("n1/mlx5_0/1 switch:leaf/1\nswitch:leaf/1 n1/mlx5_0/1\n").ok());
  EXPECT_EQ(repeated.link_count(), 1u);
}

// ingest, regressions/ingest/negative_scale_negative_rate: a declaration with scale -1 was
// accepted, so a growing counter exported negative values and a negative rate, which the detectors
// read as traffic going backwards. The aggregator now refuses scales outside (0, 1e12] (0 still
// means 1).
TEST(FuzzRegressionTest, NonPositiveOrHugeScaleIsRefused) {
  v1::SeriesDeclaration declaration;
  declaration.set_id(1);
  declaration.set_name("fabricmon_ib_port_xmit_data_bytes_total");
  declaration.set_type(v1::METRIC_TYPE_COUNTER);
  declaration.set_width_bits(64);
  for (double scale : {-0.99999999999994316, -4.0, 1e13, 1e300}) {
    declaration.set_scale(scale);
    EXPECT_THAT(wire::FromDeclaration(declaration), StatusIs(absl::StatusCode::kInvalidArgument))
        << scale;
  }
  for (double scale : {0.0, -0.0, 4.0, 1e-9, 1e12}) {
    declaration.set_scale(scale);
    EXPECT_TRUE(wire::FromDeclaration(declaration).ok()) << scale;
  }
}

// Review of the ingest target's memory use (regressions/ingest/series_id_16777215, 52 bytes):
// declaring one series with id 2^24 - 1 made the aggregator allocate ~200 MiB for that stream
// (dense tables by id); the bound is now 2^22 (~50 MiB worst case).
TEST(FuzzRegressionTest, SeriesIdsAreBoundedToKeepTablesSmall) {
  wire::StreamDecoder decoder;
  EXPECT_THAT(decoder.Declare((1u << 24) - 1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(decoder.Declare(wire::StreamDecoder::kMaxSeriesId),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(decoder.Declare(wire::StreamDecoder::kMaxSeriesId - 1).ok());
  EXPECT_LE(uint64_t{wire::StreamDecoder::kMaxSeriesId} * 12, uint64_t{50} << 20);
}

// The same review: layouts were bounded in number (4096) but not in size, and may name a series
// many times, so 4096 Layouts messages of 4 MiB (1-byte entries, held as 8 bytes) could make one
// stream hold ~128 GiB. All layouts of a stream now share a budget of entries.
TEST(FuzzRegressionTest, LayoutsShareABudgetOfEntries) {
  wire::StreamDecoder decoder;
  ASSERT_TRUE(decoder.Declare(1).ok());
  const size_t budget =
      wire::StreamDecoder::kMinLayoutEntryBudget + wire::StreamDecoder::kLayoutEntriesPerSeries;
  auto layout = [](uint32_t id, size_t entries) {
    v1::Layout layout;
    layout.set_id(id);
    for (size_t i = 0; i < entries; ++i) {
      layout.add_series_ids(1);
    }
    return layout;
  };
  EXPECT_THAT(decoder.AddLayout(layout(1, budget + 1)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_FALSE(decoder.HasLayout(1));
  EXPECT_TRUE(decoder.AddLayout(layout(1, budget)).ok());
  EXPECT_TRUE(decoder.AddLayout(layout(1, budget)).ok());  // replacing frees its old entries
  EXPECT_THAT(decoder.AddLayout(layout(2, 1)), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(decoder.AddLayout(layout(1, 1)).ok());
  EXPECT_TRUE(decoder.AddLayout(layout(2, budget - 1)).ok());
  // An honest stream: every declared series in a few layouts.
  wire::StreamDecoder honest;
  v1::Layout all;
  all.set_id(1);
  for (uint32_t id = 1; id <= 100000; ++id) {
    ASSERT_TRUE(honest.Declare(id).ok());
    all.add_series_ids(id);
  }
  for (uint32_t id = 1; id <= 8; ++id) {
    all.set_id(id);
    EXPECT_TRUE(honest.AddLayout(all).ok()) << id;
  }
}

}  // namespace
}  // namespace fabricmon::fuzz
