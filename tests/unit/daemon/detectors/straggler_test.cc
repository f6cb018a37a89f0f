// The straggler detector on a series store filled as ingest fills it, with a fake clock: one node
// of a registered job that falls behind its peers is reported — after it kept pace (a rail at half
// rate mid-job), on kernel TCP, or with its port held back — and uneven but healthy jobs (pipeline
// stages, a parameter server) stay quiet, as do idle jobs, small jobs and unregistered nodes.

#include "daemon/detectors/straggler.h"

#include <algorithm>
#include <map>

#include "daemon/detectors/engine.h"
#include "daemon/detectors/families.h"
#include "daemon/detectors/node_traffic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

namespace fabricmon::detectors {
namespace {

using testing::FabricFixture;
using ::testing::HasSubstr;
using testing::HostCounter;

// What a node does during one second.
struct Load {
  double rdma = 2e9;         // RDMA bytes/s, half each way
  double kernel = 2e6;       // kernel netdev bytes/s, half each way
  double wait_fraction = 0;  // XmitWait / (XmitWait + XmitData)
  uint64_t gpu_percent = 95;
};

collectors::SeriesDesc Netdev(const char* family) {
  return collectors::CounterSeries("netdev", family, "", collectors::Unit::kBytes, 64,
                                   collectors::Overflow::kWraps, 1.0, {{"netdev", "eth0"}});
}

// The registered jobs as the detector sees them (the aggregator's JobRegistry in production).
class FakeJobs final : public JobsProvider {
 public:
  std::vector<v1::Job> Jobs() const override {
    std::vector<v1::Job> jobs;
    for (const auto& [name, job] : jobs_) jobs.push_back(job);
    return jobs;
  }
  void Start(const std::string& name, std::vector<std::string> nodes) {
    std::sort(nodes.begin(), nodes.end());
    v1::Job& job = jobs_[name];
    job.set_name(name);
    job.clear_nodes();
    for (const std::string& node : nodes) job.add_nodes(node);
  }
  bool End(const std::string& name) { return jobs_.erase(name) == 1; }

 private:
  std::map<std::string, v1::Job> jobs_;
};

class StragglerTest : public ::testing::Test {
 protected:
  StragglerTest() { Reset(); }

  void Reset(const v1::DetectorThresholds& thresholds = {}) {
    engine_ =
        std::make_unique<DetectionEngine>(fabric_.store(), fabric_.clock(), thresholds, 1000000000);
    engine_->AddDetector(
        std::make_unique<StragglerDetector>(StragglerOptionsFrom(thresholds), jobs_));
  }

  void StartJob(const std::string& name, const std::vector<std::string>& nodes) {
    jobs_.Start(name, nodes);
  }

  // One second of every node's load, then a detector tick.
  void Step(const std::map<std::string, Load>& loads) {
    for (const auto& [node, load] : loads) {
      Counters& c = counters_[node];
      const double words = load.rdma / 2 / 4;
      c.xmit_words += static_cast<uint64_t>(words);
      c.rcv_words += static_cast<uint64_t>(words);
      c.wait += static_cast<uint64_t>(
          load.wait_fraction >= 1 ? 0 : words * load.wait_fraction / (1 - load.wait_fraction));
      c.kernel += static_cast<uint64_t>(load.kernel / 2);
      fabric_.Set(node,
                  HostCounter(families::kIbXmitData, "mlx5_0", 1, 64,
                              collectors::Overflow::kSaturates, 4.0),
                  c.xmit_words);
      fabric_.Set(
          node,
          HostCounter(families::kIbRcvData, "mlx5_0", 1, 64, collectors::Overflow::kSaturates, 4.0),
          c.rcv_words);
      fabric_.Set(node, HostCounter(families::kIbXmitWait, "mlx5_0", 1), c.wait);
      fabric_.Set(node,
                  collectors::InfoSeries("netdev", families::kNetdevInfo, "",
                                         {{"netdev", "eth0"}, {"kind", "ethernet"}}),
                  1);
      fabric_.Set(node, Netdev(families::kNetdevTxBytes), c.kernel);
      fabric_.Set(node, Netdev(families::kNetdevRxBytes), c.kernel);
      fabric_.Set(node,
                  collectors::GaugeSeries("nvml", families::kGpuUtilization, "",
                                          collectors::Unit::kRatio, 0.01, {{"gpu", "0"}}),
                  load.gpu_percent);
    }
    fabric_.Step();
    engine_->Tick();
  }

