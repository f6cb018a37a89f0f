// fabricmon_host_collectors_bench: CPU time of one Collect() cycle of the host collectors
// (ethtool, nvml, netdev), and of a whole DGX H100 node with ib_sysfs added, against the target
// of the "Host collectors" issue: all collectors together under 1 % of one core at 10 Hz.
//
//   fabricmon_host_collectors_bench [--nvml_library=PATH] [--ethtool_capture=FILE]
//                                   [--keep_inputs=EMPTY_DIR] [benchmark flags]
//
// Inputs, made once in a scratch directory that is removed at exit (or in --keep_inputs, kept):
//   ib_sysfs  the dgx-h100 tree of tests/sim/gen_sysfs_tree.py (as ib_sysfs_bench), restricted
//             to its 8 compute HCAs (mlx5_0..7; the fourth is named ibp12s0), hw_counters on.
//   netdev    a host tree: 8 ConnectX-7 RoCE netdevs (enp<bus>s0np0, each behind mlx5_N and
//             named by its GID table), a frontend NIC, a docker bridge and lo. Every netdev has the
//             attribute files of the real eth0 in ../shared/fixtures/sysfs/procfs plus the 25
//             statistics/ files of Linux 6.x; procfs is tests/unit/collectors/netdev/testdata/proc
//             (real /proc/net/snmp and /proc/net/netstat; shared/fixtures has none).
//   ethtool   FixtureEthtoolApi (the collector's source seam) replaying a real mlx5 `ethtool -S`
//             capture for each RoCE netdev of the host tree: by default
//             ../shared/fixtures/ethtool/mlx5_connectx4_ubuntu18.04_ethq-tests.txt (751 keys,
//             with per-channel keys). BM_EthtoolCollectIoctl uses the real SIOCETHTOOL ioctl on
//             veth pairs in a private network namespace (needs root; skipped otherwise).
//   nvml      the stand-in libnvidia-ml (tests/fakes/nvml_standin), loaded by path through
//             NvmlCollectorConfig.library, with a state file of H100s (identities from
//             ../shared/fixtures/nvlink/gpud_h100-80gb-hbm3_x8_nvidia-smi-q_535.183.01.txt) and
//             18 active NVLinks each, NVLink4 error counters, no NVLink5 field values (Hopper).
//             The stand-in's cost per call (a stat(2) of its state file) replaces the driver's
//             ioctl: nvml_calls_per_cycle says how many calls a real driver would serve, and
//             BM_NvmlCollectInProcess (an in-process NvmlApi through the collector's opener seam)
//             leaves only the collector's own CPU.
//
// Every collector is discovered once and collected once before timing (so queries that answer
// NOT_SUPPORTED are already remembered, as in a long-running agent). Timings are CPU time.
// Counters:
//   values_per_cycle       samples emitted per cycle
//   cpu_per_netdev/_gpu    CPU per netdev or GPU per cycle (seconds in JSON)
//   keys_per_netdev        ethtool string-set size
//   nvml_calls_per_cycle   NVML entry points called by one Collect()
//   core_percent_at_10hz   (BM_NodeCycle) cpu_seconds_per_cycle x 10 x 100: % of one core with
//                          every collector at 10 Hz; <collector>_percent_at_10hz its share;
//                          core_percent_at_default_intervals with each collector at its default
//                          interval (ib_sysfs, ethtool, netdev 1 s; nvml 5 s).

#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "benchmark/benchmark.h"
#include "collectors/core/collector.h"
#include "collectors/ethtool/ethtool_api.h"
#include "collectors/ethtool/ethtool_collector.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "collectors/netdev/netdev_collector.h"
#include "collectors/nvml/nvml_api.h"
#include "collectors/nvml/nvml_collector.h"
#include "daemon/common/file_reader.h"
#include "fabricmon/v1/config.pb.h"
#include "fabricmon/v1/inventory.pb.h"
#include "tests/bench/bench_support.h"
#include "tests/fakes/ethtool/fixture_ethtool_api.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::bench {
namespace {

namespace fs = std::filesystem;
namespace nvml_abi = collectors::nvml::abi;

constexpr int kRoceNetdevs = 8;
constexpr int kNvLinksPerGpu = 18;  // H100 SXM (NVLink4)
// The 8 compute HCAs of the dgx-h100 tree (gen_sysfs_tree.py names the fourth ibp12s0).
constexpr char kComputeHcas[] = "mlx5_[0-7]|ibp12s0";

struct Inputs {
  std::string scratch;     // removed at exit
  std::string dgx_sysfs;   // generated dgx-h100 tree (ib_sysfs)
  std::string host_sysfs;  // class/net + RoCE class/infiniband (netdev, ethtool)
  std::string procfs;      // net/snmp, net/netstat
  std::string veth_sysfs;  // discovery tree of the veth netdevs (BM_EthtoolCollectIoctl)
  std::string ethtool_capture;
  std::string nvml_library;
  std::map<int, std::string> nvml_state;  // by GPU count
  std::vector<std::string> roce_netdevs;
};

Inputs& In() {
  static auto* inputs = new Inputs();
  return *inputs;
}

bool WriteFile(const std::string& path, const std::string& content) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::ofstream out(path, std::ios::trunc);
  out << content;
  return static_cast<bool>(out);
}

