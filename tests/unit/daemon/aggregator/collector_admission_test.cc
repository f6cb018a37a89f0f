// The real collectors on captured trees, their every series offered to the aggregator's
// FamilyRegistry: each is admitted (catalogued, or a derived name that follows the rules and
// gets pinned), and every catalogued family they declare matches the catalogue. A collector that
// starts emitting a family the catalogue contradicts fails here, not in production.

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "collectors/core/recording_sink.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "collectors/netdev/netdev_collector.h"
#include "daemon/store/family_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::aggregator {
namespace {

using ::fabricmon::testing::IsOk;

std::vector<collectors::RecordedSample> CollectOnce(collectors::Collector& collector) {
  v1::Inventory inventory;
  EXPECT_THAT(collector.Discover(inventory), IsOk());
  collectors::RecordingSink sink;
  EXPECT_THAT(collector.Collect(sink), IsOk());
  return sink.Take();
}

void ExpectAdmitted(const std::vector<collectors::RecordedSample>& samples,
                    std::set<std::string>* pinned_families) {
  store::FamilyRegistry registry(wire::MetricCatalogue::Project());
  ASSERT_FALSE(samples.empty());
  for (const collectors::RecordedSample& sample : samples) {
    collectors::SeriesDesc desc = sample.series;
    const std::string help = desc.help;
    ASSERT_THAT(registry.Admit(desc), IsOk()) << desc.name;
    const wire::CatalogueFamily* family = wire::MetricCatalogue::Project().Find(desc.name);
    if (family != nullptr) {
      EXPECT_EQ(help, family->help) << desc.name << ": HELP differs from the catalogue's";
    } else {
      pinned_families->insert(desc.name);
    }
  }
}

TEST(CollectorAdmissionTest, IbSysfsOnTheCapturedDgxH100Tree) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(testing::SharedFixture("sysfs/gpud-h100/sys"));
  auto collector = collectors::IbSysfsCollector::Create(config);
  ASSERT_THAT(collector, IsOk());
  std::set<std::string> pinned;
  ExpectAdmitted(CollectOnce(**collector), &pinned);
  // Only names derived from driver files are outside the catalogue: hw_counters/ ones.
  for (const std::string& name : pinned) {
    EXPECT_TRUE(absl::StartsWith(name, "fabricmon_ib_hw_")) << name;
  }
  EXPECT_FALSE(pinned.empty());
}

TEST(CollectorAdmissionTest, NetdevOnACapturedTreeWithTcp) {
  v1::NetdevCollectorConfig config;
  config.set_sysfs_root(testing::SharedFixture("sysfs/procfs/sys"));
  config.set_procfs_root(testing::SourcePath("tests/unit/collectors/netdev/testdata/proc"));
  config.set_tcp(true);
  auto collector = collectors::NetdevCollector::Create(config);
  ASSERT_THAT(collector, IsOk());
  std::set<std::string> pinned;
  ExpectAdmitted(CollectOnce(**collector), &pinned);
  EXPECT_THAT(pinned, ::testing::IsEmpty());
}

}  // namespace
}  // namespace fabricmon::aggregator
