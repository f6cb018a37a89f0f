// Detector scenarios on a series store filled exactly as ingest fills it, with a fake clock: each
// test states the findings that must appear (kind, subject, root) and that nothing else fires.

#include <algorithm>

#include "daemon/detectors/engine.h"
#include "daemon/detectors/families.h"
#include "daemon/detectors/series_key.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

namespace fabricmon::detectors {
namespace {

using testing::Exported;
using testing::FabricFixture;
using testing::HostCounter;
using testing::HostGauge;
using testing::RaisedIncidents;
using testing::SwitchCounter;

class DetectorsTest : public ::testing::Test {
 protected:
  DetectorsTest() { Reset(); }
  void Reset(v1::DetectorThresholds thresholds = {}) {
    engine_ =
        std::make_unique<DetectionEngine>(fabric_.store(), fabric_.clock(), thresholds, 1000000000);
  }
  std::vector<TrackedFinding> Active() {
    engine_->Tick();
    return engine_->tracker().Active();
  }
  std::vector<std::string> Kinds(const std::vector<TrackedFinding>& findings) {
    std::vector<std::string> kinds;
    for (const auto& f : findings) kinds.push_back(f.finding.kind);
    std::sort(kinds.begin(), kinds.end());
    return kinds;
  }
  FabricFixture fabric_;
  std::unique_ptr<DetectionEngine> engine_;
};

TEST_F(DetectorsTest, TwoLinkDownsInTheWindowAreAFlappingLinkThatClearsAfterQuiet) {
  const auto downed = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  uint64_t value = 3;
  for (int i = 0; i < 3; ++i) {
    fabric_.Set("n1", downed, value);
    fabric_.Step();
  }
  EXPECT_TRUE(Active().empty()) << "a stable non-zero counter is history, not a flap";
  fabric_.Set("n1", downed, ++value);
  fabric_.Step();
  EXPECT_TRUE(Active().empty()) << "one flap is not flapping";
  fabric_.Set("n1", downed, ++value);
  fabric_.Step();
  auto active = Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].finding.kind, "link_flapping");
  EXPECT_EQ(active[0].finding.severity, Severity::kCritical);
  EXPECT_EQ(active[0].finding.subject.ToString(), "n1 mlx5_0/1");
  // Quiet for less than the quiet period: still reported; then it clears.
  for (int i = 0; i < 5; ++i) {
    fabric_.Set("n1", downed, value);
    fabric_.Step(60000);
  }
  EXPECT_EQ(Active().size(), 1u);
  for (int i = 0; i < 6; ++i) {
    fabric_.Set("n1", downed, value);
    fabric_.Step(60000);
  }
  EXPECT_TRUE(Active().empty());
  ASSERT_FALSE(engine_->tracker().Recent().empty());
  EXPECT_NE(engine_->tracker().Recent()[0].cleared_unix_nanos, 0);
}

// The detector looks only at links that saw an event since they were last quiet: one that went
// quiet and was forgotten must be looked at again when it flaps again, every time.
TEST_F(DetectorsTest, ALinkQuietAfterFlappingIsReportedAgainWhenItFlapsAgain) {
  const auto downed = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  uint64_t value = 0;
  auto hold = [&](int samples, int64_t step_ms) {
    for (int i = 0; i < samples; ++i) {
      fabric_.Set("n1", downed, value);
      fabric_.Step(step_ms);
    }
  };
  hold(2, 1000);
  for (int round = 0; round < 3; ++round) {
    for (int flap = 0; flap < 2; ++flap) {
      ++value;
      hold(1, 1000);
    }
    EXPECT_EQ(Kinds(Active()), std::vector<std::string>{"link_flapping"}) << "round " << round;
    hold(12, 60000);  // quiet past the window and the quiet period
    EXPECT_TRUE(Active().empty()) << "round " << round;
    hold(2, 1000);
    EXPECT_TRUE(Active().empty()) << "round " << round;
  }
  EXPECT_EQ(engine_->tracker().Recent().size(), 3u);
}

TEST_F(DetectorsTest, SubIntervalFlapsAreCountedFromTheCounterAlone) {
  const auto downed = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  const auto state = HostGauge(families::kIbPortState, "mlx5_0", 1);
  fabric_.Set("n1", downed, 0);
  fabric_.Set("n1", state, 4);
  fabric_.Step();
  // Two flaps between samples: the state is ACTIVE at every sample.
  fabric_.Set("n1", downed, 2);
  fabric_.Set("n1", state, 4);
  fabric_.Step();
  EXPECT_EQ(Kinds(Active()), std::vector<std::string>{"link_flapping"});
}

TEST_F(DetectorsTest, SaturatedLinkDownedFallsBackToStateTransitions) {
  const auto downed = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  const auto state = HostGauge(families::kIbPortState, "mlx5_0", 1);
  const int states[] = {4, 1, 4, 1, 4};
  for (int s : states) {
    fabric_.Set("n1", downed, 255);  // pinned: increments are invisible
    fabric_.Set("n1", state, s);
    fabric_.Step();
  }
  auto active = Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].finding.kind, "link_flapping");
  EXPECT_NE(active[0].finding.summary.find("saturated"), std::string::npos);
}

TEST_F(DetectorsTest, StateDropCountedByTheCounterIsNotCountedTwice) {
  const auto downed = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  const auto state = HostGauge(families::kIbPortState, "mlx5_0", 1);
  fabric_.Set("n1", downed, 0);
  fabric_.Set("n1", state, 4);
  fabric_.Step();
  fabric_.Set("n1", downed, 1);  // one flap, seen by both
  fabric_.Set("n1", state, 1);
  fabric_.Step();
  fabric_.Set("n1", downed, 1);
  fabric_.Set("n1", state, 4);
  fabric_.Step();
  EXPECT_TRUE(Active().empty());
}

TEST_F(DetectorsTest, ACounterResetIsNotAFlap) {
  const auto downed = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  for (uint64_t v : {7u, 7u, 0u, 0u}) {  // perfquery -R or driver reload
    fabric_.Set("n1", downed, v);
    fabric_.Step();
  }
  EXPECT_TRUE(Active().empty());
}

