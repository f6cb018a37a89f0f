// The capture-directory EthtoolApi (EthtoolCollectorConfig.stats_dir): errno-exact errors, files
// re-read on every call (a simulator rewrites them between cycles), and the collector built by
// the registry's factory reading through it.

#include "collectors/ethtool/capture_dir_ethtool_api.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/recording_sink.h"
#include "collectors/ethtool/ethtool_collector.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/ethtool/ethtool_test_util.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::collectors::ethtool_testing::AddRoceNetdev;
using ::fabricmon::collectors::ethtool_testing::FindSample;
using ::fabricmon::testing::SharedFixture;
using ::fabricmon::testing::StatusIs;
using ::fabricmon::testing::TempTree;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kDuration[] = "fabricmon_roce_pfc_pause_duration_seconds_total";
constexpr char kRdmaBytes[] = "fabricmon_roce_rdma_bytes_total";

// Replaces <root>/<relative> the way a simulator does: a temporary file renamed over it.
void ReplaceFile(const TempTree& tree, const std::string& relative, const std::string& content) {
  const std::string path = absl::StrCat(tree.root(), "/", relative);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
  }
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
}

std::string Stats(uint64_t rx_pause_us, uint64_t rdma_bytes) {
  return absl::StrCat(
      "NIC statistics:\n     rx_prio3_pause: ", rx_pause_us / 100,
      "\n     rx_prio3_pause_duration: ", rx_pause_us,
      "\n     tx_prio3_pause_duration: 0\n     rx_vport_rdma_unicast_bytes: ", rdma_bytes, "\n");
}

class CaptureDirApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tree_.WriteFile("stats/eth2/statistics", Stats(1000, 4096));
    tree_.WriteFile("stats/eth2/driver", "driver: mlx5_core\nversion: 24.10\n");
    tree_.WriteFile("stats/lo/driver", "loopback\n");  // a netdev without ETH_SS_STATS
    api_ = CreateCaptureDirEthtoolApi(tree_.root() + "/stats");
  }

  TempTree tree_;
  std::unique_ptr<EthtoolApi> api_;
};

TEST_F(CaptureDirApiTest, DriverAndStringSetComeFromTheFiles) {
  absl::StatusOr<EthtoolDriverInfo> info = api_->GetDriver("eth2");
  FABRICMON_ASSERT_OK(info.status());
  EXPECT_EQ(info->driver, "mlx5_core");
  EXPECT_EQ(info->n_stats, 4u);
  absl::StatusOr<std::vector<std::string>> names = api_->GetStringSet("eth2");
  FABRICMON_ASSERT_OK(names.status());
  EXPECT_THAT(*names, ElementsAre("rx_prio3_pause", "rx_prio3_pause_duration",
                                  "tx_prio3_pause_duration", "rx_vport_rdma_unicast_bytes"));
  std::vector<uint64_t> values(names->size());
  FABRICMON_ASSERT_OK(api_->GetStats("eth2", values));
  EXPECT_THAT(values, ElementsAre(10, 1000, 0, 4096));
}

