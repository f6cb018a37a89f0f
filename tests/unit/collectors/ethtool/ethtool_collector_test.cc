#include "collectors/ethtool/ethtool_collector.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/recording_sink.h"
#include "collectors/ethtool/ethtool_text.h"
#include "daemon/common/file_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/ethtool/fixture_ethtool_api.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/ethtool/ethtool_test_util.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::collectors::ethtool_testing::AddPhysicalNetdev;
using ::fabricmon::collectors::ethtool_testing::AddRoceNetdev;
using ::fabricmon::collectors::ethtool_testing::FamilySamples;
using ::fabricmon::collectors::ethtool_testing::FindSample;
using ::fabricmon::collectors::ethtool_testing::KnownCaptures;
using ::fabricmon::collectors::ethtool_testing::LabelOf;
using ::fabricmon::collectors::ethtool_testing::MakeCollector;
using ::fabricmon::testing::SharedFixture;
using ::fabricmon::testing::StatusIs;
using ::fabricmon::testing::TempTree;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kFrames[] = "fabricmon_roce_pfc_pause_frames_total";
constexpr char kDuration[] = "fabricmon_roce_pfc_pause_duration_seconds_total";
constexpr char kExtra[] = "fabricmon_ethtool_stat_total";
constexpr char kErrors[] = "fabricmon_collector_errors_total";

std::string Capture(const std::string& file) { return SharedFixture("ethtool/" + file); }

// Raw value of the series `name`{labels}; fails the test if absent.
uint64_t Raw(const std::vector<RecordedSample>& samples, absl::string_view name,
             const Labels& labels) {
  const RecordedSample* sample = FindSample(samples, name, labels);
  EXPECT_NE(sample, nullptr) << name << " " << ::testing::PrintToString(labels);
  return sample == nullptr ? 0 : sample->raw_value;
}

double Exported(const std::vector<RecordedSample>& samples, absl::string_view name,
                const Labels& labels) {
  const RecordedSample* sample = FindSample(samples, name, labels);
  EXPECT_NE(sample, nullptr) << name << " " << ::testing::PrintToString(labels);
  return sample == nullptr ? -1 : ExportedValue(sample->series, sample->raw_value);
}

uint64_t ErrorCount(const std::vector<RecordedSample>& samples, const std::string& kind) {
  return Raw(samples, kErrors, {{"collector", "ethtool"}, {"kind", kind}});
}

// Every real capture as one RoCE netdev (mlx5_core behind mlx5_<i>), discovered and collected
// once.
class EthtoolAllCapturesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto api = std::make_unique<FixtureEthtoolApi>();
    int i = 0;
    for (const auto& capture : KnownCaptures()) {
      FABRICMON_ASSERT_OK(api->LoadCapture(capture.netdev, "mlx5_core", Capture(capture.file)));
      AddRoceNetdev(tree_, capture.netdev, "mlx5_" + std::to_string(i++));
    }
    collector_ = MakeCollector(tree_, std::move(api));
    ASSERT_NE(collector_, nullptr);
    v1::Inventory inventory;
    FABRICMON_ASSERT_OK(collector_->Discover(inventory));
    RecordingSink sink;
    FABRICMON_ASSERT_OK(collector_->Collect(sink));
    samples_ = sink.Take();
  }

  TempTree tree_;
  std::unique_ptr<EthtoolCollector> collector_;
  std::vector<RecordedSample> samples_;
};

TEST_F(EthtoolAllCapturesTest, EveryCaptureInTheFixtureDirectoryIsCovered) {
  absl::StatusOr<std::vector<std::string>> files = ListDirectory(SharedFixture("ethtool"));
  FABRICMON_ASSERT_OK(files);
  std::set<std::string> known;
  for (const auto& capture : KnownCaptures()) {
    known.insert(capture.file);
  }
  for (const std::string& file : *files) {
    if (absl::EndsWith(file, ".md")) {
      continue;
    }
    if (file == ethtool_testing::kSettingsCapture) {
      // Not `ethtool -S` output: refused loudly rather than parsed into stray "statistics".
      FixtureEthtoolApi api;
      EXPECT_THAT(api.LoadCapture("eth1", "hv_netvsc", Capture(file)),
                  StatusIs(absl::StatusCode::kInvalidArgument));
      continue;
    }
    EXPECT_TRUE(known.count(file)) << "new capture without a netdev in KnownCaptures(): " << file;
  }
}

TEST_F(EthtoolAllCapturesTest, EveryCaptureIsCollectedWithInfoAndKeyCount) {
  EXPECT_THAT(collector_->collected_netdevs(), SizeIs(KnownCaptures().size()));
  int i = 0;
  for (const auto& capture : KnownCaptures()) {
    const std::string rdma = "mlx5_" + std::to_string(i++);
    EXPECT_EQ(Raw(samples_, "fabricmon_roce_netdev_info",
                  {{"netdev", capture.netdev}, {"driver", "mlx5_core"}, {"rdma_device", rdma}}),
              1u);
    absl::StatusOr<std::string> text = ReadSmallFile(Capture(capture.file), 1 << 20);
    FABRICMON_ASSERT_OK(text);
    auto parsed = ethtool::ParseEthtoolStatsText(*text);
    FABRICMON_ASSERT_OK(parsed);
    EXPECT_EQ(Raw(samples_, "fabricmon_ethtool_stat_keys", {{"netdev", capture.netdev}}),
              parsed->stats.size())
        << capture.file;
  }
  // No extra_keys configured: no untyped series, no per-queue keys anywhere.
  EXPECT_THAT(FamilySamples(samples_, kExtra), IsEmpty());
  for (const RecordedSample& sample : samples_) {
    for (const auto& [name, value] : sample.series.labels) {
      EXPECT_FALSE(absl::StartsWith(value, "rx0_") || absl::StartsWith(value, "ch0_"))
          << sample.series.name;
    }
  }
  EXPECT_EQ(ErrorCount(samples_, "unsupported"), 0u);
  EXPECT_EQ(ErrorCount(samples_, "missing"), 0u);
}

