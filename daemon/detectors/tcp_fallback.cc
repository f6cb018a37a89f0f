#include "daemon/detectors/tcp_fallback.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/detectors/families.h"
#include "daemon/detectors/node_traffic.h"

namespace fabricmon::detectors {
namespace {

using store::Rate;
using store::Series;

double RateOf(const Series& series) {
  const Rate rate = series.CurrentRate();
  return rate.kind == Rate::Kind::kOk ? rate.per_second : 0;
}

struct NodeTraffic {
  double kernel = 0;  // netdev bytes/s on inter-node netdevs (rx + tx)
  double kernel_rx = 0;
  double kernel_tx = 0;
  int64_t sampled = 0;    // newest netdev sample behind the rates
  bool has_rdma = false;  // the node reports RDMA hardware of its own (HCA ports, RoCE vport)
  double ipoib = 0;       // of which IPoIB
  double hca = 0;         // HCA port data bytes/s (includes IPoIB on IB)
  double roce_rdma = 0;   // ethtool vport RDMA bytes/s
  bool has_roce_rdma = false;
  double gpu = -1;  // max GPU utilization, -1 unknown
  std::vector<Evidence> evidence;
  double Rdma() const { return has_roce_rdma ? roce_rdma : std::max(0.0, hca - ipoib); }
};

const store::NodeState* FindNode(const FabricView& view, const std::string& name) {
  for (const auto& node : view.nodes()) {
    if (node->name() == name) {
      return node.get();
    }
  }
  return nullptr;
}

}  // namespace

GpuProcessQps InspectGpuProcessQps(const store::NodeState& node) {
  GpuProcessQps result;
  std::set<uint32_t> gpu_pids;
  const store::NodeState::Summary summary = node.GetSummary(/*with_inventory=*/true);
  for (const v1::Gpu& gpu : summary.inventory.gpus()) {
    gpu_pids.insert(gpu.compute_pids().begin(), gpu.compute_pids().end());
  }
  if (gpu_pids.empty()) {
    return result;
  }
  // The rdma_qp collector's last cycle is complete when it left no process out and could see
  // every process (the agent runs in the host's PID namespace: the kernel hides other namespaces'
  // QPs); its series are absent when it stopped reporting (no RDMA netlink, collector disabled).
  bool complete = false;
  node.VisitFamily(families::kRdmaQpProcessesDropped, [&](const Series& series) {
    const store::StoredSample* latest = series.Latest();
    complete = !series.absent && latest != nullptr && latest->raw == 0;
  });
  bool sees_all = false;
  node.VisitFamily(families::kRdmaQpSeesAllProcesses, [&](const Series& series) {
    const store::StoredSample* latest = series.Latest();
    sees_all = !series.absent && latest != nullptr && latest->raw == 1;
  });
  if (!complete || !sees_all) {
    return result;
  }
  std::set<uint32_t> qp_owners;
  node.VisitFamily(families::kRdmaProcessQps, [&](const Series& series) {
    const store::StoredSample* latest = series.Latest();
    uint32_t pid = 0;
    if (!series.absent && latest != nullptr && latest->raw > 0 &&
        absl::SimpleAtoi(collectors::LabelValue(series.desc, "pid"), &pid)) {
      qp_owners.insert(pid);
    }
  });
  result.known = true;
  for (uint32_t pid : gpu_pids) {
    (qp_owners.count(pid) ? result.with_qps : result.without_qps).push_back(pid);
  }
  return result;
}

void TcpFallbackDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  ByNode<NodeTraffic> nodes;
  NetdevKinds kinds(view);
  for (const char* family : {families::kNetdevRxBytes, families::kNetdevTxBytes}) {
    const bool rx = family == families::kNetdevRxBytes;
    view.ForEachSeries(family, [&](const std::string& node, const Series& series) {
      const std::string* host_kind = kinds.HostKind(node, series);
      if (host_kind == nullptr) {
        return;
      }
      const std::string& kind = *host_kind;
      const double rate = RateOf(series);
      NodeTraffic& traffic = nodes[node];
      traffic.kernel += rate;
      (rx ? traffic.kernel_rx : traffic.kernel_tx) += rate;
      if (const store::StoredSample* latest = series.Latest()) {
        traffic.sampled = std::max(traffic.sampled, latest->timestamp_unix_nanos);
      }
      if (kind == "ipoib") {
        traffic.ipoib += rate;
      }
      if (rate > 0) {
        traffic.evidence.push_back(
            MakeEvidence(series.desc, 0, rate, absl::StrFormat("kernel %s bytes", kind)));
      }
    });
  }
  for (const char* family : {families::kIbXmitData, families::kIbRcvData}) {
    view.ForEachSeries(family, [&](const std::string& node, const Series& series) {
      if (SweptFromFabric(series)) {
        return;
      }
      NodeTraffic& traffic = nodes[node];
      traffic.has_rdma = true;
      traffic.hca += RateOf(series);
    });
  }
  view.ForEachSeries(families::kRoceRdmaBytes, [&](const std::string& node, const Series& series) {
    NodeTraffic& traffic = nodes[node];
    traffic.has_roce_rdma = true;
    traffic.has_rdma = true;
    traffic.roce_rdma += RateOf(series);
  });
  view.ForEachSeries(families::kGpuUtilization, [&](const std::string& node, const Series& series) {
    if (const store::StoredSample* latest = series.Latest()) {
      const double utilization = collectors::ExportedValue(series.desc, latest->raw);
      NodeTraffic& traffic = nodes[node];
      traffic.gpu = std::max(traffic.gpu, utilization);
    }
  });

