#include "daemon/detectors/tcp_fallback.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {
namespace {

using aggregator::Rate;
using aggregator::Series;

double RateOf(const Series& series) {
  const Rate rate = series.CurrentRate();
  return rate.kind == Rate::Kind::kOk ? rate.per_second : 0;
}

struct NodeTraffic {
  double kernel = 0;       // netdev bytes/s on inter-node netdevs
  double ipoib = 0;        // of which IPoIB
  double hca = 0;          // HCA port data bytes/s (includes IPoIB on IB)
  double roce_rdma = 0;    // ethtool vport RDMA bytes/s
  bool has_roce_rdma = false;
  double gpu = -1;         // max GPU utilization, -1 unknown
  std::vector<Evidence> evidence;
  double Rdma() const { return has_roce_rdma ? roce_rdma : std::max(0.0, hca - ipoib); }
};

}  // namespace

void TcpFallbackDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  std::map<std::string, NodeTraffic> nodes;
  // netdev kinds from the info series: (node, netdev) → kind.
  std::map<std::pair<std::string, std::string>, std::string> kinds;
  view.ForEachSeries(families::kNetdevInfo, [&](const std::string& node, const Series& series) {
    kinds[{node, std::string(collectors::LabelValue(series.desc, "netdev"))}] =
        std::string(collectors::LabelValue(series.desc, "kind"));
  });
  for (const char* family : {families::kNetdevRxBytes, families::kNetdevTxBytes}) {
    view.ForEachSeries(family, [&](const std::string& node, const Series& series) {
      const std::string netdev(collectors::LabelValue(series.desc, "netdev"));
      const std::string& kind = kinds[{node, netdev}];
      if (kind == "loopback" || kind == "virtual" || kind.empty()) {
        return;  // container veths and bridges double-count host traffic
      }
      const double rate = RateOf(series);
      NodeTraffic& traffic = nodes[node];
      traffic.kernel += rate;
      if (kind == "ipoib") {
        traffic.ipoib += rate;
      }
      if (rate > 0) {
        traffic.evidence.push_back(MakeEvidence(series.desc, 0, rate,
                                                absl::StrFormat("kernel %s bytes", kind)));
      }
    });
  }
  for (const char* family : {families::kIbXmitData, families::kIbRcvData}) {
    view.ForEachSeries(family, [&](const std::string& node, const Series& series) {
      if (!collectors::LabelValue(series.desc, "switch").empty()) {
        return;  // switch ports seen by the fabric collector are not this node's traffic
      }
      nodes[node].hca += RateOf(series);
    });
  }
  view.ForEachSeries(families::kRoceRdmaBytes, [&](const std::string& node, const Series& series) {
    NodeTraffic& traffic = nodes[node];
    traffic.has_roce_rdma = true;
    traffic.roce_rdma += RateOf(series);
  });
  view.ForEachSeries(families::kGpuUtilization, [&](const std::string& node, const Series& series) {
    if (const aggregator::StoredSample* latest = series.Latest()) {
      const double utilization = collectors::ExportedValue(series.desc, latest->raw);
      nodes[node].gpu = std::max(nodes[node].gpu, utilization);
    }
  });

  // What "normal" looks like: the median RDMA rate of the nodes that have RDMA devices.
  std::vector<double> rdma_rates;
  for (const auto& [node, traffic] : nodes) {
    if (traffic.hca > 0 || traffic.has_roce_rdma) {
      rdma_rates.push_back(traffic.Rdma());
    }
  }
  std::sort(rdma_rates.begin(), rdma_rates.end());
  const double median_rdma = rdma_rates.empty() ? 0 : rdma_rates[rdma_rates.size() / 2];

  for (auto& [node, traffic] : nodes) {
    const double rdma = traffic.Rdma();
    const bool kernel_heavy = traffic.kernel >= options_.min_kernel_bytes_per_second;
    const bool rdma_idle = rdma <= options_.rdma_ratio * traffic.kernel;
    const bool gpus_busy = traffic.gpu >= options_.gpu_busy;
    const bool peers_use_rdma = median_rdma >= options_.min_kernel_bytes_per_second;
    if (!(kernel_heavy && rdma_idle && (gpus_busy || peers_use_rdma))) {
      streak_[node] = 0;
      continue;
    }
    if (++streak_[node] < options_.consecutive_ticks) {
      continue;
    }
    Finding finding;
    finding.kind = "tcp_fallback";
    finding.severity = Severity::kCritical;
    finding.subject.node = node;
    finding.summary = absl::StrFormat(
        "%s moves %.0f MB/s through kernel networking%s but only %.1f MB/s over RDMA%s%s: the job "
        "has most likely fallen back from RDMA to TCP sockets (NCCL 'Using network Socket')",
        node, traffic.kernel / 1e6, traffic.ipoib > 0 ? " (incl. IPoIB)" : "", rdma / 1e6,
        gpus_busy ? absl::StrFormat(" while its GPUs are %.0f%% busy", traffic.gpu * 100) : "",
        peers_use_rdma ? absl::StrFormat(" while its peers move %.0f MB/s each over RDMA",
                                         median_rdma / 1e6)
                       : "");
    finding.evidence = std::move(traffic.evidence);
    out.push_back(std::move(finding));
  }
}

}  // namespace fabricmon::detectors