  // `n` nodes named prefix1..prefixN, each with `load`.
  static std::map<std::string, Load> Uniform(const std::string& prefix, int n, Load load = {}) {
    std::map<std::string, Load> loads;
    for (int i = 1; i <= n; ++i) loads[prefix + std::to_string(i)] = load;
    return loads;
  }
  static std::vector<std::string> Names(const std::map<std::string, Load>& loads) {
    std::vector<std::string> names;
    for (const auto& [name, load] : loads) names.push_back(name);
    return names;
  }

  std::vector<Finding> Stragglers() {
    std::vector<Finding> found;
    for (const TrackedFinding& tracked : engine_->tracker().Active()) {
      if (tracked.finding.kind == "straggler") found.push_back(tracked.finding);
    }
    return found;
  }

  struct Counters {
    uint64_t xmit_words = 0, rcv_words = 0, wait = 0, kernel = 0;
  };
  FabricFixture fabric_;
  FakeJobs jobs_;
  std::unique_ptr<DetectionEngine> engine_;
  std::map<std::string, Counters> counters_;
};

// A rail drops to half rate mid-job: the node kept pace for a minute, then moves half of what its
// peers move. Reported within 3 samples of the drop, with the metric, its value and the peers'
// median; cleared when the rail recovers.
TEST_F(StragglerTest, ANodeThatFallsToHalfRateMidJobIsTheStraggler) {
  auto loads = Uniform("gpu", 8);
  StartJob("1234", Names(loads));
  for (int i = 0; i < 10; ++i) Step(loads);
  EXPECT_TRUE(Stragglers().empty());
  loads["gpu5"].rdma = 1e9;
  int samples = 0;
  while (Stragglers().empty() && samples < 10) {
    Step(loads);
    ++samples;
  }
  EXPECT_LE(samples, 3) << "detected within 3 sampling intervals";
  auto found = Stragglers();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].subject.node, "gpu5");
  EXPECT_EQ(found[0].severity, Severity::kWarning);
  EXPECT_THAT(found[0].summary, HasSubstr("job 1234"));
  EXPECT_THAT(found[0].summary, HasSubstr("kept pace"));
  ASSERT_FALSE(found[0].evidence.empty());
  EXPECT_EQ(found[0].evidence[0].series, "rdma_bytes_per_second");
  EXPECT_NEAR(found[0].evidence[0].rate_per_second, 1e9, 1e7) << "the node's value";
  EXPECT_NEAR(found[0].evidence[0].value, 2e9, 2e7) << "the peers' median";
  // It stays reported while the fault lasts (its baseline is not overwritten by the fault).
  for (int i = 0; i < 60; ++i) Step(loads);
  EXPECT_EQ(Stragglers().size(), 1u);
  loads["gpu5"].rdma = 2e9;
  for (int i = 0; i < 4; ++i) Step(loads);
  EXPECT_TRUE(Stragglers().empty());
}

