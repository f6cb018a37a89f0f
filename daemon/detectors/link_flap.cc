#include "daemon/detectors/link_flap.h"

#include <algorithm>
#include <iterator>
#include <limits>

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

  // The counter each endpoint's events are counted from (index into kFlapCounters).
  std::map<Endpoint, int> counting;
  for (int i = 0; i < kFlapCounterCount; ++i) {
    view.ForEachSeries(kFlapCounters[i], [&](const std::string& node,
                                             const aggregator::Series& series) {
      if (!series.saturated) {
        counting.emplace(view.topology().Canonical(EndpointOf(node, series.desc)), i);
      }
    });
  }

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
      const Endpoint endpoint = view.topology().Canonical(EndpointOf(node, series.desc));
      if (family == families::kIbLinkDowned) {
        links_[endpoint].counter_saturated = series.saturated;  // for the summary's advice
      }
      auto counter = counting.find(endpoint);
      const bool counts = counter != counting.end() && counter->second == i;
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
    const Endpoint endpoint = view.topology().Canonical(EndpointOf(node, series.desc));
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
