// fabricmon_ib_sysfs_bench: cost of one ib_sysfs Collect() cycle on a generated DGX H100 tree,
// against the cost of just pread(2)-ing the same files ("pread floor").
//
//   fabricmon_ib_sysfs_bench [--sysfs_root=DIR] [benchmark flags]
//
// Without --sysfs_root the program generates the dgx-h100 tree once into a temporary directory
// (tests/sim/gen_sysfs_tree.py, python3) and removes it at exit. Counters reported per benchmark:
//   values_per_cycle   samples emitted per Collect() (all series: counters, gauges, info, errors)
//   counters_per_cycle counter samples per Collect() (the hardware counter values)
//   cpu_per_value      CPU time per emitted sample (seconds in JSON)
//   preads_per_cycle   files read per cycle (pread floor); cpu_per_pread likewise
// Timings are CPU time (the benchmark library's default); the interesting ratio is
// BM_IbSysfsCollect cpu time / BM_PreadFloor cpu time for the same file set.
// BM_IbSysfsCollectIntoCycle is what the agent's collector thread does per cycle: Collect() into
// its CycleBuilder (series ids, layout, the values kept for the replay buffer).

#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "benchmark/benchmark.h"
#include "collectors/core/recording_sink.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/agent/series_table.h"
#include "daemon/common/file_reader.h"
#include "daemon/exposition/text_exposition.h"
#include "fabricmon/v1/inventory.pb.h"
#include "tests/bench/bench_support.h"

