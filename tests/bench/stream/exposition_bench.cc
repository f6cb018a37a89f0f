// fabricmon_exposition_bench: the aggregator's two hot paths without the network.
//
//   * /metrics exposition: MetricsExporter::Collect() over a SeriesStore holding N series
//     (nodes × 5,000 series each, ib_sysfs-shaped), then prometheus::TextSerializer, which is
//     what prometheus::Exposer runs per scrape; plus gzip of the text, which the Exposer adds
//     when the scraper accepts it (Prometheus does). Target: 1 M series under 1 s.
//     BM_HttpScrape: the whole scrape over HTTP of the MetricsServer the aggregator runs.
//   * ingest: StreamDecoder::Decode + NodeState::AppendBatch per batch of one DGX node's series
//     (what AgentStream::HandleBatch does), optionally with the protobuf parse gRPC performs
//     before it and with a rate computed for every series after it. Reported as samples/s on
//     one core. Target: ≥ 5 M samples/s per core with rates.
//   * encode (agent side), for the wire size: StreamEncoder::Encode + serialization, reporting
//     protobuf bytes per sample for the idle, mixed and busy counter motion.
//
// Run (about 2 minutes on a 2-core machine):
//   fabricmon_exposition_bench --benchmark_counters_tabular=true

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/aggregator/metrics_server.h"
#include "daemon/common/clock.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/store/series_store.h"
#include "daemon/wire/batch_codec.h"
#include "prometheus/text_serializer.h"
#include "tests/bench/stream/node_model.h"
#include "tests/bench/stream/run_benchmarks.h"
#include "tests/testing/loopback.h"

