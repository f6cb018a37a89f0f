#include "collectors/ethtool/mlx5_stat_specs.h"

#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon::collectors::ethtool {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(Mlx5StatSpecsTest, PerPriorityPause) {
  auto frames = Mlx5StatSpec("rx_prio3_pause");
  ASSERT_TRUE(frames.has_value());
  EXPECT_EQ(frames->metric, "fabricmon_roce_pfc_pause_frames_total");
  EXPECT_THAT(frames->labels, ElementsAre(Pair("direction", "rx"), Pair("priority", "3")));

  auto duration = Mlx5StatSpec("tx_prio7_pause_duration");
  ASSERT_TRUE(duration.has_value());
  EXPECT_EQ(duration->metric, "fabricmon_roce_pfc_pause_duration_seconds_total");
  EXPECT_EQ(duration->unit, Unit::kSeconds);
  EXPECT_DOUBLE_EQ(duration->scale, 1e-6);  // the driver counts µs
  EXPECT_THAT(duration->labels, ElementsAre(Pair("direction", "tx"), Pair("priority", "7")));

  auto transition = Mlx5StatSpec("rx_prio0_pause_transition");
  ASSERT_TRUE(transition.has_value());
  EXPECT_EQ(transition->metric, "fabricmon_roce_pfc_pause_transitions_total");
  // RX only in mlx5 (collectors/ethtool/README.md): a tx spelling is not a known counter.
  EXPECT_FALSE(Mlx5StatSpec("tx_prio0_pause_transition").has_value());
}

TEST(Mlx5StatSpecsTest, GlobalPauseUsesPriorityGlobal) {
  auto frames = Mlx5StatSpec("tx_global_pause");
  ASSERT_TRUE(frames.has_value());
  EXPECT_EQ(frames->metric, "fabricmon_roce_pfc_pause_frames_total");
  EXPECT_THAT(frames->labels, ElementsAre(Pair("direction", "tx"), Pair("priority", "global")));
  auto duration = Mlx5StatSpec("rx_global_pause_duration");
  ASSERT_TRUE(duration.has_value());
  EXPECT_DOUBLE_EQ(duration->scale, 1e-6);
  EXPECT_THAT(duration->labels, ElementsAre(Pair("direction", "rx"), Pair("priority", "global")));
}

TEST(Mlx5StatSpecsTest, PriorityOutOfRangeIsNotTyped) {
  EXPECT_FALSE(Mlx5StatSpec("rx_prio8_pause").has_value());
  EXPECT_FALSE(Mlx5StatSpec("rx_prio10_pause").has_value());
  EXPECT_FALSE(Mlx5StatSpec("rx_prioX_pause").has_value());
  EXPECT_FALSE(Mlx5StatSpec("rx_prio3_").has_value());
}

TEST(Mlx5StatSpecsTest, Widths) {
  auto link_down = Mlx5StatSpec("link_down_events_phy");
  ASSERT_TRUE(link_down.has_value());
  EXPECT_EQ(link_down->width_bits, 32);  // the one 32-bit mlx5 ethtool counter
  auto discards = Mlx5StatSpec("rx_discards_phy");
  ASSERT_TRUE(discards.has_value());
  EXPECT_EQ(discards->width_bits, 64);
}

TEST(Mlx5StatSpecsTest, PciStallIsAGaugeRatio) {
  auto stalled = Mlx5StatSpec("outbound_pci_stalled_wr");
  ASSERT_TRUE(stalled.has_value());
  EXPECT_EQ(stalled->type, MetricType::kGauge);  // percent of the last second
  EXPECT_EQ(stalled->unit, Unit::kRatio);
  EXPECT_DOUBLE_EQ(stalled->scale, 0.01);
  auto events = Mlx5StatSpec("outbound_pci_stalled_wr_events");
  ASSERT_TRUE(events.has_value());
  EXPECT_EQ(events->type, MetricType::kCounter);
}

TEST(Mlx5StatSpecsTest, OldAndNewSpellingsShareAFamily) {
  auto old_name = Mlx5StatSpec("octets_received");
  auto new_name = Mlx5StatSpec("rx_bytes_phy");
  ASSERT_TRUE(old_name.has_value() && new_name.has_value());
  EXPECT_EQ(old_name->metric, new_name->metric);
  EXPECT_EQ(old_name->labels, new_name->labels);
}

