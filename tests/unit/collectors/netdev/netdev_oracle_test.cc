// Independent oracles for the netdev collector:
//  - Debian's prometheus-node-exporter reads the same sysfs tree (--path.sysfs, netclass
//    collector) and the same procfs files (--path.procfs, netstat collector); every value it
//    reports for a metric we also export must be equal to ours.
//  - promtool check metrics lints our serialized exposition.
// Both are skipped, with a message, where the program is not installed.

#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectors/core/recording_sink.h"
#include "collectors/netdev/netdev_collector.h"
#include "daemon/common/file_reader.h"
#include "daemon/exposition/text_exposition.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/loopback.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/netdev/netdev_test_util.h"
#include "tests/unit/collectors/netdev/test_process.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::TempTree;
using netdev_testing::ChildProcess;
using netdev_testing::CollectOnce;
using netdev_testing::FindSample;
using netdev_testing::HaveProgram;
using netdev_testing::MaterializeGcmSnapshot;
using netdev_testing::Scrape;

constexpr char kNodeExporter[] = "prometheus-node-exporter";

// Starts node_exporter on a free loopback port, scrapes /metrics once, stops it. Every wait is
// bounded; the child is killed on every path (ChildProcess's destructor).
absl::StatusOr<std::string> ScrapeNodeExporter(const std::string& sysfs,
                                               const std::string& procfs) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = ::fabricmon::testing::FreePort();
    if (port == 0) {
      return absl::InternalError("no free port on 127.0.0.1");
    }
    absl::StatusOr<ChildProcess> child = ChildProcess::Start({
        kNodeExporter,
        "--collector.disable-defaults",
        "--collector.netclass",
        "--collector.netstat",
        "--collector.netstat.fields=.*",
        "--path.sysfs=" + sysfs,
        "--path.procfs=" + procfs,
        absl::StrCat("--web.listen-address=127.0.0.1:", port),
    });
    if (!child.ok()) {
      return child.status();
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (absl::Now() < deadline) {
      if (child->Wait(absl::ZeroDuration()).has_value()) {
        break;  // exited: most likely the port was taken in between; try another
      }
      absl::StatusOr<std::string> body =
          ::fabricmon::testing::HttpGet(port, "/metrics", absl::Seconds(5));
      if (body.ok()) {
        child->Stop();
        return body;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    child->Stop();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("node_exporter did not answer: ", child->ReadErr()));
    }
  }
  return absl::UnavailableError("node_exporter could not bind a port");
}

std::unique_ptr<NetdevCollector> MakeCollector(const std::string& sysfs, const std::string& procfs,
                                               bool tcp) {
  v1::NetdevCollectorConfig config;
  config.set_sysfs_root(sysfs);
  config.set_procfs_root(procfs);
  config.set_tcp(tcp);
  auto collector = NetdevCollector::Create(config);
  EXPECT_THAT(collector, IsOk());
  return collector.ok() ? *std::move(collector) : nullptr;
}

// node_exporter netclass metric → ours (same units: node_network_speed_bytes is bytes/s too),
// and the sysfs file both read.
struct NetclassPair {
  const char* theirs;
  const char* ours;
  const char* file;
};
constexpr NetclassPair kNetclassPairs[] = {
    {"node_network_carrier", "fabricmon_netdev_carrier", "carrier"},
    {"node_network_carrier_changes_total", "fabricmon_netdev_carrier_changes_total",
     "carrier_changes"},
    {"node_network_carrier_up_changes_total", "fabricmon_netdev_carrier_up_total",
     "carrier_up_count"},
    {"node_network_carrier_down_changes_total", "fabricmon_netdev_carrier_down_total",
     "carrier_down_count"},
    {"node_network_mtu_bytes", "fabricmon_netdev_mtu_bytes", "mtu"},
    {"node_network_speed_bytes", "fabricmon_netdev_speed_bytes_per_second", "speed"},
};

