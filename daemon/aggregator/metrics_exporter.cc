#include "daemon/aggregator/metrics_exporter.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/wire/aggregator_families.h"

namespace fabricmon::aggregator {
namespace {

void AddValue(prometheus::MetricFamily& family, std::vector<prometheus::ClientMetric::Label> labels,
              double value) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

}  // namespace

std::vector<prometheus::MetricFamily> MetricsExporter::OwnFamilies(
    std::vector<std::shared_ptr<store::NodeState>>* up_nodes) const {
  const int64_t now = clock_.NowUnixNanos();
  using prometheus::MetricType;

  auto up = exposition::EmptyFamily(wire::kNodeUpFamily);
  auto age = exposition::EmptyFamily(wire::kNodeLastSeenAgeSecondsFamily);
  auto node_series = exposition::EmptyFamily(wire::kNodeSeriesFamily);
  auto resets = exposition::EmptyFamily(wire::kNodeSeriesResetsTotalFamily);
  auto gaps = exposition::EmptyFamily(wire::kNodeSequenceGapsTotalFamily);
  auto dropped = exposition::EmptyFamily(wire::kNodeAgentDroppedBatchesTotalFamily);
  auto replayed = exposition::EmptyFamily(wire::kNodeDuplicateBatchesTotalFamily);
  auto clock_steps = exposition::EmptyFamily(wire::kNodeClockStepsTotalFamily);
  auto conflicts = exposition::EmptyFamily(wire::kNodeIdentityConflictsTotalFamily);
  size_t total_series = 0;
  size_t nodes_up = 0;
  size_t nodes_total = 0;

  const std::vector<std::shared_ptr<store::NodeState>> all_nodes = store_.Nodes();
  for (prometheus::MetricFamily* family :
       {&up, &age, &node_series, &resets, &gaps, &dropped, &replayed, &clock_steps, &conflicts}) {
    family->metric.reserve(all_nodes.size());  // grown once, not moved at every doubling
  }
  for (const std::shared_ptr<store::NodeState>& node : all_nodes) {
    const store::NodeState::Health health = node->GetHealth();
    const bool is_up =
        health.connected && now - health.last_seen_unix_nanos <= options_.stale_after_nanos;
    const std::vector<prometheus::ClientMetric::Label> labels = {{"node", node->name()}};
    AddValue(up, labels, is_up ? 1 : 0);
    AddValue(age, labels,
             static_cast<double>(std::max<int64_t>(0, now - health.last_seen_unix_nanos)) / 1e9);
    AddValue(node_series, labels, static_cast<double>(health.series));
    AddValue(resets, labels, static_cast<double>(health.counters.resets));
    AddValue(gaps, labels, static_cast<double>(health.counters.sequence_gaps));
    AddValue(dropped, labels, static_cast<double>(health.counters.agent_dropped_batches));
    AddValue(replayed, labels, static_cast<double>(health.counters.duplicate_batches));
    AddValue(clock_steps, labels, static_cast<double>(health.counters.clock_steps));
    AddValue(conflicts, labels, static_cast<double>(health.counters.identity_conflicts));
    ++nodes_total;
    total_series += health.series;
    if (is_up) {
      ++nodes_up;
    } else if (!options_.export_down_nodes) {
      continue;  // a down node's values are not current: export nothing rather than stale data
    }
    up_nodes->push_back(node);
  }

  auto nodes = exposition::EmptyFamily(wire::kAggregatorNodesFamily);
  AddValue(nodes, {{"state", "up"}}, static_cast<double>(nodes_up));
  AddValue(nodes, {{"state", "down"}}, static_cast<double>(nodes_total - nodes_up));
  auto series_total = exposition::EmptyFamily(wire::kAggregatorSeriesFamily);
  AddValue(series_total, {}, static_cast<double>(total_series));
  auto streams = exposition::EmptyFamily(wire::kAggregatorStreamsFamily);
  AddValue(streams, {}, static_cast<double>(stats_.streams_active.load()));
  auto unstored = exposition::EmptyFamily(wire::kAggregatorSeriesUnstoredFamily);
  AddValue(unstored, {}, static_cast<double>(std::max<int64_t>(0, stats_.series_unstored.load())));
  auto counter = [&](const collectors::FamilySpec& spec, uint64_t value) {
    auto family = exposition::EmptyFamily(spec);
    AddValue(family, {}, static_cast<double>(value));
    return family;
  };
  auto rejected = exposition::EmptyFamily(wire::kAggregatorRejectedMessagesTotalFamily);
  for (size_t i = 0; i < stats_.rejected.size(); ++i) {
    AddValue(rejected, {{"reason", std::string(RejectReasonName(static_cast<RejectReason>(i)))}},
             static_cast<double>(stats_.rejected[i].load()));
  }
  auto inventory_refused = exposition::EmptyFamily(wire::kAggregatorInventoryRefusedTotalFamily);
  AddValue(inventory_refused, {{"reason", "not_a_fabric_sweeper"}},
           static_cast<double>(stats_.inventory_fabric_refused.load()));
  auto calls_refused = exposition::EmptyFamily(wire::kAggregatorRejectedCallsTotalFamily);
  AddValue(calls_refused, {{"reason", "not_an_operator"}},
           static_cast<double>(stats_.diagnostics_not_operator.load()));
  auto handshakes = exposition::EmptyFamily(wire::kAggregatorRejectedHandshakesTotalFamily);
  static constexpr const char* kHandshakeReasons[kHandshakeFailureKinds] = {
      "no_client_certificate", "certificate_not_verified", "not_tls", "other"};
  for (size_t i = 0; i < kHandshakeFailureKinds; ++i) {
    AddValue(handshakes, {{"reason", kHandshakeReasons[i]}},
             static_cast<double>(stats_.handshakes_refused[i].load()));
  }
  auto duration = exposition::EmptyFamily(wire::kAggregatorScrapeDurationSecondsFamily);
  AddValue(duration, {}, static_cast<double>(last_scrape_nanos_.load()) / 1e9);

  // Moved in one by one: a braced list would copy every family, per node ones included (an
  // initializer_list's elements are const).
  std::vector<prometheus::MetricFamily> own;
  own.reserve(32);
  for (prometheus::MetricFamily* family :
       {&up, &age, &node_series, &resets, &gaps, &dropped, &replayed, &clock_steps, &conflicts,
        &nodes, &series_total, &streams, &unstored, &rejected, &duration, &inventory_refused,
        &calls_refused, &handshakes}) {
    own.push_back(std::move(*family));
  }
  own.push_back(counter(wire::kAggregatorStreamsOpenedTotalFamily, stats_.streams_opened.load()));
  own.push_back(counter(wire::kAggregatorBatchesTotalFamily, stats_.batches.load()));
  own.push_back(counter(wire::kAggregatorSamplesTotalFamily, stats_.samples.load()));
  own.push_back(counter(wire::kAggregatorReceivedBytesTotalFamily, stats_.bytes.load()));
  own.push_back(
      counter(wire::kAggregatorDuplicateBatchesTotalFamily, stats_.duplicate_batches.load()));
  own.push_back(counter(wire::kAggregatorAgentDroppedBatchesTotalFamily,
                        stats_.agent_dropped_batches.load()));
  own.push_back(counter(wire::kAggregatorSeriesRetiredTotalFamily, stats_.series_retired.load()));
  own.push_back(counter(wire::kAggregatorRetiredSeriesSamplesDroppedTotalFamily,
                        stats_.retired_samples.load()));
  own.push_back(counter(wire::kAggregatorUnstoredSeriesSamplesDroppedTotalFamily,
                        stats_.unstored_samples.load()));
  own.push_back(
      counter(wire::kAggregatorRedeclareRequestsTotalFamily, stats_.redeclare_requests.load()));
  own.push_back(
      counter(wire::kAggregatorTimestampsBackwardsTotalFamily, stats_.timestamps_backwards.load()));
  own.push_back(counter(wire::kAggregatorClockStepsTotalFamily, stats_.clock_steps.load()));
  own.push_back(counter(wire::kAggregatorNodesForgottenTotalFamily, store_.nodes_forgotten()));
  std::sort(own.begin(), own.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return own;
}

std::vector<prometheus::MetricFamily> MetricsExporter::HealthFamilies() const {
  std::vector<std::shared_ptr<store::NodeState>> up_nodes;
  return OwnFamilies(&up_nodes);
}

std::vector<prometheus::MetricFamily> MetricsExporter::Collect() const {
  const int64_t start = clock_.MonotonicNanos();
  std::vector<std::shared_ptr<store::NodeState>> up_nodes;
  std::vector<prometheus::MetricFamily> own = OwnFamilies(&up_nodes);
  std::vector<prometheus::MetricFamily> families;
  for (const std::shared_ptr<store::NodeState>& node : up_nodes) {
    node->WithSeries([&](const std::vector<store::Series>& all) {
      std::vector<exposition::SampleRef> samples;
      samples.reserve(all.size());
      for (const store::Series& series : all) {
        if (series.absent) {
          continue;  // gone from its collector's last cycle
        }
        if (const store::StoredSample* latest = series.Latest()) {
          samples.push_back({&series.desc.get(), latest->raw});
        }
      }
      // Families copy names and labels, so they outlive the lock.
      exposition::MergeFamilies(exposition::BuildFamilies(samples, {{"node", node->name()}}),
                                &families);
    });
  }
  exposition::MergeFamilies(std::move(own), &families);
  last_scrape_nanos_ = clock_.MonotonicNanos() - start;
  return families;
}

void MetricsExporter::AppendText(std::string* out) const {
  std::vector<std::string> pieces = TextPieces();
  size_t size = 0;
  for (const std::string& piece : pieces) {
    size += piece.size();
  }
  out->reserve(out->size() + size);
  for (const std::string& piece : pieces) {
    out->append(piece);
  }
}

std::vector<std::string> MetricsExporter::TextPieces() const {
  const int64_t start = clock_.MonotonicNanos();
  std::vector<std::shared_ptr<store::NodeState>> up_nodes;
  std::vector<prometheus::MetricFamily> own = OwnFamilies(&up_nodes);

  // One text body per family, filled node by node: the order of Collect() + MergeFamilies
  // (families by name; in a family, nodes in order, then each node's series in order) without a
  // MetricFamily per series. HELP and TYPE are the same for every series of a family (the
  // catalogue's or the family's first declaration: FamilyRegistry).
  struct Body {
    std::string name;
    std::string help;
    prometheus::MetricType type;
    std::string text;
  };
  std::vector<Body> bodies;
  absl::flat_hash_map<std::string, size_t> index;
  auto body_for = [&](const std::string& name, const std::string& help,
                      prometheus::MetricType type) -> Body& {
    auto [it, inserted] = index.try_emplace(name, bodies.size());
    if (inserted) {
      bodies.push_back({name, help, type, {}});
    }
    return bodies[it->second];
  };
  // The aggregator's own families first, so that their HELP and TYPE are its own whatever a
  // series says (agents cannot declare them: FamilyRegistry refuses reserved names).
  for (const prometheus::MetricFamily& family : own) {
    body_for(family.name, family.help, family.type);
  }
  std::string saturated;  // one node's fabricmon_series_saturated lines
  for (const std::shared_ptr<store::NodeState>& node : up_nodes) {
    const collectors::Labels node_label = {{"node", node->name()}};
    saturated.clear();
    node->WithSeries([&](const std::vector<store::Series>& all) {
      for (const store::Series& series : all) {
        const store::StoredSample* latest = series.Latest();
        if (latest == nullptr || series.absent) {
          continue;
        }
        const collectors::SeriesDesc& desc = series.desc;
        Body& body =
            body_for(desc.name, desc.help,
                     desc.type == collectors::MetricType::kCounter ? prometheus::MetricType::Counter
                                                                   : prometheus::MetricType::Gauge);
        exposition::AppendSampleLine(desc.name, node_label, desc.labels,
                                     collectors::ExportedValue(desc, latest->raw), &body.text);
        if (desc.IsSaturated(latest->raw)) {
          // As exposition::BuildFamilies flags it: node, metric, then the series' labels.
          collectors::Labels flag_labels = node_label;
          flag_labels.emplace_back("metric", desc.name);
          exposition::AppendSampleLine(exposition::kSaturatedFamily, flag_labels, desc.labels, 1,
                                       &saturated);
        }
      }
    });
    if (!saturated.empty()) {
      body_for(exposition::kSaturatedFamily, exposition::kSaturatedFamilyHelp,
               prometheus::MetricType::Gauge)
          .text.append(saturated);
    }
  }
  for (const prometheus::MetricFamily& family : own) {
    exposition::AppendMetricLines(family, &body_for(family.name, family.help, family.type).text);
  }

  std::sort(bodies.begin(), bodies.end(),
            [](const Body& a, const Body& b) { return a.name < b.name; });
  std::vector<std::string> pieces;
  pieces.reserve(2 * bodies.size());
  for (Body& body : bodies) {
    std::string header;
    exposition::AppendFamilyHeader(body.name, body.help, body.type, &header);
    pieces.push_back(std::move(header));
    pieces.push_back(std::move(body.text));
  }
  last_scrape_nanos_ = clock_.MonotonicNanos() - start;
  return pieces;
}

}  // namespace fabricmon::aggregator
