// IbSysfsCollector against sysfs failure modes a plain directory tree cannot produce by itself,
// and the real `fabricmon-agent --once` binary.
//
// This executable links fabricmon_einval_preload (tests/testing/einval_preload.c), which
// interposes read/pread/open in this process: with FABRICMON_EINVAL_PATHS set, counter files of
// a "firmware-restricted" device answer EINVAL; with FABRICMON_ENODEV_PATHS set, files of a
// removed device answer ENODEV on their open descriptors, as kernfs does. The collector is the
// production code, unchanged. Child agents get the same shim through LD_PRELOAD.

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "daemon/common/file_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/ib_sysfs/ib_sysfs_test_util.h"

#ifndef FABRICMON_EINVAL_PRELOAD_PATH
#error "FABRICMON_EINVAL_PRELOAD_PATH must name the built fabricmon_einval_preload library"
#endif
#ifndef FABRICMON_AGENT_PATH
#error "FABRICMON_AGENT_PATH must name the built fabricmon-agent"
#endif

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::TempTree;
using ib_sysfs_testing::CollectOnce;
using ib_sysfs_testing::CollectResult;
using ib_sysfs_testing::CounterFilesOfPort;
using ib_sysfs_testing::DevicePath;
using ib_sysfs_testing::DiscoverAndCollect;
using ib_sysfs_testing::EinvalPaths;
using ib_sysfs_testing::ErrorCount;
using ib_sysfs_testing::ExpectEveryCounterFileExported;
using ib_sysfs_testing::Find;
using ib_sysfs_testing::GenerateTree;
using ib_sysfs_testing::Get;
using ib_sysfs_testing::Label;
using ib_sysfs_testing::LoadManifest;
using ib_sysfs_testing::MakeCollector;
using ib_sysfs_testing::SamplesOfDevice;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kShimVariables[] = {"FABRICMON_EINVAL_PATHS", "FABRICMON_EINVAL_LOG",
                                          "FABRICMON_ENODEV_PATHS", "FABRICMON_OPEN_LOG"};

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs `command` with /bin/sh, capturing its stdout (stderr is left to the test's).
CommandResult RunShell(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return result;
  }
  char buffer[65536];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    result.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::vector<std::string> Lines(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, 1 << 24);
  if (!text.ok()) {
    return {};
  }
  return absl::StrSplit(*text, '\n', absl::SkipEmpty());
}

class IbSysfsIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kShimVariables) {
      unsetenv(name);
    }
    root_ = JoinPath(tree_.root(), "sys");
    FABRICMON_ASSERT_OK(GenerateTree(root_, "dgx-h100", 3));
    absl::StatusOr<google::protobuf::Struct> manifest = LoadManifest(root_);
    FABRICMON_ASSERT_OK(manifest);
    manifest_ = *std::move(manifest);
  }
  void TearDown() override {
    for (const char* name : kShimVariables) {
      unsetenv(name);
    }
  }

  std::string PortDir(absl::string_view device) const {
    return JoinPath(root_, absl::StrCat("class/infiniband/", device, "/ports/1"));
  }

  // Agent config: only ib_sysfs, on this tree.
  std::string WriteAgentConfig(const std::string& root, const std::string& exclude = "") const {
    const std::string path = JoinPath(tree_.root(), "agent.textproto");
    tree_.WriteFile("agent.textproto",
                    absl::StrCat("collectors {\n  ib_sysfs { sysfs_root: \"", root,
                                 "\" devices { exclude: \"", exclude,
                                 "\" } }\n  ethtool { enabled: false }\n"
                                 "  netdev { enabled: false }\n  nvml { enabled: false }\n"
                                 "  ib_fabric { enabled: false }\n}\n"));
    return path;
  }

  // Runs `fabricmon-agent --once` on `root` with the shim preloaded and `env` set; `redirect` is
  // appended to the shell command.
  CommandResult RunAgent(const std::string& root, const std::string& env,
                         const std::string& exclude = "", const std::string& redirect = "") const {
    const std::string config = WriteAgentConfig(root, exclude);
    return RunShell(absl::StrCat("env LD_PRELOAD='", FABRICMON_EINVAL_PRELOAD_PATH, "' ", env, " '",
                                 FABRICMON_AGENT_PATH, "' --once --config='", config, "' ",
                                 redirect));
  }

  TempTree tree_;
  std::string root_;
  google::protobuf::Struct manifest_;
};

