#include "daemon/aggregator/metrics_exporter.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "daemon/exposition/text_exposition.h"

namespace fabricmon::aggregator {
namespace {

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

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

  auto up = Family("fabricmon_node_up",
                   "1 if the node's agent is connected and sent data within the stale interval.",
                   MetricType::Gauge);
  auto age = Family("fabricmon_node_last_seen_age_seconds",
                    "Seconds since the node's agent last sent anything.", MetricType::Gauge);
  auto node_series =
      Family("fabricmon_node_series", "Series the node has declared.", MetricType::Gauge);
  auto resets = Family("fabricmon_node_series_resets_total",
                       "Counters of the node that went down (reset): a new baseline was started.",
                       MetricType::Counter);
  auto gaps = Family("fabricmon_node_sequence_gaps_total",
                     "Batches of the node that never arrived (agent buffer overflow or agent "
                     "restart), by sequence number.",
                     MetricType::Counter);
  auto dropped = Family("fabricmon_node_agent_dropped_batches_total",
                        "Batches the node's agent reported dropping from its full replay buffer.",
                        MetricType::Counter);
  auto replayed =
      Family("fabricmon_node_duplicate_batches_total",
             "Replayed batches of the node that were already stored.", MetricType::Counter);
  auto clock_steps = Family("fabricmon_node_clock_steps_total",
                            "Batches of the node re-based because its clock stepped back or ahead "
                            "(stored at the aggregator's estimate of their time, not refused).",
                            MetricType::Counter);
  auto conflicts = Family("fabricmon_node_identity_conflicts_total",
                          "Streams refused because another boot id held the node's identity "
                          "(two machines with one certificate or node name).",
                          MetricType::Counter);
  size_t total_series = 0;
  size_t nodes_up = 0;
  size_t nodes_total = 0;

  for (const std::shared_ptr<store::NodeState>& node : store_.Nodes()) {
    const store::NodeState::Summary summary = node->GetSummary(false);
    const bool is_up =
        summary.connected && now - summary.last_seen_unix_nanos <= options_.stale_after_nanos;
    const std::vector<prometheus::ClientMetric::Label> labels = {{"node", summary.name}};
    AddValue(up, labels, is_up ? 1 : 0);
    AddValue(age, labels,
             static_cast<double>(std::max<int64_t>(0, now - summary.last_seen_unix_nanos)) / 1e9);
    AddValue(node_series, labels, static_cast<double>(summary.series));
    AddValue(resets, labels, static_cast<double>(summary.counters.resets));
    AddValue(gaps, labels, static_cast<double>(summary.counters.sequence_gaps));
    AddValue(dropped, labels, static_cast<double>(summary.counters.agent_dropped_batches));
    AddValue(replayed, labels, static_cast<double>(summary.counters.duplicate_batches));
    AddValue(clock_steps, labels, static_cast<double>(summary.counters.clock_steps));
    AddValue(conflicts, labels, static_cast<double>(summary.counters.identity_conflicts));
    ++nodes_total;
    total_series += summary.series;
    if (is_up) {
      ++nodes_up;
    } else if (!options_.export_down_nodes) {
      continue;  // a down node's values are not current: export nothing rather than stale data
    }
    up_nodes->push_back(node);
  }

