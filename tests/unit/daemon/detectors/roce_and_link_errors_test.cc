// The ECN rule (threshold, debounce, both of its branches), the link_degraded paths other than
// IB symbol errors (LinkErrorRecovery alone, RoCE PCS symbol and CRC errors; still counters
// skipped without losing or repeating an increase; whose copy of a port counts when a node and
// fabric sweepers report it), and the validation of detector thresholds.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "daemon/detectors/engine.h"
#include "daemon/detectors/families.h"
#include "daemon/detectors/link_degraded.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

namespace fabricmon::detectors {
namespace {

using testing::FabricFixture;
using testing::HostCounter;

collectors::SeriesDesc HwCounter(const std::string& family) {
  return collectors::CounterSeries("ib_sysfs", family, "", collectors::Unit::kNone, 64,
                                   collectors::Overflow::kWraps, 1.0,
                                   {{"device", "mlx5_1"}, {"port", "1"}});
}

collectors::SeriesDesc Pause(const std::string& direction) {
  return collectors::CounterSeries(
      "ethtool", families::kRocePauseDuration, "", collectors::Unit::kSeconds, 64,
      collectors::Overflow::kWraps, 1e-6,
      {{"netdev", "ens1f1"}, {"direction", direction}, {"priority", "3"}});
}

collectors::SeriesDesc EthtoolCounter(const std::string& family) {
  return collectors::CounterSeries("ethtool", family, "", collectors::Unit::kNone, 64,
                                   collectors::Overflow::kWraps, 1.0, {{"netdev", "ens1f1"}});
}

class RoceAndLinkErrorsTest : public ::testing::Test {
 protected:
  RoceAndLinkErrorsTest() { Reset({}); }
  void Reset(const v1::DetectorThresholds& thresholds) {
    engine_ =
        std::make_unique<DetectionEngine>(fabric_.store(), fabric_.clock(), thresholds, 1000000000);
  }
  std::vector<std::string> Active() {
    engine_->Tick();
    std::vector<std::string> out;
    for (const TrackedFinding& tracked : engine_->tracker().Active()) {
      out.push_back(tracked.finding.kind + " " + tracked.finding.subject.ToString());
    }
    return out;
  }
  FabricFixture fabric_;
  std::unique_ptr<DetectionEngine> engine_;
};

// rp_cnp_ignored at 1/s every other sample never holds for 3 samples in a row: nothing. At 20/s:
// raised only once it held for 3 evaluated samples (default ecn_ticks), and cleared only after 3
// without.
TEST_F(RoceAndLinkErrorsTest, IgnoredCnpsNeedTheThresholdForSeveralSamplesAndClearLikewise) {
  uint64_t ignored = 1000;
  auto step = [&](uint64_t per_second) {
    ignored += per_second;
    fabric_.Set("r7-gpu3", HwCounter(families::kIbRpCnpIgnored), ignored);
    fabric_.Step();
    return Active();
  };
  for (int i = 0; i < 6; ++i) {
    EXPECT_THAT(step((i + 1) % 2), ::testing::IsEmpty()) << "never 3 samples in a row at 1/s";
  }
  EXPECT_THAT(step(20), ::testing::IsEmpty());
  EXPECT_THAT(step(20), ::testing::IsEmpty()) << "2 samples are not 3";
  EXPECT_THAT(step(20), ::testing::ElementsAre("ecn_misconfigured r7-gpu3"));
  EXPECT_THAT(step(0), ::testing::ElementsAre("ecn_misconfigured r7-gpu3")) << "debounced clear";
  EXPECT_THAT(step(0), ::testing::ElementsAre("ecn_misconfigured r7-gpu3"));
  EXPECT_THAT(step(0), ::testing::IsEmpty());
  // Ticks between samples do not count as samples.
  EXPECT_THAT(step(20), ::testing::IsEmpty());
  EXPECT_THAT(Active(), ::testing::IsEmpty());
  EXPECT_THAT(Active(), ::testing::IsEmpty());
}

// Thresholds at 0 where that means something: any ignored CNP, raised on the first sample.
TEST_F(RoceAndLinkErrorsTest, ZeroThresholdAndOneTickRaiseOnTheFirstIgnoredCnp) {
  v1::DetectorThresholds thresholds;
  thresholds.set_ecn_cnp_ignored_per_second(0);
  thresholds.set_ecn_ticks(1);
  Reset(thresholds);
  fabric_.Set("r7-gpu3", HwCounter(families::kIbRpCnpIgnored), 5);
  fabric_.Step();
  EXPECT_THAT(Active(), ::testing::IsEmpty());
  fabric_.Set("r7-gpu3", HwCounter(families::kIbRpCnpIgnored), 6);
  fabric_.Step();
  EXPECT_THAT(Active(), ::testing::ElementsAre("ecn_misconfigured r7-gpu3"));
}

// The other branch: heavy PFC (paused 40 % of the time) with the congestion-control counters
// present but silent (no ECN marks, no CNPs sent or handled). The same pausing with ECN marks
// is congestion control at work, not a misconfiguration.
TEST_F(RoceAndLinkErrorsTest, PfcWithoutEcnMarksOrCnpsIsMisconfiguredButWithMarksItIsNot) {
  v1::DetectorThresholds thresholds;
  thresholds.set_pause_storm_fraction(0.9);  // 40 % is no storm
  Reset(thresholds);
  for (int step = 0; step < 6; ++step) {
    for (const char* node : {"r1-gpu1", "r1-gpu2"}) {
      fabric_.Set(node, Pause("rx"), step * 400000u);
      fabric_.Set(node, HwCounter(families::kIbNpCnpSent), 0);
      fabric_.Set(node, HwCounter(families::kIbRpCnpIgnored), 0);
    }
    fabric_.Set("r1-gpu1", HwCounter(families::kIbNpEcnMarked), 0);
    fabric_.Set("r1-gpu2", HwCounter(families::kIbNpEcnMarked), step * 5000u);
    fabric_.Step();
    engine_->Tick();
  }
  std::vector<std::string> active = Active();
  EXPECT_THAT(active, ::testing::Contains("ecn_misconfigured r1-gpu1"));
  EXPECT_THAT(active, ::testing::Not(::testing::Contains("ecn_misconfigured r1-gpu2")));
}

// A link that retrains itself (LinkErrorRecovery) is degraded on that alone, below the error
// count threshold.
TEST_F(RoceAndLinkErrorsTest, LinkErrorRecoveryAloneIsADegradedLink) {
  const auto recovery = HostCounter(families::kIbLinkErrorRecovery, "mlx5_4", 1, 8);
  for (uint64_t value : {2u, 2u, 3u}) {
    fabric_.Set("r2-gpu9", recovery, value);
    fabric_.Step();
  }
  EXPECT_THAT(Active(), ::testing::ElementsAre("link_degraded r2-gpu9 mlx5_4/1"));
}

// The detector keeps its ports in a hash table; its findings still come out in endpoint order, the
// same every tick and every process (replay compares them exactly).
TEST_F(RoceAndLinkErrorsTest, DegradedLinksAreReportedInEndpointOrder) {
  const std::vector<std::string> nodes = {"r3-gpu2", "r1-gpu7", "r2-gpu1"};
  for (uint64_t value : {2u, 2u, 3u}) {
    for (const std::string& node : nodes) {
      for (const char* device : {"mlx5_3", "mlx5_0", "mlx5_2", "mlx5_1"}) {
        fabric_.Set(node, HostCounter(families::kIbLinkErrorRecovery, device, 1, 8), value);
      }
    }
    fabric_.Step();
  }
  LinkDegradedDetector detector{LinkDegradedOptions{}};
  const CableGraph no_topology;
  SeriesCache cache;  // kept between ticks, as the engine keeps its own
  std::vector<Finding> findings;
  for (int tick = 0; tick < 3; ++tick) {
    findings.clear();
    detector.Evaluate(
        FabricView(fabric_.store().Nodes(), no_topology, fabric_.clock().NowUnixNanos(), &cache),
        findings);
    ASSERT_EQ(findings.size(), 12u);
    EXPECT_TRUE(
        std::is_sorted(findings.begin(), findings.end(),
                       [](const Finding& a, const Finding& b) { return a.subject < b.subject; }));
    EXPECT_EQ(findings.front().subject.ToString(), "r1-gpu7 mlx5_0/1");
    EXPECT_EQ(findings.back().subject.ToString(), "r3-gpu2 mlx5_3/1");
  }
}

// RoCE physical-layer errors: PCS symbol errors and CRC errors each make a degraded link once
// they reach degraded_errors_in_window; a few are not enough.
TEST_F(RoceAndLinkErrorsTest, RocePcsAndCrcErrorsMakeADegradedLink) {
  for (const char* family : {families::kRocePcsSymbolErrors, families::kRoceCrcErrors}) {
    FabricFixture fabric;
    DetectionEngine engine(fabric.store(), fabric.clock(), v1::DetectorThresholds(), 1000000000);
    const auto errors = EthtoolCounter(family);
    for (uint64_t value : {100u, 103u, 105u}) {  // 5 errors: below 10
      fabric.Set("r4-gpu1", errors, value);
      fabric.Step();
    }
    engine.Tick();
    EXPECT_TRUE(engine.tracker().Active().empty()) << family;
    for (uint64_t value : {110u, 120u}) {
      fabric.Set("r4-gpu1", errors, value);
      fabric.Step();
    }
    engine.Tick();
    std::vector<TrackedFinding> active = engine.tracker().Active();
    ASSERT_EQ(active.size(), 1u) << family;
    EXPECT_EQ(active[0].finding.kind, "link_degraded");
    EXPECT_EQ(active[0].finding.subject.ToString(), "r4-gpu1 ens1f1/1");
  }
}

// Error counters that stand still are skipped without their cursors (HoldsOneValue): an increase
// after a long still spell counts once, not again at the next ticks while the ring still holds
// it, and a second one adds to it. 6 errors then 6 more: raised (10) only after the second.
TEST_F(RoceAndLinkErrorsTest, AnIncreaseAfterAStillSpellCountsOnce) {
  const auto errors = EthtoolCounter(families::kRoceCrcErrors);
  auto step = [&](uint64_t value, int times) {
    std::vector<std::string> active;
    for (int i = 0; i < times; ++i) {
      fabric_.Set("r6-gpu3", errors, value);
      fabric_.Step();
      active = Active();
    }
    return active;
  };
  EXPECT_THAT(step(40, 12), ::testing::IsEmpty());  // longer than the ring: the cursor is left
  EXPECT_THAT(step(46, 1), ::testing::IsEmpty());
  EXPECT_THAT(step(46, 12), ::testing::IsEmpty()) << "the 6 errors were counted again";
  EXPECT_THAT(step(52, 1), ::testing::ElementsAre("link_degraded r6-gpu3 ens1f1/1"));
}

// Two reporters of one port: its own node, whose copy stands still (and is skipped as such), and
// a fabric sweeper whose copy rises. The own node's copy is the one judged, still or not: the
// sweeper's 12 errors are not counted; a switch port's two sweepers likewise leave it to the
// smaller name, whose copy stands still. Once the own node's copy rises, its errors count.
TEST_F(RoceAndLinkErrorsTest, AStillCopyOfThePortsOwnNodeOutranksASweepersRisingOne) {
  const auto own = testing::HostCounter(families::kIbSymbolError, "mlx5_3", 1);
  const auto swept = collectors::CounterSeries(
      "ib_fabric", families::kIbSymbolError, "", collectors::Unit::kNone, 16,
      collectors::Overflow::kSaturates, 1.0,
      {{"ca", "h1 HCA-1"}, {"ca_guid", "0x0002c90300000001"}, {"port", "1"}});
  const auto switch_port = testing::SwitchCounter(families::kIbSymbolError, "leaf-1", 7);
  fabric_.Node("h1", testing::Hca("mlx5_3", "0x0002c90300000001"));
  uint64_t rising = 100;
  for (int i = 0; i < 4; ++i) {
    fabric_.Set("h1", own, 7);
    fabric_.Set("sweeper-b", swept, rising += 4);
    fabric_.Set("sweeper-a", switch_port, 3);
    fabric_.Set("sweeper-b", switch_port, rising);
    fabric_.Step();
    EXPECT_THAT(Active(), ::testing::IsEmpty()) << "a sweeper's copy was judged";
  }
  for (uint64_t errors : {13u, 19u}) {
    fabric_.Set("h1", own, errors);
    fabric_.Step();
  }
  EXPECT_THAT(Active(), ::testing::ElementsAre("link_degraded h1 mlx5_3/1"));
}

// A RoCE port whose sysfs LinkDowned never moves (the driver keeps it for the IB port model) while
// the NIC's link_down_events_phy and the netdev's carrier count two flaps between two reads: a
// counter that never moves hides nothing, and the two that moved count the flaps once.
TEST_F(RoceAndLinkErrorsTest, ACounterThatNeverMovesHidesNoFlapAndWitnessesAreNotSummed) {
  const auto ib_downed = HostCounter(families::kIbLinkDowned, "mlx5_bond_0", 1, 32);
  const auto phy_downs = EthtoolCounter(families::kRoceLinkDownEvents);
  const auto carrier =
      collectors::CounterSeries("netdev", families::kNetdevCarrierDown, "", collectors::Unit::kNone,
                                64, collectors::Overflow::kWraps, 1.0, {{"netdev", "ens1f1"}});
  v1::Inventory inventory;
  v1::RdmaDevice* device = inventory.add_rdma_devices();
  device->set_name("mlx5_bond_0");
  v1::RdmaPort* port = device->add_ports();
  port->set_number(1);
  port->add_netdevs("ens1f1");
  fabric_.Node("r5-gpu2", inventory);
  for (uint64_t downs : {4u, 4u, 5u}) {  // one flap: not flapping yet
    fabric_.Set("r5-gpu2", ib_downed, 0);
    fabric_.Set("r5-gpu2", phy_downs, downs);
    fabric_.Set("r5-gpu2", carrier, downs + 10);
    fabric_.Step();
  }
  EXPECT_THAT(Active(), ::testing::IsEmpty()) << "one flap seen by two witnesses is one flap";
  fabric_.Set("r5-gpu2", ib_downed, 0);
  fabric_.Set("r5-gpu2", phy_downs, 6);
  fabric_.Set("r5-gpu2", carrier, 16);
  fabric_.Step();
  EXPECT_THAT(Active(), ::testing::ElementsAre("link_flapping r5-gpu2 mlx5_bond_0/1"));
}

// Congestion hovering at the threshold is one incident: raised after 2 samples at 10 % paused,
// held at 3 % (above half of 5 %), cleared only after 3 samples below 2.5 %.
TEST_F(RoceAndLinkErrorsTest, CongestionHasHysteresisAndIsRaisedAfterTwoSamples) {
  uint64_t paused_us = 0;
  std::string id;
  auto step = [&](uint64_t per_second_us) {
    paused_us += per_second_us;
    fabric_.Set("r6-gpu1", Pause("rx"), paused_us);
    fabric_.Step();
    return Active();
  };
  step(0);
  EXPECT_THAT(step(100000), ::testing::IsEmpty()) << "one sample at 10 %";
  EXPECT_THAT(step(100000), ::testing::ElementsAre("congestion r6-gpu1 ens1f1/1"));
  id = engine_->tracker().Active()[0].id;
  for (uint64_t fraction : {30000u, 40000u, 100000u, 30000u, 0u, 0u}) {
    EXPECT_THAT(step(fraction), ::testing::ElementsAre("congestion r6-gpu1 ens1f1/1"));
    EXPECT_EQ(engine_->tracker().Active()[0].id, id) << "the same incident";
  }
  EXPECT_THAT(step(0), ::testing::IsEmpty()) << "third sample below half the threshold";
}

TEST(ThresholdsTest, OutOfRangeThresholdsAreRefusedNamingTheField) {
  EXPECT_TRUE(ValidateThresholds(v1::DetectorThresholds()).ok());
  v1::DetectorThresholds t;
  t.set_congestion_fraction(1.5);
  EXPECT_THAT(std::string(ValidateThresholds(t).message()),
              ::testing::HasSubstr("detectors.congestion_fraction must lie in 0..1"));
  t = v1::DetectorThresholds();
  t.set_ecn_ticks(0);
  EXPECT_THAT(std::string(ValidateThresholds(t).message()),
              ::testing::HasSubstr("detectors.ecn_ticks must be at least 1"));
  t = v1::DetectorThresholds();
  t.set_tcp_fallback_min_bytes_per_second(-1);
  EXPECT_FALSE(ValidateThresholds(t).ok());
  t = v1::DetectorThresholds();
  t.set_error_rate_per_second(std::nan(""));
  EXPECT_FALSE(ValidateThresholds(t).ok());
  t = v1::DetectorThresholds();
  t.set_unclaimed_ca_ignore("stor-(");
  EXPECT_THAT(std::string(ValidateThresholds(t).message()),
              ::testing::HasSubstr("detectors.unclaimed_ca_ignore"));
  t = v1::DetectorThresholds();
  t.set_tcp_fallback_min_symmetry(0);
  t.set_error_rate_per_second(0);
  t.set_flap_quiet_s(0);
  EXPECT_TRUE(ValidateThresholds(t).ok()) << "0 is meaningful for these";
}

}  // namespace
}  // namespace fabricmon::detectors