  // What "normal" looks like: the median RDMA rate of the nodes that have RDMA devices (context
  // for the summary; the peers alone never qualify a node).
  std::vector<double> rdma_rates;
  for (const auto& [node, traffic] : nodes.entries()) {
    if (traffic.has_rdma) {
      rdma_rates.push_back(traffic.Rdma());
    }
  }
  std::sort(rdma_rates.begin(), rdma_rates.end());
  const double median_rdma = rdma_rates.empty() ? 0 : rdma_rates[rdma_rates.size() / 2];
  const int64_t now = view.now_unix_nanos();

  ForgetNodesNotIn(view, state_);
  for (auto& [node, traffic] : nodes.entries()) {
    NodeState& state = state_.try_emplace(node, Debounce(options_.consecutive_ticks)).first->second;
    const double rdma = traffic.Rdma();
    if (rdma >= options_.min_kernel_bytes_per_second) {
      state.last_rdma_busy = now;
    }
    // Preconditions (README "Findings"): RDMA hardware of its own — a node without it cannot fall
    // back from what it never had — and either GPU work or RDMA traffic of its own lately; a
    // storage, login or CPU node qualifies neither way.
    const bool gpus_busy = traffic.gpu >= 0 && traffic.gpu >= options_.gpu_busy;
    const bool recent_rdma = options_.rdma_history_nanos > 0 && state.last_rdma_busy != 0 &&
                             now - state.last_rdma_busy <= options_.rdma_history_nanos;
    // The traffic shape: heavy, two-way kernel traffic (a collective's ring or tree exchanges in
    // both directions; a checkpoint write or a dataset read goes one way) and next to no RDMA.
    const bool kernel_heavy = traffic.kernel >= options_.min_kernel_bytes_per_second;
    const bool rdma_idle = rdma <= options_.rdma_ratio * traffic.kernel;
    const double larger = std::max(traffic.kernel_rx, traffic.kernel_tx);
    const double symmetry =
        larger > 0 ? std::min(traffic.kernel_rx, traffic.kernel_tx) / larger : 0;
    const bool two_way = symmetry >= options_.min_symmetry;
    bool holds = traffic.has_rdma && kernel_heavy && rdma_idle && two_way;
    GpuProcessQps qps;
    if (holds) {
      // Only nodes whose traffic already looks like a fallback pay for the QP inventory.
      if (const store::NodeState* found = FindNode(view, node)) {
        qps = InspectGpuProcessQps(*found);
      }
    }
    const bool gpu_processes_without_qps = qps.known && !qps.without_qps.empty();
    holds = holds && (gpus_busy || recent_rdma || gpu_processes_without_qps);
    if (holds) {
      state.qps = qps;
      state.summary.clear();
    }
    if (!state.debounce.Observe(holds, traffic.sampled)) {
      continue;
    }
    if (!holds && !state.summary.empty()) {
      // Clearing (the debounce holds the finding for a few samples): keep its last words.
      out.push_back(state.last);
      continue;
    }
    if (!holds) {
      continue;
    }
    qps = state.qps;
    // Every GPU process owns QPs: the job's RDMA transport is up, the kernel bytes are most
    // likely other traffic. Still worth a look, not a page.
    const bool transport_up = qps.known && qps.without_qps.empty();
    Finding finding;
    finding.kind = "tcp_fallback";
    finding.severity = transport_up ? Severity::kWarning : Severity::kCritical;
    finding.subject.node = node;
    // "GPU process 7 owns" / "GPU processes 7, 8 own".
    auto processes_own = [](const std::vector<uint32_t>& pids) {
      const bool many = pids.size() > 1;
      return absl::StrFormat("GPU process%s %s own%s", many ? "es" : "", absl::StrJoin(pids, ", "),
                             many ? "" : "s");
    };
    std::string qp_note;
    if (gpu_processes_without_qps) {
      qp_note = absl::StrCat("; ", processes_own(qps.without_qps), " no RDMA queue pairs");
    } else if (transport_up) {
      qp_note = absl::StrCat("; but its ", processes_own(qps.with_qps),
                             " RDMA queue pairs, so the kernel traffic may be something else "
                             "(storage, data loading)");
    }
    const bool peers_use_rdma = median_rdma >= options_.min_kernel_bytes_per_second;
    std::string why;
    if (gpus_busy) {
      why = absl::StrFormat(" while its GPUs are %.0f%% busy", traffic.gpu * 100);
    } else if (recent_rdma) {
      why = absl::StrFormat(" although it moved RDMA traffic %llds ago",
                            static_cast<long long>((now - state.last_rdma_busy) / 1000000000));
    }
    finding.summary = absl::StrFormat(
        "%s moves %.0f MB/s through kernel networking%s (%.0f MB/s in, %.0f MB/s out) but only "
        "%.1f MB/s over RDMA%s%s%s: %s",
        node, traffic.kernel / 1e6, traffic.ipoib > 0 ? " (incl. IPoIB)" : "",
        traffic.kernel_rx / 1e6, traffic.kernel_tx / 1e6, rdma / 1e6, why,
        peers_use_rdma
            ? absl::StrFormat("; its peers move %.0f MB/s each over RDMA", median_rdma / 1e6)
            : "",
        qp_note,
        transport_up ? "check what else this node sends"
                     : "the job has most likely fallen back from RDMA to TCP sockets (NCCL "
                       "'Using network Socket')");
    finding.evidence = std::move(traffic.evidence);
    for (uint32_t pid : qps.without_qps) {
      Evidence evidence;
      evidence.series = families::kRdmaProcessQps;
      evidence.labels = {absl::StrCat("pid=", pid)};
      evidence.note = "GPU compute process (NVML) owning no RDMA queue pair";
      finding.evidence.push_back(std::move(evidence));
    }
    state.last = finding;
    state.summary = finding.summary;
    out.push_back(std::move(finding));
  }
}

}  // namespace fabricmon::detectors