TEST_F(DetectorsTest, BothCableEndsMakeOneFindingWithThePeer) {
  FABRICMON_ASSERT_OK(engine_->SetLinkList("n1/mlx5_0/1 switch:leaf1/7\n"));
  const auto host = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  const auto sw = SwitchCounter(families::kIbLinkDowned, "leaf1", 7, 8);
  for (uint64_t v : {0u, 1u, 2u}) {
    fabric_.Set("n1", host, v);
    fabric_.Set("sweeper", sw, v);
    fabric_.Step();
  }
  auto active = Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_TRUE(active[0].finding.has_peer);
  const std::string ends =
      active[0].finding.subject.ToString() + " " + active[0].finding.peer.ToString();
  EXPECT_NE(ends.find("n1 mlx5_0/1"), std::string::npos) << ends;
  EXPECT_NE(ends.find("switch leaf1/7"), std::string::npos) << ends;
}

TEST_F(DetectorsTest, RisingSymbolErrorsAreADegradedLink) {
  const auto symbols = HostCounter(families::kIbSymbolError, "mlx5_0", 1, 16);
  const auto healthy = HostCounter(families::kIbSymbolError, "mlx5_1", 1, 16);
  for (uint64_t v : {100u, 104u, 109u, 115u}) {
    fabric_.Set("n1", symbols, v);
    fabric_.Set("n1", healthy, 100);
    fabric_.Step();
  }
  auto active = Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].finding.kind, "link_degraded");
  EXPECT_EQ(active[0].finding.subject.device, "mlx5_0");
}

// A two-tier IB fabric: h1..h3 on leaf1, h5 on leaf2, leaf1 ↔ spine1 ↔ leaf2. h5 is a slow
// receiver: leaf2's port to h5 waits, the spine's port toward leaf2 waits, leaf1's uplink waits
// and so do the senders' HCAs. One spreading tree rooted at leaf2/1, 3 hops deep.
TEST_F(DetectorsTest, CongestionSpreadingTreeHasTheSlowReceiverAtItsRoot) {
  FABRICMON_ASSERT_OK(
      engine_->SetLinkList("h1/mlx5_0/1 switch:leaf1/1\n"
                           "h2/mlx5_0/1 switch:leaf1/2\n"
                           "h3/mlx5_0/1 switch:leaf1/3\n"
                           "h5/mlx5_0/1 switch:leaf2/1\n"
                           "h6/mlx5_0/1 switch:leaf2/2\n"
                           "switch:leaf1/49 switch:spine1/1\n"
                           "switch:leaf2/49 switch:spine1/2\n"));
  struct Port {
    std::string node;
    collectors::SeriesDesc wait;
    collectors::SeriesDesc data;
    bool waiting;
  };
  auto host = [](const std::string& node, bool waiting) {
    return Port{node, HostCounter(families::kIbXmitWait, "mlx5_0", 1, 32),
                HostCounter(families::kIbXmitData, "mlx5_0", 1, 64), waiting};
  };
  auto sw = [](const std::string& name, int port, bool waiting) {
    return Port{"sweeper", SwitchCounter(families::kIbXmitWait, name, port, 32),
                SwitchCounter(families::kIbXmitData, name, port, 64), waiting};
  };
  std::vector<Port> ports = {host("h1", true),       host("h2", true),     host("h3", true),
                             host("h5", false),      host("h6", false),    sw("leaf1", 49, true),
                             sw("spine1", 2, true),  sw("leaf2", 1, true), sw("leaf2", 2, false),
                             sw("spine1", 1, false), sw("leaf1", 1, false)};
  for (int step = 0; step < 3; ++step) {
    for (const Port& port : ports) {
      fabric_.Set(port.node, port.wait, port.waiting ? step * 600000u : 0u);
      fabric_.Set(port.node, port.data, step * 400000u);
    }
    fabric_.Step();
  }
  auto active = Active();
  ASSERT_EQ(Kinds(active), std::vector<std::string>{"congestion_spreading"});
  const Finding& tree = active[0].finding;
  EXPECT_EQ(tree.subject.ToString(), "switch leaf2/1");
  EXPECT_EQ(tree.peer.ToString(), "h5 mlx5_0/1");
  EXPECT_EQ(tree.depth_hops, 3u);
  std::vector<std::string> victims;
  for (const Endpoint& victim : tree.victims) victims.push_back(victim.ToString());
  EXPECT_THAT(victims,
              ::testing::UnorderedElementsAre("switch spine1/2", "switch leaf1/49", "h1 mlx5_0/1",
                                              "h2 mlx5_0/1", "h3 mlx5_0/1"));
  // Diagnose for h2 finds the tree (h2 is a victim); for h6 nothing touches it directly but its
  // switch (leaf2) carries the root.
  v1::DiagnoseResponse h2 = engine_->Diagnose({"h2"});
  ASSERT_EQ(h2.findings_size(), 1);
  EXPECT_EQ(h2.findings(0).kind(), "congestion_spreading");
  v1::DiagnoseResponse unknown = engine_->Diagnose({"nope"});
  EXPECT_EQ(unknown.unknown_nodes_size(), 1);
}