bool Symlink(const std::string& target, const std::string& link) {
  std::error_code ec;
  fs::create_directories(fs::path(link).parent_path(), ec);
  fs::create_symlink(target, link, ec);
  return !ec;
}

uint64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// ---------------------------------------------------------------------------------------------
// Inputs

// statistics/ of a Linux 6.x netdev (net/core/net-sysfs.c netstat_attrs).
constexpr const char* kNetdevStatistics[] = {"collisions",
                                             "multicast",
                                             "rx_bytes",
                                             "rx_compressed",
                                             "rx_crc_errors",
                                             "rx_dropped",
                                             "rx_errors",
                                             "rx_fifo_errors",
                                             "rx_frame_errors",
                                             "rx_length_errors",
                                             "rx_missed_errors",
                                             "rx_nohandler",
                                             "rx_otherhost_dropped",
                                             "rx_over_errors",
                                             "rx_packets",
                                             "tx_aborted_errors",
                                             "tx_bytes",
                                             "tx_carrier_errors",
                                             "tx_compressed",
                                             "tx_dropped",
                                             "tx_errors",
                                             "tx_fifo_errors",
                                             "tx_heartbeat_errors",
                                             "tx_packets",
                                             "tx_window_errors"};

// One netdev directory: the fixture eth0's attribute files, then `overrides`, then statistics/.
bool WriteNetdevDir(const std::string& dir, const std::map<std::string, std::string>& overrides,
                    uint64_t seed) {
  const std::string fixture = testing::SharedFixture("sysfs/procfs/sys/class/net/eth0");
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(fixture, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "device" || !entry.is_regular_file(ec)) {
      continue;  // `device` is made below as the kernel makes it; ecn/ is not read
    }
    absl::StatusOr<std::string> content = ReadSmallFile(entry.path().string());
    if (!content.ok() || !WriteFile(JoinPath(dir, name), *content)) {
      return false;
    }
  }
  if (ec) {
    std::fprintf(stderr, "cannot list %s: %s\n", fixture.c_str(), ec.message().c_str());
    return false;
  }
  for (const auto& [name, value] : overrides) {
    if (!WriteFile(JoinPath(dir, name), value + "\n")) {
      return false;
    }
  }
  uint64_t x = seed * 0x9e3779b97f4a7c15u + 1;
  for (const char* stat : kNetdevStatistics) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const absl::string_view name(stat);
    const bool traffic = absl::EndsWith(name, "bytes") || absl::EndsWith(name, "packets");
    const uint64_t value = traffic ? x % 1000000000000000u : x % 100;
    if (!WriteFile(JoinPath(dir, absl::StrCat("statistics/", stat)), absl::StrCat(value, "\n"))) {
      return false;
    }
  }
  return true;
}