TEST(Mlx5StatSpecsTest, PerQueueAndSoftwareDetailsAreNotTyped) {
  for (const char* key : {"rx0_packets", "ch3_poll", "tx0_0_packets", "tx15_nop", "rx_xdp_drop",
                          "rx_cache_reuse", "ch_events", "rx_64_bytes_phy"}) {
    EXPECT_FALSE(Mlx5StatSpec(key).has_value()) << key;
  }
}

TEST(Mlx5StatSpecsTest, DriverFamily) {
  EXPECT_TRUE(IsMlx5Driver("mlx5_core"));
  EXPECT_TRUE(IsMlx5Driver("mlx5e_rep"));
  EXPECT_FALSE(IsMlx5Driver("mlx4_en"));
  EXPECT_FALSE(IsMlx5Driver("veth"));
  EXPECT_FALSE(IsMlx5Driver(""));
}

TEST(Mlx5StatSpecsTest, FamilyNamesFollowPrometheusConventions) {
  auto valid = [](const std::string& name) {
    for (char c : name) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
        return false;
      }
    }
    return !name.empty();
  };
  std::vector<std::string> families = Mlx5MetricFamilies();
  EXPECT_GE(families.size(), 30u);
  for (const std::string& name : families) {
    EXPECT_TRUE(valid(name)) << name;
    EXPECT_TRUE(absl::StartsWith(name, "fabricmon_roce_")) << name;
  }
  // Every spec: counters end in _total, gauges do not; units appear in the name.
  for (const char* key : {"rx_prio0_pause",
                          "tx_prio1_pause_duration",
                          "rx_prio2_pause_transition",
                          "rx_global_pause",
                          "tx_pause_storm_warning_events",
                          "tx_pause_storm_error_events",
                          "rx_pause_ctrl_phy",
                          "rx_prio3_bytes",
                          "tx_prio4_packets",
                          "rx_prio5_discards",
                          "rx_prio6_buf_discard",
                          "rx_prio7_cong_discard",
                          "rx_prio0_marked",
                          "rx_bytes",
                          "tx_packets",
                          "rx_bytes_phy",
                          "tx_packets_phy",
                          "rx_vport_rdma_unicast_bytes",
                          "tx_vport_rdma_multicast_packets",
                          "rx_vport_broadcast_bytes",
                          "tx_discards_phy",
                          "rx_out_of_buffer",
                          "rx_buffer_passed_thres_phy",
                          "link_down_events_phy",
                          "total_success_recovery_phy",
                          "rx_bits_phy",
                          "rx_corrected_bits_phy",
                          "rx_pcs_symbol_err_phy",
                          "rx_err_lane_3_phy",
                          "rx_crc_errors_phy",
                          "rx_symbol_err_phy",
                          "rx_pci_signal_integrity",
                          "outbound_pci_stalled_rd",
                          "outbound_pci_stalled_rd_events",
                          "outbound_pci_buffer_overflow",
                          "module_unplug"}) {
    auto spec = Mlx5StatSpec(key);
    ASSERT_TRUE(spec.has_value()) << key;
    if (spec->type == MetricType::kCounter) {
      EXPECT_TRUE(absl::EndsWith(spec->metric, "_total")) << key;
    } else {
      EXPECT_FALSE(absl::EndsWith(spec->metric, "_total")) << key;
    }
    if (spec->unit == Unit::kBytes) {
      EXPECT_TRUE(absl::StrContains(spec->metric, "_bytes")) << key;
    }
    if (spec->unit == Unit::kSeconds) {
      EXPECT_TRUE(absl::StrContains(spec->metric, "_seconds")) << key;
    }
    if (spec->unit == Unit::kRatio) {
      EXPECT_TRUE(absl::EndsWith(spec->metric, "_ratio")) << key;
    }
    EXPECT_FALSE(spec->help.empty()) << key;
  }
}

}  // namespace
}  // namespace fabricmon::collectors::ethtool