TEST_F(EthtoolAllCapturesTest, Kernel515CongestedNicExactValues) {
  const std::string n = "k515";
  // 802.3x global pause: priority="global" in the PFC families.
  EXPECT_EQ(Raw(samples_, kFrames, {{"netdev", n}, {"direction", "tx"}, {"priority", "global"}}),
            5745042u);
  const Labels tx_global = {{"netdev", n}, {"direction", "tx"}, {"priority", "global"}};
  EXPECT_EQ(Raw(samples_, kDuration, tx_global), 771103810u);  // raw µs
  EXPECT_DOUBLE_EQ(Exported(samples_, kDuration, tx_global), 771.10381);
  EXPECT_EQ(
      Raw(samples_, "fabricmon_roce_phy_discards_total", {{"netdev", n}, {"direction", "rx"}}),
      58591428329u);
  EXPECT_EQ(
      Raw(samples_, "fabricmon_roce_phy_discards_total", {{"netdev", n}, {"direction", "tx"}}),
      0u);  // present and zero in the capture
  EXPECT_EQ(
      Raw(samples_, "fabricmon_roce_rx_prio_discards_total", {{"netdev", n}, {"priority", "0"}}),
      58591314012u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_rx_out_of_buffer_total", {{"netdev", n}}), 990473555u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_pause_ctrl_frames_total",
                {{"netdev", n}, {"direction", "tx"}}),
            5745055u);
  // Three byte accountings (collectors/ethtool/README.md).
  EXPECT_EQ(
      Raw(samples_, "fabricmon_roce_kernel_bytes_total", {{"netdev", n}, {"direction", "rx"}}),
      20031246044u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_bytes_total", {{"netdev", n}, {"direction", "rx"}}),
            6211329423080u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_vport_bytes_total",
                {{"netdev", n}, {"direction", "rx"}, {"cast", "unicast"}}),
            2461450188460u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_prio_bytes_total",
                {{"netdev", n}, {"direction", "rx"}, {"priority", "0"}}),
            6211318150440u);
}

TEST_F(EthtoolAllCapturesTest, MissingKeyIsAbsentNotZero) {
  // The 5.15 poster printed only non-zero counters: what is not there must not become a 0.
  const std::string n = "k515";
  EXPECT_EQ(
      FindSample(samples_, kFrames, {{"netdev", n}, {"direction", "rx"}, {"priority", "global"}}),
      nullptr);
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_rdma_bytes_total", n), IsEmpty());
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_link_down_events_total", n), IsEmpty());
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_pcie_outbound_stalled_ratio", n), IsEmpty());
  // Only priority 0 carries traffic in this capture.
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_prio_bytes_total", n), SizeIs(2));
}

TEST_F(EthtoolAllCapturesTest, Kernel65) {
  const std::string n = "k65";
  EXPECT_EQ(
      Raw(samples_, "fabricmon_roce_rx_buffer_passed_threshold_events_total", {{"netdev", n}}),
      1192226u);
  EXPECT_DOUBLE_EQ(
      Exported(samples_, kDuration, {{"netdev", n}, {"direction", "tx"}, {"priority", "global"}}),
      5961.284324);
  EXPECT_EQ(
      Raw(samples_, "fabricmon_roce_phy_discards_total", {{"netdev", n}, {"direction", "rx"}}),
      441063206498u);
}

TEST_F(EthtoolAllCapturesTest, PciSignalIntegrityAndStallGauges) {
  const std::string n = "lkml";
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_pcie_signal_integrity_events_total",
                {{"netdev", n}, {"direction", "tx"}}),
            1471u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_pcie_signal_integrity_events_total",
                {{"netdev", n}, {"direction", "rx"}}),
            1u);
  for (const char* op : {"read", "write"}) {
    const RecordedSample* stalled = FindSample(
        samples_, "fabricmon_roce_pcie_outbound_stalled_ratio", {{"netdev", n}, {"operation", op}});
    ASSERT_NE(stalled, nullptr) << op;
    EXPECT_EQ(stalled->series.type, MetricType::kGauge);  // percent of the last second
    EXPECT_EQ(stalled->series.unit, Unit::kRatio);
    EXPECT_EQ(stalled->raw_value, 0u);
    const RecordedSample* events =
        FindSample(samples_, "fabricmon_roce_pcie_outbound_stalled_events_total",
                   {{"netdev", n}, {"operation", op}});
    ASSERT_NE(events, nullptr) << op;
    EXPECT_EQ(events->series.type, MetricType::kCounter);
  }
}

TEST_F(EthtoolAllCapturesTest, Ubuntu1804FullDump) {
  const std::string n = "u1804";
  // RDMA vport keys exist (all zero on this host: RDMA unused) — 2 directions × 2 casts.
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_rdma_bytes_total", n), SizeIs(4));
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_rdma_packets_total", n), SizeIs(4));
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_rdma_bytes_total",
                {{"netdev", n}, {"direction", "tx"}, {"cast", "multicast"}}),
            0u);
  // Per-priority traffic for all 8 priorities, both directions.
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_prio_bytes_total", n), SizeIs(16));
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_prio_packets_total", n), SizeIs(16));
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_prio_bytes_total",
                {{"netdev", n}, {"direction", "tx"}, {"priority", "0"}}),
            2662454044895u);
  // Global pause (802.3x) rx/tx frames and duration plus the RX transition counter.
  EXPECT_THAT(FamilySamples(samples_, kFrames, n), SizeIs(2));
  EXPECT_THAT(FamilySamples(samples_, kDuration, n), SizeIs(2));
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_pfc_pause_transitions_total",
                {{"netdev", n}, {"direction", "rx"}, {"priority", "global"}}),
            0u);
  // link_down_events_phy is the one 32-bit counter (collectors/ethtool/README.md).
  const RecordedSample* link_down =
      FindSample(samples_, "fabricmon_roce_link_down_events_total", {{"netdev", n}});
  ASSERT_NE(link_down, nullptr);
  EXPECT_EQ(link_down->series.width_bits, 32);
  EXPECT_EQ(link_down->series.overflow, Overflow::kWraps);
  const RecordedSample* phy_rx =
      FindSample(samples_, "fabricmon_roce_phy_bytes_total", {{"netdev", n}, {"direction", "rx"}});
  ASSERT_NE(phy_rx, nullptr);
  EXPECT_EQ(phy_rx->series.width_bits, 64);
  EXPECT_EQ(phy_rx->raw_value, 2202570777997u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_pcie_signal_integrity_events_total",
                {{"netdev", n}, {"direction", "tx"}}),
            34u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_rx_corrected_bit_total", {{"netdev", n}}), 0u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_rx_pcs_symbol_errors_total", {{"netdev", n}}), 0u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_rx_crc_errors_total", {{"netdev", n}}), 0u);
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_module_events_total", n), SizeIs(4));
  EXPECT_EQ(
      Raw(samples_, "fabricmon_roce_kernel_packets_total", {{"netdev", n}, {"direction", "rx"}}),
      845320277u);
  EXPECT_EQ(Raw(samples_, "fabricmon_ethtool_stat_keys", {{"netdev", n}}), 751u);
}

