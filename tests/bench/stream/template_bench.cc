// fabricmon_template_bench: what remote_write's steady path costs per sample on an ingest thread,
// BatchTemplate::CompressIfMatches (a stream's repeated batch layout checked and compressed in
// one pass), with a real node's values.
//
// Setup per size N: N DGX-class nodes (the ib_sysfs series of the gpud-h100 fixture, about 500
// series each, "mixed" counter motion, exported values as the aggregator sends them: raw ×
// scale), each node's template built from its first batch with labels shaped as the feed merges
// them. Each iteration advances every node one cycle (untimed) and compresses every node's batch
// (timed), as 1 Hz ingest does. N large enough that the templates do not fit in a cache, as in an
// aggregator with a thousand streams.
//
// Counters:
//   ns_per_sample     CPU time per sample of CompressIfMatches
//   bytes_per_sample  the compressed run's bytes per sample (what a request carries)
//   template_bytes_per_series  heap a node's template holds per series (BatchTemplate::MemoryBytes)
//   labels_bytes_per_series    the merged labels' bytes per series (what a writer keeps per key)
//
//   fabricmon_template_bench --benchmark_repetitions=3

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "collectors/core/sample.h"
#include "daemon/remote_write/batch_template.h"
#include "daemon/remote_write/label_set.h"
#include "tests/bench/stream/node_model.h"
#include "tests/bench/stream/run_benchmarks.h"

namespace fabricmon::bench {
namespace {

namespace rw = remote_write;

constexpr int64_t kStartMs = int64_t{1700000000} * 1000;

struct Node {
  std::unique_ptr<ValueModel> model;
  std::vector<std::string> labels;  // by key: the merged labels as a request carries them
  rw::BatchTemplate layout;
  std::vector<rw::KeyedSample> batch;
};

// The node's next cycle as the feed hands it to its writer: every series once, one timestamp.
void NextBatch(Node& node, const std::vector<NodeSeries>& series, int64_t timestamp_ms) {
  const std::vector<uint64_t>& values = node.model->Next();
  node.batch.resize(series.size());
  for (size_t i = 0; i < series.size(); ++i) {
    rw::KeyedSample& sample = node.batch[i];
    sample.labels_key = static_cast<uint32_t>(2 * i);
    sample.timestamp_ms = timestamp_ms;
    sample.value = collectors::ExportedValue(series[i].desc, values[i]);
  }
}

void BM_TemplateCompress(benchmark::State& state) {
  const std::vector<NodeSeries>& series = DgxNodeSeries();
  const rw::LabelMerger merger({{"cluster", "bench"}}, {{"shard", "bench-0"}});
  std::vector<Node> nodes(static_cast<size_t>(state.range(0)));
  for (size_t n = 0; n < nodes.size(); ++n) {
    Node& node = nodes[n];
    node.model = std::make_unique<ValueModel>(series, Profile::kMixed, n + 1);
    for (const NodeSeries& s : series) {
      rw::LabelPairs pairs = {{"node", absl::StrCat("dgx-", n)}};
      pairs.insert(pairs.end(), s.desc.labels.begin(), s.desc.labels.end());
      merger.Append(*rw::MakeLabelSet(s.desc.name, std::move(pairs), rw::SeriesOrigin::kAgent),
                    node.labels.emplace_back());
      node.labels.emplace_back();  // the saturation flag's key, unused here
    }
    NextBatch(node, series, kStartMs);
    if (!node.layout.Build(0, node.batch, [&](uint32_t key) { return node.labels[key]; })) {
      state.SkipWithError("template not built");
      return;
    }
  }
  rw::CompressedSamples run;
  int64_t cycle = 0;
  int64_t samples = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ++cycle;
    for (Node& node : nodes) {
      NextBatch(node, series, kStartMs + cycle * 1000);
    }
    state.ResumeTiming();
    for (Node& node : nodes) {
      if (!node.layout.CompressIfMatches(0, node.batch, run)) {
        state.SkipWithError("layout did not match");
        return;
      }
      samples += static_cast<int64_t>(run.samples);
      bytes += static_cast<int64_t>(run.elements.size());
    }
  }
  state.counters["ns_per_sample"] = benchmark::Counter(
      static_cast<double>(samples), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["bytes_per_sample"] =
      static_cast<double>(bytes) / static_cast<double>(std::max<int64_t>(1, samples));
  size_t template_bytes = 0;
  size_t labels_bytes = 0;
  for (const Node& node : nodes) {
    template_bytes += node.layout.MemoryBytes();
    for (const std::string& labels : node.labels) {
      labels_bytes += labels.size();
    }
  }
  const double node_series = static_cast<double>(nodes.size() * series.size());
  state.counters["template_bytes_per_series"] = static_cast<double>(template_bytes) / node_series;
  state.counters["labels_bytes_per_series"] = static_cast<double>(labels_bytes) / node_series;
}
BENCHMARK(BM_TemplateCompress)->Arg(16)->Arg(1000)->MeasureProcessCPUTime();

}  // namespace
}  // namespace fabricmon::bench

int main(int argc, char** argv) {
  return fabricmon::bench::RunBenchmarksAsTheDaemonsRun(argc, argv);
}