// The hosts are read every second; the fabric sweeper reading the switches lags them (a busy
// sweeper). An incast starts: the senders' HCAs wait for two host samples before the switches'
// ports are seen waiting. They are victims of the tree that then forms, never plain congestion.
TEST_F(DetectorsTest, SendersWaitForALaggingSweepBeforePlainCongestion) {
  FABRICMON_ASSERT_OK(
      engine_->SetLinkList("h1/mlx5_0/1 switch:leaf1/1\n"
                           "h2/mlx5_0/1 switch:leaf1/2\n"
                           "h5/mlx5_0/1 switch:leaf2/1\n"
                           "switch:leaf1/49 switch:spine1/1\n"
                           "switch:leaf2/49 switch:spine1/2\n"));
  const auto host_wait = HostCounter(families::kIbXmitWait, "mlx5_0", 1, 32);
  const auto host_data = HostCounter(families::kIbXmitData, "mlx5_0", 1, 64);
  struct SwitchPort {
    std::string name;
    int port;
  };
  const std::vector<SwitchPort> tree = {{"leaf1", 49}, {"spine1", 2}, {"leaf2", 1}};
  const std::vector<SwitchPort> idle = {{"leaf1", 1}, {"leaf1", 2}, {"spine1", 1}, {"leaf2", 49}};
  uint64_t host_waited = 0;
  uint64_t host_sent = 0;
  uint64_t switch_waited = 0;
  uint64_t switch_sent = 0;
  auto hosts = [&](bool incast) {
    host_waited += incast ? 600000 : 0;
    host_sent += 400000;
    for (const char* sender : {"h1", "h2"}) {
      fabric_.Set(sender, host_wait, host_waited);
      fabric_.Set(sender, host_data, host_sent);
    }
    fabric_.Set("h5", host_wait, 0);
    fabric_.Set("h5", host_data, host_sent);
  };
  // `failed`: the port whose XmitData read failed in this sweep (a MAD timeout), if any.
  auto sweep = [&](bool incast, const std::string& failed = "") {
    switch_waited += incast ? 600000 : 0;
    switch_sent += 400000;
    for (const SwitchPort& port : tree) {
      fabric_.Set("sweeper", SwitchCounter(families::kIbXmitWait, port.name, port.port, 32),
                  switch_waited);
      if (failed != port.name) {
        fabric_.Set("sweeper", SwitchCounter(families::kIbXmitData, port.name, port.port, 64),
                    switch_sent);
      }
    }
    for (const SwitchPort& port : idle) {
      fabric_.Set("sweeper", SwitchCounter(families::kIbXmitWait, port.name, port.port, 32), 0);
      fabric_.Set("sweeper", SwitchCounter(families::kIbXmitData, port.name, port.port, 64),
                  switch_sent);
    }
  };
  for (int step = 0; step < 3; ++step) {  // healthy, both read every second
    hosts(false);
    sweep(false);
    fabric_.Step();
  }
  // The incast starts; the sweep due now and the next one are late (nothing from the sweeper).
  for (int step = 0; step < 3; ++step) {
    hosts(true);
    fabric_.Step();
    EXPECT_TRUE(Active().empty()) << "step " << step << ": the switches are not read yet";
  }
  // The late sweep arrives, still covering mostly the time before the incast, then sweeps
  // resume every second.
  hosts(true);
  sweep(false);
  fabric_.Step();
  EXPECT_TRUE(Active().empty()) << "a sweep that began before the senders waited decides nothing";
  hosts(true);
  sweep(true, "leaf1");
  fabric_.Step();
  // The tree beyond leaf1 is seen already; the senders are not in it yet.
  EXPECT_EQ(Kinds(Active()), std::vector<std::string>{"congestion_spreading"})
      << "leaf1/49 was not judged in this sweep: whether the senders wait on it is unknown";
  for (int step = 0; step < 2; ++step) {
    hosts(true);
    sweep(true);
    fabric_.Step();
  }
  auto active = Active();
  ASSERT_EQ(Kinds(active), std::vector<std::string>{"congestion_spreading"});
  EXPECT_EQ(active[0].finding.subject.ToString(), "switch leaf2/1");
  EXPECT_LE(RaisedIncidents(*engine_, "congestion", "warning"), 0)
      << "no plain congestion finding was ever raised for a sender";
}

// The other side of the same rule: a host port that waits while its swept switch does not is
// plain congestion once the switch has been read since; a sweeper that stopped altogether does
// not hold the finding back for more than four of its intervals.
class LoneWaitingPortTest : public DetectorsTest {
 protected:
  LoneWaitingPortTest() {
    FABRICMON_CHECK(engine_
                        ->SetLinkList("h1/mlx5_0/1 switch:leaf1/1\n"
                                      "h2/mlx5_0/1 switch:leaf1/2\n")
                        .ok());
  }
  // One host sample of h1 (waiting from its first waiting sample on) and, when `swept`, one
  // sweep of leaf1's ports, which never wait.
  void Read(bool waits, bool swept) {
    waited_ += waits ? 600000 : 0;
    fabric_.Set("h1", HostCounter(families::kIbXmitWait, "mlx5_0", 1, 32), waited_);
    fabric_.Set("h1", HostCounter(families::kIbXmitData, "mlx5_0", 1, 64), step_ * 400000u);
    if (swept) {
      for (int port : {1, 2}) {
        fabric_.Set("sweeper", SwitchCounter(families::kIbXmitWait, "leaf1", port, 32), 0);
        fabric_.Set("sweeper", SwitchCounter(families::kIbXmitData, "leaf1", port, 64),
                    step_ * 400000u);
      }
    }
    fabric_.Step();
    ++step_;
  }
  uint64_t waited_ = 0;
  uint64_t step_ = 0;
};

TEST_F(LoneWaitingPortTest, IsRaisedAfterTwoSamplesWhenTheSweepKeepsPace) {
  Read(false, true);
  Read(false, true);
  Read(true, true);
  EXPECT_TRUE(Active().empty());
  Read(true, true);
  EXPECT_EQ(Kinds(Active()), std::vector<std::string>{"congestion"})
      << "two samples, and leaf1 read over an interval since h1 began to wait";
}

TEST_F(LoneWaitingPortTest, IsRaisedWithoutASweeperThatStopped) {
  Read(false, true);
  Read(false, true);
  for (int step = 0; step < 5; ++step) {
    Read(true, false);
    EXPECT_TRUE(Active().empty()) << "step " << step << ": the sweep may still come";
  }
  Read(true, false);
  EXPECT_EQ(Kinds(Active()), std::vector<std::string>{"congestion"})
      << "four of the sweeper's intervals since h1 began to wait: judged without it";
}

TEST_F(DetectorsTest, BusyHealthyTrafficRaisesNothing) {
  const auto wait = HostCounter(families::kIbXmitWait, "mlx5_0", 1, 32);
  const auto data = HostCounter(families::kIbXmitData, "mlx5_0", 1, 64);
  for (int step = 0; step < 4; ++step) {
    fabric_.Set("n1", wait, step * 100u);  // a trickle of waits under heavy traffic
    fabric_.Set("n1", data, step * 10000000u);
    fabric_.Step();
  }
  EXPECT_TRUE(Active().empty());
}