TEST_F(EthtoolAllCapturesTest, Ubuntu1604OldNamingMapsWhatItCan) {
  const std::string n = "u1604";
  // Pre-4.9 mlx5 spellings of the IEEE 802.3 and vport groups.
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_bytes_total", {{"netdev", n}, {"direction", "rx"}}),
            1084993260u);  // octets_received
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_bytes_total", {{"netdev", n}, {"direction", "tx"}}),
            5834192580u);  // octets_tx
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_packets_total", {{"netdev", n}, {"direction", "rx"}}),
            5487361u);  // frames_rx
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_pause_ctrl_frames_total",
                {{"netdev", n}, {"direction", "rx"}}),
            0u);  // pause_ctrl_rx
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_phy_rx_crc_errors_total", {{"netdev", n}}), 0u);
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_vport_bytes_total",
                {{"netdev", n}, {"direction", "rx"}, {"cast", "unicast"}}),
            982145029u);  // rx_unicast_bytes
  EXPECT_EQ(
      Raw(samples_, "fabricmon_roce_kernel_bytes_total", {{"netdev", n}, {"direction", "tx"}}),
      5813725708u);
  // No PFC keys in this version at all.
  EXPECT_THAT(FamilySamples(samples_, kFrames, n), IsEmpty());
}

TEST_F(EthtoolAllCapturesTest, TruncatedByteps) {
  // The "after" capture stops at tx_prio4_bytes: tx_prio4_packets is absent, not zero.
  const std::string n = "bpafter";
  EXPECT_EQ(Raw(samples_, "fabricmon_roce_prio_bytes_total",
                {{"netdev", n}, {"direction", "rx"}, {"priority", "0"}}),
            88171136852706u);
  EXPECT_NE(FindSample(samples_, "fabricmon_roce_prio_bytes_total",
                       {{"netdev", n}, {"direction", "tx"}, {"priority", "4"}}),
            nullptr);
  EXPECT_EQ(FindSample(samples_, "fabricmon_roce_prio_packets_total",
                       {{"netdev", n}, {"direction", "tx"}, {"priority", "4"}}),
            nullptr);
  EXPECT_THAT(FamilySamples(samples_, "fabricmon_roce_prio_bytes_total", "bpbefore"), SizeIs(16));
}

// --- Key-set changes (collectors/ethtool/README.md, "The key set depends on configuration") ---

class EthtoolKeySetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto api = std::make_unique<FixtureEthtoolApi>();
    api_ = api.get();
    FABRICMON_ASSERT_OK(api_->LoadCapture("eth0", "mlx5_core",
                                          Capture("mlx5_connectx4_ubuntu18.04_ethq-tests.txt")));
    AddRoceNetdev(tree_, "eth0", "mlx5_0");
    collector_ = MakeCollector(tree_, std::move(api), config_);
  }

  std::vector<RecordedSample> Cycle() {
    RecordingSink sink;
    EXPECT_THAT(collector_->Collect(sink), testing::IsOk());
    return sink.Take();
  }

  void Discover() {
    v1::Inventory inventory;
    FABRICMON_ASSERT_OK(collector_->Discover(inventory));
  }

  // PFC turned on for priority 3: mlx5 adds the five per-priority pause keys.
  void EnablePfc3() {
    api_->SetStat("eth0", "rx_prio3_pause", 100);
    api_->SetStat("eth0", "rx_prio3_pause_duration", 2500000);
    api_->SetStat("eth0", "rx_prio3_pause_transition", 40);
    api_->SetStat("eth0", "tx_prio3_pause", 7);
    api_->SetStat("eth0", "tx_prio3_pause_duration", 1000);
  }

  TempTree tree_;
  v1::EthtoolCollectorConfig config_;
  FixtureEthtoolApi* api_ = nullptr;
  std::unique_ptr<EthtoolCollector> collector_;
};

TEST_F(EthtoolKeySetTest, GrowthIsReReadAndExportedInTheSameCycle) {
  Discover();
  std::vector<RecordedSample> before = Cycle();
  EXPECT_THAT(FamilySamples(before, kFrames, "eth0"), SizeIs(2));  // global rx/tx only
  EXPECT_EQ(api_->string_set_calls("eth0"), 1);

  EnablePfc3();
  std::vector<RecordedSample> after = Cycle();
  EXPECT_EQ(Raw(after, kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}),
            100u);
  EXPECT_DOUBLE_EQ(
      Exported(after, kDuration, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}),
      2.5);
  EXPECT_EQ(Raw(after, "fabricmon_roce_pfc_pause_transitions_total",
                {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}),
            40u);
  EXPECT_EQ(Raw(after, "fabricmon_ethtool_stat_keys", {{"netdev", "eth0"}}), 756u);
  EXPECT_EQ(Raw(after, "fabricmon_ethtool_string_set_reloads_total", {{"netdev", "eth0"}}), 1u);
  // One GSTATS per cycle; the names were re-read once, because the count changed.
  EXPECT_EQ(api_->stats_calls("eth0"), 2);
  EXPECT_EQ(api_->string_set_calls("eth0"), 2);

  // Unchanged set: no further string-set reads.
  Cycle();
  EXPECT_EQ(api_->stats_calls("eth0"), 3);
  EXPECT_EQ(api_->string_set_calls("eth0"), 2);
}

TEST_F(EthtoolKeySetTest, ShrinkRemovesSeries) {
  EnablePfc3();
  Discover();
  EXPECT_THAT(FamilySamples(Cycle(), kFrames, "eth0"), SizeIs(4));
  for (const char* key : {"rx_prio3_pause", "rx_prio3_pause_duration", "rx_prio3_pause_transition",
                          "tx_prio3_pause", "tx_prio3_pause_duration"}) {
    api_->RemoveStat("eth0", key);
  }
  std::vector<RecordedSample> after = Cycle();
  EXPECT_THAT(FamilySamples(after, kFrames, "eth0"), SizeIs(2));
  EXPECT_EQ(
      FindSample(after, kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}),
      nullptr);
}

TEST_F(EthtoolKeySetTest, GrowthPastTheCallsCapacityRereadsNamesAndSkipsOneCycle) {
  api_->SetGrowthLimit(0);  // like the guard page: the kernel's larger copy faults
  Discover();
  Cycle();
  EnablePfc3();
  std::vector<RecordedSample> aborted = Cycle();
  EXPECT_EQ(
      FindSample(aborted, kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}),
      nullptr);
  // Still reported as present, with the new key count; nothing counted as an error.
  EXPECT_EQ(Raw(aborted, "fabricmon_roce_netdev_info",
                {{"netdev", "eth0"}, {"driver", "mlx5_core"}, {"rdma_device", "mlx5_0"}}),
            1u);
  EXPECT_EQ(Raw(aborted, "fabricmon_ethtool_stat_keys", {{"netdev", "eth0"}}), 756u);
  EXPECT_EQ(ErrorCount(aborted, "io"), 0u);
  std::vector<RecordedSample> next = Cycle();
  EXPECT_EQ(Raw(next, kFrames, {{"netdev", "eth0"}, {"direction", "tx"}, {"priority", "3"}}), 7u);
}