namespace fabricmon::bench {
namespace {

std::string& SysfsRoot() {
  static auto* root = new std::string();
  return *root;
}

std::unique_ptr<collectors::IbSysfsCollector> MakeCollector(bool hw_counters) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(SysfsRoot());
  config.set_hw_counters(hw_counters);
  auto collector = collectors::IbSysfsCollector::Create(config);
  if (!collector.ok()) {
    return nullptr;
  }
  v1::Inventory inventory;
  if (!(*collector)->Discover(inventory).ok()) {
    return nullptr;
  }
  return *std::move(collector);
}

// One Collect() cycle. Arg 0: hw_counters off (the file set node_exporter 1.5 reads), 1: on.
void BM_IbSysfsCollect(benchmark::State& state) {
  auto collector = MakeCollector(state.range(0) != 0);
  if (collector == nullptr) {
    state.SkipWithError("discovery failed");
    return;
  }
  CountingSink sink;
  for (auto _ : state) {
    if (!collector->Collect(sink).ok()) {
      state.SkipWithError("collect failed");
      return;
    }
  }
  benchmark::DoNotOptimize(sink.checksum());
  const double values = static_cast<double>(sink.values());
  state.counters["values_per_cycle"] =
      benchmark::Counter(values, benchmark::Counter::kAvgIterations);
  state.counters["counters_per_cycle"] =
      benchmark::Counter(static_cast<double>(sink.counters()), benchmark::Counter::kAvgIterations);
  // kIsRate divides by the CPU time; kInvert turns values/s into seconds per value (printed
  // with an SI prefix, e.g. "400ns"; JSON holds seconds).
  state.counters["cpu_per_value"] =
      benchmark::Counter(values, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["open_files"] = static_cast<double>(collector->open_counter_files());
}
BENCHMARK(BM_IbSysfsCollect)->ArgName("hw_counters")->Arg(0)->Arg(1);

// Collect() into the agent's CycleBuilder and Finish(): the agent's per-cycle work apart from
// the stream, the schedule and the replay buffer.
void BM_IbSysfsCollectIntoCycle(benchmark::State& state) {
  auto collector = MakeCollector(state.range(0) != 0);
  if (collector == nullptr) {
    state.SkipWithError("discovery failed");
    return;
  }
  agent::SeriesTable table;
  agent::CycleBuilder builder(table);
  uint64_t values = 0;
  int64_t timestamp = 1;
  for (auto _ : state) {
    if (!collector->Collect(builder).ok()) {
      state.SkipWithError("collect failed");
      return;
    }
    const agent::Cycle cycle = builder.Finish(timestamp++, 0);
    values += cycle.values.size();
    benchmark::DoNotOptimize(cycle.values.data());
  }
  state.counters["values_per_cycle"] =
      benchmark::Counter(static_cast<double>(values), benchmark::Counter::kAvgIterations);
  state.counters["cpu_per_value"] = benchmark::Counter(
      static_cast<double>(values), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_IbSysfsCollectIntoCycle)->ArgName("hw_counters")->Arg(0)->Arg(1);

// Collect() plus building and serializing the Prometheus text exposition, i.e. roughly what a
// node_exporter scrape does minus HTTP.
void BM_IbSysfsCollectAndSerialize(benchmark::State& state) {
  auto collector = MakeCollector(state.range(0) != 0);
  if (collector == nullptr) {
    state.SkipWithError("discovery failed");
    return;
  }
  collectors::RecordingSink sink;
  uint64_t values = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    sink.Clear();
    if (!collector->Collect(sink).ok()) {
      state.SkipWithError("collect failed");
      return;
    }
    values += sink.samples().size();
    const std::string text = exposition::SerializeText(exposition::BuildFamilies(sink.samples()));
    bytes += text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["values_per_cycle"] =
      benchmark::Counter(static_cast<double>(values), benchmark::Counter::kAvgIterations);
  state.counters["cpu_per_value"] = benchmark::Counter(
      static_cast<double>(values), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["text_bytes_per_cycle"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_IbSysfsCollectAndSerialize)->ArgName("hw_counters")->Arg(0)->Arg(1);

// The files one Collect() reads: every counter file (counters/, counters_ext/, hw_counters/
// except lifespan) plus state, phys_state and rate of every port.
std::vector<std::string> CycleFiles(bool hw_counters) {
  std::vector<std::string> files;
  const std::string class_dir = JoinPath(SysfsRoot(), "class/infiniband");
  auto devices = ListDirectory(class_dir);
  if (!devices.ok()) {
    return files;
  }
  for (const std::string& device : *devices) {
    auto ports = ListDirectory(JoinPath(class_dir, device + "/ports"));
    if (!ports.ok()) {
      continue;
    }
    for (const std::string& port : *ports) {
      const std::string port_dir = JoinPath(class_dir, device + "/ports/" + port);
      for (const char* attribute : {"state", "phys_state", "rate"}) {
        files.push_back(JoinPath(port_dir, attribute));
      }
      for (const char* group : {"counters", "counters_ext", "hw_counters"}) {
        if (!hw_counters && absl::string_view(group) == "hw_counters") {
          continue;
        }
        auto names = ListDirectory(JoinPath(port_dir, group));
        for (const std::string& name : names.ok() ? *names : std::vector<std::string>{}) {
          if (name != "lifespan") {
            files.push_back(JoinPath(port_dir, absl::StrCat(group, "/", name)));
          }
        }
      }
    }
  }
  return files;
}

// pread(2) of the same open files, no parsing, no samples: the floor for a sysfs collector that
// keeps its descriptors open.
void BM_PreadFloor(benchmark::State& state) {
  std::vector<int> fds;
  for (const std::string& path : CycleFiles(state.range(0) != 0)) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      fds.push_back(fd);
    }
  }
  if (fds.empty()) {
    state.SkipWithError("no files");
    return;
  }
  char buffer[64];
  uint64_t bytes = 0;
  for (auto _ : state) {
    for (int fd : fds) {
      const ssize_t n = pread(fd, buffer, sizeof(buffer), 0);
      bytes += n > 0 ? static_cast<uint64_t>(n) : 0;
    }
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(bytes);
  state.counters["preads_per_cycle"] = static_cast<double>(fds.size());
  state.counters["cpu_per_pread"] =
      benchmark::Counter(static_cast<double>(fds.size()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  for (int fd : fds) {
    close(fd);
  }
}
BENCHMARK(BM_PreadFloor)->ArgName("hw_counters")->Arg(0)->Arg(1);

// Rediscovery (every rediscover interval, or after a device vanished).
void BM_IbSysfsDiscover(benchmark::State& state) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(SysfsRoot());
  auto collector = collectors::IbSysfsCollector::Create(config);
  if (!collector.ok()) {
    state.SkipWithError("create failed");
    return;
  }
  for (auto _ : state) {
    v1::Inventory inventory;
    if (!(*collector)->Discover(inventory).ok()) {
      state.SkipWithError("discovery failed");
      return;
    }
    benchmark::DoNotOptimize(inventory.rdma_devices_size());
  }
}
BENCHMARK(BM_IbSysfsDiscover)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fabricmon::bench

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    if (absl::ConsumePrefix(&arg, "--sysfs_root=")) {
      fabricmon::bench::SysfsRoot() = std::string(arg);
    } else {
      args.push_back(argv[i]);
    }
  }
  std::unique_ptr<fabricmon::bench::ScratchDir> scratch;
  if (fabricmon::bench::SysfsRoot().empty()) {
    scratch = std::make_unique<fabricmon::bench::ScratchDir>("fabricmon-bench");
    if (scratch->path().empty()) {
      return 1;
    }
    fabricmon::bench::SysfsRoot() = scratch->path() + "/sys";
    if (!fabricmon::bench::GenerateSysfsTree("dgx-h100", fabricmon::bench::SysfsRoot())) {
      return 1;
    }
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) {
    return 1;
  }
  benchmark::AddCustomContext("sysfs_root", fabricmon::bench::SysfsRoot());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
