// FamilyRegistry: what an agent's declaration may put into /metrics (catalogue, reserved
// families, pinning across nodes, label names), and the exporter's text for what it admits.

#include "daemon/store/family_registry.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/store/series_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/text_format_check.h"

namespace fabricmon::aggregator {
namespace {

using collectors::CounterSeries;
using collectors::GaugeSeries;
using collectors::Overflow;
using collectors::SeriesDesc;
using collectors::Unit;
using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kXmitData[] = "fabricmon_ib_port_xmit_data_bytes_total";

SeriesDesc XmitData(std::string help,
                    collectors::Labels labels = {{"device", "mlx5_0"}, {"port", "1"}}) {
  return CounterSeries("ib_sysfs", kXmitData, std::move(help), Unit::kBytes, 64,
                       Overflow::kSaturates, 4.0, std::move(labels));
}

SeriesDesc Dynamic(std::string help, collectors::MetricType type = collectors::MetricType::kCounter,
                   Unit unit = Unit::kNone) {
  if (type == collectors::MetricType::kCounter) {
    return CounterSeries("ib_sysfs", "fabricmon_ib_hw_out_of_buffer_total", std::move(help), unit,
                         32, Overflow::kWraps, 1.0, {{"device", "mlx5_0"}});
  }
  return GaugeSeries("ib_sysfs", "fabricmon_ib_hw_out_of_buffer_total", std::move(help), unit, 1.0,
                     {{"device", "mlx5_0"}});
}

TEST(FamilyRegistryTest, CataloguedFamiliesGetTheCataloguesHelpWhateverTheAgentSent) {
  store::FamilyRegistry registry(wire::MetricCatalogue::Project());
  SeriesDesc desc = XmitData("forged\nfabricmon_node_up{node=\"victim-forged\"} 1");
  ASSERT_THAT(registry.Admit(desc), IsOk());
  EXPECT_EQ(desc.help, wire::MetricCatalogue::Project().Find(kXmitData)->help);
  EXPECT_EQ(registry.pinned(), 0u);
}

TEST(FamilyRegistryTest, CataloguedFamilyWithAnotherTypeUnitOrWidthIsAConflict) {
  store::FamilyRegistry registry(wire::MetricCatalogue::Project());
  SeriesDesc gauge = GaugeSeries("x", kXmitData, "h", Unit::kBytes, 4.0, {});
  EXPECT_THAT(registry.Admit(gauge), StatusIs(absl::StatusCode::kFailedPrecondition));
  SeriesDesc packets =
      CounterSeries("x", kXmitData, "h", Unit::kPackets, 64, Overflow::kSaturates, 4.0, {});
  EXPECT_THAT(registry.Admit(packets), StatusIs(absl::StatusCode::kFailedPrecondition));
  SeriesDesc narrow =
      CounterSeries("x", kXmitData, "h", Unit::kBytes, 8, Overflow::kSaturates, 4.0, {});
  absl::Status status = registry.Admit(narrow);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(status.message()), HasSubstr("32 or 64 bits wide, declared 8"));
}

TEST(FamilyRegistryTest, TheAggregatorsOwnFamiliesAreReserved) {
  store::FamilyRegistry registry(wire::MetricCatalogue::Project());
  for (const char* name : {"fabricmon_node_up", "fabricmon_finding_active",
                           "fabricmon_aggregator_series", "fabricmon_series_saturated"}) {
    SeriesDesc desc = GaugeSeries("x", name, "h", Unit::kNone, 1.0, {{"node2", "v"}});
    EXPECT_THAT(registry.Admit(desc), StatusIs(absl::StatusCode::kPermissionDenied)) << name;
  }
  EXPECT_EQ(registry.pinned(), 0u);
}

TEST(FamilyRegistryTest, LabelNamesTheExpositionCannotCarryAreRefused) {
  store::FamilyRegistry registry(wire::MetricCatalogue::Project());
  for (const char* label : {"le", "quantile", "metric", "node", "Device", "__name__"}) {
    SeriesDesc desc = XmitData("h", {{label, "x"}});
    EXPECT_THAT(registry.Admit(desc), StatusIs(absl::StatusCode::kInvalidArgument)) << label;
  }
}

TEST(FamilyRegistryTest, FamiliesOutsideTheCatalogueFollowTheRules) {
  store::FamilyRegistry registry(wire::MetricCatalogue::Project());
  SeriesDesc no_prefix = GaugeSeries("x", "node_load1", "h", Unit::kNone, 1.0, {});
  EXPECT_THAT(registry.Admit(no_prefix), StatusIs(absl::StatusCode::kInvalidArgument));
  SeriesDesc no_help = Dynamic("");
  EXPECT_THAT(registry.Admit(no_help), StatusIs(absl::StatusCode::kInvalidArgument));
  SeriesDesc gauge_total = Dynamic("h", collectors::MetricType::kGauge);
  EXPECT_THAT(registry.Admit(gauge_total), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(registry.pinned(), 0u);  // nothing refused was pinned
}

TEST(FamilyRegistryTest, FirstDeclarationIsPinnedAndLaterConflictsAreRefused) {
  store::FamilyRegistry registry(wire::MetricCatalogue::Project());
  SeriesDesc first = Dynamic("Driver hardware counter hw_counters/out_of_buffer.");
  ASSERT_THAT(registry.Admit(first), IsOk());
  EXPECT_EQ(registry.pinned(), 1u);
  SeriesDesc same = Dynamic("Driver hardware counter hw_counters/out_of_buffer.");
  EXPECT_THAT(registry.Admit(same), IsOk());
  SeriesDesc other_help = Dynamic("Another text.");
  EXPECT_THAT(registry.Admit(other_help), StatusIs(absl::StatusCode::kFailedPrecondition));
  SeriesDesc other_unit = Dynamic("Driver hardware counter hw_counters/out_of_buffer.",
                                  collectors::MetricType::kCounter, Unit::kBytes);
  EXPECT_THAT(registry.Admit(other_unit), StatusIs(absl::StatusCode::kFailedPrecondition));
  SeriesDesc other_type =
      Dynamic("Driver hardware counter hw_counters/out_of_buffer.", collectors::MetricType::kGauge);
  EXPECT_THAT(registry.Admit(other_type), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(FamilyRegistryTest, PinsAreBounded) {
  store::FamilyRegistry registry(wire::MetricCatalogue::Project(), /*max_pinned=*/2);
  for (const char* name :
       {"fabricmon_alpha_total", "fabricmon_beta_total", "fabricmon_gamma_total"}) {
    SeriesDesc desc = CounterSeries("x", name, "h", Unit::kNone, 64, Overflow::kWraps, 1.0, {});
    const absl::Status status = registry.Admit(desc);
    if (std::string(name) == "fabricmon_gamma_total") {
      EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
    } else {
      EXPECT_THAT(status, IsOk());
    }
  }
  EXPECT_EQ(registry.pinned(), 2u);
}

// Two nodes through one store, as two streams: node B's conflicting declaration is refused for B
// and changes nothing of node A's series or /metrics.
class TwoNodesTest : public ::testing::Test {
 protected:
  std::shared_ptr<store::NodeState> Attach(const std::string& name, uint64_t token) {
    v1::Hello hello;
    hello.set_node_name(name);
    hello.set_agent_instance_id(token);
    hello.set_boot_id("boot");
    auto attached = store_.Attach(
        hello, token, [] {}, clock_.NowUnixNanos());
    EXPECT_TRUE(attached.ok());
    return attached->node;
  }

  // HandleDeclarations' order: Admit, then declare on the node; the value is stored with the
  // node's next batch (Store).
  absl::Status Declare(store::NodeState& node, SeriesDesc desc, uint64_t value) {
    absl::Status admitted = store_.families().Admit(desc);
    if (!admitted.ok()) {
      return admitted;
    }
    absl::StatusOr<uint32_t> index = node.Declare(desc);
    if (!index.ok()) {
      return index.status();
    }
    pending_[&node].first.push_back(*index);
    pending_[&node].second.push_back(value);
    return absl::OkStatus();
  }

  // One batch with the values declared since the node's last one.
  void Store(store::NodeState& node) {
    auto& [indices, values] = pending_[&node];
    node.AppendBatch(++sequence_, 0, clock_.NowUnixNanos(), indices, values,
                     std::vector<bool>(indices.size(), true), clock_.NowUnixNanos());
    indices.clear();
    values.clear();
  }

  std::string Scrape() {
    MetricsExporter exporter(store_, stats_, clock_, ExporterOptions{});
    std::string text;
    exporter.AppendText(&text);
    return text;
  }

  // The lines of `text` that name node `node`, or that describe a family.
  static std::vector<std::string> LinesOf(const std::string& text, const std::string& node) {
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StrContains(line, "node=\"" + node + "\"") || absl::StartsWith(line, "# ")) {
        lines.emplace_back(line);
      }
    }
    return lines;
  }

  testing::FakeClock clock_;
  store::SeriesStore store_{store::StoreOptions{}};
  IngestStats stats_;
  uint64_t sequence_ = 0;
  std::map<store::NodeState*, std::pair<std::vector<uint32_t>, std::vector<uint64_t>>> pending_;
};

TEST_F(TwoNodesTest, NodeBsConflictingDeclarationLeavesNodeAUntouched) {
  std::shared_ptr<store::NodeState> a = Attach("node-a", 1);
  std::shared_ptr<store::NodeState> b = Attach("node-b", 2);
  const std::string help_a = "Driver hardware counter hw_counters/out_of_buffer.";
  ASSERT_THAT(Declare(*a, Dynamic(help_a), 41), IsOk());
  ASSERT_THAT(Declare(*a, XmitData("whatever"), 1000), IsOk());
  Store(*a);
  const std::string before = Scrape();
  EXPECT_EQ(testing::CheckTextFormat(before), "");
  const std::vector<std::string> a_before = LinesOf(before, "node-a");

  // B: the dynamic family as a gauge, with another HELP; the catalogued one as a gauge.
  SeriesDesc as_gauge = GaugeSeries("ib_sysfs", "fabricmon_ib_hw_out_of_buffer_total",
                                    "forged\nfabricmon_node_up{node=\"victim\"} 1", Unit::kNone,
                                    1.0, {{"device", "mlx5_0"}});
  EXPECT_THAT(Declare(*b, as_gauge, 7), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Declare(*b, Dynamic("Another HELP.\nfabricmon_node_up{node=\"victim\"} 1"), 7),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Declare(*b, GaugeSeries("x", kXmitData, "h", Unit::kBytes, 4.0, {}), 7),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(b->GetSummary(false).series, 0u);

  const std::string after = Scrape();
  EXPECT_EQ(testing::CheckTextFormat(after), "");
  EXPECT_EQ(LinesOf(after, "node-a"), a_before);
  EXPECT_THAT(after, HasSubstr("# HELP fabricmon_ib_hw_out_of_buffer_total " + help_a + "\n"));
  EXPECT_THAT(after, HasSubstr("# TYPE fabricmon_ib_hw_out_of_buffer_total counter\n"));
  EXPECT_THAT(after,
              HasSubstr("fabricmon_ib_hw_out_of_buffer_total{node=\"node-a\",device=\"mlx5_0\"} "
                        "41\n"));
  EXPECT_THAT(after, Not(HasSubstr("victim")));
}

TEST_F(TwoNodesTest, PinnedHelpIsEscapedSoItCannotForgeALine) {
  std::shared_ptr<store::NodeState> a = Attach("node-a", 1);
  ASSERT_THAT(Declare(*a,
                      Dynamic("line one\nfabricmon_node_up{node=\"victim-forged\"} 1\n# TYPE x "
                              "gauge \\ end"),
                      5),
              IsOk());
  Store(*a);
  const std::string text = Scrape();
  EXPECT_EQ(testing::CheckTextFormat(text), "");
  EXPECT_THAT(text, HasSubstr("# HELP fabricmon_ib_hw_out_of_buffer_total line one\\n"
                              "fabricmon_node_up{node=\"victim-forged\"} 1\\n# TYPE x gauge "
                              "\\\\ end\n"));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    EXPECT_FALSE(absl::StartsWith(line, "fabricmon_node_up{node=\"victim")) << line;
  }
}

}  // namespace
}  // namespace fabricmon::aggregator
