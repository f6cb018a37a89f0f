#include "daemon/aggregator/findings_exporter.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/detectors/cable_graph.h"
#include "daemon/detectors/finding.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/wire/aggregator_families.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace fabricmon::aggregator {
namespace {

using detectors::Endpoint;
using detectors::Finding;
using detectors::Severity;
using detectors::TrackedFinding;

// node/device/port for a host port (device "gpuN" and port = link for NVLink), switch/switch_guid/
// port for a switch port; the same label names for every subject, empty where they do not apply.
void AppendSubjectLabels(const Endpoint& subject,
                         std::vector<prometheus::ClientMetric::Label>& out) {
  std::string node, device, port, switch_name, switch_guid;
  if (subject.is_switch) {
    switch_name = subject.node;
    const std::string guid = detectors::CanonicalGuid(subject.guid);
    switch_guid = guid.empty() ? "" : absl::StrCat("0x", guid);
  } else {
    node = subject.node;
    device = subject.gpu >= 0 ? absl::StrCat("gpu", subject.gpu) : subject.device;
  }
  if (subject.gpu >= 0) {
    port = absl::StrCat(subject.link);
  } else if (subject.port != 0 || subject.is_switch || !subject.device.empty()) {
    port = absl::StrCat(subject.port);
  }
  out.push_back({"node", std::move(node)});
  out.push_back({"device", std::move(device)});
  out.push_back({"port", std::move(port)});
  out.push_back({"switch", std::move(switch_name)});
  out.push_back({"switch_guid", std::move(switch_guid)});
}

}  // namespace

std::vector<prometheus::MetricFamily> FindingsExporter::Collect() const {
  using prometheus::ClientMetric;
  using prometheus::MetricFamily;
  using prometheus::MetricType;
  MetricFamily active = exposition::EmptyFamily(wire::kFindingActiveFamily);
  MetricFamily victims = exposition::EmptyFamily(wire::kFindingVictimsFamily);
  MetricFamily depth = exposition::EmptyFamily(wire::kFindingDepthHopsFamily);
  engine_.tracker().ForEachActive([&](const TrackedFinding& tracked) {
    const Finding& f = tracked.finding;
    ClientMetric metric;
    metric.label = {{"kind", f.kind},
                    {"severity", std::string(detectors::SeverityName(f.severity))}};
    AppendSubjectLabels(f.subject, metric.label);
    metric.label.push_back({"peer", f.has_peer ? f.peer.ToString() : ""});
    metric.gauge.value = 1;
    if (f.kind == "congestion_spreading") {
      ClientMetric v = metric;
      v.label.erase(v.label.begin() + 1);  // no severity nor peer on the size series
      v.label.pop_back();
      ClientMetric d = v;
      v.gauge.value = static_cast<double>(f.victims.size());
      d.gauge.value = f.depth_hops;
      victims.metric.push_back(std::move(v));
      depth.metric.push_back(std::move(d));
    }
    active.metric.push_back(std::move(metric));
  });
  MetricFamily totals = exposition::EmptyFamily(wire::kFindingsTotalFamily);
  // Every kind at warning and critical from the start (0), so the first finding is an increase.
  std::map<std::pair<std::string, Severity>, uint64_t> raised = engine_.tracker().RaisedTotals();
  for (const char* kind : detectors::kFindingKinds) {
    for (Severity severity : {Severity::kWarning, Severity::kCritical}) {
      raised.try_emplace({kind, severity}, 0);
    }
  }
  for (const auto& [key, count] : raised) {
    ClientMetric metric;
    metric.label = {{"kind", key.first},
                    {"severity", std::string(detectors::SeverityName(key.second))}};
    metric.counter.value = static_cast<double>(count);
    totals.metric.push_back(std::move(metric));
  }
  MetricFamily tick = exposition::EmptyFamily(wire::kDetectorTickSecondsFamily);
  MetricFamily links = exposition::EmptyFamily(wire::kTopologyLinksFamily);
  MetricFamily conflicts = exposition::EmptyFamily(wire::kTopologyGuidConflictsFamily);
  MetricFamily disagreements = exposition::EmptyFamily(wire::kTopologyDisagreementsFamily);
  MetricFamily unclaimed = exposition::EmptyFamily(wire::kTopologyUnclaimedCaFamily);
  const detectors::EngineHealth health = engine_.Health();
  for (const auto& [guid, description] : health.unclaimed_cas) {
    ClientMetric u;
    u.label = {{"ca_guid", absl::StrCat("0x", guid)}, {"ca", description}};
    u.gauge.value = 1;
    unclaimed.metric.push_back(std::move(u));
  }
  ClientMetric c;
  c.gauge.value = static_cast<double>(health.guid_conflicts);
  conflicts.metric.push_back(c);
  ClientMetric d;
  d.gauge.value = static_cast<double>(health.disagreements);
  disagreements.metric.push_back(d);
  ClientMetric t;
  t.gauge.value = static_cast<double>(health.last_tick_nanos) / 1e9;
  tick.metric.push_back(t);
  ClientMetric l;
  l.gauge.value = static_cast<double>(health.topology_links);
  links.metric.push_back(l);
  std::vector<MetricFamily> out;
  out.push_back(std::move(tick));
  out.push_back(std::move(active));
  out.push_back(std::move(depth));
  out.push_back(std::move(victims));
  out.push_back(std::move(totals));
  out.push_back(std::move(links));
  out.push_back(std::move(conflicts));
  out.push_back(std::move(disagreements));
  out.push_back(std::move(unclaimed));
  return out;
}

}  // namespace fabricmon::aggregator