  auto nodes =
      Family("fabricmon_aggregator_nodes", "Known nodes by state (up, down).", MetricType::Gauge);
  AddValue(nodes, {{"state", "up"}}, static_cast<double>(nodes_up));
  AddValue(nodes, {{"state", "down"}}, static_cast<double>(nodes_total - nodes_up));
  auto series_total =
      Family("fabricmon_aggregator_series", "Series held for all nodes.", MetricType::Gauge);
  AddValue(series_total, {}, static_cast<double>(total_series));
  auto streams =
      Family("fabricmon_aggregator_streams", "Agent streams currently open.", MetricType::Gauge);
  AddValue(streams, {}, static_cast<double>(stats_.streams_active.load()));
  auto counter = [&](const char* name, const char* help, uint64_t value) {
    auto family = Family(name, help, MetricType::Counter);
    AddValue(family, {}, static_cast<double>(value));
    return family;
  };
  auto rejected = Family("fabricmon_aggregator_rejected_messages_total",
                         "Agent messages rejected, by reason; each ends that agent's stream.",
                         MetricType::Counter);
  for (size_t i = 0; i < stats_.rejected.size(); ++i) {
    AddValue(rejected, {{"reason", std::string(RejectReasonName(static_cast<RejectReason>(i)))}},
             static_cast<double>(stats_.rejected[i].load()));
  }
  auto inventory_refused = Family(
      "fabricmon_aggregator_inventory_refused_total",
      "Parts of agents' inventories dropped, by reason (not_a_fabric_sweeper: switch topology "
      "from a node authorization.fabric_sweepers does not name).",
      MetricType::Counter);
  AddValue(inventory_refused, {{"reason", "not_a_fabric_sweeper"}},
           static_cast<double>(stats_.inventory_fabric_refused.load()));
  auto calls_refused =
      Family("fabricmon_aggregator_rejected_calls_total",
             "Diagnostics (CLI) calls refused, by reason (not_an_operator: the client certificate "
             "matches no authorization.operators pattern).",
             MetricType::Counter);
  AddValue(calls_refused, {{"reason", "not_an_operator"}},
           static_cast<double>(stats_.diagnostics_not_operator.load()));
  auto handshakes =
      Family("fabricmon_aggregator_rejected_handshakes_total",
             "TLS handshakes refused, by reason (no_client_certificate, certificate_not_verified, "
             "not_tls, other), as gRPC reports them.",
             MetricType::Counter);
  static constexpr const char* kHandshakeReasons[kHandshakeFailureKinds] = {
      "no_client_certificate", "certificate_not_verified", "not_tls", "other"};
  for (size_t i = 0; i < kHandshakeFailureKinds; ++i) {
    AddValue(handshakes, {{"reason", kHandshakeReasons[i]}},
             static_cast<double>(stats_.handshakes_refused[i].load()));
  }
  auto duration = Family("fabricmon_aggregator_scrape_duration_seconds",
                         "Time the previous /metrics scrape took to build.", MetricType::Gauge);
  AddValue(duration, {}, static_cast<double>(last_scrape_nanos_.load()) / 1e9);

  std::vector<prometheus::MetricFamily> own = {
      std::move(up),
      std::move(age),
      std::move(node_series),
      std::move(resets),
      std::move(gaps),
      std::move(dropped),
      std::move(replayed),
      std::move(clock_steps),
      std::move(conflicts),
      std::move(nodes),
      std::move(series_total),
      std::move(streams),
      std::move(rejected),
      std::move(duration),
      std::move(inventory_refused),
      std::move(calls_refused),
      std::move(handshakes),
      counter("fabricmon_aggregator_streams_opened_total", "Agent streams accepted.",
              stats_.streams_opened.load()),
      counter("fabricmon_aggregator_batches_total", "Sample batches stored.",
              stats_.batches.load()),
      counter("fabricmon_aggregator_samples_total", "Samples stored.", stats_.samples.load()),
      counter("fabricmon_aggregator_received_bytes_total",
              "Protobuf bytes of agent messages received.", stats_.bytes.load()),
      counter("fabricmon_aggregator_duplicate_batches_total",
              "Replayed batches that were already stored (not stored again).",
              stats_.duplicate_batches.load()),
      counter("fabricmon_aggregator_agent_dropped_batches_total",
              "Batches agents reported dropping from their full replay buffers.",
              stats_.agent_dropped_batches.load()),
      counter("fabricmon_aggregator_series_retired_total",
              "Series retired after series_retention_s without a sample (memory freed).",
              stats_.series_retired.load()),
      counter("fabricmon_aggregator_retired_series_samples_dropped_total",
              "Values that arrived for a series after it was retired (dropped; its agent is "
              "asked to declare it again).",
              stats_.retired_samples.load()),
      counter("fabricmon_aggregator_redeclare_requests_total",
              "Series declarations asked of agents again after their series were retired.",
              stats_.redeclare_requests.load()),
      counter("fabricmon_aggregator_timestamps_backwards_total",
              "Batches older than their series' latest sample (a node's clock stepped back), "
              "stored re-based after it.",
              stats_.timestamps_backwards.load()),
      counter("fabricmon_aggregator_clock_steps_total",
              "Batches re-based because their node's clock stepped back or ahead.",
              stats_.clock_steps.load()),
      counter("fabricmon_aggregator_nodes_forgotten_total",
              "Nodes forgotten after node_retention_s without a batch (series freed).",
              store_.nodes_forgotten()),
  };
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
