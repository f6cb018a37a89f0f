#include "daemon/detectors/nvlink.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {
namespace {

Endpoint LinkEndpoint(const std::string& node, const collectors::SeriesDesc& desc) {
  Endpoint endpoint;
  endpoint.node = node;
  int gpu = -1;
  int link = -1;
  (void)absl::SimpleAtoi(collectors::LabelValue(desc, "gpu"), &gpu);
  (void)absl::SimpleAtoi(collectors::LabelValue(desc, "link"), &link);
  endpoint.gpu = gpu;
  endpoint.link = link;
  return endpoint;
}

}  // namespace

void NvlinkDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  std::map<Endpoint, std::pair<double, std::vector<Evidence>>> degraded;
  // A series holding one value has no rate, which only a threshold of 0 would flag: with a
  // positive one, the links whose counters stand still (nearly all) are not read.
  const auto for_each_series = options_.errors_per_second > 0 ? &FabricView::ForEachChangingSeries
                                                              : &FabricView::ForEachSeries;
  for (const char* family : {families::kNvlinkErrors, families::kNvlinkRecoveryEvents}) {
    (view.*for_each_series)(family, [&](const std::string& node, const store::Series& series) {
      if (family == families::kNvlinkRecoveryEvents &&
          collectors::LabelValue(series.desc, "outcome") == "all") {
        return;  // the sum of the other two outcomes
      }
      const store::Rate rate = series.CurrentRate();
      if (rate.kind != store::Rate::Kind::kOk || rate.per_second < options_.errors_per_second) {
        return;
      }
      auto& entry = degraded[LinkEndpoint(node, series.desc)];
      entry.first += rate.per_second;
      entry.second.push_back(MakeEvidence(series.desc, static_cast<double>(series.Latest()->raw),
                                          rate.per_second, "NVLink errors rising"));
    });
  }
  for (auto& [endpoint, entry] : degraded) {
    Finding finding;
    finding.kind = "nvlink_degraded";
    finding.severity = Severity::kWarning;
    finding.subject = endpoint;
    finding.summary = absl::StrFormat(
        "%s: %.1f NVLink errors/s (CRC/replay/recovery): the link retries, cutting intra-node "
        "all-reduce bandwidth",
        endpoint.ToString(), entry.first);
    finding.evidence = std::move(entry.second);
    out.push_back(std::move(finding));
  }

  // Active links per GPU against the links ever seen active on it (in any retained sample).
  std::map<std::pair<std::string, std::string>, std::pair<int, std::vector<Endpoint>>> gpus;
  view.ForEachSeries(families::kNvlinkState, [&](const std::string& node,
                                                 const store::Series& series) {
    const store::StoredSample* latest = series.Latest();
    if (latest == nullptr) {
      return;
    }
    const Endpoint link = LinkEndpoint(node, series.desc);
    if (latest->raw == 1) {
      ever_active_.insert(link);
    }
    ForEachNewPair(series, &cursors_[view.KeyOf(series)],
                   [&](const store::StoredSample& previous, const store::StoredSample& current) {
                     if (previous.raw == 1 || current.raw == 1) {
                       ever_active_.insert(link);
                     }
                   });
    auto& gpu = gpus[{node, std::string(collectors::LabelValue(series.desc, "gpu"))}];
    if (latest->raw == 1) {
      ++gpu.first;
    } else if (ever_active_.count(link) > 0) {
      gpu.second.push_back(link);
    }
  });
  for (auto& [gpu, entry] : gpus) {
    const int baseline = entry.first + static_cast<int>(entry.second.size());
    for (const Endpoint& link : entry.second) {
      Finding finding;
      finding.kind = "nvlink_down";
      finding.severity = Severity::kCritical;
      finding.subject = link;
      finding.summary = absl::StrFormat(
          "%s is inactive: GPU %s has %d of its %d NVLinks up (intra-node traffic reroutes or "
          "falls back to PCIe)",
          link.ToString(), gpu.second, entry.first, baseline);
      out.push_back(std::move(finding));
    }
  }
}

}  // namespace fabricmon::detectors
