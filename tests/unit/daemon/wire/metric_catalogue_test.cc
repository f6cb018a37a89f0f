#include "daemon/wire/metric_catalogue.h"

#include <string>
#include <vector>

#include "collectors/core/family_spec.h"
#include "collectors/families.h"
#include "daemon/detectors/families.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::wire {
namespace {

using collectors::CounterSeries;
using collectors::GaugeSeries;
using collectors::MetricType;
using collectors::Overflow;
using collectors::SeriesDesc;
using collectors::Unit;
using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::testing::HasSubstr;

TEST(MetricCatalogueTest, ProjectTablesAgreeAndBuildTheCatalogue) {
  std::vector<SeriesDesc> series;
  collectors::AppendProjectFamilies(&series);
  absl::StatusOr<MetricCatalogue> built = MetricCatalogue::FromSeries(series);
  ASSERT_THAT(built, IsOk());
  const MetricCatalogue& project = MetricCatalogue::Project();
  EXPECT_EQ(project.families().size(), built->families().size());
  // Every family any table lists is in it, with that table's semantics.
  for (const SeriesDesc& desc : series) {
    const CatalogueFamily* family = project.Find(desc.name);
    ASSERT_NE(family, nullptr) << desc.name;
    EXPECT_THAT(CheckAgainstCatalogue(*family, desc), IsOk()) << desc.collector;
  }
  EXPECT_GT(project.families().size(), 150u);
}

TEST(MetricCatalogueTest, ProjectFamiliesFollowTheExpositionRules) {
  for (const CatalogueFamily& family : MetricCatalogue::Project().families()) {
    EXPECT_FALSE(IsReservedFamily(family.name)) << family.name;
    EXPECT_THAT(CheckFamilyName(family.name, family.type), IsOk());
    EXPECT_THAT(CheckHelp(family.help), IsOk()) << family.name;
    if (family.type == MetricType::kCounter) {
      EXPECT_NE(family.widths, 0u) << family.name;
      EXPECT_NE(family.overflow, Overflow::kNotApplicable) << family.name;
    }
  }
}

// The families detectors read (and dashboards, alert rules) are the catalogue's.
TEST(MetricCatalogueTest, DetectorFamiliesAreCatalogued) {
  namespace f = detectors::families;
  for (const char* name : {f::kIbLinkDowned,
                           f::kIbLinkErrorRecovery,
                           f::kIbSymbolError,
                           f::kIbRcvErrors,
                           f::kIbLocalLinkIntegrity,
                           f::kIbBufferOverrun,
                           f::kIbRemotePhysical,
                           f::kIbPortState,
                           f::kIbXmitWait,
                           f::kIbXmitData,
                           f::kIbRcvData,
                           f::kIbPortInfo,
                           f::kRoceLinkDownEvents,
                           f::kRocePauseDuration,
                           f::kRocePauseFrames,
                           f::kRocePauseStormWarning,
                           f::kRocePauseStormError,
                           f::kRoceEcnMarked,
                           f::kRoceRdmaBytes,
                           f::kRoceRxOutOfBuffer,
                           f::kRocePcsSymbolErrors,
                           f::kRoceCrcErrors,
                           f::kNetdevCarrierDown,
                           f::kNetdevRxBytes,
                           f::kNetdevTxBytes,
                           f::kNetdevInfo,
                           f::kGpuUtilization,
                           f::kNvlinkState,
                           f::kNvlinkErrors,
                           f::kNvlinkRecoveryEvents,
                           f::kRdmaProcessQps,
                           f::kRdmaQpProcessesDropped}) {
    EXPECT_NE(MetricCatalogue::Project().Find(name), nullptr) << name;
  }
  // hw_counters families the congestion detectors read are named after mlx5 files: pinned at
  // first declaration, not catalogued.
  EXPECT_EQ(MetricCatalogue::Project().Find(f::kIbRpCnpHandled), nullptr);
}

TEST(MetricCatalogueTest, IbDataCountersAreEitherWidthAndSaturate) {
  const CatalogueFamily* family =
      MetricCatalogue::Project().Find("fabricmon_ib_port_xmit_data_bytes_total");
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(family->type, MetricType::kCounter);
  EXPECT_EQ(family->unit, Unit::kBytes);
  EXPECT_EQ(family->scale, 4.0);
  EXPECT_EQ(family->overflow, Overflow::kSaturates);
  EXPECT_TRUE(family->AllowsWidth(32));
  EXPECT_TRUE(family->AllowsWidth(64));
  EXPECT_FALSE(family->AllowsWidth(16));
  EXPECT_EQ(family->help, "Bytes transmitted on the port (data words × 4).");
}

TEST(MetricCatalogueTest, DeclarationsThatContradictTheCatalogueAreRefused) {
  const CatalogueFamily& family =
      *MetricCatalogue::Project().Find("fabricmon_ib_port_xmit_data_bytes_total");
  const SeriesDesc good =
      CounterSeries("x", family.name, "any help", Unit::kBytes, 64, Overflow::kSaturates, 4.0, {});
  EXPECT_THAT(CheckAgainstCatalogue(family, good), IsOk());
  EXPECT_THAT(
      CheckAgainstCatalogue(family, GaugeSeries("x", family.name, "h", Unit::kBytes, 4.0, {})),
      StatusIs(absl::StatusCode::kFailedPrecondition));
  for (const SeriesDesc& bad :
       {CounterSeries("x", family.name, "h", Unit::kPackets, 64, Overflow::kSaturates, 4.0, {}),
        CounterSeries("x", family.name, "h", Unit::kBytes, 16, Overflow::kSaturates, 4.0, {}),
        CounterSeries("x", family.name, "h", Unit::kBytes, 64, Overflow::kWraps, 4.0, {}),
        CounterSeries("x", family.name, "h", Unit::kBytes, 64, Overflow::kSaturates, 400.0, {})}) {
    EXPECT_THAT(CheckAgainstCatalogue(family, bad),
                StatusIs(absl::StatusCode::kFailedPrecondition));
  }
}

TEST(MetricCatalogueTest, TablesThatDisagreeDoNotMakeACatalogue) {
  EXPECT_THAT(
      MetricCatalogue::FromSeries({
          CounterSeries("a", "fabricmon_x_total", "h", Unit::kNone, 32, Overflow::kWraps, 1.0, {}),
          CounterSeries("b", "fabricmon_x_total", "h", Unit::kBytes, 32, Overflow::kWraps, 1.0, {}),
      }),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MetricCatalogue::FromSeries(
                  {GaugeSeries("a", "fabricmon_node_up", "h", Unit::kNone, 1.0, {})}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MetricCatalogueTest, ReservedFamiliesAreTheAggregatorsOwn) {
  for (const char* name :
       {"fabricmon_node_up", "fabricmon_node_clock_steps_total", "fabricmon_finding_active",
        "fabricmon_findings_total", "fabricmon_aggregator_rejected_messages_total",
        "fabricmon_detector_tick_seconds", "fabricmon_topology_links", "fabricmon_series_saturated",
        "fabricmon_recording_bytes_written_total", "fabricmon_recording_active"}) {
    EXPECT_TRUE(IsReservedFamily(name)) << name;
  }
  EXPECT_FALSE(IsReservedFamily("fabricmon_netdev_info"));
  EXPECT_FALSE(IsReservedFamily("fabricmon_ib_fabric_node_up"));
}

TEST(MetricCatalogueTest, FamilyNamesFollowPromtoolsRules) {
  struct Case {
    const char* name;
    MetricType type;
    bool ok;
  };
  const Case cases[] = {
      {"fabricmon_ib_hw_out_of_buffer_total", MetricType::kCounter, true},
      {"fabricmon_x_bytes", MetricType::kGauge, true},
      {"fabricmon_x_info", MetricType::kInfo, true},
      {"fabricmon_", MetricType::kGauge, false},
      {"node_up", MetricType::kGauge, false},
      {"fabricmon_x", MetricType::kCounter, false},      // counter without _total
      {"fabricmon_x_total", MetricType::kGauge, false},  // gauge with _total
      {"fabricmon_x_count", MetricType::kGauge, false},
      {"fabricmon_x_sum", MetricType::kGauge, false},
      {"fabricmon_x_bucket", MetricType::kGauge, false},
      {"fabricmon_xBytes", MetricType::kGauge, false},   // camelCase
      {"fabricmon_x:y", MetricType::kGauge, false},      // colon
      {"fabricmon_x_gauge", MetricType::kGauge, false},  // type in name
      {"fabricmon_x_counter_total", MetricType::kCounter, false},
      {"fabricmon_x_ms", MetricType::kGauge, false},  // abbreviated unit
      {"fabricmon_x_kb_total", MetricType::kCounter, false},
      {"fabricmon_x_milliseconds", MetricType::kGauge, false},  // not a base unit
      {"fabricmon_x_bits_total", MetricType::kCounter, false},
      {"fabricmon_x_kilobytes", MetricType::kGauge, false},
      {"fabricmon_x\nfabricmon_node_up", MetricType::kGauge, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(CheckFamilyName(c.name, c.type).ok(), c.ok) << c.name;
  }
}

TEST(MetricCatalogueTest, LabelNamesAndHelp) {
  EXPECT_THAT(CheckLabelName("device"), IsOk());
  EXPECT_THAT(CheckLabelName("_x9"), IsOk());
  for (const char* bad : {"", "__name__", "__x", "Device", "a-b", "9a", "node", "metric", "le",
                          "quantile", "shard", "a\"b", "a\nb"}) {
    EXPECT_THAT(CheckLabelName(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_THAT(CheckHelp("Bytes \\ with \"quotes\"\nand a newline: escaped by the writer."), IsOk());
  EXPECT_THAT(CheckHelp(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckHelp(std::string(kMaxHelpBytes + 1, 'h')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckHelp("bad \xed\xa0\x80 surrogate"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fabricmon::wire
