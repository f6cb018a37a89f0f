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

}  // namespace
}  // namespace fabricmon::collectors