int OperStateCode(const std::string& text) {
  static const char* const kStates[] = {"unknown", "notpresent", "down", "lowerlayerdown",
                                        "testing", "dormant",    "up"};
  for (int i = 0; i < 7; ++i) {
    if (text == kStates[i]) {
      return i;
    }
  }
  return -1;
}

// Compares every netclass value node_exporter reports with ours; returns the number compared.
// One deliberate difference: node_exporter reports an empty file (what a capture holds where the
// kernel answered EINVAL) as 0; we count it as an "empty" error and export no value.
int CompareNetclass(const std::string& exposition, const Scrape& ours, const std::string& sysfs,
                    const std::vector<std::string>& netdevs) {
  int compared = 0;
  for (const std::string& netdev : netdevs) {
    for (const auto& [theirs, mine, file] : kNetclassPairs) {
      std::optional<double> expected =
          FindSample(exposition, absl::StrCat(theirs, "{device=\"", netdev, "\"}"));
      if (!expected.has_value()) {
        continue;
      }
      absl::StatusOr<std::string> content =
          ReadTrimmed(absl::StrCat(sysfs, "/class/net/", netdev, "/", file));
      if (content.ok() && content->empty()) {
        EXPECT_FALSE(ours.Has(absl::StrCat(mine, "{netdev=\"", netdev, "\"}")));
        continue;
      }
      const std::string key = absl::StrCat(mine, "{netdev=\"", netdev, "\"}");
      EXPECT_TRUE(ours.Has(key)) << key << " absent; node_exporter has " << *expected;
      if (ours.Has(key)) {
        EXPECT_EQ(ours.Get(key), *expected) << key;
        ++compared;
      }
    }
    // node_network_info{...,device="X",...,operstate="up"} 1 → fabricmon_netdev_oper_state.
    std::string operstate;
    for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
      std::smatch match;
      const std::string text(line);
      static const std::regex info_re(
          R"re(^node_network_info\{.*device="([^"]*)".*operstate="([a-z]*)".*\} 1$)re");
      if (std::regex_match(text, match, info_re) && match[1] == netdev) {
        operstate = match[2];
      }
    }
    if (!operstate.empty()) {
      const std::string key = absl::StrCat("fabricmon_netdev_oper_state{netdev=\"", netdev, "\"}");
      EXPECT_EQ(ours.Get(key), OperStateCode(operstate)) << key;
      ++compared;
    }
  }
  return compared;
}

std::vector<std::string> NetdevNames(const v1::Inventory& inventory) {
  std::vector<std::string> names;
  for (const v1::Netdev& netdev : inventory.netdevs()) {
    names.push_back(netdev.name());
  }
  return names;
}

class NodeExporterOracleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveProgram(kNodeExporter)) {
      GTEST_SKIP() << kNodeExporter << " is not installed (Debian: apt-get install "
                   << kNodeExporter << ")";
    }
  }
};

