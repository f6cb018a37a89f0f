#include "daemon/detectors/link_flap.h"

#include "absl/strings/str_cat.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {
namespace {

// Counters whose every increment is one link-down event.
constexpr const char* kFlapCounters[] = {
    families::kIbLinkDowned,        // IBA LinkDownedCounter: recovery failed, link went down
    families::kRoceLinkDownEvents,  // mlx5 link_down_events_phy
    families::kNetdevCarrierDown,   // /sys/class/net/<if>/carrier_down_count
};
constexpr int kIbPortActive = 4;

}  // namespace

void LinkFlapDetector::Record(const Endpoint& endpoint, int64_t timestamp, uint64_t count,
                              Evidence evidence) {
  LinkEvents& link = links_[endpoint];
  for (uint64_t i = 0; i < count && i < 1000; ++i) {
    link.events.push_back(timestamp);
  }
  link.total += count;
  link.last_event = std::max(link.last_event, timestamp);
  link.evidence.clear();
  link.evidence.push_back(std::move(evidence));
}

void LinkFlapDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  const int64_t now = view.now_unix_nanos();
  // Timestamps of counter events per endpoint in this tick, to avoid counting a state transition
  // that the counter already saw.
  std::map<Endpoint, std::vector<std::pair<int64_t, int64_t>>> counted_intervals;

  for (const char* family : kFlapCounters) {
    view.ForEachSeries(family, [&](const std::string& node, const aggregator::Series& series) {
      const Endpoint endpoint = view.topology().Canonical(EndpointOf(node, series.desc));
      links_[endpoint].counter_saturated = series.saturated;
      ForEachNewPair(series, &cursors_[{node, series.desc.fingerprint}],
                     [&](const aggregator::StoredSample& previous,
                         const aggregator::StoredSample& current) {
                       const uint64_t increase = RawIncrease(series.desc, previous, current);
                       if (increase == 0) {
                         return;
                       }
                       counted_intervals[endpoint].emplace_back(previous.timestamp_unix_nanos,
                                                                current.timestamp_unix_nanos);
                       Record(endpoint, current.timestamp_unix_nanos, increase,
                              MakeEvidence(series.desc, static_cast<double>(current.raw), 0,
                                           absl::StrCat("+", increase, " link down")));
                     });
    });
  }
  view.ForEachSeries(families::kIbPortState, [&](const std::string& node,
                                                 const aggregator::Series& series) {
    const Endpoint endpoint = view.topology().Canonical(EndpointOf(node, series.desc));
    ForEachNewPair(series, &cursors_[{node, series.desc.fingerprint}],
                   [&](const aggregator::StoredSample& previous,
                       const aggregator::StoredSample& current) {
                     if (static_cast<int64_t>(previous.raw) != kIbPortActive ||
                         static_cast<int64_t>(current.raw) == kIbPortActive) {
                       return;
                     }
                     for (const auto& [from, to] : counted_intervals[endpoint]) {
                       if (from <= current.timestamp_unix_nanos &&
                           previous.timestamp_unix_nanos <= to) {
                         return;  // the counter already counted this one
                       }
                     }
                     Record(endpoint, current.timestamp_unix_nanos, 1,
                            MakeEvidence(series.desc, static_cast<double>(current.raw), 0,
                                         "port left ACTIVE"));
                   });
  });

  for (auto& [endpoint, link] : links_) {
    while (!link.events.empty() && link.events.front() < now - options_.window_nanos) {
      link.events.pop_front();
    }
    if (link.events.size() >= options_.transitions) {
      link.flapping = true;
    } else if (link.flapping && now - link.last_event >= options_.quiet_nanos) {
      link.flapping = false;
    }
    if (!link.flapping) {
      continue;
    }
    Finding finding;
    finding.kind = "link_flapping";
    finding.severity = Severity::kCritical;
    finding.subject = endpoint;
    if (std::optional<Endpoint> peer = view.topology().PeerOf(endpoint)) {
      finding.peer = *peer;
      finding.has_peer = true;
    }
    finding.summary = absl::StrCat(
        "link ", endpoint.ToString(), finding.has_peer ? " <-> " + finding.peer.ToString() : "",
        " went down ", link.events.size(), " times in the last ",
        options_.window_nanos / 1000000000, " s (", link.total, " since first seen)",
        link.counter_saturated ? "; LinkDowned is saturated at 255, so some flaps are only seen "
                                 "as state changes — clear the counter"
                               : "");
    finding.evidence = link.evidence;
    out.push_back(std::move(finding));
  }
}

}  // namespace fabricmon::detectors