// A node slowed to about the threshold: its samples' noise puts it at 0.6 and 0.75 of its peers
// by turns (two samples each). One incident, raised once and held until it is back at pace — not
// a finding raised and cleared with every other pair of samples.
TEST_F(StragglerTest, ANodeAtAboutTheThresholdIsOneIncident) {
  auto loads = Uniform("gpu", 8);
  StartJob("noisy", Names(loads));
  for (int i = 0; i < 6; ++i) Step(loads);
  int raised = 0;
  bool active = false;
  for (int i = 0; i < 40; ++i) {
    loads["gpu3"].rdma = (i / 2) % 2 == 0 ? 1.2e9 : 1.5e9;
    Step(loads);
    const bool now = !Stragglers().empty();
    raised += now && !active;
    active = now;
  }
  EXPECT_EQ(raised, 1);
  EXPECT_TRUE(active) << "still slow: still reported";
  // Back at 0.8 of its peers: still below the clearing ratio (0.85), still the straggler.
  loads["gpu3"].rdma = 1.6e9;
  for (int i = 0; i < 4; ++i) Step(loads);
  EXPECT_EQ(Stragglers().size(), 1u);
  loads["gpu3"].rdma = 1.9e9;
  for (int i = 0; i < 3; ++i) Step(loads);
  EXPECT_TRUE(Stragglers().empty());
}

// A rail at half rate whose samples read at pace now and then (a 0.5 s rate is noisy): two slow
// samples of three raise it, a sample at pace between them does not restart the count.
TEST_F(StragglerTest, ASampleAtPaceBetweenSlowOnesDoesNotDelayIt) {
  auto loads = Uniform("gpu", 8);
  StartJob("noisy", Names(loads));
  for (int i = 0; i < 6; ++i) Step(loads);
  for (double rdma : {1e9, 1.9e9, 1e9}) {
    loads["gpu6"].rdma = rdma;
    Step(loads);
  }
  auto found = Stragglers();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].subject.node, "gpu6");
}

// A 4-node job whose peers' rates differ by +-10 % (noise, as a 0.5 s rate shows): its
// half-rate node is 3.4 scaled MADs below its peers' median — found (the default is 2.5, not
// the textbook 3.5: a 4-node MAD is too noisy a yardstick for that).
TEST_F(StragglerTest, AHalfRateNodeOfASmallNoisyJobIsFound) {
  std::map<std::string, Load> loads = {
      {"n1", Load{2e9}}, {"n2", Load{2.2e9}}, {"n3", Load{1.8e9}}, {"n4", Load{2e9}}};
  StartJob("small", Names(loads));
  for (int i = 0; i < 6; ++i) Step(loads);
  loads["n4"].rdma = 1e9;
  for (int i = 0; i < 3; ++i) Step(loads);
  auto found = Stragglers();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].subject.node, "n4");
}

// A raised straggler whose job goes idle (GPUs between steps) is not reported meanwhile; when the
// job is busy again the node must be slow for straggler_samples samples anew, not one.
TEST_F(StragglerTest, AfterAnIdleSpellAStragglerIsRaisedAfresh) {
  auto loads = Uniform("gpu", 6);
  StartJob("steps", Names(loads));
  for (int i = 0; i < 6; ++i) Step(loads);
  loads["gpu4"].rdma = 1e9;
  for (int i = 0; i < 3; ++i) Step(loads);
  ASSERT_EQ(Stragglers().size(), 1u);
  for (auto& [name, load] : loads) load.gpu_percent = 5;
  Step(loads);
  EXPECT_TRUE(Stragglers().empty());
  for (auto& [name, load] : loads) load.gpu_percent = 95;
  loads["gpu4"].rdma = 1.5e9;  // below clear_ratio, above ratio: the hysteresis would hold it
  Step(loads);
  EXPECT_TRUE(Stragglers().empty());
}