TEST_F(NodeExporterOracleTest, NetclassOnTheProcfsFixtureTree) {
  const std::string sysfs = testing::SharedFixture("sysfs/procfs/sys");
  TempTree empty_proc;
  auto collector = MakeCollector(sysfs, empty_proc.root(), false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const Scrape ours = CollectOnce(*collector);
  absl::StatusOr<std::string> theirs = ScrapeNodeExporter(sysfs, empty_proc.root());
  ASSERT_THAT(theirs, IsOk());
  ASSERT_TRUE(absl::StrContains(*theirs, "node_scrape_collector_success{collector=\"netclass\"} 1"))
      << *theirs;
  // eth0: carrier, 3 carrier counters, mtu, speed, operstate.
  EXPECT_EQ(CompareNetclass(*theirs, ours, sysfs, NetdevNames(inventory)), 7);
}

TEST_F(NodeExporterOracleTest, NetclassOnIpoibSnapshots) {
  for (const char* snapshot :
       {"learn_good.json", "learn_ib_intf_operstate_down.json", "learn_stuck_ib_intf.json"}) {
    SCOPED_TRACE(snapshot);
    TempTree tree;
    ASSERT_TRUE(MaterializeGcmSnapshot(snapshot, tree));
    auto collector = MakeCollector(tree.root(), tree.root(), false);
    v1::Inventory inventory;
    ASSERT_THAT(collector->Discover(inventory), IsOk());
    const Scrape ours = CollectOnce(*collector);
    absl::StatusOr<std::string> theirs = ScrapeNodeExporter(tree.root(), tree.root());
    ASSERT_THAT(theirs, IsOk());
    EXPECT_GE(CompareNetclass(*theirs, ours, tree.root(), NetdevNames(inventory)), 8 * 5)
        << *theirs;
  }
}

TEST_F(NodeExporterOracleTest, NetstatTcpFieldsOnARealProcSnapshot) {
  const std::string procfs = testing::SourcePath("tests/unit/collectors/netdev/testdata/proc");
  TempTree empty_sys;
  auto collector = MakeCollector(empty_sys.root(), procfs, true);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const Scrape ours = CollectOnce(*collector);
  absl::StatusOr<std::string> theirs = ScrapeNodeExporter(empty_sys.root(), procfs);
  ASSERT_THAT(theirs, IsOk());
  int compared = 0;
  for (const netdev::TcpMetricSpec& spec : netdev::CuratedTcpMetrics()) {
    const std::string their_key = absl::StrCat("node_netstat_", spec.section, "_", spec.key);
    std::string our_key(spec.metric);
    if (!spec.label_name.empty()) {
      absl::StrAppend(&our_key, "{", spec.label_name, "=\"", spec.label_value, "\"}");
    }
    std::optional<double> expected = FindSample(*theirs, their_key);
    ASSERT_TRUE(expected.has_value()) << their_key;
    EXPECT_EQ(ours.Get(our_key), *expected) << our_key << " vs " << their_key;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(netdev::CuratedTcpMetrics().size()));
}

// ---------------------------------------------------------------------------------------------
// promtool check metrics

void ExpectPromtoolClean(const std::vector<RecordedSample>& samples) {
  const std::string text = exposition::SerializeText(exposition::BuildFamilies(samples));
  ASSERT_FALSE(text.empty());
  TempTree tmp;
  tmp.WriteFile("metrics.prom", text);
  netdev_testing::ProcessResult result = netdev_testing::RunProcess(
      {"promtool", "check", "metrics"}, absl::Seconds(30), tmp.root() + "/metrics.prom");
  ASSERT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err << "\n--- input ---\n" << text;
  EXPECT_EQ(result.out + result.err, "");
}

TEST(NetdevPromtoolTest, SerializedOutputIsLintClean) {
  if (!HaveProgram("promtool")) {
    GTEST_SKIP() << "promtool is not installed (Debian: apt-get install prometheus)";
  }
  {
    SCOPED_TRACE("procfs fixture tree + real TCP tables");
    auto collector =
        MakeCollector(testing::SharedFixture("sysfs/procfs/sys"),
                      testing::SourcePath("tests/unit/collectors/netdev/testdata/proc"), true);
    v1::Inventory inventory;
    ASSERT_THAT(collector->Discover(inventory), IsOk());
    ExpectPromtoolClean(CollectOnce(*collector).samples);
  }
  {
    SCOPED_TRACE("IPoIB snapshot");
    TempTree tree;
    ASSERT_TRUE(MaterializeGcmSnapshot("learn_ib_intf_operstate_down.json", tree));
    auto collector = MakeCollector(tree.root(), tree.root(), false);
    v1::Inventory inventory;
    ASSERT_THAT(collector->Discover(inventory), IsOk());
    ExpectPromtoolClean(CollectOnce(*collector).samples);
  }
  {
    SCOPED_TRACE("this host's /sys and /proc");
    auto collector = MakeCollector("/sys", "/proc", true);
    v1::Inventory inventory;
    if (collector->Discover(inventory).ok()) {
      ExpectPromtoolClean(CollectOnce(*collector).samples);
    }
  }
}

}  // namespace
}  // namespace fabricmon::collectors
