#include "daemon/detectors/link_flap.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {
namespace {

// Counters whose every increment is one link-down event, most specific first. Several of them
// see the same event on one port (an IB port going down bumps LinkDowned and its IPoIB netdev's
// carrier_down_count; a RoCE port link_down_events_phy and its netdev's carrier), so each
// endpoint's events are counted from the first of them it has that can still count (not
// saturated); the others would count every flap twice.
constexpr const char* kFlapCounters[] = {
    families::kIbLinkDowned,        // IBA LinkDownedCounter: recovery failed, link went down
    families::kRoceLinkDownEvents,  // mlx5 link_down_events_phy
    families::kNetdevCarrierDown,   // /sys/class/net/<if>/carrier_down_count
};
constexpr int kFlapCounterCount = static_cast<int>(std::size(kFlapCounters));
constexpr int kIbPortActive = 4;
// How long a port state transition waits for the endpoint's counter to report past it.
constexpr int64_t kCounterWaitNanos = int64_t{2} * 1000000000;

// Which series of an endpoint is judged: the counter's index in kFlapCounters (0 for the port
// state) and the node reporting it.
struct Source {
  int index = 0;
  std::string node;
  bool operator==(const Source& other) const {
    return index == other.index && node == other.node;
  }
  bool operator!=(const Source& other) const { return !(*this == other); }
};

// Keeps the better of two sources of `endpoint`: the more specific counter, then the endpoint's
// own node, then the smaller node name (stable whatever order the store lists nodes in).
void Prefer(std::map<Endpoint, Source>& chosen, const Endpoint& endpoint, Source candidate) {
  auto [it, inserted] = chosen.emplace(endpoint, candidate);
  if (inserted) {
    return;
  }
  const Source& current = it->second;
  auto rank = [&](const Source& source) {
    return std::make_tuple(source.index, source.node == endpoint.node ? 0 : 1, source.node);
  };
  if (rank(candidate) < rank(current)) {
    it->second = std::move(candidate);
  }
}

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
  cursors_.StartTick();
  const int64_t now = view.now_unix_nanos();

  // The one series each endpoint's events are counted from: the first counter of kFlapCounters
  // it has that is not saturated, reported by the endpoint's own node where it reports one (a CA
  // port is also swept from the fabric, a switch port by every sweeper of its subnet).
  std::map<Endpoint, Source> counting;
  for (int i = 0; i < kFlapCounterCount; ++i) {
    view.ForEachSeries(kFlapCounters[i], [&](const std::string& node,
                                             const aggregator::Series& series) {
      if (!series.saturated) {
        Prefer(counting, view.PortOf(node, series.desc), Source{i, node});
      }
    });
  }
  // Every counted port remembers the other end of its cable while the topology names it: a down
  // cable drops out of rediscovery, and its flaps still name the cable.
  for (const auto& [endpoint, source] : counting) {
    if (std::optional<Endpoint> peer = view.topology().PeerOf(endpoint)) {
      links_[endpoint].peer = *peer;
    }
  }
  // Likewise the one port-state series of each endpoint.
  std::map<Endpoint, Source> state_source;
  view.ForEachSeries(families::kIbPortState, [&](const std::string& node,
                                                 const aggregator::Series& series) {
    Prefer(state_source, view.PortOf(node, series.desc), Source{0, node});
  });

  // What the counting counter of each endpoint retains: the intervals in which it rose and how
  // far it has reported. It may come from another collector than the port state (netdev, ethtool)
  // and reach the store an interval earlier or later, so a state transition is only judged once
  // the counter has reported past it: counted by the counter, or not seen by it.
  struct CounterView {
    std::vector<std::pair<int64_t, int64_t>> rises;
    int64_t latest = std::numeric_limits<int64_t>::max();
  };
  std::map<Endpoint, CounterView> counters;

