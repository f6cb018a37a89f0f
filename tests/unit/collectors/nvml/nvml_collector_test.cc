// The NVML collector through its production path: NvmlLibrary dlopen()s a stand-in
// libnvidia-ml (tests/fakes/nvml_standin) whose GPUs and counters come from a state file that
// each test writes (and rewrites between cycles). GPU identities come from real captures in
// shared/fixtures/nvlink (PROVENANCE.md §4).

#include "collectors/nvml/nvml_collector.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/recording_sink.h"
#include "collectors/nvml/nvml_loader.h"
#include "daemon/common/clock.h"
#include "daemon/exposition/text_exposition.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/nvml/nvml_test_util.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::SharedFixture;
using ::fabricmon::testing::StatusIs;
using ::fabricmon::testing::TempTree;
using nvml_test::ByKey;
using nvml_test::SeriesKey;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kStandin[] = FABRICMON_NVML_STANDIN_PATH;
constexpr char kStandinLegacy[] = FABRICMON_NVML_STANDIN_LEGACY_PATH;
constexpr char kStandinBroken[] = FABRICMON_NVML_STANDIN_BROKEN_PATH;

constexpr char kH100Capture[] = "nvlink/gpud_h100-80gb-hbm3_x8_nvidia-smi-q_535.183.01.txt";
constexpr char kV100Capture[] = "nvlink/azhpc-diag_v100-sxm2-32gb_nvlink-status_2-inactive.txt";
constexpr unsigned int kH100Links = 18;  // NVLink4: 18 links per H100 SXM5
constexpr const char* kErrorTypes[] = {"replay", "recovery", "crc_flit", "crc_data", "ecc_data"};
constexpr const char* kStateKeys[] = {"replay", "recovery", "crc_flit", "crc_data", "ecc"};
constexpr const char* kErrorKinds[] = {"missing",     "empty",      "no_pma", "not_numeric",
                                       "unsupported", "permission", "io"};

// Remote end of H100 HGX link `link`: one of the board's four NVSwitches (5/4/4/5 links).
// Synthetic bus ids: no capture of nvmlDeviceGetNvLinkRemotePciInfo on H100 is at hand.
std::string SwitchFor(unsigned int link) {
  static const char* kSwitches[] = {"00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0",
                                    "00000000:08:00.0"};
  return kSwitches[link < 5 ? 0 : link < 9 ? 1 : link < 13 ? 2 : 3];
}

// Deterministic error counter value: distinct per GPU, link and type, growing with `cycle`.
uint64_t CounterValue(unsigned int gpu, unsigned int link, int type, unsigned int cycle) {
  return (uint64_t{gpu} * 1000 + link * 10 + type) * (cycle + 1);
}

unsigned int Utilization(unsigned int gpu) { return (7 + 11 * gpu) % 101; }
unsigned int MemoryUtilization(unsigned int gpu) { return (3 + 13 * gpu) % 101; }

// An 8×H100 HGX node: identities and processes from the nvidia-smi -q capture, 18 active links
// per GPU with counters from CounterValue(), no NVLink5 fields (Hopper answers NOT_SUPPORTED).
struct H100Node {
  std::vector<nvml_test::SmiGpu> gpus = nvml_test::ParseNvidiaSmiQ(SharedFixture(kH100Capture));

  std::string State(unsigned int cycle) const {
    std::string out = "# 8x H100 80GB HBM3 (gpud nvidia-smi -q capture, driver 535.183.01)\n";
    for (unsigned int i = 0; i < gpus.size(); ++i) {
      absl::StrAppend(&out, "gpu ", i, " uuid=", gpus[i].uuid, " pci=", gpus[i].bus_id, " name=\"",
                      gpus[i].name, "\" util=", Utilization(i), " mem=", MemoryUtilization(i),
                      " pids=", absl::StrJoin(gpus[i].pids, ","), "\n");
      for (unsigned int l = 0; l < kH100Links; ++l) {
        absl::StrAppend(&out, "link ", i, " ", l, " active=1 remote=", SwitchFor(l));
        for (int t = 0; t < 5; ++t) {
          absl::StrAppend(&out, " ", kStateKeys[t], "=", CounterValue(i, l, t, cycle));
        }
        out += "\n";
      }
    }
    return out;
  }