// XmitWait and XmitData are judged over the same interval: when the data read of a port failed
// (its sample is missing from the cycle), fresh wait against stale data is not "100 % waiting".
TEST_F(DetectorsTest, WaitIsJudgedOnlyAgainstDataOfTheSameInterval) {
  const auto wait = HostCounter(families::kIbXmitWait, "mlx5_0", 1, 32);
  const auto data = HostCounter(families::kIbXmitData, "mlx5_0", 1, 64);
  // The first cycle's data read failed: wait has an interval, data has one sample only.
  fabric_.Set("n1", wait, 0u);
  fabric_.Step();
  fabric_.Set("n1", wait, 100u);
  fabric_.Set("n1", data, 10000000u);
  fabric_.Step();
  EXPECT_TRUE(Active().empty());
  // Later a data read fails again: wait's interval has no data interval to match.
  fabric_.Set("n1", wait, 200u);
  fabric_.Set("n1", data, 20000000u);
  fabric_.Step();
  fabric_.Set("n1", wait, 300u);
  fabric_.Step();
  EXPECT_TRUE(Active().empty());

  // Both again, and this time the port really waits: found.
  fabric_.Set("n1", wait, 300u + 9000000u);
  fabric_.Set("n1", data, 20000000u + 1000000u);
  fabric_.Step();
  fabric_.Set("n1", wait, 300u + 18000000u);
  fabric_.Set("n1", data, 20000000u + 2000000u);
  fabric_.Step();
  EXPECT_TRUE(Active().empty()) << "one judged sample: congestion_raise_samples is 2";
  fabric_.Set("n1", wait, 300u + 27000000u);
  fabric_.Set("n1", data, 20000000u + 3000000u);
  fabric_.Step();
  EXPECT_EQ(Kinds(Active()), std::vector<std::string>{"congestion"});
}

collectors::SeriesDesc Pause(const std::string& netdev, const std::string& direction) {
  return collectors::CounterSeries(
      "ethtool", families::kRocePauseDuration, "", collectors::Unit::kSeconds, 64,
      collectors::Overflow::kWraps, 1e-6,
      {{"netdev", netdev}, {"direction", direction}, {"priority", "3"}});
}

TEST_F(DetectorsTest, RocePauseSourcesAndVictimsWithoutTopology) {
  for (int step = 0; step < 3; ++step) {
    fabric_.Set("src", Pause("eth2", "tx"), step * 500000u);  // pauses its switch 50 %
    fabric_.Set("v1", Pause("eth2", "rx"), step * 300000u);   // paused 30 %
    fabric_.Set("v2", Pause("eth2", "rx"), step * 200000u);
    fabric_.Set("ok", Pause("eth2", "rx"), step * 1000u);
    fabric_.Step();
  }
  auto active = Active();
  ASSERT_EQ(Kinds(active), std::vector<std::string>{"congestion_spreading"});
  EXPECT_EQ(active[0].finding.subject.node, "src");
  EXPECT_EQ(active[0].finding.victims.size(), 2u);
}

TEST_F(DetectorsTest, ContinuousPauseIsAPauseStorm) {
  for (int step = 0; step < 5; ++step) {
    fabric_.Set("n1", Pause("eth2", "rx"), step * 990000u);
    fabric_.Step();
  }
  auto kinds = Kinds(Active());
  EXPECT_TRUE(std::count(kinds.begin(), kinds.end(), "pause_storm") == 1) << kinds.size();
}

collectors::SeriesDesc NetdevBytes(const std::string& family, const std::string& netdev) {
  return collectors::CounterSeries("netdev", family, "", collectors::Unit::kBytes, 64,
                                   collectors::Overflow::kWraps, 1.0, {{"netdev", netdev}});
}

collectors::SeriesDesc NetdevInfo(const std::string& netdev, const std::string& kind) {
  return collectors::InfoSeries("netdev", families::kNetdevInfo, "",
                                {{"netdev", netdev}, {"kind", kind}});
}

// The counters of `node` at `step` (one per second): on TCP, 800 MB/s of kernel bytes and no
// RDMA; otherwise 1 MB/s of kernel bytes and 2 GB/s of RDMA (XmitData in 4-byte words).
void NodeTraffic(FabricFixture& fabric, const std::string& node, int step, bool on_tcp) {
  fabric.Set(node, NetdevInfo("eth0", "ethernet"), 1);
  // A collective on sockets sends and receives alike: 400 MB/s each way.
  fabric.Set(node, NetdevBytes(families::kNetdevTxBytes, "eth0"),
             step * (on_tcp ? 400000000ull : 1000000ull));
  fabric.Set(node, NetdevBytes(families::kNetdevRxBytes, "eth0"),
             step * (on_tcp ? 400000000ull : 1000000ull));
  fabric.Set(
      node,
      HostCounter(families::kIbXmitData, "mlx5_0", 1, 64, collectors::Overflow::kSaturates, 4.0),
      step * (on_tcp ? 0ull : 500000000ull));
}

collectors::SeriesDesc GpuUtilization() {
  return collectors::GaugeSeries("nvml", families::kGpuUtilization, "", collectors::Unit::kRatio,
                                 0.01, {{"gpu", "0"}});
}

// A job restarted on sockets: the node moved RDMA traffic itself a minute ago, and now moves as
// much through the kernel, both ways. Its peers' RDMA alone would not have qualified it.
TEST_F(DetectorsTest, ANodeThatMovedRdmaAndNowUsesKernelTcpIsAFallback) {
  for (int step = 0; step < 4; ++step) {
    for (const char* node : {"n1", "n2", "n3", "n4"}) {
      NodeTraffic(fabric_, node, step, /*on_tcp=*/false);
    }
    fabric_.Step();
    engine_->Tick();
  }
  EXPECT_TRUE(Active().empty());
  uint64_t rdma_words = 3 * 500000000ull;
  for (int step = 4; step < 8; ++step) {
    for (const char* node : {"n1", "n2", "n4"}) {
      NodeTraffic(fabric_, node, step, /*on_tcp=*/false);
    }
    fabric_.Set("n3", NetdevInfo("eth0", "ethernet"), 1);
    fabric_.Set("n3", NetdevBytes(families::kNetdevTxBytes, "eth0"), (step - 3) * 400000000ull);
    fabric_.Set("n3", NetdevBytes(families::kNetdevRxBytes, "eth0"), (step - 3) * 400000000ull);
    fabric_.Set(
        "n3",
        HostCounter(families::kIbXmitData, "mlx5_0", 1, 64, collectors::Overflow::kSaturates, 4.0),
        rdma_words);
    fabric_.Step();
    engine_->Tick();
  }
  auto active = Active();
  ASSERT_EQ(Kinds(active), std::vector<std::string>{"tcp_fallback"});
  EXPECT_EQ(active[0].finding.subject.node, "n3");
  EXPECT_THAT(active[0].finding.summary, ::testing::HasSubstr("although it moved RDMA traffic"));
}

