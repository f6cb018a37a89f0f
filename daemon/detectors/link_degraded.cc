#include "daemon/detectors/link_degraded.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {
namespace {
constexpr const char* kErrorCounters[] = {
    families::kIbSymbolError,       families::kIbRcvErrors,      families::kIbLocalLinkIntegrity,
    families::kIbBufferOverrun,     families::kIbRemotePhysical, families::kIbLinkErrorRecovery,
    families::kRocePcsSymbolErrors, families::kRoceCrcErrors,
};
}  // namespace

void LinkDegradedDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  const int64_t now = view.now_unix_nanos();
  // First the increases, from the series that have one (most error counters stand still: those
  // are not even read), every family of a node in one visit.
  struct Increase {
    const Port* port;
    const std::string* node;  // the view's: valid for the tick
    int64_t time;
    uint64_t errors;
    Evidence evidence;
  };
  constexpr size_t kFamilies = std::size(kErrorCounters);
  std::array<std::vector<Increase>, kFamilies> increases_of;
  // An increase reported by a node that is not its port's own, per family.
  std::array<bool, kFamilies> contested_of{};
  view.ForEachChangingSeriesOf(kErrorCounters, [&](size_t f, const std::string& node,
                                                   const store::Series& series) {
    const Port& port = view.PortOf(node, series);
    ForEachNewPair(series, &cursors_[view.KeyOf(series)],
                   [&](const store::StoredSample& previous, const store::StoredSample& current) {
                     const uint64_t increase = RawIncrease(series.desc, previous, current);
                     if (increase == 0) {
                       return;
                     }
                     const double seconds = static_cast<double>(current.timestamp_unix_nanos -
                                                                previous.timestamp_unix_nanos) /
                                            1e9;
                     contested_of[f] = contested_of[f] || node != port.endpoint.node;
                     increases_of[f].push_back(
                         {&port, &node, current.timestamp_unix_nanos, increase,
                          MakeEvidence(series.desc, static_cast<double>(current.raw),
                                       seconds > 0 ? static_cast<double>(increase) / seconds : 0,
                                       absl::StrCat("+", increase, " in ", seconds, " s"))});
                   });
  });
  for (size_t f = 0; f < kFamilies; ++f) {
    const char* family = kErrorCounters[f];
    std::vector<Increase>& increases = increases_of[f];
    const bool contested = contested_of[f];
    // Then whose increases count (ReporterChoice): the port's own node's always; another node's
    // (a fabric sweeper's copy) only when no reporter of the port ranks before it, which takes
    // every reporter of the family, still ones included: a second pass, only when needed.
    ReporterChoice reporters;
    if (contested) {
      view.ForEachSeries(family, [&](const std::string& node, const store::Series& series) {
        reporters.Offer(view.PortOf(node, series), node);
      });
    }
    for (Increase& increase : increases) {
      if (*increase.node != increase.port->endpoint.node &&
          !reporters.Judges(*increase.port, *increase.node)) {
        continue;  // another node's copy of the same errors
      }
      PortErrors& port = ports_[increase.port->endpoint];
      port.events.emplace_back(increase.time, increase.errors);
      port.evidence[family] = std::move(increase.evidence);
    }
  }
  // Expire old events; the ports still in their window are judged in endpoint order, so that the
  // findings come out in the same order every tick.
  std::vector<std::pair<const Endpoint*, PortErrors*>> live;
  for (auto it = ports_.begin(); it != ports_.end();) {
    PortErrors& port = it->second;
    while (!port.events.empty() && port.events.front().first < now - options_.window_nanos) {
      port.events.pop_front();
    }
    if (port.events.empty()) {
      ports_.erase(it++);
      continue;
    }
    live.emplace_back(&it->first, &port);
    ++it;
  }
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  for (const auto& [endpoint, port_errors] : live) {
    const Endpoint& subject = *endpoint;
    const PortErrors& port = *port_errors;
    uint64_t errors = 0;
    for (const auto& [time, count] : port.events) {
      errors += count;
    }
    const bool recovered = port.evidence.count(families::kIbLinkErrorRecovery) > 0;
    if (errors >= options_.errors_in_window || recovered) {
      Finding finding;
      finding.kind = "link_degraded";
      finding.severity = Severity::kWarning;
      finding.subject = subject;
      if (std::optional<Endpoint> peer = view.topology().PeerOf(subject)) {
        finding.peer = *peer;
        finding.has_peer = true;
      }
      std::vector<std::string> kinds;
      for (const auto& [family, evidence] : port.evidence) {
        finding.evidence.push_back(evidence);
        kinds.push_back(family);
      }
      finding.summary = absl::StrCat(
          "link ", subject.ToString(), finding.has_peer ? " <-> " + finding.peer.ToString() : "",
          ": ", errors, " link errors in the last ", options_.window_nanos / 1000000000, " s",
          recovered ? " including link error recoveries (the link retrained itself)" : "",
          " — check the cable/transceiver before it starts flapping");
      out.push_back(std::move(finding));
    }
  }
}

}  // namespace fabricmon::detectors
