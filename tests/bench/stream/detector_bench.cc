// fabricmon_detector_bench: the cost of one DetectionEngine::Tick() with every detector on, per
// series evaluated, against the streaming ingest target (5 M samples/s per core, i.e. 200 ns per
// sample).
//
// Setup per size N: N DGX-class nodes (the ib_sysfs series of the gpud-h100 fixture, about 500
// series each, "mixed" counter motion) attached to a SeriesStore, two batches each so rates
// exist, and a link list for a 2-tier tree (each node's HCA ports on rail leaves, every leaf
// uplinked to every spine) so the topology and congestion-spreading code runs. Each iteration
// then appends one new batch per node (timing paused; its CPU time is kept apart as the append
// cost) and moves the clock 1 s, and the timed part is one Tick(): the steady state of a 1 s
// detector tick.
//
// Counters:
//   series_per_tick          series in the store, all of which a tick may visit
//   ns_per_series            CPU time of one tick / series_per_tick (mean over the ticks)
//   median_ns_per_series     the same for the median tick (what to compare two builds by)
//   ingest_share_at_1s_tick  see IngestShare() below
//   append_ns_per_sample     CPU time of NodeState::AppendBatch per sample (the store part of
//                            ingest only; BM_Ingest in fabricmon_exposition_bench measures
//                            parse+decode+append, so the real ingest cost is higher)
//   detector_per_append      ns_per_series / append_ns_per_sample: the tick's cost per series
//                            relative to storing one sample (an upper bound of detector cost
//                            relative to full ingest)
//
//   topology_builds          times the engine built the topology (1: once, before the ticks)
//
// Each size runs a fixed number of ticks (see the registrations below). Run (under a minute on
// a 2-core machine; repetitions build the same fleet again and tick it the same way):
//   fabricmon_detector_bench --benchmark_counters_tabular=true --benchmark_repetitions=3

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "daemon/common/clock.h"
#include "daemon/detectors/engine.h"
#include "daemon/detectors/finding_tracker.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/config.pb.h"
#include "tests/bench/stream/node_model.h"
#include "tests/bench/stream/run_benchmarks.h"

namespace fabricmon::bench {
namespace {

constexpr int64_t kStart = int64_t{1700000000} * 1000000000;
constexpr int64_t kSecond = 1000000000;
// The streaming target: samples per second one core ingests.
constexpr double kIngestTargetSamplesPerSecond = 5e6;

// Wall time set by the benchmark; monotonic time real (the engine times its own tick with it).
class SteppedClock final : public Clock {
 public:
  int64_t NowUnixNanos() const override { return now_.load(std::memory_order_relaxed); }
  int64_t MonotonicNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void Set(int64_t now) { now_.store(now, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_{kStart};
};

int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * kSecond + ts.tv_nsec;
}

std::string NodeName(size_t n) { return absl::StrFormat("node%03d", n); }

// The host ports (device, port) the node's series carry, in label order.
std::vector<std::pair<std::string, std::string>> HostPorts(const std::vector<NodeSeries>& series) {
  std::set<std::pair<std::string, std::string>> ports;
  for (const NodeSeries& s : series) {
    std::string device, port;
    for (const auto& [name, value] : s.desc.labels) {
      if (name == "device") device = value;
      if (name == "port") port = value;
    }
    if (!device.empty() && !port.empty()) ports.insert({device, port});
  }
  return {ports.begin(), ports.end()};
}

// A 2-tier tree: rail r of nodes [16k, 16k+16) on leaf "leafK_R" ports 1..16; every leaf has
// uplinks 17..(16+spines) to the spines, spine s port = leaf number + 1.
std::string TwoTierLinkList(size_t nodes,
                            const std::vector<std::pair<std::string, std::string>>& host_ports) {
  constexpr size_t kNodesPerLeaf = 16;
  constexpr size_t kSpines = 4;
  const size_t rails = host_ports.size();
  const size_t groups = (nodes + kNodesPerLeaf - 1) / kNodesPerLeaf;
  std::string text;
  for (size_t n = 0; n < nodes; ++n) {
    for (size_t r = 0; r < rails; ++r) {
      absl::StrAppendFormat(&text, "%s/%s/%s switch:leaf%02d_%d/%d\n", NodeName(n),
                            host_ports[r].first, host_ports[r].second, n / kNodesPerLeaf, r,
                            n % kNodesPerLeaf + 1);
    }
  }
  for (size_t g = 0; g < groups; ++g) {
    for (size_t r = 0; r < rails; ++r) {
      const size_t leaf = g * rails + r;
      for (size_t s = 0; s < kSpines; ++s) {
        absl::StrAppendFormat(&text, "switch:leaf%02d_%d/%d switch:spine%02d/%d\n", g, r,
                              kNodesPerLeaf + 1 + s, s, leaf + 1);
      }
    }
  }
  return text;
}

struct Node {
  std::shared_ptr<store::NodeState> state;
  std::vector<uint32_t> indices;
  std::unique_ptr<ValueModel> model;
};

struct Fleet {
  SteppedClock clock;
  store::SeriesStore store{store::StoreOptions{}};
  std::vector<Node> nodes;
  std::vector<bool> present;
  uint64_t sequence = 0;
  int64_t now = kStart;
  size_t series = 0;
  size_t links = 0;

