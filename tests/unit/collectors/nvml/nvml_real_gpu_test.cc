// The NVML collector against the real libnvidia-ml.so.1 (ctest label `gpu`). Skips where the
// library or the driver is absent, so it is harmless on machines without GPUs; on a GPU machine
// run it through tests/gpu/run_nvml_check.sh, which also prints nvidia-smi's view to compare.
//
// FABRICMON_NVML_LIBRARY overrides the library (e.g. an absolute path in a container).

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectors/core/recording_sink.h"
#include "collectors/nvml/nvml_collector.h"
#include "daemon/exposition/text_exposition.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/nvml/nvml_test_util.h"

namespace fabricmon::collectors {
namespace {

TEST(NvmlRealGpuTest, CollectsFromTheRealLibrary) {
  v1::NvmlCollectorConfig config;
  const char* library = std::getenv("FABRICMON_NVML_LIBRARY");
  config.set_library(library != nullptr ? library : "libnvidia-ml.so.1");
  absl::StatusOr<std::unique_ptr<NvmlCollector>> created = NvmlCollector::Create(config);
  FABRICMON_ASSERT_OK(created);
  NvmlCollector& collector = **created;

  v1::Inventory inventory;
  const absl::Status discovered = collector.Discover(inventory);
  if (absl::IsNotFound(discovered)) {
    GTEST_SKIP() << "no usable NVML here: " << discovered;
  }
  FABRICMON_ASSERT_OK(discovered);
  ASSERT_GT(inventory.gpus_size(), 0);
  std::cout << "inventory:\n" << inventory.DebugString() << "\n";

  RecordingSink first;
  FABRICMON_ASSERT_OK(collector.Collect(first));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  RecordingSink second;
  FABRICMON_ASSERT_OK(collector.Collect(second));

  const std::string text = exposition::SerializeText(exposition::BuildFamilies(second.samples()));
  std::cout << text;

  const std::map<std::string, uint64_t> before = nvml_test::ByKey(first.samples());
  const std::map<std::string, uint64_t> after = nvml_test::ByKey(second.samples());
  for (const v1::Gpu& gpu : inventory.gpus()) {
    SCOPED_TRACE(absl::StrCat("GPU ", gpu.index(), " ", gpu.uuid()));
    // NVML UUIDs are "GPU-" + 36 hex/dash characters (MIG devices are not enumerated here).
    EXPECT_TRUE(absl::StartsWith(gpu.uuid(), "GPU-")) << gpu.uuid();
    // nvmlPciInfo_t.busId is "%08X:%02X:%02X.0": 16 characters. A wrong struct layout shows up
    // here as garbage or an empty string.
    EXPECT_EQ(gpu.pci_bus_id().size(), 16u) << gpu.pci_bus_id();
    EXPECT_FALSE(gpu.name().empty());
    const std::string g = absl::StrCat(gpu.index());
    EXPECT_EQ(
        after.at(absl::StrCat("fabricmon_gpu_lost{gpu=\"", g, "\",uuid=\"", gpu.uuid(), "\"}")),
        0u);
    auto util = after.find(absl::StrCat("fabricmon_gpu_utilization_ratio{gpu=\"", g, "\"}"));
    if (util != after.end()) {
      EXPECT_LE(util->second, 100u);
    }
    for (const v1::NvLink& link : gpu.nvlinks()) {
      EXPECT_LT(link.link(), 36u);
      const std::string state =
          absl::StrCat("fabricmon_nvlink_state{gpu=\"", g, "\",link=\"", link.link(), "\"}");
      ASSERT_EQ(after.count(state), 1u) << state;
      EXPECT_LE(after.at(state), 1u);
    }
  }
  // Error counters are monotonic over one second (64-bit: no wrap in practice).
  for (const auto& [key, value] : after) {
    if (absl::StartsWith(key, "fabricmon_nvlink_errors_total") ||
        absl::StartsWith(key, "fabricmon_nvlink_recovery_events_total")) {
      auto it = before.find(key);
      if (it != before.end()) {
        EXPECT_GE(value, it->second) << key;
      }
    }
  }

  int exit_code = -1;
  std::string output;
  testing::TempTree tree;
  if (nvml_test::RunPromtool(tree.root(), text, &exit_code, &output)) {
    EXPECT_EQ(exit_code, 0) << output;
    EXPECT_EQ(output, "") << output;
  }
}

}  // namespace
}  // namespace fabricmon::collectors