// No finding without its preconditions, while busy GPU nodes move RDMA beside them: a storage
// node without RDMA hardware moving 800 MB/s two-way; a GPU node writing a checkpoint (one way)
// with busy GPUs; an idle GPU node (no GPU work, no RDMA lately) receiving a dataset both ways.
// And the positive control: a GPU node with busy GPUs exchanging over kernel TCP.
TEST_F(DetectorsTest, TcpFallbackNeedsRdmaHardwareAndGpuWorkOrRdmaHistoryAndTwoWayTraffic) {
  for (int step = 0; step < 5; ++step) {
    for (const char* node : {"gpu1", "gpu2", "gpu3"}) {
      NodeTraffic(fabric_, node, step, /*on_tcp=*/false);
      fabric_.Set(node, GpuUtilization(), 95);
    }
    // Storage: kernel bytes only, both ways, no HCA.
    fabric_.Set("stor1", NetdevInfo("eth0", "ethernet"), 1);
    fabric_.Set("stor1", NetdevBytes(families::kNetdevTxBytes, "eth0"), step * 400000000ull);
    fabric_.Set("stor1", NetdevBytes(families::kNetdevRxBytes, "eth0"), step * 400000000ull);
    // Checkpoint: 1 GB/s out, 5 MB/s in, GPUs busy, RDMA idle meanwhile.
    fabric_.Set("ckpt1", NetdevInfo("eth0", "ethernet"), 1);
    fabric_.Set("ckpt1", NetdevBytes(families::kNetdevTxBytes, "eth0"), step * 1000000000ull);
    fabric_.Set("ckpt1", NetdevBytes(families::kNetdevRxBytes, "eth0"), step * 5000000ull);
    fabric_.Set(
        "ckpt1",
        HostCounter(families::kIbXmitData, "mlx5_0", 1, 64, collectors::Overflow::kSaturates, 4.0),
        0);
    fabric_.Set("ckpt1", GpuUtilization(), 90);
    // Idle GPU node: GPUs at 0, no RDMA ever, kernel traffic both ways.
    NodeTraffic(fabric_, "idle1", step, /*on_tcp=*/true);
    fabric_.Set("idle1", GpuUtilization(), 0);
    // The real thing.
    NodeTraffic(fabric_, "gpu4", step, /*on_tcp=*/true);
    fabric_.Set("gpu4", GpuUtilization(), 97);
    fabric_.Step();
    engine_->Tick();
  }
  auto active = Active();
  ASSERT_EQ(Kinds(active), std::vector<std::string>{"tcp_fallback"});
  EXPECT_EQ(active[0].finding.subject.node, "gpu4");
  EXPECT_EQ(active[0].finding.severity, Severity::kCritical);
}

// Thresholds are configurable, 0 included where it means something: with
// tcp_fallback_min_symmetry 0 the checkpoint-shaped traffic of a GPU node counts.
TEST_F(DetectorsTest, TcpFallbackSymmetryCanBeTurnedOff) {
  v1::DetectorThresholds thresholds;
  thresholds.set_tcp_fallback_min_symmetry(0);
  Reset(thresholds);
  for (int step = 0; step < 5; ++step) {
    fabric_.Set("ckpt1", NetdevInfo("eth0", "ethernet"), 1);
    fabric_.Set("ckpt1", NetdevBytes(families::kNetdevTxBytes, "eth0"), step * 1000000000ull);
    fabric_.Set(
        "ckpt1",
        HostCounter(families::kIbXmitData, "mlx5_0", 1, 64, collectors::Overflow::kSaturates, 4.0),
        0);
    fabric_.Set("ckpt1", GpuUtilization(), 90);
    fabric_.Step();
    engine_->Tick();
  }
  EXPECT_EQ(Kinds(Active()), std::vector<std::string>{"tcp_fallback"});
}

v1::Inventory GpuProcesses(std::vector<uint32_t> pids) {
  v1::Inventory inventory;
  v1::Gpu* gpu = inventory.add_gpus();
  gpu->set_index(0);
  for (uint32_t pid : pids) gpu->add_compute_pids(pid);
  return inventory;
}

collectors::SeriesDesc ProcessQps(uint32_t pid) {
  return collectors::GaugeSeries(
      "rdma_qp", families::kRdmaProcessQps, "", collectors::Unit::kNone, 1.0,
      {{"pid", std::to_string(pid)}, {"comm", "python3"}, {"device", "mlx5_0"}, {"type", "rc"}});
}

collectors::SeriesDesc QpProcessesDropped() {
  return collectors::GaugeSeries("rdma_qp", families::kRdmaQpProcessesDropped, "",
                                 collectors::Unit::kNone, 1.0, {});
}

collectors::SeriesDesc QpSeesAllProcesses() {
  return collectors::GaugeSeries("rdma_qp", families::kRdmaQpSeesAllProcesses, "",
                                 collectors::Unit::kNone, 1.0, {});
}

TEST_F(DetectorsTest, GpuProcessesOwningNoQueuePairsAreEnoughToCallAFallback) {
  // n1: its GPU process 4242 owns no QP (another process does): a fallback on this alone.
  // n2: the same traffic without a QP inventory: nothing to corroborate it.
  // n3: the QP listing left a process out (max_processes): absence proves nothing.
  // n4: the agent runs without the host's PID namespace (a DaemonSet without hostPID): the kernel
  // hides the GPU process's QPs from it, so absence proves nothing either.
  for (const char* node : {"n1", "n2", "n3", "n4"}) {
    fabric_.Node(node, GpuProcesses({4242}));
  }
  for (int step = 0; step < 4; ++step) {
    for (const char* node : {"n1", "n2", "n3", "n4"}) {  // no peers, no GPU utilization series
      NodeTraffic(fabric_, node, step, /*on_tcp=*/true);
    }
    fabric_.Set("n1", ProcessQps(999), 3);
    fabric_.Set("n1", QpProcessesDropped(), 0);
    fabric_.Set("n1", QpSeesAllProcesses(), 1);
    fabric_.Set("n3", ProcessQps(999), 3);
    fabric_.Set("n3", QpProcessesDropped(), 1);
    fabric_.Set("n3", QpSeesAllProcesses(), 1);
    fabric_.Set("n4", ProcessQps(999), 3);
    fabric_.Set("n4", QpProcessesDropped(), 0);
    fabric_.Set("n4", QpSeesAllProcesses(), 0);
    fabric_.Step();
    engine_->Tick();
  }
  auto active = Active();
  ASSERT_EQ(Kinds(active), std::vector<std::string>{"tcp_fallback"});
  const Finding& finding = active[0].finding;
  EXPECT_EQ(finding.subject.node, "n1");
  EXPECT_EQ(finding.severity, Severity::kCritical);
  EXPECT_THAT(finding.summary, ::testing::HasSubstr("GPU process 4242 owns no RDMA queue pairs"));
  EXPECT_TRUE(std::any_of(finding.evidence.begin(), finding.evidence.end(), [](const auto& e) {
    return e.series == families::kRdmaProcessQps &&
           e.labels == std::vector<std::string>{"pid=4242"};
  }));
}