  // Every series one Collect() must produce, as "key raw".
  std::vector<std::string> Expected(unsigned int cycle) const {
    std::vector<std::string> out;
    for (unsigned int i = 0; i < gpus.size(); ++i) {
      const std::string g = absl::StrCat(i);
      out.push_back(absl::StrCat("fabricmon_gpu_info{gpu=\"", g, "\",uuid=\"", gpus[i].uuid,
                                 "\",pci_bus_id=\"", gpus[i].bus_id, "\",name=\"", gpus[i].name,
                                 "\"} 1"));
      out.push_back(
          absl::StrCat("fabricmon_gpu_lost{gpu=\"", g, "\",uuid=\"", gpus[i].uuid, "\"} 0"));
      out.push_back(
          absl::StrCat("fabricmon_gpu_utilization_ratio{gpu=\"", g, "\"} ", Utilization(i)));
      out.push_back(absl::StrCat("fabricmon_gpu_memory_utilization_ratio{gpu=\"", g, "\"} ",
                                 MemoryUtilization(i)));
      out.push_back(
          absl::StrCat("fabricmon_gpu_compute_processes{gpu=\"", g, "\"} ", gpus[i].pids.size()));
      // 18 links × 5 NVLink5 fields answered NOT_SUPPORTED on the first cycle.
      out.push_back(
          absl::StrCat("fabricmon_gpu_unsupported_queries{gpu=\"", g, "\"} ", kH100Links * 5));
      for (unsigned int l = 0; l < kH100Links; ++l) {
        const std::string gl = absl::StrCat("gpu=\"", g, "\",link=\"", l, "\"");
        out.push_back(absl::StrCat("fabricmon_nvlink_state{", gl, "} 1"));
        out.push_back(absl::StrCat("fabricmon_nvlink_info{", gl, ",remote_pci_bus_id=\"",
                                   SwitchFor(l), "\"} 1"));
        for (int t = 0; t < 5; ++t) {
          out.push_back(absl::StrCat("fabricmon_nvlink_errors_total{", gl, ",type=\"",
                                     kErrorTypes[t], "\"} ", CounterValue(i, l, t, cycle)));
        }
      }
    }
    for (const char* kind : kErrorKinds) {
      out.push_back(absl::StrCat("fabricmon_collector_errors_total{collector=\"nvml\",kind=\"",
                                 kind, "\"} 0"));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::vector<std::string> AsLines(const std::vector<RecordedSample>& samples) {
  std::vector<std::string> out;
  for (const RecordedSample& sample : samples) {
    out.push_back(absl::StrCat(SeriesKey(sample.series), " ", sample.raw_value));
  }
  std::sort(out.begin(), out.end());
  return out;
}

class NvmlStandinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_path_ = tree_.root() + "/nvml.state";
    log_path_ = tree_.root() + "/nvml.log";
    setenv("FABRICMON_NVML_STANDIN_STATE", state_path_.c_str(), 1);
    unsetenv("FABRICMON_NVML_STANDIN_LOG");
  }
  void TearDown() override {
    unsetenv("FABRICMON_NVML_STANDIN_STATE");
    unsetenv("FABRICMON_NVML_STANDIN_LOG");
  }

  // Replaces the state file atomically (the stand-in re-reads it when its inode changes).
  void WriteState(const std::string& text) {
    tree_.WriteFile("nvml.state.tmp", text);
    ASSERT_EQ(std::rename((tree_.root() + "/nvml.state.tmp").c_str(), state_path_.c_str()), 0);
  }

  void EnableCallLog() { setenv("FABRICMON_NVML_STANDIN_LOG", log_path_.c_str(), 1); }
  std::vector<std::string> CallLog() const {
    std::ifstream in(log_path_);
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(in, line)) {
      lines.push_back(line);
    }
    return lines;
  }
  void ClearCallLog() { std::remove(log_path_.c_str()); }
  size_t CountCalls(const std::string& prefix) const {
    size_t n = 0;
    for (const std::string& line : CallLog()) {
      n += absl::StartsWith(line, prefix) ? 1 : 0;
    }
    return n;
  }

  static std::unique_ptr<NvmlCollector> MakeCollector(const std::string& library = kStandin) {
    v1::NvmlCollectorConfig config;
    config.set_library(library);
    absl::StatusOr<std::unique_ptr<NvmlCollector>> collector = NvmlCollector::Create(config);
    EXPECT_THAT(collector, ::fabricmon::testing::IsOk());
    return collector.ok() ? *std::move(collector) : nullptr;
  }

  static std::vector<RecordedSample> CollectOnce(NvmlCollector& collector) {
    RecordingSink sink;
    EXPECT_THAT(collector.Collect(sink), ::fabricmon::testing::IsOk());
    return sink.Take();
  }

  TempTree tree_;
  std::string state_path_;
  std::string log_path_;
};

// ---- loading and init ---------------------------------------------------------------------

TEST_F(NvmlStandinTest, AbsentLibraryIsNotFound) {
  for (const std::string& library :
       {tree_.root() + "/no/such/libnvidia-ml.so.1", std::string("libnvidia-ml-absent.so.1")}) {
    SCOPED_TRACE(library);
    std::unique_ptr<NvmlCollector> collector = MakeCollector(library);
    v1::Inventory inventory;
    EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_FALSE(collector->nvml_open());
    EXPECT_EQ(inventory.gpus_size(), 0);
    RecordingSink sink;
    EXPECT_THAT(collector->Collect(sink), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(sink.samples(), IsEmpty());
  }
}

TEST_F(NvmlStandinTest, DriverNotLoadedIsNotFoundAndRetriedOnNextDiscovery) {
  // No state file: the stand-in's nvmlInit_v2 answers NVML_ERROR_DRIVER_NOT_LOADED, as on a host
  // with the library installed but without the kernel module.
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  const absl::Status status = collector->Discover(inventory);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(status.message()), HasSubstr("NVML_ERROR_DRIVER_NOT_LOADED"));
  EXPECT_FALSE(collector->nvml_open());

  // The driver appears later: the next discovery picks it up without a restart.
  WriteState("gpu 0 uuid=GPU-late pci=00000000:18:00.0 util=1 mem=2 pids=\n");
  FABRICMON_EXPECT_OK(collector->Discover(inventory));
  EXPECT_TRUE(collector->nvml_open());
  ASSERT_EQ(inventory.gpus_size(), 1);
  EXPECT_EQ(inventory.gpus(0).uuid(), "GPU-late");
}