TEST_F(EthtoolKeySetTest, KernelThatRejectsACountMismatchCostsOneCycle) {
  // Newer kernels answer GSTATS with n_stats = 0 when the caller's count is stale.
  api_->SetRejectCountMismatch(true);
  Discover();
  Cycle();
  EnablePfc3();
  std::vector<RecordedSample> changed = Cycle();
  EXPECT_THAT(FamilySamples(changed, kFrames, "eth0"), IsEmpty());
  EXPECT_EQ(Raw(changed, "fabricmon_ethtool_stat_keys", {{"netdev", "eth0"}}), 756u);
  EXPECT_EQ(Raw(changed, "fabricmon_ethtool_string_set_reloads_total", {{"netdev", "eth0"}}), 1u);
  std::vector<RecordedSample> next = Cycle();
  EXPECT_EQ(Raw(next, kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}), 100u);
  EXPECT_EQ(api_->stats_calls("eth0"), 3);
  EXPECT_EQ(api_->string_set_calls("eth0"), 2);
  api_->RemoveStat("eth0", "rx_prio3_pause");  // and shrinking
  EXPECT_EQ(
      FindSample(Cycle(), kFrames, {{"netdev", "eth0"}, {"direction", "tx"}, {"priority", "3"}}),
      nullptr);
  EXPECT_EQ(Raw(Cycle(), kFrames, {{"netdev", "eth0"}, {"direction", "tx"}, {"priority", "3"}}),
            7u);
}

TEST_F(EthtoolKeySetTest, SameSizeRenameIsSeenAtRediscovery) {
  EnablePfc3();
  Discover();
  Cycle();
  // PFC moved from priority 3 to 4: same count, different names.
  for (const char* suffix : {"_pause", "_pause_duration", "_pause_transition"}) {
    api_->RenameStat("eth0", std::string("rx_prio3") + suffix, std::string("rx_prio4") + suffix);
  }
  api_->RenameStat("eth0", "tx_prio3_pause", "tx_prio4_pause");
  api_->RenameStat("eth0", "tx_prio3_pause_duration", "tx_prio4_pause_duration");
  // Without verify_string_set, a same-size change is invisible until re-discovery (documented).
  EXPECT_NE(
      FindSample(Cycle(), kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}),
      nullptr);
  Discover();
  std::vector<RecordedSample> after = Cycle();
  EXPECT_EQ(
      FindSample(after, kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}),
      nullptr);
  EXPECT_EQ(Raw(after, kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "4"}}),
            100u);
}

TEST_F(EthtoolKeySetTest, VerifyStringSetCatchesSameSizeRenameAtOnce) {
  config_.set_verify_string_set(true);
  collector_.reset();
  auto api = std::make_unique<FixtureEthtoolApi>();
  api_ = api.get();
  FABRICMON_ASSERT_OK(
      api_->LoadCapture("eth0", "mlx5_core", Capture("mlx5_connectx4_ubuntu18.04_ethq-tests.txt")));
  collector_ = MakeCollector(tree_, std::move(api), config_);
  EnablePfc3();
  Discover();
  Cycle();
  api_->RenameStat("eth0", "rx_prio3_pause", "rx_prio4_pause");
  std::vector<RecordedSample> after = Cycle();
  EXPECT_EQ(
      FindSample(after, kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "3"}}),
      nullptr);
  EXPECT_EQ(Raw(after, kFrames, {{"netdev", "eth0"}, {"direction", "rx"}, {"priority", "4"}}),
            100u);
  EXPECT_EQ(Raw(after, "fabricmon_ethtool_string_set_reloads_total", {{"netdev", "eth0"}}), 1u);
  EXPECT_EQ(api_->stats_calls("eth0"), 2);  // still one GSTATS per cycle
}

TEST_F(EthtoolKeySetTest, ReloadCounterSurvivesRediscovery) {
  Discover();
  Cycle();
  EnablePfc3();
  Cycle();
  Discover();
  EXPECT_EQ(Raw(Cycle(), "fabricmon_ethtool_string_set_reloads_total", {{"netdev", "eth0"}}), 1u);
}

// --- Keys, extra keys, drivers ---

TEST(EthtoolCollectorTest, TrailingSpaceKeyIsTrimmed) {
  TempTree tree;
  AddRoceNetdev(tree, "eth0", "mlx5_0");
  auto api = std::make_unique<FixtureEthtoolApi>();
  api->SetNetdev("eth0", "mlx5_core",
                 {{"tx_pause_storm_warning_events ", 3}, {"  tx_pause_storm_error_events", 1}});
  auto collector = MakeCollector(tree, std::move(api));
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  RecordingSink sink;
  FABRICMON_ASSERT_OK(collector->Collect(sink));
  EXPECT_EQ(
      Raw(sink.samples(), "fabricmon_roce_pause_storm_warning_events_total", {{"netdev", "eth0"}}),
      3u);
  EXPECT_EQ(
      Raw(sink.samples(), "fabricmon_roce_pause_storm_error_events_total", {{"netdev", "eth0"}}),
      1u);
}

TEST(EthtoolCollectorTest, DuplicateKeysFirstWins) {
  TempTree tree;
  AddRoceNetdev(tree, "eth0", "mlx5_0");
  auto api = std::make_unique<FixtureEthtoolApi>();
  // Old and new spellings of one counter, and a repeated name: one series each.
  api->SetNetdev("eth0", "mlx5_core",
                 {{"rx_bytes_phy", 10}, {"octets_received", 11}, {"rx_bytes", 1}, {"rx_bytes", 2}});
  auto collector = MakeCollector(tree, std::move(api));
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  RecordingSink sink;
  FABRICMON_ASSERT_OK(collector->Collect(sink));
  EXPECT_THAT(FamilySamples(sink.samples(), "fabricmon_roce_phy_bytes_total"), SizeIs(1));
  EXPECT_EQ(Raw(sink.samples(), "fabricmon_roce_phy_bytes_total",
                {{"netdev", "eth0"}, {"direction", "rx"}}),
            10u);
  EXPECT_EQ(Raw(sink.samples(), "fabricmon_roce_kernel_bytes_total",
                {{"netdev", "eth0"}, {"direction", "rx"}}),
            1u);
}

class EthtoolExtraKeysTest : public ::testing::Test {
 protected:
  std::vector<RecordedSample> Run(const std::string& pattern, uint32_t limit,
                                  const std::string& driver = "mlx5_core") {
    AddRoceNetdev(tree_, "eth0", "mlx5_0");
    auto api = std::make_unique<FixtureEthtoolApi>();
    EXPECT_THAT(
        api->LoadCapture("eth0", driver, Capture("mlx5_connectx4_ubuntu18.04_ethq-tests.txt")),
        testing::IsOk());
    v1::EthtoolCollectorConfig config;
    config.set_extra_keys(pattern);
    config.set_extra_keys_limit(limit);
    collector_ = MakeCollector(tree_, std::move(api), config);
    v1::Inventory inventory;
    EXPECT_THAT(collector_->Discover(inventory), testing::IsOk());
    RecordingSink sink;
    EXPECT_THAT(collector_->Collect(sink), testing::IsOk());
    return sink.Take();
  }