TEST_F(CaptureDirApiTest, ErrorsAreTheIoctlOnes) {
  // No directory: ENODEV.
  EXPECT_THAT(api_->GetDriver("eth9").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(api_->GetStringSet("eth9").status(), StatusIs(absl::StatusCode::kNotFound));
  std::vector<uint64_t> values(1);
  EXPECT_THAT(api_->GetStats("eth9", values), StatusIs(absl::StatusCode::kNotFound));
  // Names that are not a directory entry never escape the directory.
  EXPECT_THAT(api_->GetStringSet("../stats").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(api_->GetStringSet("").status(), StatusIs(absl::StatusCode::kNotFound));
  // A netdev without `statistics`: the driver answers GDRVINFO but not ETH_SS_STATS.
  absl::StatusOr<EthtoolDriverInfo> lo = api_->GetDriver("lo");
  FABRICMON_ASSERT_OK(lo.status());
  EXPECT_EQ(lo->driver, "loopback");
  EXPECT_THAT(api_->GetStringSet("lo").status(), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(api_->GetStats("lo", values), StatusIs(absl::StatusCode::kUnimplemented));
  // The caller must pass its set size, as for the ioctl.
  std::vector<uint64_t> empty;
  EXPECT_THAT(api_->GetStats("eth2", empty), StatusIs(absl::StatusCode::kInvalidArgument));
  // A settings dump is not a statistics capture.
  tree_.WriteFile("stats/eth3/statistics", "Settings for eth3:\n\tSpeed: 100000Mb/s\n");
  EXPECT_THAT(api_->GetStringSet("eth3").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CaptureDirApiTest, EveryCallRereadsTheFiles) {
  std::vector<uint64_t> values(4);
  FABRICMON_ASSERT_OK(api_->GetStats("eth2", values));
  EXPECT_EQ(values[1], 1000u);
  ReplaceFile(tree_, "stats/eth2/statistics", Stats(250000, 1 << 20));
  FABRICMON_ASSERT_OK(api_->GetStats("eth2", values));
  EXPECT_THAT(values, ElementsAre(2500, 250000, 0, 1 << 20));

  // The key set grows (PFC enabled on another priority): the current count comes back, and the
  // string set says what the new values are.
  ReplaceFile(tree_, "stats/eth2/statistics",
              Stats(250000, 1 << 20) + "     rx_prio4_pause_duration: 7\n");
  FABRICMON_ASSERT_OK(api_->GetStats("eth2", values));
  ASSERT_EQ(values.size(), 5u);
  EXPECT_EQ(values[4], 7u);
  EXPECT_EQ(api_->GetStringSet("eth2")->back(), "rx_prio4_pause_duration");

  // The netdev goes away.
  tree_.Remove("stats/eth2");
  EXPECT_THAT(api_->GetStats("eth2", values), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CaptureDirApiTest, RealCaptureParsesLikeTheFixtureApi) {
  TempTree tree;
  const std::string capture = SharedFixture("ethtool/mlx5_connectx4_ubuntu18.04_ethq-tests.txt");
  std::ifstream in(capture);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  tree.WriteFile("dir/u1804/statistics", text);
  auto api = CreateCaptureDirEthtoolApi(tree.root() + "/dir");
  FixtureEthtoolApi fixture;
  FABRICMON_ASSERT_OK(fixture.LoadCapture("u1804", "mlx5_core", capture));
  absl::StatusOr<std::vector<std::string>> names = api->GetStringSet("u1804");
  FABRICMON_ASSERT_OK(names.status());
  EXPECT_EQ(*names, *fixture.GetStringSet("u1804"));
  std::vector<uint64_t> a(names->size());
  std::vector<uint64_t> b(names->size());
  FABRICMON_ASSERT_OK(api->GetStats("u1804", a));
  FABRICMON_ASSERT_OK(fixture.GetStats("u1804", b));
  EXPECT_EQ(a, b);
}

// The registry's factory picks the capture-directory api when stats_dir is set; the collector
// then follows the files from cycle to cycle.
TEST(CaptureDirCollectorTest, FactoryUsesStatsDirAndSeesChanges) {
  TempTree tree;
  AddRoceNetdev(tree, "eth2", "mlx5_0");
  tree.WriteFile("stats/eth2/statistics", Stats(0, 0));
  tree.WriteFile("stats/eth2/driver", "mlx5_core\n");

  v1::CollectorsConfig config;
  config.mutable_ethtool()->set_sysfs_root(tree.root());
  config.mutable_ethtool()->set_stats_dir(tree.root() + "/stats");
  testing::FakeClock clock;
  CollectorRegistry registry;
  RegisterEthtoolCollector(registry);
  CollectorContext context{config, clock};
  absl::StatusOr<std::vector<std::unique_ptr<Collector>>> created = registry.CreateEnabled(context);
  FABRICMON_ASSERT_OK(created.status());
  ASSERT_EQ(created->size(), 1u);
  Collector& collector = *created->front();

  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector.Discover(inventory));
  ASSERT_EQ(inventory.netdevs_size(), 1);
  EXPECT_EQ(inventory.netdevs(0).driver(), "mlx5_core");
  EXPECT_EQ(inventory.netdevs(0).rdma_device(), "mlx5_0");

  const Labels rx3 = {{"netdev", "eth2"}, {"direction", "rx"}, {"priority", "3"}};
  const Labels rdma = {{"netdev", "eth2"}, {"direction", "rx"}, {"cast", "unicast"}};
  RecordingSink first;
  FABRICMON_ASSERT_OK(collector.Collect(first));
  const RecordedSample* paused = FindSample(first.samples(), kDuration, rx3);
  ASSERT_NE(paused, nullptr);
  EXPECT_EQ(paused->raw_value, 0u);

  ReplaceFile(tree, "stats/eth2/statistics", Stats(900000, 123456789));
  RecordingSink second;
  FABRICMON_ASSERT_OK(collector.Collect(second));
  paused = FindSample(second.samples(), kDuration, rx3);
  ASSERT_NE(paused, nullptr);
  EXPECT_EQ(paused->raw_value, 900000u);
  EXPECT_DOUBLE_EQ(ExportedValue(paused->series, paused->raw_value), 0.9);  // µs → s
  const RecordedSample* bytes = FindSample(second.samples(), kRdmaBytes, rdma);
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(bytes->raw_value, 123456789u);

  // The netdev's directory vanishes: counted, and the collector asks for re-discovery.
  tree.Remove("stats/eth2");
  RecordingSink third;
  FABRICMON_ASSERT_OK(collector.Collect(third));
  EXPECT_EQ(FindSample(third.samples(), kDuration, rx3), nullptr);
  EXPECT_TRUE(collector.WantsRediscovery());
}

TEST(CaptureDirCollectorTest, WithoutStatsDirTheFactoryStillBuilds) {
  // The ioctl api: no RoCE netdev in an empty tree, so discovery reports hardware absent. The
  // tree is a capture, so the ioctl collector must be enabled explicitly (the capture rule).
  TempTree tree;
  v1::CollectorsConfig config;
  config.mutable_ethtool()->set_sysfs_root(tree.root());
  config.mutable_ethtool()->set_enabled(true);
  testing::FakeClock clock;
  CollectorRegistry registry;
  RegisterEthtoolCollector(registry);
  CollectorContext context{config, clock};
  auto created = registry.CreateEnabled(context);
  FABRICMON_ASSERT_OK(created.status());
  ASSERT_EQ(created->size(), 1u);
  v1::Inventory inventory;
  EXPECT_THAT(created->front()->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(inventory.netdevs(), IsEmpty());
}

}  // namespace
}  // namespace fabricmon::collectors