TEST_F(NvmlStandinTest, OtherInitFailuresAreFailedPreconditionWithNvmlCode) {
  // Decision: DRIVER_NOT_LOADED means "no GPU here" (NotFound); any other nvmlInit_v2 failure is
  // a broken setup the operator must see, e.g. LIB_RM_VERSION_MISMATCH (18) after a driver
  // upgrade without a module reload.
  WriteState("init 18\ngpu 0\n");
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  const absl::Status status = collector->Discover(inventory);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(status.message()), HasSubstr("NVML_ERROR_LIB_RM_VERSION_MISMATCH"));
  EXPECT_FALSE(collector->nvml_open());
}

TEST_F(NvmlStandinTest, FileThatIsNotALibraryIsFailedPrecondition) {
  WriteState("gpu 0\n");
  std::unique_ptr<NvmlCollector> collector = MakeCollector(state_path_);
  v1::Inventory inventory;
  EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(NvmlStandinTest, MissingRequiredSymbolIsAClearError) {
  WriteState("gpu 0\n");
  std::unique_ptr<NvmlCollector> collector = MakeCollector(kStandinBroken);
  v1::Inventory inventory;
  const absl::Status status = collector->Discover(inventory);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(status.message()), HasSubstr("nvmlDeviceGetHandleByIndex_v2"));
}

TEST_F(NvmlStandinTest, NoGpuIsNotFoundAndReleasesNvml) {
  WriteState("count 0\n");
  EnableCallLog();
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(collector->nvml_open());
  EXPECT_EQ(CountCalls("nvmlInit_v2"), 1u);
  EXPECT_EQ(CountCalls("nvmlShutdown"), 1u);
}

TEST_F(NvmlStandinTest, InitOnceShutdownOnDestruction) {
  H100Node node;
  WriteState(node.State(0));
  EnableCallLog();
  {
    std::unique_ptr<NvmlCollector> collector = MakeCollector();
    v1::Inventory inventory;
    FABRICMON_ASSERT_OK(collector->Discover(inventory));
    (void)CollectOnce(*collector);
    FABRICMON_ASSERT_OK(collector->Discover(inventory));  // re-discovery does not re-init
    (void)CollectOnce(*collector);
    EXPECT_EQ(CountCalls("nvmlInit_v2"), 1u);
    EXPECT_EQ(CountCalls("nvmlShutdown"), 0u);
  }
  EXPECT_EQ(CountCalls("nvmlInit_v2"), 1u);
  EXPECT_EQ(CountCalls("nvmlShutdown"), 1u);
  ASSERT_FALSE(CallLog().empty());
  EXPECT_EQ(CallLog().back(), "nvmlShutdown");
}

// ---- discovery and series -----------------------------------------------------------------

TEST_F(NvmlStandinTest, EightH100sWithEighteenLinksGiveExactSeries) {
  H100Node node;
  ASSERT_EQ(node.gpus.size(), 8u) << "capture changed?";
  WriteState(node.State(0));
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));

  ASSERT_EQ(inventory.gpus_size(), 8);
  for (int i = 0; i < 8; ++i) {
    const v1::Gpu& gpu = inventory.gpus(i);
    EXPECT_EQ(gpu.index(), static_cast<uint32_t>(i));
    EXPECT_EQ(gpu.uuid(), node.gpus[i].uuid);
    EXPECT_EQ(gpu.pci_bus_id(), node.gpus[i].bus_id);
    EXPECT_EQ(gpu.name(), "NVIDIA H100 80GB HBM3");
    EXPECT_THAT(std::vector<uint32_t>(gpu.compute_pids().begin(), gpu.compute_pids().end()),
                ElementsAreArray(node.gpus[i].pids));
    ASSERT_EQ(gpu.nvlinks_size(), static_cast<int>(kH100Links));
    for (unsigned int l = 0; l < kH100Links; ++l) {
      EXPECT_EQ(gpu.nvlinks(l).link(), l);
      EXPECT_TRUE(gpu.nvlinks(l).active());
      EXPECT_EQ(gpu.nvlinks(l).remote_pci_bus_id(), SwitchFor(l));
    }
  }
  // The capture has one compute process, python on GPU 00000000:75:00.0 (index 2).
  EXPECT_THAT(inventory.gpus(2).compute_pids(), ElementsAre(1002127u));

  const std::vector<RecordedSample> samples = CollectOnce(*collector);
  EXPECT_THAT(AsLines(samples), ElementsAreArray(node.Expected(0)));
  EXPECT_FALSE(collector->WantsRediscovery());

  // Export scaling: percent → ratio.
  for (const RecordedSample& sample : samples) {
    if (SeriesKey(sample.series) == "fabricmon_gpu_utilization_ratio{gpu=\"1\"}") {
      EXPECT_DOUBLE_EQ(ExportedValue(sample.series, sample.raw_value), 0.18);
    }
  }
}