TEST_F(DetectorsTest, GpuProcessesOwningQueuePairsMakeTheFallbackOnlyAWarning) {
  fabric_.Node("n3", GpuProcesses({77, 78}));
  for (int step = 0; step < 4; ++step) {
    for (const char* node : {"n1", "n2", "n3", "n4"}) {
      NodeTraffic(fabric_, node, step, /*on_tcp=*/std::string(node) == "n3");
    }
    fabric_.Set("n3", GpuUtilization(), 80);
    fabric_.Set("n3", ProcessQps(77), 8);
    fabric_.Set("n3", ProcessQps(78), 8);
    fabric_.Set("n3", QpProcessesDropped(), 0);
    fabric_.Set("n3", QpSeesAllProcesses(), 1);
    fabric_.Step();
    engine_->Tick();
  }
  auto active = Active();
  ASSERT_EQ(Kinds(active), std::vector<std::string>{"tcp_fallback"});
  const Finding& finding = active[0].finding;
  EXPECT_EQ(finding.subject.node, "n3");
  EXPECT_EQ(finding.severity, Severity::kWarning);
  EXPECT_THAT(finding.summary, ::testing::HasSubstr("GPU processes 77, 78 own RDMA queue pairs"));
}

TEST_F(DetectorsTest, NvlinkGoingInactiveIsDownAndErrorsAreDegraded) {
  auto state = [](int link) {
    return collectors::GaugeSeries("nvml", families::kNvlinkState, "", collectors::Unit::kState,
                                   1.0, {{"gpu", "0"}, {"link", std::to_string(link)}});
  };
  const auto crc = collectors::CounterSeries(
      "nvml", families::kNvlinkErrors, "", collectors::Unit::kNone, 64,
      collectors::Overflow::kWraps, 1.0, {{"gpu", "1"}, {"link", "2"}, {"type", "crc_flit"}});
  for (int step = 0; step < 3; ++step) {
    fabric_.Set("n1", state(0), 1);
    fabric_.Set("n1", state(1), step < 2 ? 1 : 0);  // goes down at step 2
    fabric_.Set("n1", state(2), 0);                 // never up: not "down"
    fabric_.Set("n1", crc, step * 50u);
    fabric_.Step();
  }
  auto active = Active();
  ASSERT_EQ(Kinds(active), (std::vector<std::string>{"nvlink_degraded", "nvlink_down"}));
  for (const auto& tracked : active) {
    if (tracked.finding.kind == "nvlink_down") {
      EXPECT_EQ(tracked.finding.subject.ToString(), "n1 gpu0 link1");
    } else {
      EXPECT_EQ(tracked.finding.subject.ToString(), "n1 gpu1 link2");
    }
  }
}

TEST(SeriesStatesTest, AnEntryLeftByAnotherSerialStartsFresh) {
  const SeriesKey first{0, 1}, other{3, 2}, unused{1, 9}, next_owner{0, 4};
  SeriesStates<int64_t> states;
  states[first] = 10;
  states[other] = 30;
  EXPECT_EQ(states[first], 10);
  EXPECT_EQ(states[other], 30);
  EXPECT_EQ(states[unused], 0) << "a slot never used";
  EXPECT_EQ(states[next_owner], 0) << "slot 0 given to another series";
  EXPECT_EQ(states[first], 0) << "and its first owner, back, starts fresh too";
}

// A node attached to `store` as a stream attaches it (nullptr if refused).
std::shared_ptr<store::NodeState> AttachNode(store::SeriesStore& store, const char* name) {
  v1::Hello hello;
  hello.set_node_name(name);
  hello.set_boot_id("boot");
  static uint64_t stream = 0;
  auto attached = store.Attach(
      hello, ++stream, [] {}, 1);
  return attached.ok() ? attached->node : nullptr;
}

// The keys of one node's series, looked up through `cache` from a visitor (as detectors do).
std::vector<SeriesKey> KeysOf(SeriesCache& cache, const store::NodeState& node,
                              absl::string_view family) {
  std::vector<SeriesKey> keys;
  node.VisitFamily(family,
                   [&](const store::Series& series) { keys.push_back(cache.KeyOf(series)); });
  return keys;
}