// The whole job restarts: one node's sample already shows the stop while its peers' do not yet
// (their agents sample later), the job idles, and the same node's first sample after the restart
// again reads behind its peers'. Two slow samples with an idle spell between them are not two of
// its last three: no straggler (the votes before the spell are forgotten).
TEST_F(StragglerTest, OneSlowSampleEachSideOfARestartIsNoStraggler) {
  auto loads = Uniform("gpu", 6);
  StartJob("restarts", Names(loads));
  for (int i = 0; i < 6; ++i) Step(loads);
  loads["gpu3"].rdma = 4e8;  // stopped first; its GPU's utilization lags
  Step(loads);
  for (int i = 0; i < 4; ++i) {
    for (auto& [name, load] : loads) load = Load{0, 2e6, 0, 0};
    Step(loads);
  }
  loads = Uniform("gpu", 6);
  loads["gpu3"].rdma = 4e8;  // its first sample after the restart holds part of an idle second
  Step(loads);
  EXPECT_TRUE(Stragglers().empty());
  loads["gpu3"].rdma = 2e9;
  for (int i = 0; i < 3; ++i) Step(loads);
  EXPECT_TRUE(Stragglers().empty());
}

// Pipeline parallelism: two stages of four nodes with different traffic from the start; and a
// job whose first stage (one node) always moves a third of the rest. Roles, not faults.
TEST_F(StragglerTest, PipelineStagesAreQuiet) {
  std::map<std::string, Load> loads = Uniform("a", 4);
  for (auto& [name, load] : Uniform("b", 4, Load{6e8})) loads[name] = load;
  StartJob("pipeline", Names(loads));
  auto lone = Uniform("c", 6);
  lone["c1"].rdma = 6e8;
  StartJob("first-stage", Names(lone));
  for (auto& [name, load] : lone) loads[name] = load;
  for (int i = 0; i < 120; ++i) {
    Step(loads);
    ASSERT_TRUE(Stragglers().empty()) << "step " << i << ": " << Stragglers()[0].summary;
  }
}

// A parameter server moves several times what each worker moves: a high outlier, not a slow one.
TEST_F(StragglerTest, AParameterServerIsQuiet) {
  auto loads = Uniform("w", 7, Load{1e9});
  loads["ps1"] = Load{12e9};
  StartJob("ps-job", Names(loads));
  for (int i = 0; i < 60; ++i) Step(loads);
  EXPECT_TRUE(Stragglers().empty());
}

// One node on TCP sockets from the start (NCCL fell back): next to no RDMA, heavy kernel traffic
// its peers do not have.
TEST_F(StragglerTest, ANodeOnKernelTcpIsTheStraggler) {
  auto loads = Uniform("gpu", 6);
  loads["gpu2"] = Load{1e7, 8e8};
  StartJob("nccl", Names(loads));
  for (int i = 0; i < 4; ++i) Step(loads);
  auto found = Stragglers();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].subject.node, "gpu2");
  EXPECT_THAT(found[0].summary, HasSubstr("kernel networking"));
}

// A node whose port waits for credits a third of the time while its peers do not, from the
// start of the job.
TEST_F(StragglerTest, ANodeHeldBackByItsPortIsTheStraggler) {
  auto loads = Uniform("gpu", 5);
  loads["gpu4"] = Load{9e8, 2e6, 0.33};
  StartJob("held", Names(loads));
  for (int i = 0; i < 4; ++i) Step(loads);
  auto found = Stragglers();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].subject.node, "gpu4");
  EXPECT_THAT(found[0].summary, HasSubstr("held back 33%"));
}

// The same fault, but the job's GPUs are idle (between steps, checkpointing), the job is smaller
// than straggler_min_job_nodes, or its nodes are not a registered job: nothing to compare.
TEST_F(StragglerTest, IdleSmallOrUnregisteredJobsAreNotJudged) {
  auto idle = Uniform("idle", 6, Load{2e9, 2e6, 0, 5});
  idle["idle3"] = Load{1e7, 8e8, 0, 5};
  StartJob("idle", Names(idle));
  auto small = Uniform("small", 3);
  small["small2"] = Load{1e7, 8e8};
  StartJob("small", Names(small));
  auto unregistered = Uniform("free", 6);
  unregistered["free1"] = Load{1e7, 8e8};
  std::map<std::string, Load> loads = idle;
  for (auto& [name, load] : small) loads[name] = load;
  for (auto& [name, load] : unregistered) loads[name] = load;
  for (int i = 0; i < 10; ++i) Step(loads);
  EXPECT_TRUE(Stragglers().empty());

  // The minimum job size is configurable: at 3 the small job is judged.
  v1::DetectorThresholds thresholds;
  thresholds.set_straggler_min_job_nodes(3);
  Reset(thresholds);
  for (int i = 0; i < 4; ++i) Step(loads);
  auto found = Stragglers();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].subject.node, "small2");
}