TEST_F(NvmlStandinTest, LinkProbeStopsAtFirstNotSupported) {
  // GPU 0: links 0-2, then NOT_SUPPORTED at 3; links 4-5 exist in the file but must never be
  // asked for. GPU 1: no NVLink at all (a PCIe card). GPU 2: 6 links, then the driver's
  // INVALID_ARGUMENT (a V100 beyond link 5).
  WriteState(
      "gpu 0 uuid=GPU-a util=1 mem=1 pids= nvlink_end=3\n"
      "link 0 0 replay=1\nlink 0 1 replay=1\nlink 0 2 replay=1\n"
      "link 0 4 replay=1\nlink 0 5 replay=1\n"
      "gpu 1 uuid=GPU-b util=1 mem=1 pids=\n"
      "gpu 2 uuid=GPU-c util=1 mem=1 pids=\n"
      "link 2 0\nlink 2 1\nlink 2 2\nlink 2 3\nlink 2 4\nlink 2 5\n");
  EnableCallLog();
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  ASSERT_EQ(inventory.gpus_size(), 3);
  EXPECT_EQ(inventory.gpus(0).nvlinks_size(), 3);
  EXPECT_EQ(inventory.gpus(1).nvlinks_size(), 0);
  EXPECT_EQ(inventory.gpus(2).nvlinks_size(), 6);

  const std::vector<std::string> log = CallLog();
  EXPECT_THAT(log, Contains("nvmlDeviceGetNvLinkState 0 3"));
  EXPECT_THAT(log, Not(Contains("nvmlDeviceGetNvLinkState 0 4")));
  EXPECT_THAT(log, Contains("nvmlDeviceGetNvLinkState 1 0"));
  EXPECT_THAT(log, Not(Contains("nvmlDeviceGetNvLinkState 1 1")));
  EXPECT_THAT(log, Contains("nvmlDeviceGetNvLinkState 2 6"));
  EXPECT_THAT(log, Not(Contains("nvmlDeviceGetNvLinkState 2 7")));

  const std::map<std::string, uint64_t> values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.count("fabricmon_nvlink_state{gpu=\"0\",link=\"2\"}"), 1u);
  EXPECT_EQ(values.count("fabricmon_nvlink_state{gpu=\"0\",link=\"4\"}"), 0u);
  EXPECT_EQ(values.count("fabricmon_nvlink_state{gpu=\"1\",link=\"0\"}"), 0u);
  EXPECT_EQ(values.count("fabricmon_nvlink_state{gpu=\"2\",link=\"5\"}"), 1u);
  // Links without error counters in the file answer NOT_SUPPORTED: no series, remembered.
  EXPECT_EQ(values.count("fabricmon_nvlink_errors_total{gpu=\"2\",link=\"0\",type=\"replay\"}"),
            0u);
  EXPECT_EQ(values.at("fabricmon_nvlink_errors_total{gpu=\"0\",link=\"1\",type=\"replay\"}"), 1u);
}

TEST_F(NvmlStandinTest, InactiveLinksOfTheV100CaptureReadZero) {
  // azhpc-diagnostics nvlink.bad: V100-SXM2, 6 links per GPU, GPU 3 links 3 and 5 <inactive>
  // (Azure/azhpc-diagnostics#73), plus the other inactive links the capture shows.
  const std::vector<nvml_test::NvlinkStatusGpu> gpus =
      nvml_test::ParseNvlinkStatus(SharedFixture(kV100Capture));
  ASSERT_GE(gpus.size(), 4u);
  std::string state;
  for (const auto& gpu : gpus) {
    absl::StrAppend(&state, "gpu ", gpu.index, " uuid=", gpu.uuid, " name=\"", gpu.name,
                    "\" util=0 mem=0 pids=\n");
    for (size_t l = 0; l < gpu.active.size(); ++l) {
      // An inactive link has no remote end to report.
      absl::StrAppend(&state, "link ", gpu.index, " ", l, " active=", gpu.active[l] ? 1 : 0,
                      gpu.active[l] ? " remote=00000000:00:00.0" : "",
                      " replay=0 recovery=0 crc_flit=0 crc_data=0\n");
    }
  }
  WriteState(state);
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  const std::map<std::string, uint64_t> values = ByKey(CollectOnce(*collector));

  // The case the capture is known for.
  EXPECT_EQ(values.at("fabricmon_nvlink_state{gpu=\"3\",link=\"3\"}"), 0u);
  EXPECT_EQ(values.at("fabricmon_nvlink_state{gpu=\"3\",link=\"5\"}"), 0u);
  EXPECT_EQ(values.at("fabricmon_nvlink_state{gpu=\"3\",link=\"4\"}"), 1u);
  EXPECT_EQ(values.count("fabricmon_nvlink_info{gpu=\"3\",link=\"3\",remote_pci_bus_id=\"\"}"), 1u);
  // Every link of the capture.
  size_t inactive = 0;
  for (const auto& gpu : gpus) {
    ASSERT_EQ(gpu.active.size(), 6u);
    for (size_t l = 0; l < gpu.active.size(); ++l) {
      const std::string key =
          absl::StrCat("fabricmon_nvlink_state{gpu=\"", gpu.index, "\",link=\"", l, "\"}");
      ASSERT_EQ(values.count(key), 1u) << key;
      EXPECT_EQ(values.at(key), gpu.active[l] ? 1u : 0u) << key;
      inactive += gpu.active[l] ? 0 : 1;
    }
  }
  EXPECT_GE(inactive, 2u);
  // ECC data counters are absent in the file (V100 has none): no series, counted as unsupported.
  EXPECT_EQ(values.at("fabricmon_gpu_unsupported_queries{gpu=\"0\"}"), 6u * (1 + 5));
}

