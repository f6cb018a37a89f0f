#include "collectors/core/collector_registry.h"

#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::collectors {
namespace {

class NamedCollector final : public Collector {
 public:
  explicit NamedCollector(std::string name) : name_(std::move(name)) {}
  absl::string_view name() const override { return name_; }
  absl::Status Discover(v1::Inventory&) override { return absl::OkStatus(); }
  absl::Status Collect(SampleSink&) override { return absl::OkStatus(); }
  int64_t interval_ms() const override { return 1000; }
  int64_t rediscover_interval_ms() const override { return 60000; }

 private:
  std::string name_;
};

CollectorFactory FactoryFor(const std::string& name) {
  return [name](const CollectorContext&) -> absl::StatusOr<std::unique_ptr<Collector>> {
    return std::unique_ptr<Collector>(new NamedCollector(name));
  };
}

TEST(CollectorRegistryTest, DefaultsApplyWhenConfigIsSilent) {
  CollectorRegistry registry;
  registry.Register("ib_sysfs", true, FactoryFor("ib_sysfs"));
  registry.Register("ib_fabric", false, FactoryFor("ib_fabric"));
  v1::CollectorsConfig config;
  testing::FakeClock clock;
  auto created = registry.CreateEnabled({config, clock});
  FABRICMON_ASSERT_OK(created);
  ASSERT_EQ(created->size(), 1u);
  EXPECT_EQ((*created)[0]->name(), "ib_sysfs");
}

TEST(CollectorRegistryTest, ConfigEnabledOverridesDefault) {
  CollectorRegistry registry;
  registry.Register("ib_sysfs", true, FactoryFor("ib_sysfs"));
  registry.Register("ib_fabric", false, FactoryFor("ib_fabric"));
  v1::CollectorsConfig config;
  config.mutable_ib_sysfs()->set_enabled(false);
  config.mutable_ib_fabric()->set_enabled(true);
  testing::FakeClock clock;
  auto created = registry.CreateEnabled({config, clock});
  FABRICMON_ASSERT_OK(created);
  ASSERT_EQ(created->size(), 1u);
  EXPECT_EQ((*created)[0]->name(), "ib_fabric");
}

TEST(CollectorRegistryTest, FactoryErrorNamesTheCollector) {
  CollectorRegistry registry;
  registry.Register("ib_sysfs", true,
                    [](const CollectorContext&) -> absl::StatusOr<std::unique_ptr<Collector>> {
                      return absl::InvalidArgumentError("bad pattern");
                    });
  v1::CollectorsConfig config;
  testing::FakeClock clock;
  auto created = registry.CreateEnabled({config, clock});
  EXPECT_THAT(created, testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(created.status().message().find("ib_sysfs"), absl::string_view::npos);
}

LiveSourceFn Live(std::string what) {
  return [what](const v1::CollectorsConfig&) { return what; };
}

TEST(CollectorRegistryTest, CaptureRootIsAnyNonLiveRoot) {
  v1::CollectorsConfig config;
  EXPECT_EQ(CaptureRoot(config), "");
  config.mutable_ib_sysfs()->set_sysfs_root("/sys/");
  config.mutable_netdev()->set_procfs_root("/proc");
  EXPECT_EQ(CaptureRoot(config), "");
  config.mutable_rdma_qp()->set_procfs_root("/tmp/capture/proc");
  EXPECT_EQ(CaptureRoot(config), "rdma_qp.procfs_root=/tmp/capture/proc");
}

TEST(CollectorRegistryTest, CaptureTurnsOffDefaultEnabledLiveCollectors) {
  CollectorRegistry registry;
  registry.Register("ib_sysfs", true, FactoryFor("ib_sysfs"));
  registry.Register("rdma_qp", true, FactoryFor("rdma_qp"), Live("netlink"));
  registry.Register("nvml", true, FactoryFor("nvml"), Live("the library"));
  registry.Register("ethtool", true, FactoryFor("ethtool"), Live(""));  // reads its roots
  v1::CollectorsConfig config;
  config.mutable_ib_sysfs()->set_sysfs_root("/tmp/tree");
  config.mutable_nvml()->set_enabled(true);  // explicit: stays on
  testing::FakeClock clock;
  auto created = registry.CreateEnabled({config, clock});
  FABRICMON_ASSERT_OK(created);
  ASSERT_EQ(created->size(), 4u);
  v1::Inventory inventory;
  FABRICMON_EXPECT_OK((*created)[0]->Discover(inventory));
  const absl::Status off = (*created)[1]->Discover(inventory);
  EXPECT_TRUE(IsTurnedOff(off));
  EXPECT_NE(off.message().find("ib_sysfs.sysfs_root=/tmp/tree"), absl::string_view::npos);
  EXPECT_NE(off.message().find("netlink"), absl::string_view::npos);
  EXPECT_FALSE(IsTurnedOff((*created)[2]->Discover(inventory)));
  EXPECT_FALSE(IsTurnedOff((*created)[3]->Discover(inventory)));
  // Without a capture nothing is turned off.
  config.mutable_ib_sysfs()->clear_sysfs_root();
  for (const auto& decision : registry.Decide(config)) {
    EXPECT_NE(decision.state, CollectorRegistry::Decision::State::kTurnedOff)
        << decision.entry->name;
  }
}

TEST(CollectorRegistryTest, EnableCollectorsByName) {
  v1::CollectorsConfig config;
  FABRICMON_EXPECT_OK(EnableCollectors({"nvml", "ib_fabric"}, config));
  EXPECT_TRUE(config.nvml().enabled());
  EXPECT_TRUE(config.ib_fabric().enabled());
  EXPECT_THAT(EnableCollectors({"nosuch"}, config),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fabricmon::collectors