// Ending the job ends its stragglers.
TEST_F(StragglerTest, EndingTheJobClearsItsStraggler) {
  auto loads = Uniform("gpu", 6);
  loads["gpu2"] = Load{1e7, 8e8};
  StartJob("nccl", Names(loads));
  for (int i = 0; i < 4; ++i) Step(loads);
  ASSERT_EQ(Stragglers().size(), 1u);
  ASSERT_TRUE(jobs_.End("nccl"));
  Step(loads);
  EXPECT_TRUE(Stragglers().empty());
}

TEST(StragglerThresholdsTest, OutOfRangeValuesAreRefused) {
  EXPECT_TRUE(ValidateThresholds({}).ok());
  auto refused = [](auto set) {
    v1::DetectorThresholds t;
    set(t);
    return ValidateThresholds(t);
  };
  EXPECT_FALSE(refused([](auto& t) { t.set_straggler_min_job_nodes(2); }).ok());
  EXPECT_FALSE(refused([](auto& t) { t.set_straggler_ratio(1.5); }).ok());
  EXPECT_FALSE(refused([](auto& t) { t.set_straggler_ratio(std::nan("")); }).ok());
  EXPECT_FALSE(refused([](auto& t) { t.set_straggler_mad(-1); }).ok());
  EXPECT_FALSE(refused([](auto& t) { t.set_straggler_gpu_busy(2); }).ok());
  EXPECT_FALSE(refused([](auto& t) { t.set_straggler_samples(0); }).ok());
  EXPECT_FALSE(refused([](auto& t) { t.set_straggler_samples(31); }).ok());
  absl::Status status = refused([](auto& t) { t.set_straggler_ratio(-0.1); });
  EXPECT_THAT(std::string(status.message()), HasSubstr("detectors.straggler_ratio"));
  EXPECT_TRUE(refused([](auto& t) {
                t.set_straggler_min_job_nodes(3);
                t.set_straggler_mad(0);
                t.set_straggler_samples(1);
              }).ok());
}

// The side-by-side numbers Diagnose shows come from the same reading.
TEST_F(StragglerTest, NodeTrafficReaderReportsEachNodesNumbers) {
  auto loads = Uniform("gpu", 2);
  loads["gpu2"] = Load{1e9, 4e8, 0.25};
  for (int i = 0; i < 3; ++i) Step(loads);
  NodeTrafficReader reader(fabric_.store(), fabric_.clock());
  auto traffic = reader.Traffic({"gpu2", "nope", "gpu1"});
  ASSERT_EQ(traffic.size(), 2u) << "unknown nodes are left out";
  EXPECT_EQ(traffic[0].node(), "gpu2");
  EXPECT_NEAR(traffic[0].rdma_bytes_per_second(), 1e9, 1e7);
  EXPECT_NEAR(traffic[0].kernel_bytes_per_second(), 4e8, 4e6);
  EXPECT_NEAR(traffic[0].wait_fraction(), 0.25, 0.01);
  EXPECT_EQ(traffic[0].pause_fraction(), -1) << "no RoCE series: unknown, not 0";
  EXPECT_NEAR(traffic[0].gpu_utilization(), 0.95, 1e-9);
  EXPECT_NEAR(traffic[1].rdma_bytes_per_second(), 2e9, 2e7);
  EXPECT_EQ(traffic[1].wait_fraction(), 0);
}

}  // namespace
}  // namespace fabricmon::detectors