// ---- changes between cycles ---------------------------------------------------------------

TEST_F(NvmlStandinTest, CountersAndStatesChangeBetweenCycles) {
  H100Node node;
  WriteState(node.State(0));
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  EXPECT_THAT(AsLines(CollectOnce(*collector)), ElementsAreArray(node.Expected(0)));

  WriteState(node.State(4));
  std::vector<std::string> expected = node.Expected(4);
  EXPECT_THAT(AsLines(CollectOnce(*collector)), ElementsAreArray(expected));

  // 64-bit counters pass through untouched (nvml.h: unsigned long long), link 7 of GPU 0 goes
  // down, and link 8 comes back attached to another switch.
  WriteState(
      "gpu 0 uuid=GPU-x pci=00000000:18:00.0 util=0 mem=0 pids=\n"
      "link 0 7 active=1 remote=00000000:05:00.0 replay=18446744073709551615 recovery=0\n"
      "link 0 8 active=0 recovery=1\n");
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  std::map<std::string, uint64_t> values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.count("fabricmon_nvlink_state{gpu=\"0\",link=\"7\"}"), 0u);  // probe ends at 0
  WriteState(
      "gpu 0 uuid=GPU-x pci=00000000:18:00.0 util=0 mem=0 pids=\n"
      "link 0 0 active=1 remote=00000000:05:00.0 replay=18446744073709551615 recovery=0\n"
      "link 0 1 active=0 recovery=1\n");
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at("fabricmon_nvlink_errors_total{gpu=\"0\",link=\"0\",type=\"replay\"}"),
            18446744073709551615u);
  EXPECT_EQ(values.at("fabricmon_nvlink_state{gpu=\"0\",link=\"1\"}"), 0u);
  EXPECT_EQ(values.count("fabricmon_nvlink_info{gpu=\"0\",link=\"1\",remote_pci_bus_id=\"\"}"), 1u);

  // Link 1 comes up between two discoveries: state and remote end follow on the next cycle.
  WriteState(
      "gpu 0 uuid=GPU-x pci=00000000:18:00.0 util=0 mem=0 pids=\n"
      "link 0 0 active=0 remote=00000000:05:00.0 replay=18446744073709551615 recovery=0\n"
      "link 0 1 active=1 remote=00000000:06:00.0 recovery=2\n");
  values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at("fabricmon_nvlink_state{gpu=\"0\",link=\"0\"}"), 0u);
  EXPECT_EQ(values.at("fabricmon_nvlink_state{gpu=\"0\",link=\"1\"}"), 1u);
  EXPECT_EQ(
      values.count(
          "fabricmon_nvlink_info{gpu=\"0\",link=\"1\",remote_pci_bus_id=\"00000000:06:00.0\"}"),
      1u);
  EXPECT_EQ(values.at("fabricmon_nvlink_errors_total{gpu=\"0\",link=\"1\",type=\"recovery\"}"), 2u);
  EXPECT_FALSE(collector->WantsRediscovery());
}

TEST_F(NvmlStandinTest, UnsupportedUtilizationIsRememberedUntilRediscovery) {
  WriteState("gpu 0 uuid=GPU-a util=!3 mem=1 pids=!3\n");
  EnableCallLog();
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  std::map<std::string, uint64_t> values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.count("fabricmon_gpu_utilization_ratio{gpu=\"0\"}"), 0u);
  EXPECT_EQ(values.count("fabricmon_gpu_compute_processes{gpu=\"0\"}"), 0u);
  EXPECT_EQ(values.at("fabricmon_gpu_unsupported_queries{gpu=\"0\"}"), 2u);
  // NOT_SUPPORTED is a capability, not a fault: no error counted.
  EXPECT_EQ(values.at("fabricmon_collector_errors_total{collector=\"nvml\",kind=\"unsupported\"}"),
            0u);

  WriteState("gpu 0 uuid=GPU-a util=50 mem=1 pids=\n");
  ClearCallLog();
  values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.count("fabricmon_gpu_utilization_ratio{gpu=\"0\"}"), 0u);
  EXPECT_EQ(CountCalls("nvmlDeviceGetUtilizationRates"), 0u);

  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at("fabricmon_gpu_utilization_ratio{gpu=\"0\"}"), 50u);
  EXPECT_EQ(values.at("fabricmon_gpu_compute_processes{gpu=\"0\"}"), 0u);
}

// ---- NVLink5 field values -----------------------------------------------------------------