  for (int i = 0; i < kFlapCounterCount; ++i) {
    const char* family = kFlapCounters[i];
    view.ForEachSeries(family, [&](const std::string& node, const aggregator::Series& series) {
      const Endpoint endpoint = view.PortOf(node, series.desc);
      auto counter = counting.find(endpoint);
      const bool counts = counter != counting.end() && counter->second == Source{i, node};
      if (family == families::kIbLinkDowned && (counts || counter == counting.end())) {
        links_[endpoint].counter_saturated = series.saturated;  // for the summary's advice
      }
      if (counts) {
        CounterView& retained = counters[endpoint];
        int64_t all = 0;  // every retained pair, not only the new ones
        ForEachNewPair(series, &all, [&](const aggregator::StoredSample& previous,
                                         const aggregator::StoredSample& current) {
          if (RawIncrease(series.desc, previous, current) > 0) {
            retained.rises.emplace_back(previous.timestamp_unix_nanos,
                                        current.timestamp_unix_nanos);
          }
        });
        if (const aggregator::StoredSample* latest = series.Latest()) {
          retained.latest = std::min(retained.latest, latest->timestamp_unix_nanos);
        }
      }
      ForEachNewPair(series, &cursors_[{node, series.desc.fingerprint}],
                     [&](const aggregator::StoredSample& previous,
                         const aggregator::StoredSample& current) {
                       const uint64_t increase = RawIncrease(series.desc, previous, current);
                       if (increase == 0 || !counts) {
                         return;  // (a less specific counter's copy of the same events)
                       }
                       Record(endpoint, current.timestamp_unix_nanos, increase,
                              MakeEvidence(series.desc, static_cast<double>(current.raw), 0,
                                           absl::StrCat("+", increase, " link down")));
                     });
    });
  }
  view.ForEachSeries(families::kIbPortState, [&](const std::string& node,
                                                 const aggregator::Series& series) {
    const Endpoint endpoint = view.PortOf(node, series.desc);
    if (state_source[endpoint] != Source{0, node}) {
      return;  // another node's view of the same port is the one judged
    }
    auto counter = counters.find(endpoint);
    int64_t& cursor = cursors_[{node, series.desc.fingerprint}];
    int64_t walked = cursor;
    bool waiting = false;
    ForEachNewPair(series, &walked, [&](const aggregator::StoredSample& previous,
                                        const aggregator::StoredSample& current) {
      if (waiting) {
        return;
      }
      if (counter != counters.end() && current.timestamp_unix_nanos > counter->second.latest &&
          now - current.timestamp_unix_nanos < kCounterWaitNanos) {
        waiting = true;  // the counter has not reported this far: judge it at a later tick
        return;
      }
      cursor = current.timestamp_unix_nanos;
      if (static_cast<int64_t>(previous.raw) != kIbPortActive ||
          static_cast<int64_t>(current.raw) == kIbPortActive) {
        return;
      }
      if (counter != counters.end()) {
        for (const auto& [from, to] : counter->second.rises) {
          if (from <= current.timestamp_unix_nanos && previous.timestamp_unix_nanos <= to) {
            return;  // the counter already counted this one
          }
        }
      }
      Record(endpoint, current.timestamp_unix_nanos, 1,
             MakeEvidence(series.desc, static_cast<double>(current.raw), 0, "port left ACTIVE"));
    });
    if (!waiting) {
      cursor = walked;
    }
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
    finding.identity = Identity::kCable;
    finding.severity = Severity::kCritical;
    finding.subject = endpoint;
    // The cable as last resolved (the tracker keeps the incident's labels anyway).
    if (link.peer.has_value()) {
      finding.peer = *link.peer;
      finding.has_peer = true;
    }
    finding.OrientCable();
    finding.summary = absl::StrCat(
        "link ", finding.subject.ToString(),
        finding.has_peer ? " <-> " + finding.peer.ToString() : "", " went down ",
        link.events.size(), " times in the last ", options_.window_nanos / 1000000000, " s (",
        link.total, " since first seen",
        endpoint == finding.subject ? "" : absl::StrCat(", counted at ", endpoint.ToString()), ")",
        link.counter_saturated ? "; LinkDowned is saturated at 255, so some flaps are only seen "
                                 "as state changes — clear the counter"
                               : "");
    finding.evidence = link.evidence;
    out.push_back(std::move(finding));
  }
}

}  // namespace fabricmon::detectors