  // One batch per node at `now` + 1 s; returns the samples stored.
  uint64_t AppendRound() {
    ++sequence;
    now += kSecond;
    clock.Set(now);
    uint64_t samples = 0;
    for (Node& node : nodes) {
      const std::vector<uint64_t>& values = node.model->Next();
      samples +=
          node.state->AppendBatch(sequence, 0, now, node.indices, values, present, now).samples;
    }
    return samples;
  }
};

std::unique_ptr<Fleet> MakeFleet(size_t count) {
  const std::vector<NodeSeries>& series = DgxNodeSeries();
  auto fleet = std::make_unique<Fleet>();
  fleet->present.assign(series.size(), true);
  for (size_t n = 0; n < count; ++n) {
    v1::Hello hello;
    hello.set_node_name(NodeName(n));
    hello.set_agent_instance_id(n + 1);
    hello.set_boot_id(absl::StrCat("boot-", n));
    auto attached = fleet->store.Attach(
        hello, n + 1, [] {}, kStart);
    if (!attached.ok()) std::abort();
    Node node;
    node.state = attached->node;
    for (const NodeSeries& s : series) {
      auto index = node.state->Declare(s.desc);
      if (!index.ok()) std::abort();
      node.indices.push_back(*index);
    }
    node.model = std::make_unique<ValueModel>(series, Profile::kMixed, n + 1);
    fleet->nodes.push_back(std::move(node));
  }
  fleet->series = count * series.size();
  fleet->AppendRound();
  fleet->AppendRound();
  return fleet;
}

// What the tick costs as a share of the ingest budget it rides on. With a 1 s tick every series
// receives 1 sample/s, so ingesting one tick's worth of samples takes
//   series × 1 sample/s ÷ 5e6 samples/s   core-seconds per second
// at the target rate. Dividing the tick's CPU seconds by that gives the detectors' cost in units
// of "ingesting the same samples": 0.1 means detectors add 10 % to the ingest CPU, i.e. ingest
// at the target would drop from 5 M to 5 M / 1.1 ≈ 4.5 M samples/s per core if both shared one
// core. Equivalently ns_per_series / 200 ns.
double IngestShare(double tick_cpu_seconds, size_t series) {
  const double ingest_seconds = static_cast<double>(series) * 1.0 / kIngestTargetSamplesPerSecond;
  return tick_cpu_seconds / ingest_seconds;
}

// Arg 0: nodes. Arg 1: 1 to configure the 2-tier link list.
void BM_DetectorTick(benchmark::State& state) {
  const size_t count = static_cast<size_t>(state.range(0));
  const bool with_links = state.range(1) != 0;
  std::unique_ptr<Fleet> fleet = MakeFleet(count);
  detectors::DetectionEngine engine(fleet->store, fleet->clock, v1::DetectorThresholds{}, kSecond);
  if (with_links) {
    const absl::Status status =
        engine.SetLinkList(TwoTierLinkList(count, HostPorts(DgxNodeSeries())));
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  engine.Tick();  // first tick: detectors build their per-series state
  fleet->links = engine.topology_links();

  int64_t tick_cpu = 0;
  std::vector<int64_t> ticks;
  ticks.reserve(state.max_iterations);
  int64_t append_cpu = 0;
  uint64_t appended = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const int64_t append_start = ThreadCpuNanos();
    appended += fleet->AppendRound();
    append_cpu += ThreadCpuNanos() - append_start;
    state.ResumeTiming();
    const int64_t tick_start = ThreadCpuNanos();
    engine.Tick();
    const int64_t tick_nanos = ThreadCpuNanos() - tick_start;
    tick_cpu += tick_nanos;
    ticks.push_back(tick_nanos);
  }
  const double iterations = static_cast<double>(state.iterations());
  const double tick_seconds = static_cast<double>(tick_cpu) / 1e9 / iterations;
  const double ns_per_series = tick_seconds * 1e9 / static_cast<double>(fleet->series);
  const double append_ns = static_cast<double>(append_cpu) / static_cast<double>(appended);
  state.counters["nodes"] = static_cast<double>(count);
  state.counters["links"] = static_cast<double>(fleet->links);
  state.counters["topology_builds"] = static_cast<double>(engine.topology_builds());
  state.counters["series_per_tick"] = static_cast<double>(fleet->series);
  state.counters["ns_per_series"] = ns_per_series;
  // The median tick: on a VM, page faults and a neighbour's work land on a few ticks and move
  // the mean by tens of percent from run to run.
  std::sort(ticks.begin(), ticks.end());
  state.counters["median_ns_per_series"] =
      ticks.empty()
          ? 0
          : static_cast<double>(ticks[ticks.size() / 2]) / static_cast<double>(fleet->series);
  state.counters["ingest_share_at_1s_tick"] = IngestShare(tick_seconds, fleet->series);
  state.counters["append_ns_per_sample"] = append_ns;
  state.counters["detector_per_append"] = ns_per_series / append_ns;
  state.counters["active_findings"] =
      static_cast<double>(engine.Findings(/*include_cleared=*/false, "").size());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(fleet->series));
  state.SetLabel(with_links ? "all detectors, 2-tier link list" : "all detectors, no topology");
}

// A fixed number of ticks per size: the model's bad links (node_model.h) raise their findings over
// the first ticks, and a tick's cost with them, so a run that chose its own count by time would
// measure a different fabric each time and two builds could not be compared.
BENCHMARK(BM_DetectorTick)->Args({16, 1})->Iterations(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DetectorTick)->Args({256, 1})->Iterations(60)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DetectorTick)->Args({1000, 1})->Iterations(40)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DetectorTick)->Args({1000, 0})->Iterations(40)->Unit(benchmark::kMillisecond);