TEST_F(NvmlStandinTest, NvLink5FieldValuesWithPerValueNotSupported) {
  // A Blackwell-like GPU: no DL error counters (collectors/nvml/README.md); NVLink5 per link.
  // Link 0 has all five; link 1 only the recovery counters (effective/symbol answer
  // NOT_SUPPORTED per value); link 2's symbol errors answer INVALID_ARGUMENT (an older driver
  // for a newer field id); link 3's effective errors fail transiently (UNKNOWN, 999).
  WriteState(
      "gpu 0 uuid=GPU-b200 name=\"NVIDIA B200\" util=90 mem=60 pids=42\n"
      "link 0 0 remote=00000000:05:00.0 nvl5_recovery_successful=3 nvl5_recovery_failed=1 "
      "nvl5_recovery_events=4 nvl5_effective_errors=7 nvl5_symbol_errors=9\n"
      "link 0 1 remote=00000000:05:00.0 nvl5_recovery_successful=5 nvl5_recovery_failed=0 "
      "nvl5_recovery_events=5\n"
      "link 0 2 remote=00000000:06:00.0 nvl5_recovery_successful=0 nvl5_recovery_failed=0 "
      "nvl5_recovery_events=0 nvl5_effective_errors=1 nvl5_symbol_errors=!2\n"
      "link 0 3 remote=00000000:06:00.0 nvl5_recovery_successful=0 nvl5_recovery_failed=0 "
      "nvl5_recovery_events=0 nvl5_effective_errors=!999 nvl5_symbol_errors=2\n");
  EnableCallLog();
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  std::map<std::string, uint64_t> values = ByKey(CollectOnce(*collector));

  auto recovery = [](int link, const char* outcome) {
    return absl::StrCat("fabricmon_nvlink_recovery_events_total{gpu=\"0\",link=\"", link,
                        "\",outcome=\"", outcome, "\"}");
  };
  auto effective = [](int link) {
    return absl::StrCat("fabricmon_nvlink_effective_errors_total{gpu=\"0\",link=\"", link, "\"}");
  };
  auto symbol = [](int link) {
    return absl::StrCat("fabricmon_nvlink_symbol_errors_total{gpu=\"0\",link=\"", link, "\"}");
  };
  EXPECT_EQ(values.at(recovery(0, "successful")), 3u);
  EXPECT_EQ(values.at(recovery(0, "failed")), 1u);
  EXPECT_EQ(values.at(recovery(0, "all")), 4u);
  EXPECT_EQ(values.at(effective(0)), 7u);
  EXPECT_EQ(values.at(symbol(0)), 9u);
  EXPECT_EQ(values.at(recovery(1, "all")), 5u);
  EXPECT_EQ(values.count(effective(1)), 0u);
  EXPECT_EQ(values.count(symbol(1)), 0u);
  EXPECT_EQ(values.at(effective(2)), 1u);
  EXPECT_EQ(values.count(symbol(2)), 0u);
  EXPECT_EQ(values.count(effective(3)), 0u);
  EXPECT_EQ(values.at(symbol(3)), 2u);
  EXPECT_EQ(values.at("fabricmon_collector_errors_total{collector=\"nvml\",kind=\"io\"}"), 1u);
  // DL counters answered NOT_SUPPORTED: no fabricmon_nvlink_errors_total at all.
  for (const auto& [key, value] : values) {
    EXPECT_FALSE(absl::StartsWith(key, "fabricmon_nvlink_errors_total")) << key;
  }
  // 4 links × 5 DL counters + link 1's two fields + link 2's symbol field.
  EXPECT_EQ(values.at("fabricmon_gpu_unsupported_queries{gpu=\"0\"}"), 4u * 5 + 2 + 1);
  // One nvmlDeviceGetFieldValues call for the whole GPU: 4 links × 5 fields.
  EXPECT_THAT(CallLog(), Contains("nvmlDeviceGetFieldValues 0 20"));

  // The file now supports everything: the fields that answered NOT_SUPPORTED / INVALID_ARGUMENT
  // stay unasked until re-discovery; the transient failure is asked again.
  WriteState(
      "gpu 0 uuid=GPU-b200 name=\"NVIDIA B200\" util=90 mem=60 pids=42\n"
      "link 0 0 remote=00000000:05:00.0 nvl5_recovery_successful=3 nvl5_recovery_failed=2 "
      "nvl5_recovery_events=5 nvl5_effective_errors=7 nvl5_symbol_errors=9\n"
      "link 0 1 remote=00000000:05:00.0 nvl5_recovery_successful=5 nvl5_recovery_failed=0 "
      "nvl5_recovery_events=5 nvl5_effective_errors=1 nvl5_symbol_errors=1\n"
      "link 0 2 remote=00000000:06:00.0 nvl5_recovery_successful=0 nvl5_recovery_failed=0 "
      "nvl5_recovery_events=0 nvl5_effective_errors=1 nvl5_symbol_errors=1\n"
      "link 0 3 remote=00000000:06:00.0 nvl5_recovery_successful=0 nvl5_recovery_failed=0 "
      "nvl5_recovery_events=0 nvl5_effective_errors=6 nvl5_symbol_errors=2\n");
  ClearCallLog();
  values = ByKey(CollectOnce(*collector));
  EXPECT_THAT(CallLog(), Contains("nvmlDeviceGetFieldValues 0 17"));
  EXPECT_EQ(values.at(recovery(0, "failed")), 2u);  // the flap edge
  EXPECT_EQ(values.count(effective(1)), 0u);
  EXPECT_EQ(values.count(symbol(2)), 0u);
  EXPECT_EQ(values.at(effective(3)), 6u);
  EXPECT_EQ(CountCalls("nvmlDeviceGetNvLinkErrorCounter"), 0u);

  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at(effective(1)), 1u);
  EXPECT_EQ(values.at(symbol(2)), 1u);
}