TEST(SeriesCacheTest, KeepsOneStatePerSeriesOfEveryNodeWhateverTheLookupOrder) {
  // The same series (name and labels, so the same fingerprint) on two nodes: two keys.
  store::SeriesStore store(testing::StoreKeeping(4, 100));
  const auto desc = HostCounter(families::kIbSymbolError, "mlx5_0", 1);
  const auto other = HostCounter(families::kIbSymbolError, "mlx5_1", 1);
  std::vector<std::shared_ptr<store::NodeState>> nodes;
  for (const char* name : {"n1", "n2"}) {
    nodes.push_back(AttachNode(store, name));
    ASSERT_NE(nodes.back(), nullptr);
    for (const auto& declared : {desc, other}) {
      ASSERT_TRUE(nodes.back()->Declare(declared).ok());
    }
  }
  SeriesCache cache;
  cache.StartTick();
  std::vector<SeriesKey> keys = KeysOf(cache, *nodes[1], families::kIbSymbolError);
  for (const SeriesKey& key : KeysOf(cache, *nodes[0], families::kIbSymbolError)) {
    keys.push_back(key);
  }
  ASSERT_EQ(keys.size(), 4u);
  EXPECT_EQ(cache.series(), 4u);
  SeriesStates<int64_t> states;
  states[keys[0]] = 1;
  states[keys[2]] = 2;
  states[keys[1]] = 3;
  states[keys[0]] += 10;
  states[keys[2]] += 20;
  EXPECT_EQ(states[keys[0]], 11);
  EXPECT_EQ(states[keys[2]], 22);
  EXPECT_EQ(states[keys[1]], 3);
  EXPECT_EQ(states[keys[3]], 0);

  // Another cache (the diagnostics' traffic reader) overwrites the series' memos: this cache
  // finds the same keys, the same state, at the next tick.
  SeriesCache reader;
  reader.StartTick();
  for (const auto& node : nodes) {
    for (const SeriesKey& key : KeysOf(reader, *node, families::kIbSymbolError)) {
      EXPECT_TRUE(std::find(keys.begin(), keys.end(), key) == keys.end());
    }
  }
  cache.StartTick();
  std::vector<SeriesKey> again = KeysOf(cache, *nodes[1], families::kIbSymbolError);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0], keys[0]);
  EXPECT_EQ(again[0].slot, keys[0].slot);
  EXPECT_EQ(states[again[0]], 11);
  EXPECT_EQ(states[again[1]], 3);
  EXPECT_EQ(cache.series(), 4u);
}

// A series not looked up for a sweep period (retired, its netdev gone, its family no longer
// read) is forgotten: its slot goes to the next new series, and the series itself, if it comes
// back, starts fresh.
TEST(SeriesCacheTest, ForgetsSeriesNotLookedUpForASweepPeriod) {
  store::SeriesStore store(testing::StoreKeeping(4, 100));
  std::shared_ptr<store::NodeState> node_state = AttachNode(store, "n1");
  ASSERT_NE(node_state, nullptr);
  ASSERT_TRUE(node_state->Declare(HostCounter(families::kIbSymbolError, "mlx5_0", 1)).ok());
  ASSERT_TRUE(node_state->Declare(HostCounter(families::kIbLinkDowned, "mlx5_0", 1)).ok());
  const store::NodeState& node = *node_state;

  SeriesCache cache;
  SeriesStates<int64_t> states;
  cache.StartTick();
  const SeriesKey kept = KeysOf(cache, node, families::kIbSymbolError).at(0);
  const SeriesKey gone = KeysOf(cache, node, families::kIbLinkDowned).at(0);
  states[kept] = 10;
  states[gone] = 20;
  for (uint32_t tick = 1; tick < 2 * SeriesCache::kSweepEveryTicks; ++tick) {
    cache.StartTick();
    const SeriesKey key = KeysOf(cache, node, families::kIbSymbolError).at(0);
    EXPECT_EQ(key, kept);
    EXPECT_EQ(states[key], 10);
  }
  EXPECT_EQ(cache.series(), 1u);
  const SeriesKey back = KeysOf(cache, node, families::kIbLinkDowned).at(0);
  EXPECT_NE(back, gone);
  EXPECT_EQ(back.slot, gone.slot) << "the freed slot is given again";
  EXPECT_EQ(states[back], 0) << "a series that comes back starts fresh";
  EXPECT_EQ(cache.series(), 2u);
}

// Detectors keep each series' canonical port from tick to tick; a topology change is seen at
// the next tick. A CA port swept from the fabric is the fabric CA's until a node claims that HCA,
// and that node's port from then on.
TEST_F(DetectorsTest, ASweptCaPortBecomesItsNodesPortWhenTheNodeClaimsTheHca) {
  const auto swept = collectors::CounterSeries(
      "ib_fabric", families::kIbSymbolError, "", collectors::Unit::kNone, 16,
      collectors::Overflow::kSaturates, 1.0,
      {{"ca", "gpu-host HCA-1"}, {"ca_guid", "0x0002c90300000001"}, {"port", "1"}});
  uint64_t errors = 100;
  auto sweep = [&](int samples) {
    for (int i = 0; i < samples; ++i) {
      fabric_.Set("sweeper", swept, errors += 5);
      fabric_.Step();
    }
  };
  sweep(4);
  auto active = Active();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].finding.kind, "link_degraded");
  EXPECT_EQ(active[0].finding.subject.node, "ca:gpu-host HCA-1");

  fabric_.Node("h1", testing::Hca("mlx5_3", "0x0002c90300000001"));
  sweep(4);
  bool moved = false;
  for (const TrackedFinding& tracked : Active()) {
    if (tracked.finding.kind == "link_degraded" && tracked.finding.subject.node == "h1") {
      EXPECT_EQ(tracked.finding.subject.device, "mlx5_3");
      moved = true;
    }
  }
  EXPECT_TRUE(moved) << "the swept port still reads as the fabric CA's after h1 claimed the HCA";
}

