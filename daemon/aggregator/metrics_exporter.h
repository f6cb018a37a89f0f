#pragma once

// /metrics of the aggregator: a prometheus::Collectable that builds every family from a snapshot
// of the series store at scrape time (node_exporter's const-metric model): no per-series objects,
// and no stale series once a node is gone. Raw counters keep the names `fabricmon-agent --once`
// prints, with a `node` label in front.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/aggregator/ingest_stats.h"
#include "daemon/common/clock.h"
#include "daemon/store/series_store.h"
#include "prometheus/collectable.h"

namespace fabricmon::aggregator {

struct ExporterOptions {
  // A connected node that sent nothing for this long is reported down and its series are no
  // longer exported.
  int64_t stale_after_nanos = int64_t{30} * 1000000000;
  // Also export the series of nodes that are down, at their last stored values (their
  // fabricmon_node_up still reads 0). Off in the aggregator, where a down node's values are not
  // current; on in `fabricmon replay --listen_metrics`, whose recording ends with every stream's
  // end while the last values are what a post-mortem browses.
  bool export_down_nodes = false;
};

class MetricsExporter final : public prometheus::Collectable {
 public:
  // Keeps references; all must outlive the exporter.
  MetricsExporter(const store::SeriesStore& store, const IngestStats& stats, const Clock& clock,
                  ExporterOptions options)
      : store_(store), stats_(stats), clock_(clock), options_(options) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

  // Appends to `out` exactly the text prometheus::TextSerializer would write for Collect(), but
  // straight from the store, without a MetricFamily per series: for serving /metrics at a
  // million series (see tests/bench/stream). Thread-safe, like Collect().
  void AppendText(std::string* out) const;
  // The same text in pieces whose concatenation is AppendText's (a family's header, its lines,
  // ...), so that a server can send them without first copying them into one buffer.
  std::vector<std::string> TextPieces() const;
  // The node health and aggregator families alone (fabricmon_node_*, fabricmon_aggregator_*),
  // without the nodes' series: what remote write sends besides the stored samples.
  std::vector<prometheus::MetricFamily> HealthFamilies() const;

 private:
  // The node health and aggregator families (sorted by name), and in `up_nodes` the nodes whose
  // series are exported.
  std::vector<prometheus::MetricFamily> OwnFamilies(
      std::vector<std::shared_ptr<store::NodeState>>* up_nodes) const;

  const store::SeriesStore& store_;
  const IngestStats& stats_;
  const Clock& clock_;
  const ExporterOptions options_;
  mutable std::atomic<int64_t> last_scrape_nanos_{0};
};

}  // namespace fabricmon::aggregator
