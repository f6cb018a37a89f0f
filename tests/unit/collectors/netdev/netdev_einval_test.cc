// The kernel's failure modes on a hand-built tree: the netdev_dump driver runs with the
// fabricmon_einval_preload shim (tests/testing/einval_preload.c), which makes reads of chosen
// files fail with EINVAL (as sysfs does for `speed` of a down link and for the statistics of a
// netdev being unregistered) or, once removed, with ENODEV (as kernfs does under an open
// descriptor), and logs every path opened. Built only where the shim target exists.

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/common/file_reader.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/netdev/test_process.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::TempTree;
using netdev_testing::ChildProcess;
using netdev_testing::FindSample;
using netdev_testing::ProcessResult;
using netdev_testing::RunProcess;

constexpr char kDumpPath[] = FABRICMON_NETDEV_DUMP_PATH;
constexpr char kShimPath[] = FABRICMON_EINVAL_PRELOAD_PATH;

void WriteNetdev(const TempTree& tree, const std::string& name) {
  const std::string dir = "class/net/" + name;
  for (const auto& [file, value] :
       std::vector<std::pair<std::string, std::string>>{{"type", "1\n"},
                                                        {"operstate", "up\n"},
                                                        {"carrier", "1\n"},
                                                        {"carrier_changes", "2\n"},
                                                        {"carrier_up_count", "1\n"},
                                                        {"carrier_down_count", "1\n"},
                                                        {"mtu", "1500\n"},
                                                        {"speed", "100000\n"},
                                                        {"statistics/rx_bytes", "111\n"},
                                                        {"statistics/tx_bytes", "222\n"},
                                                        {"statistics/rx_packets", "3\n"}}) {
    tree.WriteFile(dir + "/" + file, value);
  }
}

std::string Errors(const char* kind) {
  return absl::StrCat("fabricmon_collector_errors_total{collector=\"netdev\",kind=\"", kind, "\"}");
}

std::string Key(const char* metric, const char* netdev) {
  return absl::StrCat(metric, "{netdev=\"", netdev, "\"}");
}

std::vector<std::string> DumpArgv(const std::vector<std::string>& env, const TempTree& tree,
                                  std::vector<std::string> flags = {}) {
  std::vector<std::string> argv = {"env", absl::StrCat("LD_PRELOAD=", kShimPath)};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {kDumpPath, "--sysfs_root=" + tree.root(), "--tcp=false"});
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

TEST(NetdevEinvalTest, ExpectedEinvalIsAbsentUnexpectedEinvalIsCounted) {
  TempTree tree;
  WriteNetdev(tree, "eth0");
  WriteNetdev(tree, "eth1");
  TempTree logs;
  const std::string einval_log = logs.root() + "/einval.log";
  const ProcessResult result =
      RunProcess(DumpArgv({"FABRICMON_EINVAL_PATHS=eth0/speed:eth0/statistics/rx_bytes",
                           "FABRICMON_EINVAL_LOG=" + einval_log},
                          tree),
                 absl::Seconds(30));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string& text = result.out;
  // speed: EINVAL is "down or no link settings" → absent, not an error.
  EXPECT_FALSE(FindSample(text, Key("fabricmon_netdev_speed_bytes_per_second", "eth0")));
  EXPECT_EQ(FindSample(text, Key("fabricmon_netdev_speed_bytes_per_second", "eth1")), 12.5e9);
  // statistics: EINVAL means the netdev is being unregistered → counted, early rediscovery.
  EXPECT_FALSE(FindSample(text, Key("fabricmon_netdev_rx_bytes_total", "eth0")));
  EXPECT_EQ(FindSample(text, Key("fabricmon_netdev_tx_bytes_total", "eth0")), 222);
  EXPECT_EQ(FindSample(text, Key("fabricmon_netdev_rx_bytes_total", "eth1")), 111);
  EXPECT_EQ(FindSample(text, Errors("unsupported")), 1);
  EXPECT_EQ(FindSample(text, Errors("missing")), 0);
  EXPECT_TRUE(absl::StrContains(result.err, "wants_rediscovery: 1")) << result.err;
  // The shim really refused them: speed once (at discovery), rx_bytes once (in Collect).
  absl::StatusOr<std::string> refused = ReadSmallFile(einval_log, 1 << 16);
  ASSERT_TRUE(refused.ok()) << refused.status();
  const std::vector<std::string> lines = absl::StrSplit(*refused, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 2u) << *refused;
}

TEST(NetdevEinvalTest, EnodevFromAFileRemovedUnderAnOpenDescriptor) {
  TempTree tree;
  WriteNetdev(tree, "eth0");
  TempTree sync;
  absl::StatusOr<ChildProcess> dump = ChildProcess::Start(DumpArgv(
      {"FABRICMON_ENODEV_PATHS=class/net/eth0/statistics"}, tree, {"--sync_dir=" + sync.root()}));
  ASSERT_TRUE(dump.ok()) << dump.status();
  bool discovered = false;
  for (int i = 0; i < 1000 && !discovered; ++i) {  // ≤ 10 s
    discovered = access((sync.root() + "/discovered").c_str(), F_OK) == 0;
    if (!discovered) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ASSERT_TRUE(discovered) << dump->ReadErr();
  tree.Remove("class/net/eth0/statistics/tx_bytes");  // class/net itself is unchanged
  sync.WriteFile("go", "1\n");
  ASSERT_EQ(dump->Wait(absl::Seconds(30)), 0) << dump->ReadErr();
  const std::string text = dump->ReadOut();
  EXPECT_FALSE(FindSample(text, Key("fabricmon_netdev_tx_bytes_total", "eth0")));
  EXPECT_EQ(FindSample(text, Key("fabricmon_netdev_rx_bytes_total", "eth0")), 111);
  EXPECT_EQ(FindSample(text, Key("fabricmon_netdev_mtu_bytes", "eth0")), 1500);
  EXPECT_EQ(FindSample(text, Errors("missing")), 1);
  EXPECT_TRUE(absl::StrContains(dump->ReadErr(), "wants_rediscovery: 1")) << dump->ReadErr();
}

TEST(NetdevEinvalTest, ExcludedNetdevIsNeverOpened) {
  TempTree tree;
  WriteNetdev(tree, "eth0");
  WriteNetdev(tree, "restricted0");
  TempTree logs;
  const std::string open_log = logs.root() + "/open.log";
  const ProcessResult result =
      RunProcess(DumpArgv({"FABRICMON_OPEN_LOG=" + open_log}, tree, {"--exclude=restricted.*"}),
                 absl::Seconds(30));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  absl::StatusOr<std::string> opened = ReadSmallFile(open_log, 1 << 20);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE(absl::StrContains(*opened, "class/net/eth0/statistics/rx_bytes")) << *opened;
  EXPECT_FALSE(absl::StrContains(*opened, "restricted0")) << *opened;
  EXPECT_FALSE(absl::StrContains(result.out, "restricted0"));
}

}  // namespace
}  // namespace fabricmon::collectors