// SeriesCache interns ports: series of one port share one, numbered from 0 and knowing the other
// end of their cable; ResetPorts (a new topology) builds anew.
TEST(SeriesCacheTest, InternsOnePortPerEndpointAndForgetsThemAtReset) {
  store::SeriesStore store(testing::StoreKeeping(4, 100));
  std::shared_ptr<store::NodeState> node_state = AttachNode(store, "n1");
  ASSERT_NE(node_state, nullptr);
  for (const char* family : {families::kIbSymbolError, families::kIbLinkDowned}) {
    ASSERT_TRUE(node_state->Declare(HostCounter(family, "mlx5_0", 1)).ok());
  }
  ASSERT_TRUE(node_state->Declare(HostCounter(families::kIbSymbolError, "mlx5_1", 1)).ok());
  std::vector<const store::Series*> series;
  for (const char* family : {families::kIbSymbolError, families::kIbLinkDowned}) {
    node_state->VisitFamily(family, [&](const store::Series& s) { series.push_back(&s); });
  }
  ASSERT_EQ(series.size(), 3u);
  auto device_of = [](const store::Series* s) {
    return std::string(collectors::LabelValue(s->desc, "device"));
  };
  // mlx5_0's two series, then mlx5_1's.
  std::stable_sort(series.begin(), series.end(),
                   [&](const auto* a, const auto* b) { return device_of(a) < device_of(b); });

  CableGraph graph;
  ASSERT_TRUE(graph.AddLinkList("n1/mlx5_0/1 switch:leaf01/7\n").ok());
  SeriesCache ports;
  ports.StartTick();
  const Port& first = ports.PortOf("n1", *series[0], graph);
  EXPECT_EQ(first.endpoint.ToString(), "n1 mlx5_0/1");
  EXPECT_EQ(first.index, 0u);
  ASSERT_TRUE(first.peer.has_value());
  EXPECT_EQ(first.peer->ToString(), "switch leaf01/7");
  EXPECT_EQ(&ports.PortOf("n1", *series[1], graph), &first);
  EXPECT_EQ(&ports.PortOf("n1", *series[0], graph), &first);
  const Port& second = ports.PortOf("n1", *series[2], graph);
  EXPECT_EQ(second.endpoint.ToString(), "n1 mlx5_1/1");
  EXPECT_EQ(second.index, 1u);
  EXPECT_FALSE(second.peer.has_value());
  EXPECT_EQ(ports.ports(), 2u);

  // Another cache (another engine) over the same series overwrites their memos; each still
  // answers from its own ports.
  SeriesCache other;
  other.StartTick();
  EXPECT_EQ(other.PortOf("n1", *series[0], graph).endpoint.ToString(), "n1 mlx5_0/1");
  EXPECT_NE(&other.PortOf("n1", *series[0], graph), &first);
  EXPECT_EQ(&ports.PortOf("n1", *series[0], graph), &first);
  EXPECT_EQ(ports.ports(), 2u);

  const uint32_t epoch = ports.port_epoch();
  ports.ResetPorts();
  EXPECT_NE(ports.port_epoch(), epoch);
  EXPECT_EQ(ports.ports(), 0u);
  const Port& again = ports.PortOf("n1", *series[2], graph);
  EXPECT_EQ(again.endpoint.ToString(), "n1 mlx5_1/1");
  EXPECT_EQ(again.index, 0u);
  EXPECT_EQ(ports.ports(), 1u);
}

// One reporter is judged per port: the port's own node wherever it reports it, else the smallest
// node name, whatever order they were offered in.
TEST(ReporterChoiceTest, JudgesThePortsOwnNodeElseTheSmallestName) {
  Port own;
  own.endpoint.node = "h1";
  own.endpoint.device = "mlx5_0";
  own.endpoint.port = 1;
  own.index = 0;
  Port swept;
  swept.endpoint.node = "leaf01";
  swept.endpoint.is_switch = true;
  swept.endpoint.port = 7;
  swept.index = 3;
  Port unoffered;
  unoffered.index = 9;
  const std::string h1 = "h1", sweeper_a = "sweeper-a", sweeper_b = "sweeper-b";
  for (bool reversed : {false, true}) {
    ReporterChoice reporters;
    std::vector<const std::string*> order = {&sweeper_b, &h1, &sweeper_a};
    if (reversed) std::reverse(order.begin(), order.end());
    for (const std::string* node : order) {
      reporters.Offer(own, *node);
      if (node != &h1) reporters.Offer(swept, *node);
    }
    EXPECT_TRUE(reporters.Judges(own, h1));
    EXPECT_FALSE(reporters.Judges(own, sweeper_a));
    EXPECT_FALSE(reporters.Judges(own, sweeper_b));
    EXPECT_TRUE(reporters.Judges(swept, sweeper_a));
    EXPECT_FALSE(reporters.Judges(swept, sweeper_b));
    // A port nobody offered: whoever reports it is judged.
    EXPECT_TRUE(reporters.Judges(unoffered, sweeper_b));
  }
}

// ByNode finds each node's entry whether the node was the last one asked or not.
TEST(ByNodeTest, KeepsOneEntryPerNodeInAnyOrder) {
  ByNode<int> counts;
  for (const char* node : {"n2", "n2", "n1", "n2", "n10", "n1", "n1"}) {
    ++counts[node];
  }
  std::vector<std::pair<std::string, int>> entries(counts.entries().begin(),
                                                   counts.entries().end());
  EXPECT_EQ(entries, (std::vector<std::pair<std::string, int>>{{"n1", 3}, {"n10", 1}, {"n2", 3}}));
}

// Per-node detector state of a node the store forgot is dropped; the held nodes keep theirs.
TEST(ForgetNodesNotInTest, DropsTheNodesTheViewDoesNotHold) {
  store::SeriesStore store(testing::StoreKeeping(4, 100));
  std::vector<std::shared_ptr<store::NodeState>> nodes;
  for (const char* name : {"n1", "n2"}) {
    v1::Hello hello;
    hello.set_node_name(name);
    hello.set_boot_id(std::string("boot-") + name);
    auto attached = store.Attach(
        hello, nodes.size() + 1, [] {}, 1);
    ASSERT_TRUE(attached.ok());
    nodes.push_back(attached->node);
  }
  const CableGraph graph;
  const FabricView view(nodes, graph, 1);
  std::map<std::string, int> state = {{"n1", 1}, {"gone", 2}, {"n2", 3}, {"n10", 4}};
  ForgetNodesNotIn(view, state);
  EXPECT_EQ(state, (std::map<std::string, int>{{"n1", 1}, {"n2", 3}}));
}

TEST_F(DetectorsTest, FindingsAreExportedAsMetrics) {
  // Before any finding every kind's counter is there at 0 (increase() sees the first one).
  auto raised = [&](const std::string& kind, const std::string& severity) {
    return testing::RaisedIncidents(*engine_, kind, severity);
  };
  for (const char* kind : kFindingKinds) {
    EXPECT_EQ(raised(kind, "warning"), 0) << kind;
    EXPECT_EQ(raised(kind, "critical"), 0) << kind;
  }
  const auto downed = HostCounter(families::kIbLinkDowned, "mlx5_0", 1, 8);
  for (uint64_t v : {0u, 1u, 2u}) {
    fabric_.Set("n1", downed, v);
    fabric_.Step();
  }
  engine_->Tick();
  bool found = false;
  for (const auto& family : Exported(*engine_)) {
    if (family.name == "fabricmon_finding_active") {
      ASSERT_EQ(family.metric.size(), 1u);
      found = true;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(raised("link_flapping", "critical"), 1);
  EXPECT_EQ(raised("link_flapping", "warning"), 0);
}

}  // namespace
}  // namespace fabricmon::detectors
