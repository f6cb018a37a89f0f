#include "daemon/detectors/link_flap.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {
namespace {

// Counters whose every increment is one link-down event. Several of them see the same event on
// one port (an IB port going down bumps LinkDowned and its IPoIB netdev's carrier_down_count; a
// RoCE port link_down_events_phy and its netdev's carrier): each is a witness of its own.
constexpr const char* kFlapCounters[] = {
    families::kIbLinkDowned,        // IBA LinkDownedCounter: recovery failed, link went down
    families::kRoceLinkDownEvents,  // mlx5 link_down_events_phy
    families::kNetdevCarrierDown,   // /sys/class/net/<if>/carrier_down_count
};
constexpr int kIbPortActive = 4;

}  // namespace

LinkFlapDetector::LinkEvents& LinkFlapDetector::LinkOf(const FabricView& view, const Port& port) {
  if (port_epoch_ != view.port_epoch()) {
    port_epoch_ = view.port_epoch();
    link_by_port_.clear();
  }
  if (port.index >= link_by_port_.size()) {
    link_by_port_.resize(static_cast<size_t>(port.index) + 1, nullptr);
  }
  LinkEvents*& link = link_by_port_[port.index];
  if (link == nullptr) {
    auto it = links_.try_emplace(port.endpoint).first;
    it->second.endpoint = &it->first;
    link = &it->second;
  }
  return *link;
}

void LinkFlapDetector::Record(LinkEvents& link, const SeriesKey& witness, int64_t timestamp,
                              uint64_t count, Evidence evidence) {
  if (!link.listed) {
    link.listed = true;
    recent_.push_back(&link);
  }
  Witness& seen = link.witnesses[witness];
  for (uint64_t i = 0; i < count && i < 1000; ++i) {
    seen.events.push_back(timestamp);
  }
  seen.total += count;
  link.last_event = std::max(link.last_event, timestamp);
  link.evidence.clear();
  link.evidence.push_back(std::move(evidence));
}

void LinkFlapDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  const int64_t now = view.now_unix_nanos();

  for (const char* family : kFlapCounters) {
    view.ForEachSeries(family, [&](const std::string& node, const store::Series& series) {
      const Port& port = view.PortOf(node, series);
      LinkEvents& link = LinkOf(view, port);
      if (family == families::kIbLinkDowned && series.saturated) {
        link.counter_saturated = true;  // for the summary's advice
      }
      // Every counted port remembers the other end of its cable while the topology names it;
      // copied only when it changed (its strings were copied for every port, every tick).
      if (port.peer.has_value() && !(link.peer.has_value() && *link.peer == *port.peer &&
                                     link.peer->guid == port.peer->guid)) {
        link.peer = port.peer;
      }
      if (HoldsOneValue(series)) {
        return;  // no link down among its samples (detector.h)
      }
      const SeriesKey key = view.KeyOf(series);
      ForEachNewPair(series, &cursors_[key],
                     [&](const store::StoredSample& previous, const store::StoredSample& current) {
                       const uint64_t increase = RawIncrease(series.desc, previous, current);
                       if (increase > 0) {
                         Record(link, key, current.timestamp_unix_nanos, increase,
                                MakeEvidence(series.desc, static_cast<double>(current.raw), 0,
                                             absl::StrCat("+", increase, " link down")));
                       }
                     });
    });
  }
  view.ForEachChangingSeries(families::kIbPortState, [&](const std::string& node,
                                                         const store::Series& series) {
    const Port& port = view.PortOf(node, series);
    const SeriesKey key = view.KeyOf(series);
    ForEachNewPair(series, &cursors_[key],
                   [&](const store::StoredSample& previous, const store::StoredSample& current) {
                     if (static_cast<int64_t>(previous.raw) == kIbPortActive &&
                         static_cast<int64_t>(current.raw) != kIbPortActive) {
                       Record(LinkOf(view, port), key, current.timestamp_unix_nanos, 1,
                              MakeEvidence(series.desc, static_cast<double>(current.raw), 0,
                                           "port left ACTIVE"));
                     }
                   });
  });

  struct Flapping {
    const LinkEvents* link;
    size_t events;   // in the window, by the witness that saw most
    uint64_t total;  // since first seen, likewise
  };
  std::vector<Flapping> flapping;
  for (size_t i = 0; i < recent_.size();) {
    LinkEvents& link = *recent_[i];
    // The port's events in the window: the most any one witness saw.
    size_t events = 0;
    uint64_t total = 0;
    for (auto it = link.witnesses.begin(); it != link.witnesses.end();) {
      Witness& witness = it->second;
      while (!witness.events.empty() && witness.events.front() < now - options_.window_nanos) {
        witness.events.pop_front();
      }
      events = std::max(events, witness.events.size());
      total = std::max(total, witness.total);
      if (witness.events.empty() && !link.flapping) {
        link.witnesses.erase(it++);  // nothing in the window: forget it (series come and go)
      } else {
        ++it;
      }
    }
    if (events >= options_.transitions) {
      link.flapping = true;
    } else if (link.flapping && now - link.last_event >= options_.quiet_nanos) {
      link.flapping = false;
    }
    if (link.flapping) {
      flapping.push_back({&link, events, total});
    } else if (link.witnesses.empty()) {
      link.listed = false;  // quiet: nothing to look at until its next event
      recent_[i] = recent_.back();
      recent_.pop_back();
      continue;
    }
    ++i;
  }
  // In the links' order, as when every link was walked.
  std::sort(flapping.begin(), flapping.end(), [](const Flapping& a, const Flapping& b) {
    return *a.link->endpoint < *b.link->endpoint;
  });
  for (const auto& [flapping_link, events, total] : flapping) {
    const LinkEvents& link = *flapping_link;
    const Endpoint& endpoint = *link.endpoint;
    Finding finding;
    finding.kind = "link_flapping";
    finding.identity = Identity::kCable;
    finding.severity = Severity::kCritical;
    finding.subject = endpoint;
    if (link.peer.has_value()) {
      finding.peer = *link.peer;
      finding.has_peer = true;
    }
    finding.OrientCable();
    finding.summary = absl::StrCat(
        "link ", finding.subject.ToString(),
        finding.has_peer ? " <-> " + finding.peer.ToString() : "", " went down ", events,
        " times in the last ", options_.window_nanos / 1000000000, " s (", total,
        " since first seen",
        endpoint == finding.subject ? "" : absl::StrCat(", counted at ", endpoint.ToString()), ")",
        link.counter_saturated ? "; LinkDowned is saturated at 255, so some flaps are only seen "
                                 "as state changes — clear the counter"
                               : "");
    finding.evidence = link.evidence;
    out.push_back(std::move(finding));
  }
}

}  // namespace fabricmon::detectors