  TempTree tree_;
  std::unique_ptr<EthtoolCollector> collector_;
};

TEST_F(EthtoolExtraKeysTest, RegexSelectsUntypedKeysUnderACap) {
  // 16 per-queue rxN_packets keys match; the cap keeps the first 4 in driver order.
  std::vector<RecordedSample> samples = Run("rx[0-9]+_packets|rx_bytes", 4);
  std::vector<const RecordedSample*> extra = FamilySamples(samples, kExtra, "eth0");
  ASSERT_THAT(extra, SizeIs(4));
  EXPECT_EQ(LabelOf(extra[0]->series.labels, "key"), "rx0_packets");
  EXPECT_EQ(LabelOf(extra[3]->series.labels, "key"), "rx3_packets");
  EXPECT_EQ(extra[0]->raw_value, 53947906u);
  EXPECT_EQ(extra[0]->series.type, MetricType::kCounter);
  EXPECT_EQ(Raw(samples, "fabricmon_ethtool_extra_keys_dropped", {{"netdev", "eth0"}}), 12u);
  // rx_bytes has a typed metric: never duplicated as an extra key.
  EXPECT_EQ(FindSample(samples, kExtra, {{"netdev", "eth0"}, {"key", "rx_bytes"}}), nullptr);
}

TEST_F(EthtoolExtraKeysTest, DefaultCapIs64) {
  std::vector<RecordedSample> samples = Run(".*", 0);
  EXPECT_THAT(FamilySamples(samples, kExtra, "eth0"), SizeIs(64));
  EXPECT_GT(Raw(samples, "fabricmon_ethtool_extra_keys_dropped", {{"netdev", "eth0"}}), 500u);
}

TEST_F(EthtoolExtraKeysTest, PerQueueKeysAreRedundantWithTheDriversSums) {
  // Why per-queue keys are left out: mlx5 already reports their sum under the un-numbered name.
  std::vector<RecordedSample> samples = Run("rx[0-9]+_packets", 1000);
  uint64_t sum = 0;
  for (const RecordedSample* sample : FamilySamples(samples, kExtra, "eth0")) {
    sum += sample->raw_value;
  }
  EXPECT_EQ(sum, Raw(samples, "fabricmon_roce_kernel_packets_total",
                     {{"netdev", "eth0"}, {"direction", "rx"}}));
}

TEST_F(EthtoolExtraKeysTest, OtherDriversGetOnlyExtraKeys) {
  // Typed metrics encode mlx5 semantics; another driver's "rx_bytes" may mean something else.
  std::vector<RecordedSample> samples = Run("rx_bytes|rx_prio0_bytes", 64, "ice");
  EXPECT_THAT(FamilySamples(samples, "fabricmon_roce_kernel_bytes_total"), IsEmpty());
  EXPECT_THAT(FamilySamples(samples, "fabricmon_roce_prio_bytes_total"), IsEmpty());
  EXPECT_EQ(Raw(samples, kExtra, {{"netdev", "eth0"}, {"key", "rx_bytes"}}), 2195783498134u);
  EXPECT_EQ(Raw(samples, "fabricmon_roce_netdev_info",
                {{"netdev", "eth0"}, {"driver", "ice"}, {"rdma_device", "mlx5_0"}}),
            1u);
}

TEST(EthtoolCollectorTest, ExtraKeyLabelIsSanitised) {
  TempTree tree;
  AddRoceNetdev(tree, "eth0", "mlx5_0");
  auto api = std::make_unique<FixtureEthtoolApi>();
  api->SetNetdev("eth0", "weird", {{"Pio Reserved 30", 5}, {std::string("bad\xff\x01key"), 6}});
  v1::EthtoolCollectorConfig config;
  config.set_extra_keys(".*");
  auto collector = MakeCollector(tree, std::move(api), config);
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  RecordingSink sink;
  FABRICMON_ASSERT_OK(collector->Collect(sink));
  EXPECT_EQ(Raw(sink.samples(), kExtra, {{"netdev", "eth0"}, {"key", "Pio Reserved 30"}}), 5u);
  EXPECT_EQ(Raw(sink.samples(), kExtra, {{"netdev", "eth0"}, {"key", "bad__key"}}), 6u);
}