TEST_F(NvmlStandinTest, MissingOptionalSymbolsDisableOnlyTheirMetrics) {
  // The legacy stand-in has no nvmlDeviceGetFieldValues, only the unversioned (v1-struct)
  // process query and nvmlDeviceGetPciInfo_v2.
  WriteState(
      "gpu 0 uuid=GPU-old pci=00000000:3B:00.0 name=\"Tesla V100-SXM2-32GB\" util=12 mem=5 "
      "pids=1234,5678,91011\n"
      "link 0 0 remote=00000000:5E:00.0 replay=4 recovery=1 crc_flit=2 crc_data=3 "
      "nvl5_recovery_failed=1 nvl5_effective_errors=7\n");
  EnableCallLog();
  absl::StatusOr<std::unique_ptr<nvml::NvmlLibrary>> library =
      nvml::NvmlLibrary::Load(kStandinLegacy);
  FABRICMON_ASSERT_OK(library);
  EXPECT_FALSE((*library)->Has(nvml::Feature::kFieldValues));
  EXPECT_TRUE((*library)->Has(nvml::Feature::kComputeProcesses));
  EXPECT_TRUE((*library)->Has(nvml::Feature::kPciInfo));
  EXPECT_THAT((*library)->missing_symbols(), Contains("nvmlDeviceGetFieldValues"));
  library->reset();

  std::unique_ptr<NvmlCollector> collector = MakeCollector(kStandinLegacy);
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  ASSERT_EQ(inventory.gpus_size(), 1);
  EXPECT_EQ(inventory.gpus(0).pci_bus_id(), "00000000:3B:00.0");
  // Three PIDs read back through the 16-byte nvmlProcessInfo_v1_t stride.
  EXPECT_THAT(inventory.gpus(0).compute_pids(), ElementsAre(1234u, 5678u, 91011u));
  const std::map<std::string, uint64_t> values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at("fabricmon_gpu_compute_processes{gpu=\"0\"}"), 3u);
  EXPECT_EQ(values.at("fabricmon_gpu_utilization_ratio{gpu=\"0\"}"), 12u);
  EXPECT_EQ(values.at("fabricmon_nvlink_errors_total{gpu=\"0\",link=\"0\",type=\"crc_data\"}"), 3u);
  for (const auto& [key, value] : values) {
    EXPECT_FALSE(absl::StartsWith(key, "fabricmon_nvlink_recovery_events_total")) << key;
    EXPECT_FALSE(absl::StartsWith(key, "fabricmon_nvlink_effective_errors_total")) << key;
  }
  EXPECT_EQ(CountCalls("nvmlDeviceGetFieldValues"), 0u);
}

// ---- lost GPUs ----------------------------------------------------------------------------

TEST_F(NvmlStandinTest, LostGpuIsReportedAndTheOthersAreCollected) {
  H100Node node;
  WriteState(node.State(0));
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  (void)CollectOnce(*collector);
  const std::string uuid2 = node.gpus[2].uuid;
  const std::string lost2 = absl::StrCat("fabricmon_gpu_lost{gpu=\"2\",uuid=\"", uuid2, "\"}");

  // GPU 2 falls off the bus between two cycles.
  WriteState(node.State(1) + "lost 2\n");
  std::map<std::string, uint64_t> values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at(lost2), 1u);
  EXPECT_TRUE(collector->WantsRediscovery());
  EXPECT_EQ(values.count("fabricmon_gpu_utilization_ratio{gpu=\"2\"}"), 0u);
  EXPECT_EQ(values.count("fabricmon_nvlink_state{gpu=\"2\",link=\"0\"}"), 0u);
  EXPECT_EQ(values.at("fabricmon_collector_errors_total{collector=\"nvml\",kind=\"missing\"}"), 1u);
  for (unsigned int i : {0u, 1u, 3u, 7u}) {
    EXPECT_EQ(values.at(absl::StrCat("fabricmon_gpu_lost{gpu=\"", i, "\",uuid=\"",
                                     node.gpus[i].uuid, "\"}")),
              0u);
    EXPECT_EQ(values.at(absl::StrCat("fabricmon_gpu_utilization_ratio{gpu=\"", i, "\"}")),
              Utilization(i));
    EXPECT_EQ(values.at(absl::StrCat("fabricmon_nvlink_errors_total{gpu=\"", i,
                                     "\",link=\"17\",type=\"replay\"}")),
              CounterValue(i, 17, 0, 1));
  }

  // Early re-discovery: GPU 2 cannot even give a handle now, but keeps its identity.
  v1::Inventory rediscovered;
  FABRICMON_ASSERT_OK(collector->Discover(rediscovered));
  EXPECT_FALSE(collector->WantsRediscovery());
  ASSERT_EQ(rediscovered.gpus_size(), 8);
  EXPECT_EQ(rediscovered.gpus(2).uuid(), uuid2);
  EXPECT_EQ(rediscovered.gpus(2).nvlinks_size(), 0);
  EXPECT_EQ(rediscovered.gpus(3).nvlinks_size(), static_cast<int>(kH100Links));
  values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at(lost2), 1u);
  EXPECT_EQ(
      values.count(absl::StrCat("fabricmon_gpu_info{gpu=\"2\",uuid=\"", uuid2, "\",pci_bus_id=\"",
                                node.gpus[2].bus_id, "\",name=\"NVIDIA H100 80GB HBM3\"}")),
      1u);
  EXPECT_FALSE(collector->WantsRediscovery());  // no re-discovery storm while it stays lost

  // After a reset the GPU is back.
  WriteState(node.State(2));
  FABRICMON_ASSERT_OK(collector->Discover(rediscovered));
  values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at(lost2), 0u);
  EXPECT_EQ(values.at("fabricmon_nvlink_errors_total{gpu=\"2\",link=\"3\",type=\"crc_flit\"}"),
            CounterValue(2, 3, 2, 2));
}