namespace fabricmon::bench {
namespace {

constexpr int64_t kNow = int64_t{1700000000} * 1000000000;
constexpr size_t kSeriesPerNode = 5000;

class FixedClock final : public Clock {
 public:
  int64_t NowUnixNanos() const override { return kNow; }
  int64_t MonotonicNanos() const override { return 0; }
};

// A store filled as if `nodes` agents had each sent two batches of `per_node` series.
struct FilledStore {
  FixedClock clock;
  store::SeriesStore store{store::StoreOptions{}};
  aggregator::IngestStats stats;
  std::unique_ptr<aggregator::MetricsExporter> exporter;
  size_t series = 0;
};

// `node_series` empty: synthetic ib_sysfs-shaped series, kSeriesPerNode per node.
std::unique_ptr<FilledStore> Fill(size_t total_series, std::vector<NodeSeries> node_series = {}) {
  auto filled = std::make_unique<FilledStore>();
  if (node_series.empty()) {
    node_series = SyntheticNodeSeries(kSeriesPerNode);
  }
  const size_t per_node = node_series.size();
  const size_t nodes = (total_series + per_node - 1) / per_node;
  for (size_t n = 0; n < nodes; ++n) {
    v1::Hello hello;
    hello.set_node_name(absl::StrFormat("gpu-node-%04d", n));
    hello.set_agent_instance_id(n + 1);
    hello.set_boot_id(absl::StrCat("boot-", n));
    auto attached = filled->store.Attach(
        hello, n + 1, [] {}, kNow);
    if (!attached.ok()) {
      std::abort();
    }
    store::NodeState& node = *attached->node;
    std::vector<uint32_t> indices;
    const size_t count = std::min(per_node, total_series - n * per_node);
    for (size_t i = 0; i < count; ++i) {
      auto index = node.Declare(node_series[i].desc);
      if (!index.ok()) {
        std::abort();
      }
      indices.push_back(*index);
    }
    ValueModel model(node_series, Profile::kMixed, n + 1);
    const std::vector<bool> present(count, true);
    for (uint64_t sequence = 1; sequence <= 2; ++sequence) {
      const std::vector<uint64_t>& values = model.Next();
      node.AppendBatch(sequence, 0, kNow - int64_t{2 - static_cast<int>(sequence)} * 1000000000,
                       indices, absl::MakeConstSpan(values.data(), count), present, kNow);
    }
    filled->series += count;
  }
  filled->exporter = std::make_unique<aggregator::MetricsExporter>(
      filled->store, filled->stats, filled->clock, aggregator::ExporterOptions{});
  return filled;
}

// One store per size, built on first use and kept (building 1 M series takes seconds).
FilledStore& StoreOf(size_t series) {
  static std::map<size_t, std::unique_ptr<FilledStore>>* stores =
      new std::map<size_t, std::unique_ptr<FilledStore>>();
  auto& slot = (*stores)[series];
  if (slot == nullptr) {
    slot = Fill(series);
  }
  return *slot;
}

std::string Serialize(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

void BM_ExporterCollect(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    std::vector<prometheus::MetricFamily> families = filled.exporter->Collect();
    benchmark::DoNotOptimize(families.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
}

// The node-series part of MetricsExporter::Collect() as it was before exposition::FamilyBuilder
// (kept here as the peer for the same-run comparison): per node, families grouped in a std::map,
// then merged one by one into the sorted result.
std::vector<prometheus::MetricFamily> LegacyBuildFamilies(
    const std::vector<exposition::SampleRef>& samples, const collectors::Labels& extra) {
  std::map<std::string, prometheus::MetricFamily> by_name;
  prometheus::MetricFamily saturated;
  saturated.name = "fabricmon_series_saturated";
  saturated.type = prometheus::MetricType::Gauge;
  for (const exposition::SampleRef& sample : samples) {
    const collectors::SeriesDesc& desc = *sample.series;
    prometheus::MetricFamily& family = by_name[desc.name];
    if (family.name.empty()) {
      family.name = desc.name;
      family.help = desc.help;
      family.type = desc.type == collectors::MetricType::kCounter ? prometheus::MetricType::Counter
                                                                  : prometheus::MetricType::Gauge;
    }
    prometheus::ClientMetric metric;
    metric.label.reserve(extra.size() + desc.labels.size());
    for (const auto& [name, value] : extra) {
      metric.label.push_back({name, value});
    }
    for (const auto& [name, value] : desc.labels) {
      metric.label.push_back({name, value});
    }
    const double value = collectors::ExportedValue(desc, sample.raw_value);
    if (desc.type == collectors::MetricType::kCounter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));
    if (desc.IsSaturated(sample.raw_value)) {
      prometheus::ClientMetric flag;
      flag.label = {{extra[0].first, extra[0].second}, {"metric", desc.name}};
      for (const auto& [name, label_value] : desc.labels) {
        flag.label.push_back({name, label_value});
      }
      flag.gauge.value = 1;
      saturated.metric.push_back(std::move(flag));
    }
  }
  std::vector<prometheus::MetricFamily> families;
  for (auto& [name, family] : by_name) {
    families.push_back(std::move(family));
  }
  if (!saturated.metric.empty()) {
    families.push_back(std::move(saturated));
    std::sort(families.begin(), families.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
  }
  return families;
}

std::vector<prometheus::MetricFamily> LegacyNodeFamilies(const FilledStore& filled) {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& node : filled.store.Nodes()) {
    node->WithSeries([&](const std::vector<store::Series>& all) {
      std::vector<exposition::SampleRef> samples;
      samples.reserve(all.size());
      for (const store::Series& series : all) {
        if (const store::StoredSample* latest = series.Latest()) {
          samples.push_back({&series.desc.get(), latest->raw});
        }
      }
      exposition::MergeFamilies(LegacyBuildFamilies(samples, {{"node", node->name()}}), &families);
    });
  }
  return families;
}

// Same-run peer of BM_ExporterCollect: the previous per-node build-and-merge.
void BM_LegacyCollect(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    std::vector<prometheus::MetricFamily> families = LegacyNodeFamilies(filled);
    benchmark::DoNotOptimize(families.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
}

void BM_TextSerializer(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  const std::vector<prometheus::MetricFamily> families = filled.exporter->Collect();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = Serialize(families);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
  state.counters["text_MiB"] = static_cast<double>(bytes) / 1048576.0;
}

// What one uncompressed scrape costs the aggregator (minus HTTP): Collect + TextSerializer.
void BM_Scrape(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    std::string text = Serialize(filled.exporter->Collect());
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
}

// fabricmon's own serializer (exposition::AppendText, same bytes) on the same families.
void BM_AppendText(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  const std::vector<prometheus::MetricFamily> families = filled.exporter->Collect();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text;
    exposition::AppendText(families, &text);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
  state.counters["text_MiB"] = static_cast<double>(bytes) / 1048576.0;
}

// A scrape served with exposition::AppendText instead of prometheus::TextSerializer.
void BM_ScrapeAppendText(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    std::string text;
    exposition::AppendText(filled.exporter->Collect(), &text);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
}

// MetricsExporter::AppendText: the same bytes straight from the store, no MetricFamily objects.
void BM_ExporterAppendText(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text;
    filled.exporter->AppendText(&text);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
  state.counters["text_MiB"] = static_cast<double>(bytes) / 1048576.0;
}

// The gzip step prometheus-cpp's Exposer adds when the scraper sends Accept-Encoding: gzip
// (Prometheus does): deflate at Z_DEFAULT_COMPRESSION, as in prometheus-cpp 1.0.1
// pull/src/handler.cc. Arg 1: level.
void BM_Gzip(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  const std::string text = Serialize(filled.exporter->Collect());
  const int level = static_cast<int>(state.range(1));
  std::string out;
  for (auto _ : state) {
    z_stream zs{};
    if (deflateInit2(&zs, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      state.SkipWithError("deflateInit2");
      return;
    }
    out.resize(deflateBound(&zs, text.size()));
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    zs.avail_in = static_cast<uInt>(text.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
  state.counters["text_MiB"] = static_cast<double>(text.size()) / 1048576.0;
  state.counters["gzip_MiB"] = static_cast<double>(out.size()) / 1048576.0;
}

// A whole scrape over HTTP on loopback, as Prometheus makes it, of the aggregator's MetricsServer
// (what fabricmon-aggregator serves). Arg 1: 0 the scraper does not accept gzip; 1 it does
// (Prometheus) and the server has its default gzip limit (32 MiB of text); 2 it does and the
// server compresses whatever the size. Wall time: the server's civetweb thread does the work,
// and the client here copies the body in the same process, so these are upper bounds.
void BM_HttpScrape(benchmark::State& state) {
  FilledStore& filled = StoreOf(static_cast<size_t>(state.range(0)));
  aggregator::MetricsServerOptions options;
  if (state.range(1) == 2) {
    options.gzip_max_bytes = std::numeric_limits<size_t>::max();
  }
  absl::StatusOr<std::unique_ptr<aggregator::MetricsServer>> server =
      aggregator::MetricsServer::Listen("127.0.0.1:0", options);
  if (!server.ok()) {
    state.SkipWithError("cannot listen on 127.0.0.1:0");
    return;
  }
  // The store outlives the server; the shared_ptr does not own the exporter.
  (*server)->Serve(
      std::shared_ptr<aggregator::MetricsExporter>(std::shared_ptr<void>(), filled.exporter.get()),
      {});
  std::vector<std::string> headers;
  if (state.range(1) != 0) {
    headers.push_back("Accept-Encoding: gzip");
  }
  size_t bytes = 0;
  for (auto _ : state) {
    absl::StatusOr<testing::HttpResponse> response =
        testing::HttpFetch((*server)->port(), "/metrics", headers, absl::Seconds(60));
    if (!response.ok() || response->status != 200) {
      state.SkipWithError("scrape failed");
      return;
    }
    bytes = response->body.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * filled.series));
  state.counters["body_MiB"] = static_cast<double>(bytes) / 1048576.0;
}

BENCHMARK(BM_ExporterCollect)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_LegacyCollect)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_TextSerializer)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_Scrape)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_AppendText)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ScrapeAppendText)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_ExporterAppendText)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_HttpScrape)
    ->Args({100000, 1})
    ->Args({1000000, 0})
    ->Args({1000000, 1})
    ->Args({1000000, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK(BM_Gzip)
    ->Args({1000000, Z_DEFAULT_COMPRESSION})
    ->Args({1000000, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

// ---- ingest ----

// A SeriesLookup over a fixed list (ids 1..n).
class VectorLookup final : public wire::SeriesLookup {
 public:
  explicit VectorLookup(const std::vector<NodeSeries>& series) : series_(series) {}
  const collectors::SeriesDesc* Find(uint32_t id) const override {
    return id == 0 || id > series_.size() ? nullptr : &series_[id - 1].desc;
  }

 private:
  const std::vector<NodeSeries>& series_;
};

// One simulated node on the aggregator side, primed the way AgentStream is after the hello,
// the declarations and the layout; plus a ring of pre-encoded batches from that node's agent.
struct IngestNode {
  std::shared_ptr<store::NodeState> node;
  wire::StreamDecoder decoder;
  wire::DecodedBatch decoded;
  std::vector<store::SlotRef> slots;  // layout position → node series slot
  std::vector<v1::AgentMessage> batches;
  std::vector<std::string> wire;  // the same batches serialized
  size_t samples_per_batch = 0;
  size_t wire_bytes = 0;
};

std::unique_ptr<IngestNode> MakeIngestNode(size_t index, Profile profile, size_t ring) {
  const std::vector<NodeSeries>& series = DgxNodeSeries();
  auto ingest = std::make_unique<IngestNode>();
  // The production retention (AggregatorConfig default): its sweep is part of the ingest cost.
  ingest->node = std::make_shared<store::NodeState>(
      absl::StrCat("node-", index), 4, 200000, store::NewSeriesLimit{}, int64_t{900} * 1000000000);
  VectorLookup lookup(series);
  wire::StreamEncoder encoder(lookup);
  auto layout = std::make_shared<std::vector<uint32_t>>();
  for (uint32_t id = 1; id <= series.size(); ++id) {
    layout->push_back(id);
  }
  ValueModel model(series, profile, index + 1);
  for (size_t k = 0; k < ring + 1; ++k) {
    std::vector<v1::AgentMessage> messages;
    encoder.Encode(k + 1, kNow + static_cast<int64_t>(k) * 1000000000, 100, 0, layout, model.Next(),
                   &messages);
    for (v1::AgentMessage& message : messages) {
      switch (message.body_case()) {
        case v1::AgentMessage::kDeclarations:
          for (const v1::SeriesDeclaration& d : message.declarations().series()) {
            (void)ingest->decoder.Declare(d.id());
            ingest->slots.push_back(*ingest->node->DeclareSlot(series[d.id() - 1].desc, 0));
          }
          break;
        case v1::AgentMessage::kLayouts:
          (void)ingest->decoder.AddLayout(message.layouts().layouts(0));
          break;
        case v1::AgentMessage::kBatch:
          if (k == 0) {
            // The first batch carries absolute values; the ring holds steady-state deltas.
            (void)ingest->decoder.Decode(message.batch(), &ingest->decoded);
          } else {
            ingest->wire.push_back(message.SerializeAsString());
            ingest->wire_bytes += ingest->wire.back().size();
            ingest->batches.push_back(std::move(message));
          }
          break;
        default:
          break;
      }
    }
  }
  ingest->samples_per_batch = series.size();
  return ingest;
}

enum IngestMode { kDecodeAppend = 0, kParseDecodeAppend = 1, kParseDecodeAppendRates = 2 };

// Arg 0: nodes (round-robin, to see cache effects of many nodes); arg 1: mode.
void BM_Ingest(benchmark::State& state) {
  const size_t node_count = static_cast<size_t>(state.range(0));
  const auto mode = static_cast<IngestMode>(state.range(1));
  constexpr size_t kRing = 8;
  std::vector<std::unique_ptr<IngestNode>> nodes;
  for (size_t i = 0; i < node_count; ++i) {
    nodes.push_back(MakeIngestNode(i, Profile::kMixed, kRing));
  }
  uint64_t sequence = 2;
  int64_t timestamp = kNow + int64_t{kRing + 1} * 1000000000;
  size_t samples = 0;
  size_t position = 0;
  v1::AgentMessage parsed;
  double rate_sum = 0;
  for (auto _ : state) {
    // Every node gets batch `position` of its ring; sequence and time move forward (the delta
    // values repeat, so counters keep rising).
    ++sequence;
    timestamp += 1000000000;
    for (auto& ingest : nodes) {
      const v1::SampleBatch* batch;
      if (mode == kDecodeAppend) {
        v1::AgentMessage& message = ingest->batches[position];
        message.mutable_batch()->set_sequence(sequence);
        message.mutable_batch()->set_timestamp_unix_nanos(timestamp);
        batch = &message.batch();
      } else {
        if (!parsed.ParseFromString(ingest->wire[position])) {
          state.SkipWithError("parse");
          return;
        }
        parsed.mutable_batch()->set_sequence(sequence);
        parsed.mutable_batch()->set_timestamp_unix_nanos(timestamp);
        batch = &parsed.batch();
      }
      if (!ingest->decoder.Decode(*batch, &ingest->decoded).ok()) {
        state.SkipWithError("decode");
        return;
      }
      const auto result = ingest->node->AppendBatchToSlots(
          batch->sequence(), batch->dropped_before(), batch->timestamp_unix_nanos(), ingest->slots,
          ingest->decoded.values, ingest->decoded.present, timestamp);
      samples += result.samples;
      if (mode == kParseDecodeAppendRates) {
        ingest->node->WithSeries([&](const std::vector<store::Series>& all) {
          for (const store::Series& series : all) {
            const store::Rate rate = series.CurrentRate();
            rate_sum += rate.per_second;
          }
        });
      }
    }
    position = (position + 1) % kRing;
  }
  benchmark::DoNotOptimize(rate_sum);
  state.SetItemsProcessed(static_cast<int64_t>(samples));
  state.counters["series"] = static_cast<double>(node_count * nodes[0]->samples_per_batch);
  state.counters["ns_per_sample"] = benchmark::Counter(
      static_cast<double>(samples), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(mode == kDecodeAppend        ? "decode+append"
                 : mode == kParseDecodeAppend ? "parse+decode+append"
                                              : "parse+decode+append+rates");
}

BENCHMARK(BM_Ingest)
    ->ArgsProduct({{1, 200}, {kDecodeAppend, kParseDecodeAppend, kParseDecodeAppendRates}})
    ->MinTime(1.0);

// The retirement sweep over a node holding `arg` series, none of them stale (its common case):
// the scan a node's batch pays every min(retention / 4, 60 s). Each iteration stores a
// one-series batch a minute after the previous one, which triggers exactly one sweep.
void BM_RetirementSweep(benchmark::State& state) {
  const size_t count = static_cast<size_t>(state.range(0));
  store::NodeState node("node-sweep", 4, count + 1, store::NewSeriesLimit{1e9, 1e9},
                        int64_t{1} << 62);  // a retention nothing outlives
  std::vector<uint32_t> indices;
  for (size_t i = 0; i < count; ++i) {
    indices.push_back(*node.Declare(collectors::GaugeSeries("bench", "fabricmon_bench_gauge", "h",
                                                            collectors::Unit::kNone, 1.0,
                                                            {{"series", absl::StrCat(i)}})));
  }
  int64_t now = kNow;
  uint64_t sequence = 1;
  node.AppendBatch(sequence, 0, now, indices, std::vector<uint64_t>(count, 1),
                   std::vector<bool>(count, true), now);
  const std::vector<uint32_t> one = {indices[0]};
  for (auto _ : state) {
    now += int64_t{60} * 1000000000;
    node.AppendBatch(++sequence, 0, now, one, {1}, {true}, now);
  }
  state.counters["ns_per_series"] =
      benchmark::Counter(static_cast<double>(state.iterations() * count),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_RetirementSweep)->Arg(1000)->Arg(100000);

// Agent side: encode + serialize one cycle; reports protobuf bytes per sample. Arg: profile.
void BM_EncodeBatch(benchmark::State& state) {
  const Profile profile = static_cast<Profile>(state.range(0));
  const std::vector<NodeSeries>& series = DgxNodeSeries();
  VectorLookup lookup(series);
  wire::StreamEncoder encoder(lookup);
  auto layout = std::make_shared<std::vector<uint32_t>>();
  for (uint32_t id = 1; id <= series.size(); ++id) {
    layout->push_back(id);
  }
  ValueModel model(series, profile, 1);
  std::vector<v1::AgentMessage> messages;
  encoder.Encode(1, kNow, 100, 0, layout, model.Next(), &messages);  // declarations, layout
  uint64_t sequence = 1;
  size_t bytes = 0;
  size_t samples = 0;
  std::string out;
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<uint64_t>& values = model.Next();
    state.ResumeTiming();
    messages.clear();
    ++sequence;
    encoder.Encode(sequence, kNow + static_cast<int64_t>(sequence) * 1000000000, 100, 0, layout,
                   values, &messages);
    out.clear();
    messages.back().AppendToString(&out);
    bytes += out.size();
    samples += values.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(samples));
  state.counters["wire_bytes_per_sample"] =
      static_cast<double>(bytes) / static_cast<double>(std::max<size_t>(1, samples));
  state.SetLabel(profile == Profile::kIdle    ? "idle"
                 : profile == Profile::kMixed ? "mixed"
                                              : "busy");
}

BENCHMARK(BM_EncodeBatch)
    ->Arg(static_cast<int>(Profile::kIdle))
    ->Arg(static_cast<int>(Profile::kMixed))
    ->Arg(static_cast<int>(Profile::kBusy))
    ->MinTime(0.5);

// --dump_text=PATH [--dump_series=N] [--dump_source=synthetic|dgx]
// [--dump_serializer=prometheus-cpp|fabricmon|direct]: instead of benchmarking, write the
// aggregator's exposition of a deterministic store (fixed clock, seeded values), to compare
// exposition code before and after a change, and the two serializers with each other.
int DumpText(const std::string& path, size_t series, const std::string& source,
             const std::string& serializer) {
  std::vector<NodeSeries> node_series;
  if (source == "dgx") {
    node_series = DgxNodeSeries();
  }
  std::unique_ptr<FilledStore> filled = Fill(series, node_series);
  std::string text;
  if (serializer == "fabricmon") {
    exposition::AppendText(filled->exporter->Collect(), &text);
  } else if (serializer == "direct") {
    filled->exporter->AppendText(&text);
  } else {
    text = Serialize(filled->exporter->Collect());
  }
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return 1;
  }
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  std::printf("wrote %zu bytes (%zu series) to %s\n", text.size(), filled->series, path.c_str());
  return 0;
}

}  // namespace
}  // namespace fabricmon::bench

int main(int argc, char** argv) {
  std::string dump_path, dump_source = "synthetic", dump_serializer = "prometheus-cpp";
  size_t dump_series = 100000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--dump_text=", 0) == 0) {
      dump_path = arg.substr(12);
    } else if (arg.rfind("--dump_series=", 0) == 0) {
      dump_series = std::stoul(arg.substr(14));
    } else if (arg.rfind("--dump_source=", 0) == 0) {
      dump_source = arg.substr(14);
    } else if (arg.rfind("--dump_serializer=", 0) == 0) {
      dump_serializer = arg.substr(18);
    }
  }
  if (!dump_path.empty()) {
    return fabricmon::bench::DumpText(dump_path, dump_series, dump_source, dump_serializer);
  }
  return fabricmon::bench::RunBenchmarksAsTheDaemonsRun(argc, argv);
}