TEST(EthtoolCollectorTest, ConfigErrors) {
  v1::EthtoolCollectorConfig config;
  config.set_extra_keys("rx_(");
  EXPECT_THAT(EthtoolCollector::Create(config, std::make_unique<FixtureEthtoolApi>()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  config.Clear();
  config.mutable_netdevs()->set_include("[");
  EXPECT_THAT(EthtoolCollector::Create(config, std::make_unique<FixtureEthtoolApi>()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  config.Clear();
  config.set_interval_ms(50);
  EXPECT_THAT(EthtoolCollector::Create(config, std::make_unique<FixtureEthtoolApi>()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(EthtoolCollector::Create({}, nullptr), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(EthtoolCollectorTest, Defaults) {
  auto collector = EthtoolCollector::Create({}, std::make_unique<FixtureEthtoolApi>());
  FABRICMON_ASSERT_OK(collector);
  EXPECT_EQ((*collector)->name(), "ethtool");
  EXPECT_EQ((*collector)->interval_ms(), 1000);
  EXPECT_EQ((*collector)->rediscover_interval_ms(), 60000);
}

// --- Discovery ---

TEST(EthtoolDiscoveryTest, NothingToCollectIsNotFound) {
  TempTree tree;
  AddPhysicalNetdev(tree, "eno1");  // physical but not behind an RDMA device
  auto api = std::make_unique<FixtureEthtoolApi>();
  FixtureEthtoolApi* fixture = api.get();
  api->SetNetdev("eno1", "igb", {{"rx_bytes", 1}});
  auto collector = MakeCollector(tree, std::move(api));
  v1::Inventory inventory;
  EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
  RecordingSink sink;
  EXPECT_THAT(collector->Collect(sink), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(fixture->driver_calls("eno1"), 0);
  EXPECT_THAT(inventory.netdevs(), IsEmpty());
}

TEST(EthtoolDiscoveryTest, EmptyRootIsNotFound) {
  TempTree tree;
  auto collector = MakeCollector(tree, std::make_unique<FixtureEthtoolApi>());
  v1::Inventory inventory;
  EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
}

TEST(EthtoolDiscoveryTest, GidTablesAndPciFunctionsFindRoceNetdevs) {
  TempTree tree;
  AddRoceNetdev(tree, "ens1f0", "mlx5_0");
  // More GIDs of the same netdev (IPv4-mapped, link-local, ...).
  tree.WriteFile("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/1", "ens1f0\n");
  // Only through the PCI function's infiniband/ directory.
  tree.WriteFile("class/net/ens2f0/type", "1\n");
  tree.MakeDir("class/net/ens2f0/device/infiniband/mlx5_2");
  tree.WriteFile("class/net/ens2f0/dev_port", "0\n");
  // A GID of a netdev in another namespace (absent from class/net) and an unused GID entry.
  tree.WriteFile("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/2", "podnet0\n");
  tree.WriteFile("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3", "");
  // IPoIB: behind an RDMA device, but not Ethernet.
  tree.WriteFile("class/net/ib0/type", "32\n");
  tree.MakeDir("class/net/ib0/device/infiniband/mlx5_3");
  // A virtual netdev and lo: never candidates by default.
  tree.WriteFile("class/net/lo/type", "772\n");
  tree.WriteFile("class/net/veth0/type", "1\n");

  auto api = std::make_unique<FixtureEthtoolApi>();
  FixtureEthtoolApi* fixture = api.get();
  for (const char* netdev : {"ens1f0", "ens2f0", "ib0", "lo", "veth0", "podnet0"}) {
    api->SetNetdev(netdev, "mlx5_core", {{"rx_bytes", 1}});
  }
  auto collector = MakeCollector(tree, std::move(api));
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  EXPECT_THAT(collector->collected_netdevs(), ElementsAre("ens1f0", "ens2f0"));
  for (const char* untouched : {"ib0", "lo", "veth0", "podnet0"}) {
    EXPECT_EQ(fixture->driver_calls(untouched), 0) << untouched;
  }
  ASSERT_THAT(inventory.netdevs(), SizeIs(2));
  EXPECT_EQ(inventory.netdevs(0).name(), "ens1f0");
  EXPECT_EQ(inventory.netdevs(0).kind(), v1::Netdev::KIND_RDMA_ETHERNET);
  EXPECT_EQ(inventory.netdevs(0).rdma_device(), "mlx5_0");
  EXPECT_EQ(inventory.netdevs(0).rdma_port(), 1u);
  EXPECT_EQ(inventory.netdevs(0).driver(), "mlx5_core");
  EXPECT_EQ(inventory.netdevs(1).rdma_device(), "mlx5_2");
  EXPECT_EQ(inventory.netdevs(1).rdma_port(), 1u);  // dev_port 0 → RDMA port 1

  RecordingSink sink;
  FABRICMON_ASSERT_OK(collector->Collect(sink));
  EXPECT_EQ(Raw(sink.samples(), "fabricmon_roce_netdev_info",
                {{"netdev", "ens2f0"}, {"driver", "mlx5_core"}, {"rdma_device", "mlx5_2"}}),
            1u);
}

TEST(EthtoolDiscoveryTest, BondUpperResolvesToItsPorts) {
  // RoCE LAG: mlx5_bond_0's GIDs name bond0 (and a VLAN on it); bonding has no ethtool stats,
  // the ports below it do.
  TempTree tree;
  AddPhysicalNetdev(tree, "eth0");
  AddPhysicalNetdev(tree, "eth1");
  tree.WriteFile("class/net/bond0/type", "1\n");
  tree.Symlink("class/net/bond0/lower_eth0", "../eth0");
  tree.Symlink("class/net/bond0/lower_eth1", "../eth1");
  tree.WriteFile("class/net/bond0.100/type", "1\n");
  tree.Symlink("class/net/bond0.100/lower_bond0", "../bond0");
  tree.WriteFile("class/infiniband/mlx5_bond_0/ports/1/gid_attrs/ndevs/0", "bond0\n");
  tree.WriteFile("class/infiniband/mlx5_bond_0/ports/1/gid_attrs/ndevs/4", "bond0.100\n");
  auto api = std::make_unique<FixtureEthtoolApi>();
  FixtureEthtoolApi* fixture = api.get();
  api->SetNetdev("eth0", "mlx5_core", {{"rx_bytes", 1}});
  api->SetNetdev("eth1", "mlx5_core", {{"rx_bytes", 2}});
  api->SetNetdevWithoutStats("bond0", "bonding");
  auto collector = MakeCollector(tree, std::move(api));
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  EXPECT_THAT(collector->collected_netdevs(), ElementsAre("eth0", "eth1"));
  EXPECT_EQ(fixture->driver_calls("bond0"), 0);
  RecordingSink sink;
  FABRICMON_ASSERT_OK(collector->Collect(sink));
  EXPECT_EQ(Raw(sink.samples(), "fabricmon_roce_netdev_info",
                {{"netdev", "eth1"}, {"driver", "mlx5_core"}, {"rdma_device", "mlx5_bond_0"}}),
            1u);
}

TEST(EthtoolDiscoveryTest, AllPhysicalNetdevsOnTheProcfsFixtureTree) {
  // procfs's tree: class/net/eth0 with a (dangling) device entry, no RDMA mapping.
  const std::string root = SharedFixture("sysfs/procfs/sys");
  auto api = std::make_unique<FixtureEthtoolApi>();
  api->SetNetdev("eth0", "e1000e", {{"rx_bytes", 1}});
  v1::EthtoolCollectorConfig config;
  config.set_sysfs_root(root);
  auto without = EthtoolCollector::Create(config, std::make_unique<FixtureEthtoolApi>());
  FABRICMON_ASSERT_OK(without);
  v1::Inventory inventory;
  EXPECT_THAT((*without)->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));

  config.set_all_physical_netdevs(true);
  auto with = EthtoolCollector::Create(config, std::move(api));
  FABRICMON_ASSERT_OK(with);
  FABRICMON_ASSERT_OK((*with)->Discover(inventory));
  EXPECT_THAT((*with)->collected_netdevs(), ElementsAre("eth0"));
  ASSERT_THAT(inventory.netdevs(), SizeIs(1));
  EXPECT_EQ(inventory.netdevs(0).kind(), v1::Netdev::KIND_ETHERNET);
  RecordingSink sink;
  FABRICMON_ASSERT_OK((*with)->Collect(sink));
  EXPECT_EQ(Raw(sink.samples(), "fabricmon_roce_netdev_info",
                {{"netdev", "eth0"}, {"driver", "e1000e"}, {"rdma_device", ""}}),
            1u);
}

TEST(EthtoolDiscoveryTest, FilterRunsBeforeAnyIoctl) {
  TempTree tree;
  AddRoceNetdev(tree, "eth0", "mlx5_0");
  AddRoceNetdev(tree, "eth1", "mlx5_1");
  AddRoceNetdev(tree, "eth2", "mlx5_2");
  auto api = std::make_unique<FixtureEthtoolApi>();
  FixtureEthtoolApi* fixture = api.get();
  for (const char* netdev : {"eth0", "eth1", "eth2"}) {
    api->SetNetdev(netdev, "mlx5_core", {{"rx_bytes", 1}});
  }
  v1::EthtoolCollectorConfig config;
  config.mutable_netdevs()->set_include("eth[01]");
  config.mutable_netdevs()->set_exclude("eth1");
  auto collector = MakeCollector(tree, std::move(api), config);
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  EXPECT_THAT(collector->collected_netdevs(), ElementsAre("eth0"));
  EXPECT_EQ(fixture->driver_calls("eth1"), 0);
  EXPECT_EQ(fixture->driver_calls("eth2"), 0);

  config.mutable_netdevs()->set_include("nothing");
  auto none = MakeCollector(tree, std::make_unique<FixtureEthtoolApi>(), config);
  EXPECT_THAT(none->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
}

TEST(EthtoolDiscoveryTest, InventoryMergesWithAnExistingNetdevEntry) {
  TempTree tree;
  AddRoceNetdev(tree, "eth0", "mlx5_0");
  auto api = std::make_unique<FixtureEthtoolApi>();
  api->SetNetdev("eth0", "mlx5_core", {{"rx_bytes", 1}});
  auto collector = MakeCollector(tree, std::move(api));
  v1::Inventory inventory;
  v1::Netdev* listed = inventory.add_netdevs();  // as another collector may have done
  listed->set_name("eth0");
  listed->set_mtu(4200);
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  ASSERT_THAT(inventory.netdevs(), SizeIs(1));
  EXPECT_EQ(inventory.netdevs(0).mtu(), 4200u);
  EXPECT_EQ(inventory.netdevs(0).rdma_device(), "mlx5_0");
}

// --- Per-netdev failures never hide the others ---

class EthtoolFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto api = std::make_unique<FixtureEthtoolApi>();
    api_ = api.get();
    for (const char* netdev : {"eth0", "eth1", "eth2"}) {
      AddRoceNetdev(tree_, netdev, std::string("mlx5_") + netdev[3]);
      api_->SetNetdev(netdev, "mlx5_core", {{"rx_bytes", 10}, {"tx_bytes", 20}});
    }
    collector_ = MakeCollector(tree_, std::move(api));
  }

  absl::Status Discover() {
    v1::Inventory inventory;
    return collector_->Discover(inventory);
  }

  std::vector<RecordedSample> Cycle() {
    RecordingSink sink;
    EXPECT_THAT(collector_->Collect(sink), testing::IsOk());
    return sink.Take();
  }

  static bool HasBytes(const std::vector<RecordedSample>& samples, const std::string& netdev) {
    return FindSample(samples, "fabricmon_roce_kernel_bytes_total",
                      {{"netdev", netdev}, {"direction", "rx"}}) != nullptr;
  }

  TempTree tree_;
  FixtureEthtoolApi* api_ = nullptr;
  std::unique_ptr<EthtoolCollector> collector_;
};

TEST_F(EthtoolFailureTest, NetdevWithoutStatisticsIsSkippedAfterDiscoveryAndNotReasked) {
  api_->SetNetdevWithoutStats("eth1", "8021q");
  FABRICMON_ASSERT_OK(Discover());
  EXPECT_THAT(collector_->collected_netdevs(), ElementsAre("eth0", "eth2"));
  std::vector<RecordedSample> samples;
  for (int i = 0; i < 3; ++i) {
    samples = Cycle();
  }
  EXPECT_EQ(api_->string_set_calls("eth1"), 1);
  EXPECT_EQ(api_->stats_calls("eth1"), 0);
  EXPECT_EQ(ErrorCount(samples, "unsupported"), 1u);
  EXPECT_TRUE(HasBytes(samples, "eth0"));
  EXPECT_TRUE(HasBytes(samples, "eth2"));
  EXPECT_FALSE(HasBytes(samples, "eth1"));
}

TEST_F(EthtoolFailureTest, EmptyStringSetIsSkippedLikeUnsupported) {
  api_->SetNetdev("eth1", "mlx5_core", {});
  FABRICMON_ASSERT_OK(Discover());
  EXPECT_THAT(collector_->collected_netdevs(), ElementsAre("eth0", "eth2"));
  Cycle();
  EXPECT_EQ(api_->stats_calls("eth1"), 0);
}

TEST_F(EthtoolFailureTest, AllWithoutStatisticsIsNotFound) {
  for (const char* netdev : {"eth0", "eth1", "eth2"}) {
    api_->SetNetdevWithoutStats(netdev, "8021q");
  }
  EXPECT_THAT(Discover(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(EthtoolFailureTest, EopnotsuppDuringCollectionStopsAskingThatNetdev) {
  FABRICMON_ASSERT_OK(Discover());
  Cycle();
  api_->SetError("eth1", absl::UnimplementedError("Operation not supported"));
  std::vector<RecordedSample> samples = Cycle();
  EXPECT_TRUE(HasBytes(samples, "eth0"));
  EXPECT_TRUE(HasBytes(samples, "eth2"));
  EXPECT_FALSE(HasBytes(samples, "eth1"));
  EXPECT_EQ(ErrorCount(samples, "unsupported"), 1u);
  const int calls = api_->stats_calls("eth1");
  Cycle();
  Cycle();
  EXPECT_EQ(api_->stats_calls("eth1"), calls);
  EXPECT_FALSE(collector_->WantsRediscovery());
}

TEST_F(EthtoolFailureTest, SetThatBecomesEmptyIsTreatedAsUnsupported) {
  FABRICMON_ASSERT_OK(Discover());
  Cycle();
  api_->SetNetdev("eth1", "mlx5_core", {});
  std::vector<RecordedSample> samples = Cycle();
  EXPECT_FALSE(HasBytes(samples, "eth1"));
  EXPECT_TRUE(HasBytes(samples, "eth2"));
  EXPECT_EQ(ErrorCount(samples, "unsupported"), 1u);
  EXPECT_THAT(collector_->collected_netdevs(), ElementsAre("eth0", "eth2"));
}

TEST_F(EthtoolFailureTest, VanishedNetdevIsCountedAndTriggersRediscovery) {
  FABRICMON_ASSERT_OK(Discover());
  Cycle();
  api_->RemoveNetdev("eth1");  // ENODEV from now on; sysfs still lists it for a moment
  std::vector<RecordedSample> samples = Cycle();
  EXPECT_TRUE(HasBytes(samples, "eth0"));
  EXPECT_TRUE(HasBytes(samples, "eth2"));
  EXPECT_EQ(ErrorCount(samples, "missing"), 1u);
  EXPECT_TRUE(collector_->WantsRediscovery());
  EXPECT_THAT(collector_->collected_netdevs(), ElementsAre("eth0", "eth2"));

  FABRICMON_ASSERT_OK(Discover());
  EXPECT_FALSE(collector_->WantsRediscovery());
  EXPECT_THAT(collector_->collected_netdevs(), ElementsAre("eth0", "eth2"));
  samples = Cycle();
  EXPECT_EQ(ErrorCount(samples, "missing"), 2u);  // GDRVINFO at re-discovery said ENODEV too
}

TEST_F(EthtoolFailureTest, TransientErrorIsCountedAndRetried) {
  FABRICMON_ASSERT_OK(Discover());
  api_->SetError("eth1", absl::UnavailableError("EBUSY"));
  std::vector<RecordedSample> samples = Cycle();
  EXPECT_FALSE(HasBytes(samples, "eth1"));
  EXPECT_EQ(ErrorCount(samples, "io"), 1u);
  api_->SetError("eth1", absl::OkStatus());
  samples = Cycle();
  EXPECT_TRUE(HasBytes(samples, "eth1"));
}

TEST_F(EthtoolFailureTest, CountersFollowTheSourceAcrossCycles) {
  FABRICMON_ASSERT_OK(Discover());
  EXPECT_EQ(
      Raw(Cycle(), "fabricmon_roce_kernel_bytes_total", {{"netdev", "eth0"}, {"direction", "tx"}}),
      20u);
  api_->SetStat("eth0", "tx_bytes", 25);
  EXPECT_EQ(
      Raw(Cycle(), "fabricmon_roce_kernel_bytes_total", {{"netdev", "eth0"}, {"direction", "tx"}}),
      25u);
}

// --- Hostile captures through the whole collector ---

TEST(EthtoolHostileTest, HostileCapturesNeverCrashAndKeepWhatIsValid) {
  TempTree tree;
  tree.WriteFile("captures/empty.txt", "");
  tree.WriteFile("captures/garbage.txt",
                 "NIC statistics:\n"
                 "     rx_discards_phy: 18446744073709551615\n"
                 "     tx_discards_phy: 18446744073709551616\n"
                 "     rx_out_of_buffer: -1\n"
                 "     link_down_events_phy: 4294967296\n"
                 "\x01\x02\x03 binary: junk\n"
                 "     rx_crc_errors_phy: 12abc\n");
  AddRoceNetdev(tree, "eth0", "mlx5_0");
  AddRoceNetdev(tree, "eth1", "mlx5_1");
  auto api = std::make_unique<FixtureEthtoolApi>();
  FABRICMON_ASSERT_OK(api->LoadCapture("eth0", "mlx5_core", tree.root() + "/captures/empty.txt"));
  FABRICMON_ASSERT_OK(api->LoadCapture("eth1", "mlx5_core", tree.root() + "/captures/garbage.txt"));
  EXPECT_THAT(api->LoadCapture("eth2", "mlx5_core", tree.root() + "/captures/absent.txt"),
              StatusIs(absl::StatusCode::kNotFound));
  auto collector = MakeCollector(tree, std::move(api));
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  EXPECT_THAT(collector->collected_netdevs(), ElementsAre("eth1"));  // eth0: empty set
  RecordingSink sink;
  FABRICMON_ASSERT_OK(collector->Collect(sink));
  const auto& samples = sink.samples();
  EXPECT_EQ(
      Raw(samples, "fabricmon_roce_phy_discards_total", {{"netdev", "eth1"}, {"direction", "rx"}}),
      18446744073709551615u);
  EXPECT_EQ(FindSample(samples, "fabricmon_roce_phy_discards_total",
                       {{"netdev", "eth1"}, {"direction", "tx"}}),
            nullptr);
  EXPECT_THAT(FamilySamples(samples, "fabricmon_roce_rx_out_of_buffer_total"), IsEmpty());
  EXPECT_THAT(FamilySamples(samples, "fabricmon_roce_phy_rx_crc_errors_total"), IsEmpty());
  // A value past the 32-bit width is passed on raw: wrap handling is the aggregator's, by width.
  const RecordedSample* link_down =
      FindSample(samples, "fabricmon_roce_link_down_events_total", {{"netdev", "eth1"}});
  ASSERT_NE(link_down, nullptr);
  EXPECT_EQ(link_down->raw_value, 4294967296u);
}

TEST(EthtoolFixtureApiTest, DirectoryLayout) {
  TempTree tree;
  tree.WriteFile("eth0/driver", "driver: mlx5_core\nversion: 5.15\n");
  tree.WriteFile("eth0/statistics", "NIC statistics:\n     rx_bytes: 5\n");
  tree.WriteFile("eth1/driver", "8021q\n");
  FixtureEthtoolApi api;
  FABRICMON_ASSERT_OK(api.LoadDirectory(tree.root()));
  auto driver = api.GetDriver("eth0");
  FABRICMON_ASSERT_OK(driver);
  EXPECT_EQ(driver->driver, "mlx5_core");
  EXPECT_EQ(driver->n_stats, 1u);
  std::vector<uint64_t> values(1);
  FABRICMON_ASSERT_OK(api.GetStats("eth0", values));
  EXPECT_THAT(values, ElementsAre(5u));
  values.clear();
  EXPECT_THAT(api.GetStats("eth0", values), StatusIs(absl::StatusCode::kInvalidArgument));
  values.resize(1);
  EXPECT_THAT(api.GetStringSet("eth1"), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(api.GetStats("eth1", values), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(api.GetDriver("eth9"), StatusIs(absl::StatusCode::kNotFound));
}

// --- Registration ---

TEST(EthtoolRegistrationTest, RegisteredEnabledByDefault) {
  CollectorRegistry registry;
  RegisterEthtoolCollector(registry);
  ASSERT_THAT(registry.entries(), SizeIs(1));
  EXPECT_EQ(registry.entries()[0].name, "ethtool");
  v1::CollectorsConfig config;
  TempTree tree;
  config.mutable_ethtool()->set_sysfs_root(tree.root());  // hermetic: an empty tree
  testing::FakeClock clock;
  auto created = registry.CreateEnabled({config, clock});
  FABRICMON_ASSERT_OK(created);
  ASSERT_THAT(*created, SizeIs(1));
  v1::Inventory inventory;
  // A tree that is not /sys is a capture: the ioctl would read this host, so the collector is
  // off unless enabled explicitly or given captured statistics (the capture rule).
  EXPECT_TRUE(IsTurnedOff((*created)[0]->Discover(inventory)));
  config.mutable_ethtool()->set_stats_dir(tree.root());
  created = registry.CreateEnabled({config, clock});
  FABRICMON_ASSERT_OK(created);
  ASSERT_THAT(*created, SizeIs(1));
  EXPECT_THAT((*created)[0]->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
  config.clear_ethtool();
  config.mutable_ethtool()->set_sysfs_root(tree.root());
  config.mutable_ethtool()->set_enabled(true);
  created = registry.CreateEnabled({config, clock});
  FABRICMON_ASSERT_OK(created);
  ASSERT_THAT(*created, SizeIs(1));
  EXPECT_THAT((*created)[0]->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));

  config.mutable_ethtool()->set_enabled(false);
  created = registry.CreateEnabled({config, clock});
  FABRICMON_ASSERT_OK(created);
  EXPECT_THAT(*created, IsEmpty());
}

}  // namespace
}  // namespace fabricmon::collectors