// One FindingTracker::Update with `count` active cable findings (link_flapping), the same ones
// every tick: a fabric in a bad hour (a failed spine, a flapping rail), where a tick carries
// thousands of them. Half know their peer (a switch port), half do not (no topology for them).
// What it prints: ns per finding per tick; a tick whose cost per finding grows with the count is
// quadratic in the findings.
void BM_FindingTrackerUpdate(benchmark::State& state) {
  const size_t count = static_cast<size_t>(state.range(0));
  std::vector<detectors::Finding> findings;
  findings.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    detectors::Finding finding;
    finding.kind = "link_flapping";
    finding.identity = detectors::Identity::kCable;
    finding.subject.node = absl::StrFormat("node%05d", i / 8);
    finding.subject.device = absl::StrCat("mlx5_", i % 8);
    finding.subject.port = 1;
    if (i % 2 == 0) {
      finding.has_peer = true;
      finding.peer.node = absl::StrFormat("leaf%03d", i / 64);
      finding.peer.is_switch = true;
      finding.peer.port = static_cast<uint32_t>(i % 64 + 1);
    }
    finding.summary = "link went down 3 times in 5 minutes";
    finding.OrientCable();
    findings.push_back(std::move(finding));
  }
  detectors::FindingTracker tracker;
  int64_t now = kStart;
  tracker.Update(findings, now);
  int64_t cpu = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<detectors::Finding> tick = findings;  // Update takes them by value
    now += kSecond;
    state.ResumeTiming();
    const int64_t start = ThreadCpuNanos();
    tracker.Update(std::move(tick), now);
    cpu += ThreadCpuNanos() - start;
  }
  state.counters["findings"] = static_cast<double>(count);
  state.counters["ns_per_finding"] = static_cast<double>(cpu) /
                                     static_cast<double>(state.iterations()) /
                                     static_cast<double>(count);
}
BENCHMARK(BM_FindingTrackerUpdate)
    ->Arg(100)
    ->Arg(1000)
    ->Arg(4000)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fabricmon::bench

int main(int argc, char** argv) {
  return fabricmon::bench::RunBenchmarksAsTheDaemonsRun(argc, argv);
}