// The host tree of the netdev and ethtool benchmarks (see the file comment).
bool BuildHostTree(const std::string& root) {
  static constexpr const char* kBdfs[kRoceNetdevs] = {
      "0000:18:00.0", "0000:40:00.0", "0000:4f:00.0", "0000:0c:00.0",
      "0000:9a:00.0", "0000:c0:00.0", "0000:ce:00.0", "0000:dc:00.0"};
  for (int i = 0; i < kRoceNetdevs; ++i) {
    const std::string bdf = kBdfs[i];
    const unsigned bus = static_cast<unsigned>(std::strtoul(bdf.substr(5, 2).c_str(), nullptr, 16));
    const std::string netdev = absl::StrCat("enp", bus, "s0np0");
    const std::string rdma = absl::StrCat("mlx5_", i);
    const std::string pci = absl::StrCat(root, "/devices/pci0000:00/", bdf);
    const std::string netdev_dir = absl::StrCat(pci, "/net/", netdev);
    const std::string port_dir = absl::StrCat(pci, "/infiniband/", rdma, "/ports/1");
    const bool ok = WriteNetdevDir(netdev_dir,
                                   {{"type", "1"},
                                    {"mtu", "9000"},
                                    {"speed", "400000"},
                                    {"dev_port", "0"},
                                    {"ifindex", absl::StrCat(4 + i)},
                                    {"address", absl::StrCat("b8:3f:d2:00:00:", 10 + i)}},
                                   static_cast<uint64_t>(i)) &&
                    Symlink(absl::StrCat("../../../", bdf), JoinPath(netdev_dir, "device")) &&
                    Symlink("../../../bus/pci/drivers/mlx5_core", JoinPath(pci, "driver")) &&
                    WriteFile(JoinPath(port_dir, "link_layer"), "Ethernet\n") &&
                    WriteFile(JoinPath(port_dir, "gid_attrs/ndevs/0"), netdev + "\n") &&
                    WriteFile(JoinPath(port_dir, "gid_attrs/ndevs/1"), netdev + "\n") &&
                    Symlink(absl::StrCat("../../devices/pci0000:00/", bdf, "/net/", netdev),
                            absl::StrCat(root, "/class/net/", netdev)) &&
                    Symlink(absl::StrCat("../../devices/pci0000:00/", bdf, "/infiniband/", rdma),
                            absl::StrCat(root, "/class/infiniband/", rdma));
    if (!ok) {
      return false;
    }
    In().roce_netdevs.push_back(netdev);
  }
  std::error_code ec;
  fs::create_directories(root + "/bus/pci/drivers/mlx5_core", ec);
  fs::create_directories(root + "/bus/pci/drivers/igb", ec);
  // Frontend NIC (no RDMA), a docker bridge and loopback (virtual: no `device`).
  const std::string eno1 = root + "/devices/pci0000:00/0000:03:00.0/net/eno1";
  return WriteNetdevDir(eno1, {{"type", "1"}, {"speed", "1000"}}, 100) &&
         Symlink("../../../0000:03:00.0", eno1 + "/device") &&
         Symlink("../../../bus/pci/drivers/igb",
                 root + "/devices/pci0000:00/0000:03:00.0/driver") &&
         Symlink("../../devices/pci0000:00/0000:03:00.0/net/eno1", root + "/class/net/eno1") &&
         WriteNetdevDir(root + "/devices/virtual/net/docker0", {{"type", "1"}}, 101) &&
         Symlink("../../devices/virtual/net/docker0", root + "/class/net/docker0") &&
         WriteNetdevDir(root + "/devices/virtual/net/lo",
                        {{"type", "772"}, {"mtu", "65536"}, {"address", "00:00:00:00:00:00"}},
                        102) &&
         Symlink("../../devices/virtual/net/lo", root + "/class/net/lo");
}

// NVML stand-in state: `gpus` H100s with 18 active NVLinks to the 4 NVSwitches.
bool WriteNvmlState(const std::string& path, int gpus) {
  // Bus ids and UUIDs of the 8 GPUs in the gpud H100 nvidia-smi -q capture (shared/fixtures).
  static constexpr const char* kGpus[8][2] = {
      {"00000000:53:00.0", "GPU-566e6f65-c38e-b12f-4824-6944218668b9"},
      {"00000000:64:00.0", "GPU-9930d717-21dd-7692-054e-3d0a2bae76b5"},
      {"00000000:75:00.0", "GPU-973565ff-45cf-12ea-4e91-33386720f7bb"},
      {"00000000:86:00.0", "GPU-6b932a61-abfd-5ea1-b26a-7dea7f2fa601"},
      {"00000000:97:00.0", "GPU-726d356b-f548-bbfd-c81e-b9c68f2f1587"},
      {"00000000:A8:00.0", "GPU-06db64f6-6181-5a90-cf95-5ce52a58c4e5"},
      {"00000000:B9:00.0", "GPU-a5271aa6-4cdb-28c7-0ef5-5da271d0caae"},
      {"00000000:CA:00.0", "GPU-7e78e6c8-c71c-66c7-9ded-f8836cecab32"}};
  std::string state = absl::StrCat("count ", gpus, "\n");
  for (int g = 0; g < gpus; ++g) {
    absl::StrAppend(&state, "gpu ", g, " uuid=", kGpus[g % 8][1], " pci=", kGpus[g % 8][0],
                    " name=\"NVIDIA H100 80GB HBM3\" util=97 mem=41 pids=", 1002127 + g, "\n");
    for (int l = 0; l < kNvLinksPerGpu; ++l) {
      absl::StrAppend(&state, "link ", g, " ", l, " active=1 remote=00000000:0", 5 + l % 4,
                      ":00.0 replay=", (g * 31 + l) % 7, " recovery=", l % 2,
                      " crc_flit=", 100 + g * l, " crc_data=", l % 3, " ecc=0\n");
    }
  }
  return WriteFile(path, state);
}