TEST_F(IbSysfsIntegrationTest, ShimIsActiveInThisProcess) {
  // Guards every test below: if the interposition silently failed (link order, --as-needed), the
  // EINVAL/ENODEV tests would test nothing.
  const std::string file = JoinPath(PortDir("mlx5_0"), "counters/symbol_error");
  absl::StatusOr<std::string> before = ReadSmallFile(file);
  FABRICMON_ASSERT_OK(before);
  setenv("FABRICMON_EINVAL_PATHS", "mlx5_0/ports/1/counters/", 1);
  EXPECT_THAT(ReadSmallFile(file),
              ::fabricmon::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(ReadSmallFile(JoinPath(PortDir("mlx5_2"), "counters/symbol_error")).ok());
  unsetenv("FABRICMON_EINVAL_PATHS");
  EXPECT_TRUE(ReadSmallFile(file).ok());
}

TEST_F(IbSysfsIntegrationTest, SkipsEinvalFilesUntilRediscovery) {
  const std::string einval_log = JoinPath(tree_.root(), "einval.log");
  setenv("FABRICMON_EINVAL_PATHS", EinvalPaths(manifest_).c_str(), 1);
  setenv("FABRICMON_EINVAL_LOG", einval_log.c_str(), 1);
  const int files = CounterFilesOfPort(PortDir("mlx5_9"));
  ASSERT_EQ(files, 21 + 29);  // PMA extended group + mlx5 hw_counters (lifespan is no counter)

  auto collector = MakeCollector(root_);
  ASSERT_NE(collector, nullptr);
  CollectResult r = DiscoverAndCollect(*collector);
  FABRICMON_ASSERT_OK(r.discover);
  FABRICMON_ASSERT_OK(r.collect);

  // Restricted: listed, flagged, nothing read.
  bool found = false;
  for (const v1::RdmaDevice& d : r.inventory.rdma_devices()) {
    EXPECT_EQ(d.restricted(), d.name() == "mlx5_9") << d.name();
    found = found || d.name() == "mlx5_9";
  }
  EXPECT_TRUE(found);
  const RecordedSample* info = Find(r.samples, "fabricmon_ib_device_info", "mlx5_9");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(Label(info->series, "restricted"), "true");
  const RecordedSample* unreadable =
      Find(r.samples, "fabricmon_ib_port_unreadable_counters", "mlx5_9", "1");
  ASSERT_NE(unreadable, nullptr);
  EXPECT_EQ(unreadable->raw_value, static_cast<uint64_t>(files));
  for (const RecordedSample* s : SamplesOfDevice(r.samples, "mlx5_9")) {
    EXPECT_NE(s->series.type, MetricType::kCounter) << s->series.name;
  }
  EXPECT_NE(Find(r.samples, "fabricmon_ib_port_state", "mlx5_9", "1"), nullptr);
  EXPECT_EQ(ErrorCount(r.samples, ErrorKind::kUnsupported), static_cast<uint64_t>(files));
  // Every other device is complete.
  ExpectEveryCounterFileExported(root_, r.samples, {"mlx5_9"});
  const size_t asked = Lines(einval_log).size();
  EXPECT_GE(asked, static_cast<size_t>(files));  // + hw_counters/lifespan, read as a setting

  // Later cycles do not ask again: no new EINVAL, errors counted once per file.
  for (int i = 0; i < 3; ++i) {
    std::vector<RecordedSample> again = CollectOnce(*collector);
    EXPECT_EQ(ErrorCount(again, ErrorKind::kUnsupported), static_cast<uint64_t>(files));
    EXPECT_EQ(Get(again, "fabricmon_ib_port_unreadable_counters", "mlx5_9", "1").raw_value,
              static_cast<uint64_t>(files));
  }
  EXPECT_EQ(Lines(einval_log).size(), asked);

  // Rediscovery probes once more (the firmware policy may have changed), once per file.
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  std::vector<RecordedSample> after = CollectOnce(*collector);
  EXPECT_EQ(ErrorCount(after, ErrorKind::kUnsupported), 2u * files);
  EXPECT_EQ(Lines(einval_log).size(), 2 * asked);

  // Policy lifted: the next discovery reads the device again.
  unsetenv("FABRICMON_EINVAL_PATHS");
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  std::vector<RecordedSample> lifted = CollectOnce(*collector);
  EXPECT_EQ(Label(Get(lifted, "fabricmon_ib_device_info", "mlx5_9").series, "restricted"), "false");
  ExpectEveryCounterFileExported(root_, lifted);
}

TEST_F(IbSysfsIntegrationTest, StopsReadingFilesThatTurnEinvalAfterDiscovery) {
  const std::string einval_log = JoinPath(tree_.root(), "einval.log");
  auto collector = MakeCollector(root_);
  ASSERT_NE(collector, nullptr);
  CollectResult r = DiscoverAndCollect(*collector);
  FABRICMON_ASSERT_OK(r.collect);
  const size_t open_before = collector->open_counter_files();
  // Only the PMA counters of mlx5_4 start failing (e.g. a firmware update restricted the PF).
  setenv("FABRICMON_EINVAL_PATHS", "infiniband/mlx5_4/ports/1/counters/", 1);
  setenv("FABRICMON_EINVAL_LOG", einval_log.c_str(), 1);
  std::vector<RecordedSample> first = CollectOnce(*collector);
  const std::vector<std::string> pma = Lines(einval_log);
  EXPECT_EQ(pma.size(), 21u);
  EXPECT_EQ(ErrorCount(first, ErrorKind::kUnsupported), 21u);
  EXPECT_EQ(Get(first, "fabricmon_ib_port_unreadable_counters", "mlx5_4", "1").raw_value, 21u);
  EXPECT_EQ(Find(first, "fabricmon_ib_port_xmit_data_bytes_total", "mlx5_4", "1"), nullptr);
  EXPECT_NE(Find(first, "fabricmon_ib_hw_out_of_buffer_total", "mlx5_4", "1"), nullptr);
  EXPECT_EQ(collector->open_counter_files(), open_before - 21);
  // Not asked again in later cycles.
  for (int i = 0; i < 3; ++i) {
    std::vector<RecordedSample> again = CollectOnce(*collector);
    EXPECT_EQ(ErrorCount(again, ErrorKind::kUnsupported), 21u);
  }
  EXPECT_EQ(Lines(einval_log).size(), 21u);
  // EINVAL is not a vanished device.
  EXPECT_FALSE(collector->WantsRediscovery());
}

TEST_F(IbSysfsIntegrationTest, DeviceVanishingBetweenDiscoverAndCollect) {
  setenv("FABRICMON_ENODEV_PATHS", tree_.root().c_str(), 1);
  auto collector = MakeCollector(root_);
  ASSERT_NE(collector, nullptr);
  CollectResult r = DiscoverAndCollect(*collector);
  FABRICMON_ASSERT_OK(r.collect);
  EXPECT_EQ(ErrorCount(r.samples, ErrorKind::kMissing), 0u);
  const int counter_files = CounterFilesOfPort(PortDir("mlx5_2"));
  ASSERT_GT(counter_files, 40);

  // Hot-unplug / driver unbind: the class link and the device directory go away while the
  // collector holds descriptors on its files.
  const std::string device_dir = DevicePath(manifest_, "mlx5_2");
  tree_.Remove("sys/class/infiniband/mlx5_2");
  tree_.Remove("sys/" + device_dir);

  absl::Status status;
  std::vector<RecordedSample> samples = CollectOnce(*collector, &status);
  FABRICMON_EXPECT_OK(status);  // one device must not fail the cycle
  // Every open file of the device failed once: its counters and state/phys_state/rate.
  EXPECT_EQ(ErrorCount(samples, ErrorKind::kMissing), static_cast<uint64_t>(counter_files + 3));
  EXPECT_TRUE(collector->WantsRediscovery());
  for (const RecordedSample* s : SamplesOfDevice(samples, "mlx5_2")) {
    EXPECT_NE(s->series.type, MetricType::kCounter) << s->series.name;
  }
  ExpectEveryCounterFileExported(root_, samples);  // every remaining device, exact

  // The agent re-discovers early: the device is gone, nothing else changes.
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  EXPECT_FALSE(collector->WantsRediscovery());
  EXPECT_EQ(inventory.rdma_devices_size(), 11);
  std::vector<RecordedSample> after = CollectOnce(*collector);
  EXPECT_EQ(Find(after, "fabricmon_ib_device_info", "mlx5_2"), nullptr);
  EXPECT_EQ(ErrorCount(after, ErrorKind::kMissing), static_cast<uint64_t>(counter_files + 3));
  EXPECT_FALSE(collector->WantsRediscovery());
}

TEST_F(IbSysfsIntegrationTest, AgentNeverOpensAnExcludedDevice) {
  const std::string open_log = JoinPath(tree_.root(), "open.log");
  const std::string einval_log = JoinPath(tree_.root(), "einval.log");
  const std::string env =
      absl::StrCat("FABRICMON_OPEN_LOG='", open_log, "' FABRICMON_EINVAL_LOG='", einval_log,
                   "' FABRICMON_EINVAL_PATHS='", EinvalPaths(manifest_), "'");

  // Control run without the filter: the log sees the restricted device, so the check below can
  // fail.
  CommandResult control = RunAgent(root_, env);
  ASSERT_EQ(control.exit_code, 0) << control.output;
  std::vector<std::string> lines = Lines(open_log);
  auto touches = [](const std::string& line, absl::string_view device) {
    return absl::StrContains(line, absl::StrCat("/", device, "/")) ||
           absl::EndsWith(line, absl::StrCat("/", device));
  };
  int control_hits = 0;
  for (const std::string& line : lines) {
    control_hits += touches(line, "mlx5_9") ? 1 : 0;
  }
  EXPECT_GT(control_hits, 50);
  EXPECT_FALSE(Lines(einval_log).empty());
  EXPECT_THAT(control.output, HasSubstr("device=\"mlx5_9\""));
  std::remove(open_log.c_str());
  std::remove(einval_log.c_str());

  // Excluded: not one open, opendir or readlink of anything under the device.
  CommandResult run = RunAgent(root_, env, "mlx5_9");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  lines = Lines(open_log);
  int other_devices = 0;
  for (const std::string& line : lines) {
    EXPECT_FALSE(touches(line, "mlx5_9")) << line;
    other_devices += touches(line, "mlx5_8") ? 1 : 0;
  }
  EXPECT_GT(other_devices, 50) << "the open log did not record the agent's reads";
  EXPECT_TRUE(Lines(einval_log).empty()) << "the restricted device's counters were read";
  EXPECT_THAT(run.output, Not(HasSubstr("device=\"mlx5_9\"")));
  EXPECT_THAT(run.output, HasSubstr("fabricmon_ib_device_info{device=\"mlx5_8\""));
}

TEST_F(IbSysfsIntegrationTest, AgentMarksRestrictedDevice) {
  CommandResult run =
      RunAgent(root_, absl::StrCat("FABRICMON_EINVAL_PATHS='", EinvalPaths(manifest_), "'"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const int files = CounterFilesOfPort(PortDir("mlx5_9"));
  EXPECT_THAT(run.output, HasSubstr("fabricmon_ib_device_info{device=\"mlx5_9\""));
  EXPECT_THAT(run.output, HasSubstr("restricted=\"true\"} 1"));
  EXPECT_THAT(run.output,
              HasSubstr(absl::StrCat(
                  "fabricmon_ib_port_unreadable_counters{device=\"mlx5_9\",port=\"1\"} ", files)));
  EXPECT_THAT(run.output,
              HasSubstr(absl::StrCat(
                  "fabricmon_collector_errors_total{collector=\"ib_sysfs\",kind=\"unsupported\"} ",
                  files)));
  EXPECT_THAT(run.output, Not(HasSubstr("fabricmon_ib_symbol_error_total{device=\"mlx5_9\"")));
  EXPECT_THAT(run.output, HasSubstr("fabricmon_ib_symbol_error_total{device=\"mlx5_7\""));
  // Only one device is restricted.
  size_t count = 0;
  for (size_t pos = 0; (pos = run.output.find("restricted=\"true\"", pos)) != std::string::npos;
       ++pos) {
    ++count;
  }
  EXPECT_EQ(count, 1u);
}

// promtool check metrics on the agent's output for every tree: real captures, the generated
// node, and the generated node with its restricted device refusing reads.
class IbSysfsPromtoolTest : public IbSysfsIntegrationTest,
                            public ::testing::WithParamInterface<const char*> {};

TEST_P(IbSysfsPromtoolTest, AgentOutputPassesPromtool) {
  if (RunShell("command -v promtool >/dev/null 2>&1 && echo yes").output.empty()) {
    GTEST_SKIP() << "promtool is not installed (apt-get install prometheus)";
  }
  const std::string param = GetParam();
  std::string root = root_;
  std::string env;
  if (param == "generated-restricted") {
    env = absl::StrCat("FABRICMON_EINVAL_PATHS='", EinvalPaths(manifest_), "'");
  } else if (param != "generated") {
    root = ::fabricmon::testing::SharedFixture(absl::StrCat("sysfs/", param, "/sys"));
  }
  const std::string out = JoinPath(tree_.root(), "metrics.prom");
  CommandResult agent = RunAgent(root, env, "", absl::StrCat(">'", out, "'"));
  ASSERT_EQ(agent.exit_code, 0);
  absl::StatusOr<std::string> text = ReadSmallFile(out, 1 << 24);
  FABRICMON_ASSERT_OK(text);
  EXPECT_THAT(*text, HasSubstr("fabricmon_ib_device_info{"));
  CommandResult check = RunShell(absl::StrCat("promtool check metrics <'", out, "' 2>&1"));
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_EQ(check.output, "") << check.output;
}

INSTANTIATE_TEST_SUITE_P(AllTrees, IbSysfsPromtoolTest,
                         ::testing::Values("procfs", "node_exporter", "gpud-h100", "generated",
                                           "generated-restricted"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace fabricmon::collectors