TEST_F(NvmlStandinTest, InaccessibleGpusAreSkippedWithoutError) {
  // nvmlDeviceGetHandleByIndex_v2 answers NO_PERMISSION for GPUs a container may not use.
  WriteState(
      "gpu 0 uuid=GPU-mine util=1 mem=1 pids=\n"
      "gpu 1 uuid=GPU-theirs handle=!4\n");
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  ASSERT_EQ(inventory.gpus_size(), 1);
  EXPECT_EQ(inventory.gpus(0).uuid(), "GPU-mine");
  const std::map<std::string, uint64_t> values = ByKey(CollectOnce(*collector));
  EXPECT_EQ(values.at("fabricmon_collector_errors_total{collector=\"nvml\",kind=\"permission\"}"),
            0u);
}

// ---- exposition ---------------------------------------------------------------------------

TEST_F(NvmlStandinTest, SerializedSamplesPassPromtoolCheckMetrics) {
  H100Node node;
  // The H100 node plus a ninth, Blackwell-like GPU so that every family is present.
  WriteState(node.State(3) +
             "gpu 8 uuid=GPU-b200 name=\"NVIDIA B200\" util=90 mem=60 pids=42\n"
             "link 8 0 remote=00000000:05:00.0 nvl5_recovery_successful=3 "
             "nvl5_recovery_failed=1 nvl5_recovery_events=4 nvl5_effective_errors=7 "
             "nvl5_symbol_errors=9\n");
  std::unique_ptr<NvmlCollector> collector = MakeCollector();
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(collector->Discover(inventory));
  const std::vector<RecordedSample> samples = CollectOnce(*collector);
  const std::string text = exposition::SerializeText(exposition::BuildFamilies(samples));
  for (const char* family :
       {"fabricmon_gpu_info", "fabricmon_gpu_lost", "fabricmon_gpu_utilization_ratio",
        "fabricmon_gpu_memory_utilization_ratio", "fabricmon_gpu_compute_processes",
        "fabricmon_nvlink_state", "fabricmon_nvlink_info", "fabricmon_nvlink_errors_total",
        "fabricmon_nvlink_recovery_events_total", "fabricmon_nvlink_effective_errors_total",
        "fabricmon_nvlink_symbol_errors_total"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("\n# TYPE ", family, " "))) << family;
  }
  EXPECT_THAT(text, HasSubstr("fabricmon_gpu_utilization_ratio{gpu=\"1\"} 0.18"));

  int exit_code = -1;
  std::string output;
  if (!nvml_test::RunPromtool(tree_.root(), text, &exit_code, &output)) {
    GTEST_SKIP() << output;
  }
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_EQ(output, "") << output;
}

// ---- registration -------------------------------------------------------------------------

TEST_F(NvmlStandinTest, RegisteredEnabledByDefaultAndIdleWithoutLibrary) {
  CollectorRegistry registry;
  RegisterNvmlCollector(registry);
  ASSERT_EQ(registry.entries().size(), 1u);
  EXPECT_EQ(registry.entries()[0].name, "nvml");
  EXPECT_TRUE(registry.entries()[0].enabled_by_default);

  v1::CollectorsConfig config;
  config.mutable_nvml()->set_library(tree_.root() + "/absent/libnvidia-ml.so.1");
  collectors::CollectorContext context{config, RealClock::Get()};
  auto created = registry.CreateEnabled(context);
  FABRICMON_ASSERT_OK(created);
  ASSERT_EQ(created->size(), 1u);
  v1::Inventory inventory;
  EXPECT_THAT((*created)[0]->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));

  config.mutable_nvml()->set_enabled(false);
  created = registry.CreateEnabled(context);
  FABRICMON_ASSERT_OK(created);
  EXPECT_TRUE(created->empty());
}

TEST(NvmlCollectorConfigTest, RejectsTooShortInterval) {
  v1::NvmlCollectorConfig config;
  config.set_interval_ms(10);
  EXPECT_THAT(NvmlCollector::Create(config), StatusIs(absl::StatusCode::kInvalidArgument));
  config.set_interval_ms(0);  // default
  absl::StatusOr<std::unique_ptr<NvmlCollector>> collector = NvmlCollector::Create(config);
  FABRICMON_ASSERT_OK(collector);
  EXPECT_EQ((*collector)->interval_ms(), 5000);
  EXPECT_EQ((*collector)->rediscover_interval_ms(), 60000);
  EXPECT_FALSE((*collector)->nvml_open());  // Create never touches the library
}

}  // namespace
}  // namespace fabricmon::collectors