bool PrepareInputs() {
  Inputs& in = In();
  in.dgx_sysfs = in.scratch + "/dgx/sys";
  in.host_sysfs = in.scratch + "/host/sys";
  in.veth_sysfs = in.scratch + "/veth/sys";
  in.procfs = testing::SourcePath("tests/unit/collectors/netdev/testdata/proc");
  if (!GenerateSysfsTree("dgx-h100", in.dgx_sysfs) || !BuildHostTree(in.host_sysfs)) {
    std::fprintf(stderr, "cannot build the sysfs trees under %s\n", in.scratch.c_str());
    return false;
  }
  for (int gpus : {1, 8}) {
    const std::string path = absl::StrCat(in.scratch, "/nvml-", gpus, "gpu.state");
    if (!WriteNvmlState(path, gpus)) {
      return false;
    }
    in.nvml_state[gpus] = path;
  }
  // Soft-RoCE style mapping for the veth pairs: an RDMA device whose GID names the netdev.
  return WriteFile(in.veth_sysfs + "/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "fmb1\n") &&
         WriteFile(in.veth_sysfs + "/class/infiniband/rxe1/ports/1/gid_attrs/ndevs/0", "fmb16\n") &&
         WriteFile(in.veth_sysfs + "/class/net/fmb1/type", "1\n") &&
         WriteFile(in.veth_sysfs + "/class/net/fmb16/type", "1\n");
}

// ---------------------------------------------------------------------------------------------
// Collectors

template <typename C>
std::unique_ptr<C> Discovered(absl::StatusOr<std::unique_ptr<C>> created, std::string* error) {
  if (!created.ok()) {
    *error = created.status().ToString();
    return nullptr;
  }
  v1::Inventory inventory;
  if (absl::Status status = (*created)->Discover(inventory); !status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  CountingSink warmup;  // first cycle: unsupported queries are learned, buffers sized
  if (absl::Status status = (*created)->Collect(warmup); !status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return *std::move(created);
}

std::unique_ptr<collectors::EthtoolCollector> MakeFixtureEthtool(int netdevs, std::string* error) {
  auto api = std::make_unique<collectors::FixtureEthtoolApi>();
  v1::EthtoolCollectorConfig config;
  config.set_sysfs_root(In().host_sysfs);
  std::string include;
  for (int i = 0; i < netdevs && i < static_cast<int>(In().roce_netdevs.size()); ++i) {
    const std::string& netdev = In().roce_netdevs[i];
    if (absl::Status status = api->LoadCapture(netdev, "mlx5_core", In().ethtool_capture);
        !status.ok()) {
      *error = status.ToString();
      return nullptr;
    }
    absl::StrAppend(&include, include.empty() ? "" : "|", netdev);
  }
  config.mutable_netdevs()->set_include(include);
  return Discovered(collectors::EthtoolCollector::Create(config, std::move(api)), error);
}

// The same H100s as the stand-in state, answered in-process at no cost: what remains of a
// Collect() is the collector's own CPU (series, sink calls), without any library's.
class InProcessH100Nvml final : public collectors::nvml::NvmlApi {
  using Device = collectors::nvml::Device;
  using ErrorCounter = nvml_abi::nvmlNvLinkErrorCounter_t;

 public:
  explicit InProcessH100Nvml(unsigned int gpus) : gpus_(gpus) {}

  bool Has(collectors::nvml::Feature) const override { return true; }
  int DeviceGetCount(unsigned int* count) override {
    *count = gpus_;
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetHandleByIndex(unsigned int index, Device* device) override {
    if (index >= gpus_) {
      return nvml_abi::NVML_ERROR_INVALID_ARGUMENT;
    }
    *device = reinterpret_cast<Device>(static_cast<uintptr_t>(index) + 1);
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetUuid(Device device, std::string* uuid) override {
    *uuid = absl::StrCat("GPU-00000000-0000-0000-0000-00000000000", Index(device));
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetName(Device, std::string* name) override {
    *name = "NVIDIA H100 80GB HBM3";
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetPciBusId(Device device, std::string* bus_id) override {
    *bus_id = absl::StrCat("00000000:", 53 + 11 * Index(device), ":00.0");
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetUtilization(Device, nvml_abi::nvmlUtilization_t* utilization) override {
    utilization->gpu = 97;
    utilization->memory = 41;
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetComputePids(Device device, std::vector<uint32_t>* pids) override {
    pids->assign(1, 1002127 + Index(device));
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetNvLinkState(Device, unsigned int link, bool* active) override {
    if (link >= kNvLinksPerGpu) {
      return nvml_abi::NVML_ERROR_INVALID_ARGUMENT;
    }
    *active = true;
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetNvLinkRemotePciBusId(Device, unsigned int link, std::string* bus_id) override {
    *bus_id = absl::StrCat("00000000:0", 5 + link % 4, ":00.0");
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetNvLinkErrorCounter(Device device, unsigned int link, ErrorCounter counter,
                                  uint64_t* value) override {
    *value = Index(device) * 1000 + link * 10 + static_cast<uint64_t>(counter);
    return nvml_abi::NVML_SUCCESS;
  }
  int DeviceGetFieldValues(Device, nvml_abi::nvmlFieldValue_t* values, size_t count) override {
    for (size_t i = 0; i < count; ++i) {
      values[i].nvmlReturn = nvml_abi::NVML_ERROR_NOT_SUPPORTED;  // NVLink5 fields on Hopper
    }
    return nvml_abi::NVML_SUCCESS;
  }
  std::string ErrorString(int result) const override {
    return collectors::nvml::ReturnName(result);
  }

 private:
  static uint64_t Index(Device device) { return reinterpret_cast<uintptr_t>(device) - 1; }

  const unsigned int gpus_;
};

// NVML from the stand-in library (`in_process` false) or InProcessH100Nvml.
std::unique_ptr<collectors::NvmlCollector> MakeNvml(int gpus, std::string* error,
                                                    bool in_process = false) {
  v1::NvmlCollectorConfig config;
  if (in_process) {
    collectors::nvml::NvmlOpener opener =
        [gpus]() -> absl::StatusOr<std::unique_ptr<collectors::nvml::NvmlApi>> {
      return std::make_unique<InProcessH100Nvml>(static_cast<unsigned int>(gpus));
    };
    return Discovered(collectors::NvmlCollector::Create(config, std::move(opener)), error);
  }
  setenv("FABRICMON_NVML_STANDIN_STATE", In().nvml_state[gpus].c_str(), 1);
  config.set_library(In().nvml_library);
  return Discovered(collectors::NvmlCollector::Create(config), error);
}

std::unique_ptr<collectors::NetdevCollector> MakeNetdev(std::string* error) {
  v1::NetdevCollectorConfig config;
  config.set_sysfs_root(In().host_sysfs);
  config.set_procfs_root(In().procfs);
  return Discovered(collectors::NetdevCollector::Create(config), error);
}

std::unique_ptr<collectors::IbSysfsCollector> MakeIbSysfs(std::string* error) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(In().dgx_sysfs);
  config.mutable_devices()->set_include(kComputeHcas);
  return Discovered(collectors::IbSysfsCollector::Create(config), error);
}

// NVML calls made by one Collect(), counted through the stand-in's call log.
double CountNvmlCalls(collectors::Collector& collector) {
  const std::string log = In().scratch + "/nvml-calls.log";
  setenv("FABRICMON_NVML_STANDIN_LOG", log.c_str(), 1);
  CountingSink sink;
  (void)collector.Collect(sink);
  unsetenv("FABRICMON_NVML_STANDIN_LOG");
  std::ifstream in(log);
  std::string line;
  double calls = 0;
  while (std::getline(in, line)) {
    ++calls;
  }
  std::error_code ec;
  fs::remove(log, ec);
  return calls;
}

void SetCycleCounters(benchmark::State& state, const CountingSink& sink, double units,
                      const char* per_unit_name) {
  benchmark::DoNotOptimize(sink.checksum());
  state.counters["values_per_cycle"] =
      benchmark::Counter(static_cast<double>(sink.values()), benchmark::Counter::kAvgIterations);
  // kIsRate divides by the CPU time; kInvert makes it CPU seconds per unit.
  state.counters[per_unit_name] =
      benchmark::Counter(units * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// ---------------------------------------------------------------------------------------------
// ethtool

// One Collect() over `netdevs` mlx5 netdevs replaying the real capture (one GSTATS each).
void BM_EthtoolCollectFixture(benchmark::State& state) {
  const int netdevs = static_cast<int>(state.range(0));
  std::string error;
  auto collector = MakeFixtureEthtool(netdevs, &error);
  if (collector == nullptr) {
    state.SkipWithError(("setup failed: " + error).c_str());
    return;
  }
  CountingSink sink;
  for (auto _ : state) {
    if (!collector->Collect(sink).ok()) {
      state.SkipWithError("collect failed");
      return;
    }
  }
  SetCycleCounters(state, sink, netdevs, "cpu_per_netdev");
  collectors::FixtureEthtoolApi probe;
  (void)probe.LoadCapture("x", "mlx5_core", In().ethtool_capture);
  absl::StatusOr<std::vector<std::string>> keys = probe.GetStringSet("x");
  state.counters["keys_per_netdev"] = keys.ok() ? static_cast<double>(keys->size()) : 0;
}
BENCHMARK(BM_EthtoolCollectFixture)
    ->ArgName("netdevs")
    ->Arg(1)
    ->Arg(kRoceNetdevs)
    ->Unit(benchmark::kMicrosecond);

// veth pairs in a private network namespace: fmb1 (1 queue pair) and fmb16 (16), each with a
// peer. The namespace has no name; it lives while an ioctl socket made in it or `ns_fd_` does,
// so it disappears with the process whatever way that ends.
class VethNamespace {
 public:
  // Made by the first call (root only; error() says why not otherwise).
  static VethNamespace& Get() {
    if (instance_ == nullptr) {
      instance_ = new VethNamespace();
    }
    return *instance_;
  }
  // Closes the namespace handle if one was made (the namespace goes with its last socket).
  static void Release() {
    if (instance_ != nullptr && instance_->ns_fd_ >= 0) {
      close(instance_->ns_fd_);
      instance_->ns_fd_ = -1;
    }
  }
  const std::string& error() const { return error_; }

  // A SIOCETHTOOL api whose socket lives in the namespace; null on failure.
  std::unique_ptr<collectors::EthtoolApi> NewApi() {
    std::unique_ptr<collectors::EthtoolApi> api;
    if (ns_fd_ < 0) {
      return api;
    }
    std::thread([&] {
      if (setns(ns_fd_, CLONE_NEWNET) == 0) {
        api = collectors::CreateIoctlEthtoolApi();
      }
    }).join();
    return api;
  }

 private:
  VethNamespace() {
    if (geteuid() != 0) {
      error_ = "skipped: needs root (a private network namespace with veth pairs)";
      return;
    }
    std::thread([this] {
      if (unshare(CLONE_NEWNET) != 0) {
        error_ = absl::StrCat("skipped: unshare(CLONE_NEWNET): ", std::strerror(errno));
        return;
      }
      // Children forked from this thread inherit its network namespace.
      const int rc = std::system(
          "{ ip link add fmb1 type veth peer name fmb1p &&"
          "  ip link add fmb16 numrxqueues 16 numtxqueues 16 type veth peer name fmb16p &&"
          "  for d in fmb1 fmb1p fmb16 fmb16p; do ip link set $d up || exit 1; done; }"
          " >/dev/null 2>&1");
      if (rc != 0) {
        error_ = "skipped: `ip link add ... type veth` failed (iproute2 or veth missing?)";
        return;
      }
      ns_fd_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
      if (ns_fd_ < 0) {
        error_ = absl::StrCat("skipped: open /proc/thread-self/ns/net: ", std::strerror(errno));
      }
    }).join();
  }

  static inline VethNamespace* instance_ = nullptr;
  int ns_fd_ = -1;
  std::string error_;
};

const char* VethName(int64_t queues) { return queues == 1 ? "fmb1" : "fmb16"; }

// One Collect() through the real SIOCETHTOOL ioctl on a veth, every key exported (extra_keys).
void BM_EthtoolCollectIoctl(benchmark::State& state) {
  VethNamespace& ns = VethNamespace::Get();
  std::unique_ptr<collectors::EthtoolApi> api = ns.NewApi();
  if (api == nullptr) {
    state.SkipWithError(ns.error().empty() ? "cannot enter the namespace" : ns.error().c_str());
    return;
  }
  const std::string netdev = VethName(state.range(0));
  absl::StatusOr<std::vector<std::string>> keys = api->GetStringSet(netdev);
  v1::EthtoolCollectorConfig config;
  config.set_sysfs_root(In().veth_sysfs);
  config.mutable_netdevs()->set_include(netdev);
  config.set_extra_keys(".*");
  config.set_extra_keys_limit(4096);
  std::string error;
  auto collector = Discovered(collectors::EthtoolCollector::Create(config, std::move(api)), &error);
  if (collector == nullptr) {
    state.SkipWithError(("setup failed: " + error).c_str());
    return;
  }
  CountingSink sink;
  for (auto _ : state) {
    if (!collector->Collect(sink).ok()) {
      state.SkipWithError("collect failed");
      return;
    }
  }
  SetCycleCounters(state, sink, 1, "cpu_per_netdev");
  state.counters["keys_per_netdev"] = keys.ok() ? static_cast<double>(keys->size()) : 0;
}
BENCHMARK(BM_EthtoolCollectIoctl)
    ->ArgName("queues")
    ->Arg(1)
    ->Arg(16)
    ->Unit(benchmark::kMicrosecond);

// The ioctl alone: one ETHTOOL_GSTATS on the same veth (the floor under the collector).
void BM_EthtoolGstatsIoctl(benchmark::State& state) {
  VethNamespace& ns = VethNamespace::Get();
  std::unique_ptr<collectors::EthtoolApi> api = ns.NewApi();
  if (api == nullptr) {
    state.SkipWithError(ns.error().empty() ? "cannot enter the namespace" : ns.error().c_str());
    return;
  }
  const std::string netdev = VethName(state.range(0));
  absl::StatusOr<std::vector<std::string>> keys = api->GetStringSet(netdev);
  if (!keys.ok() || keys->empty()) {
    state.SkipWithError("no string set");
    return;
  }
  std::vector<uint64_t> values(keys->size());
  for (auto _ : state) {
    values.resize(keys->size());
    if (!api->GetStats(netdev, values).ok()) {
      state.SkipWithError("GSTATS failed");
      return;
    }
    benchmark::DoNotOptimize(values.data());
  }
  state.counters["keys_per_netdev"] = static_cast<double>(keys->size());
}
BENCHMARK(BM_EthtoolGstatsIoctl)->ArgName("queues")->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------------------------
// nvml

// One Collect() over `gpus` H100s with 18 NVLinks each, through the stand-in library.
void BM_NvmlCollect(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  std::string error;
  auto collector = MakeNvml(gpus, &error);
  if (collector == nullptr) {
    state.SkipWithError(("setup failed: " + error).c_str());
    return;
  }
  CountingSink sink;
  for (auto _ : state) {
    if (!collector->Collect(sink).ok()) {
      state.SkipWithError("collect failed");
      return;
    }
  }
  SetCycleCounters(state, sink, gpus, "cpu_per_gpu");
  state.counters["nvml_calls_per_cycle"] = CountNvmlCalls(*collector);
}
BENCHMARK(BM_NvmlCollect)->ArgName("gpus")->Arg(1)->Arg(8)->Unit(benchmark::kMicrosecond);

// The collector alone: the same 8 GPUs answered in-process (InProcessH100Nvml).
void BM_NvmlCollectInProcess(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  std::string error;
  auto collector = MakeNvml(gpus, &error, /*in_process=*/true);
  if (collector == nullptr) {
    state.SkipWithError(("setup failed: " + error).c_str());
    return;
  }
  CountingSink sink;
  for (auto _ : state) {
    if (!collector->Collect(sink).ok()) {
      state.SkipWithError("collect failed");
      return;
    }
  }
  SetCycleCounters(state, sink, gpus, "cpu_per_gpu");
}
BENCHMARK(BM_NvmlCollectInProcess)->ArgName("gpus")->Arg(8)->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------------------------
// netdev

// One Collect() of the host tree (11 netdevs) plus /proc/net/snmp and /proc/net/netstat.
void BM_NetdevCollect(benchmark::State& state) {
  std::string error;
  auto collector = MakeNetdev(&error);
  if (collector == nullptr) {
    state.SkipWithError(("setup failed: " + error).c_str());
    return;
  }
  CountingSink sink;
  for (auto _ : state) {
    if (!collector->Collect(sink).ok()) {
      state.SkipWithError("collect failed");
      return;
    }
  }
  SetCycleCounters(state, sink, static_cast<double>(collector->netdev_count()), "cpu_per_netdev");
  state.counters["netdevs"] = static_cast<double>(collector->netdev_count());
}
BENCHMARK(BM_NetdevCollect)->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------------------------
// A whole DGX H100 node

// One cycle of every collector: ib_sysfs (8 HCAs), ethtool (8 RoCE netdevs, capture keys),
// nvml (8 GPUs x 18 NVLinks), netdev (host tree + TCP). Arg nvml_in_process 0: NVML is the
// stand-in library (888 calls per cycle, each a mutex, a getenv and a stat(2) of its state file
// where a driver would do an ioctl); 1: the in-process NVML, i.e. the collectors' own CPU.
// Per-collector CPU is taken with the thread CPU clock around each Collect() (5 clock reads per
// cycle, well under 1 % of it).
void BM_NodeCycle(benchmark::State& state) {
  std::string error;
  std::vector<std::unique_ptr<collectors::Collector>> node;
  node.push_back(MakeIbSysfs(&error));
  node.push_back(MakeFixtureEthtool(kRoceNetdevs, &error));
  node.push_back(MakeNvml(8, &error, /*in_process=*/state.range(0) != 0));
  node.push_back(MakeNetdev(&error));
  for (const auto& collector : node) {
    if (collector == nullptr) {
      state.SkipWithError(("setup failed: " + error).c_str());
      return;
    }
  }
  std::vector<uint64_t> nanos(node.size(), 0);
  CountingSink sink;
  const uint64_t start = ThreadCpuNanos();
  for (auto _ : state) {
    uint64_t before = ThreadCpuNanos();
    for (size_t i = 0; i < node.size(); ++i) {
      if (!node[i]->Collect(sink).ok()) {
        state.SkipWithError("collect failed");
        return;
      }
      const uint64_t after = ThreadCpuNanos();
      nanos[i] += after - before;
      before = after;
    }
  }
  const double total = static_cast<double>(ThreadCpuNanos() - start);
  const double iterations = static_cast<double>(state.iterations());
  SetCycleCounters(state, sink, 1, "cpu_per_cycle");
  // seconds per cycle x 10 cycles/s x 100 % = nanoseconds per cycle / 1e6.
  state.counters["core_percent_at_10hz"] = total / iterations / 1e6;
  double at_default = 0;
  for (size_t i = 0; i < node.size(); ++i) {
    const double per_cycle = static_cast<double>(nanos[i]) / iterations;  // ns
    state.counters[absl::StrCat(node[i]->name(), "_percent_at_10hz")] = per_cycle / 1e6;
    at_default += per_cycle / 1e9 / (static_cast<double>(node[i]->interval_ms()) / 1e3) * 100;
  }
  state.counters["core_percent_at_default_intervals"] = at_default;
}
BENCHMARK(BM_NodeCycle)->ArgName("nvml_in_process")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fabricmon::bench

int main(int argc, char** argv) {
  using fabricmon::bench::In;
  In().ethtool_capture =
      fabricmon::testing::SharedFixture("ethtool/mlx5_connectx4_ubuntu18.04_ethq-tests.txt");
  In().nvml_library = FABRICMON_NVML_STANDIN_PATH;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    if (absl::ConsumePrefix(&arg, "--nvml_library=")) {
      In().nvml_library = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--ethtool_capture=")) {
      In().ethtool_capture = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--keep_inputs=")) {
      In().scratch = std::string(arg);
    } else {
      args.push_back(argv[i]);
    }
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) {
    return 1;
  }
  std::unique_ptr<fabricmon::bench::ScratchDir> scratch;
  if (In().scratch.empty()) {
    scratch = std::make_unique<fabricmon::bench::ScratchDir>("fabricmon-host-bench");
    if (scratch->path().empty()) {
      return 1;
    }
    In().scratch = scratch->path();
  }
  if (!fabricmon::bench::PrepareInputs()) {
    return 1;
  }
  benchmark::AddCustomContext("ethtool_capture", In().ethtool_capture);
  benchmark::AddCustomContext("nvml_library", In().nvml_library);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  fabricmon::bench::VethNamespace::Release();
  return 0;
}
