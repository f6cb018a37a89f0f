#include "daemon/detectors/congestion.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {
namespace {

using store::Series;
using store::StoredSample;

// Increase over the two newest samples, and their time span.
bool LatestIncrease(const Series& series, uint64_t* increase, double* seconds) {
  const StoredSample* latest = series.Latest();
  const StoredSample* previous = series.Previous();
  if (latest == nullptr || previous == nullptr) {
    return false;
  }
  *increase = RawIncrease(series.desc, *previous, *latest);
  *seconds =
      static_cast<double>(latest->timestamp_unix_nanos - previous->timestamp_unix_nanos) / 1e9;
  return *seconds > 0;
}

// A plain congestion finding waits for a fresh reading of its peer's device for at most this
// many of that device's reading intervals.
constexpr int64_t kStaleReads = 4;

std::string Percent(double fraction) { return absl::StrFormat("%.0f%%", fraction * 100); }

}  // namespace

CongestionDetector::Measured& CongestionDetector::MeasuredAt(const Port& port) {
  if (port.index >= measured_.size()) {
    measured_.resize(static_cast<size_t>(port.index) + 1);
  }
  Measured& entry = measured_[port.index];
  if (entry.port == nullptr) {
    entry.port = &port;
    measured_indexes_.push_back(port.index);
  }
  return entry;
}

const CongestionDetector::Measured* CongestionDetector::FindMeasured(
    const FabricView& view, const Endpoint& endpoint) const {
  const Port* port = view.FindPort(endpoint);
  if (port == nullptr || port->index >= measured_.size()) {
    return nullptr;
  }
  const Measured& entry = measured_[port->index];
  return entry.port != nullptr ? &entry : nullptr;
}

void CongestionDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  // Every port read this interval (MeasuredAt). The last tick's entries start over; their
  // indexes may since name other ports (the topology changed), which is just as well.
  for (const uint32_t index : measured_indexes_) {
    measured_[index] = Measured{};
  }
  measured_indexes_.clear();
  auto note_interval = [](Measured& port, const Series& series) {
    if (series.Latest()->timestamp_unix_nanos > port.sampled) {
      port.sampled = series.Latest()->timestamp_unix_nanos;
      port.from = series.Previous()->timestamp_unix_nanos;
    }
  };

  // IB: join XmitWait with XmitData of the same port over the same interval. Both come from one
  // read of the port (a sysfs cycle, a sweep), so their newest two samples share timestamps; when
  // they do not (one of the two reads failed, e.g. a MAD timed out) the port is not judged this
  // tick: pairing a fresh wait with stale data would read as "waiting 100 % of the time".
  struct DataInterval {
    uint64_t words;
    int64_t from;
    int64_t to;
  };
  // By reporting node and port: a host port is also swept from the fabric (a CA port), a switch
  // port by every sweeper of its subnet, each on its own schedule. The view's node names and
  // ports stay put for the tick: their addresses and indexes are the key.
  absl::flat_hash_map<std::pair<const std::string*, uint32_t>, DataInterval> data_words;
  data_words.reserve(data_words_hint_);
  view.ForEachSeries(families::kIbXmitData, [&](const std::string& node, const Series& series) {
    uint64_t increase;
    double seconds;
    if (LatestIncrease(series, &increase, &seconds)) {
      data_words[{&node, view.PortOf(node, series).index}] = {
          increase, series.Previous()->timestamp_unix_nanos, series.Latest()->timestamp_unix_nanos};
    }
  });
  view.ForEachSeries(families::kIbXmitWait, [&](const std::string& node, const Series& series) {
    uint64_t wait;
    double seconds;
    if (!LatestIncrease(series, &wait, &seconds)) {
      return;
    }
    const Port& waiting = view.PortOf(node, series);
    auto data = data_words.find({&node, waiting.index});
    if (data == data_words.end() || data->second.from != series.Previous()->timestamp_unix_nanos ||
        data->second.to != series.Latest()->timestamp_unix_nanos) {
      return;
    }
    const uint64_t words = data->second.words;
    const double fraction =
        wait == 0 ? 0 : static_cast<double>(wait) / static_cast<double>(wait + words);
    Measured& port = MeasuredAt(waiting);
    note_interval(port, series);
    port.threshold = options_.wait_fraction;
    if (fraction < port.reading.fraction || wait == 0) {
      return;
    }
    port.reading.fraction = fraction;
    port.reading.evidence.push_back(MakeEvidence(
        series.desc, static_cast<double>(series.Latest()->raw), static_cast<double>(wait) / seconds,
        absl::StrCat("waiting for credits: XmitWait is ", Percent(fraction),
                     " of wait+data in the last ", absl::StrFormat("%.1f", seconds), " s")));
  });

  // RoCE: fraction of time paused, per netdev and direction (worst priority).
  view.ForEachSeries(families::kRocePauseDuration, [&](const std::string& node,
                                                       const Series& series) {
    uint64_t increase;
    double seconds;
    if (!LatestIncrease(series, &increase, &seconds)) {
      return;
    }
    const double fraction =
        std::min(1.0, static_cast<double>(increase) * series.desc->scale / seconds);
    const bool tx = collectors::LabelValue(series.desc, "direction") == "tx";
    Measured& port = MeasuredAt(view.PortOf(node, series));
    note_interval(port, series);
    port.threshold = options_.pause_fraction;
    if (fraction < options_.pause_fraction / 2) {
      return;
    }
    port.reading.fraction = std::max(port.reading.fraction, fraction);
    port.reading.pauses_peer = port.reading.pauses_peer || tx;
    port.reading.evidence.push_back(MakeEvidence(
        series.desc, static_cast<double>(series.Latest()->raw) * series.desc->scale, fraction,
        tx ? absl::StrCat("pausing its peer ", Percent(fraction), " of the time (slow receiver)")
           : absl::StrCat("paused by its peer ", Percent(fraction), " of the time")));
  });

  // Sized like the last tick's: grown from empty every tick, it spent more time rehashing than
  // looking up.
  data_words_hint_ = data_words.size();

  // Hysteresis: a port becomes congested at the threshold and stays so until it has been below
  // half of it for clear_samples of its samples in a row. Congestion hovering at the threshold
  // (an incast's senders, a tree's root) would otherwise end and restart its findings, and the
  // tree they form, every few seconds.
  std::map<Endpoint, Congested> congested;
  std::set<Endpoint> at_threshold;  // congested by this interval's reading, not only held
  for (const uint32_t index : measured_indexes_) {
    const Measured& measured = measured_[index];
    const Endpoint& endpoint = measured.port->endpoint;
    const double threshold = measured.threshold;
    auto state = ports_.find(endpoint);
    if (measured.reading.fraction >= threshold) {
      at_threshold.insert(endpoint);
      state = ports_.insert_or_assign(endpoint, PortState{}).first;
      state->second.last = measured.reading;
    } else if (state == ports_.end()) {
      continue;  // never congested
    } else if (measured.reading.fraction >= threshold / 2) {
      state->second.below = 0;  // between half and the threshold: holds
      state->second.last = measured.reading;
    } else if (measured.sampled != state->second.last_sample &&
               ++state->second.below >= options_.clear_samples) {
      ports_.erase(state);
      continue;
    }
    state->second.last_sample = measured.sampled;
    state->second.unread = 0;
    congested.emplace(endpoint, state->second.last);
  }
  for (auto it = ports_.begin(); it != ports_.end();) {
    if (FindMeasured(view, it->first) != nullptr) {
      ++it;
    } else if (++it->second.unread >= options_.clear_samples) {
      it = ports_.erase(it);  // no longer read (its series gone): not congested
    } else {
      congested.emplace(it->first, it->second.last);
      ++it;
    }
  }

  std::vector<Finding> found;
  BuildFindings(congested, view.topology(), options_, found);

  // What may start an incident: a port held congested by the hysteresis keeps its finding going
  // but starts none (the senders of an incast that just ended are not new congestion). A plain
  // congestion finding also waits for raise_samples samples of the port in a row: an incast's
  // senders are paused one sample before the receiver's pausing shows and would be reported
  // alone for that sample before the tree forms. And it waits until its peer's device, where
  // that is measured, has been read over an interval that began after the port started waiting:
  // a host port and its switch are read by different agents on their own schedules (a fabric
  // sweep can lag the hosts' reads by seconds on a busy sweeper), and a sender judged against a
  // picture of its switch from before the incast would be a false plain congestion finding.
  auto peer_device_read_since = [&](const Finding& finding, int64_t onset, int64_t now) {
    if (!finding.has_peer) {
      return true;
    }
    // Every other cabled port of the peer's device: the ports the waiting one could point at.
    // The device counts as measured when any of its ports, the peer port included, was judged.
    const Endpoint& peer = finding.peer;
    bool device_measured = false;
    bool read_since = true;
    int64_t newest_from = 0;
    int64_t newest_to = 0;
    for (const Endpoint& other : view.topology().PortsOf(peer.node, peer.is_switch)) {
      const Measured* reading = FindMeasured(view, other);
      if (other == peer) {
        device_measured = device_measured || reading != nullptr;
        continue;
      }
      if (reading == nullptr) {
        read_since = false;  // not judged this tick (a failed read): unknown
        continue;
      }
      device_measured = true;
      read_since = read_since && reading->from >= onset;
      if (reading->sampled > newest_to) {
        newest_to = reading->sampled;
        newest_from = reading->from;
      }
    }
    if (!device_measured || read_since) {
      return true;  // not measured (nothing to wait for), or read since
    }
    // Waited kStaleReads of the device's own intervals (its reader stopped, or one port keeps
    // failing): judge without it.
    const int64_t interval = std::max<int64_t>(newest_to - newest_from, 1);
    return now - onset > kStaleReads * interval;
  };
  std::map<std::pair<std::string, Endpoint>, Reported> reported;
  for (Finding& finding : found) {
    const std::pair<std::string, Endpoint> key{finding.kind, finding.subject};
    auto previous = reported_.find(key);
    Reported state = previous != reported_.end() ? previous->second : Reported{};
    auto port = ports_.find(finding.subject);
    const int64_t sample = port != ports_.end() ? port->second.last_sample : 0;
    if (sample != state.last_sample) {
      if (state.samples == 0) {
        state.onset = sample;
      }
      state.last_sample = sample;
      ++state.samples;
    }
    bool starts = at_threshold.count(finding.subject) > 0;
    if (starts && !state.active && finding.kind == "congestion") {
      starts = state.samples >= options_.raise_samples &&
               peer_device_read_since(finding, state.onset, sample);
    }
    if (state.active || starts) {
      state.active = true;
      out.push_back(std::move(finding));
    }
    reported.emplace(key, state);
  }
  reported_ = std::move(reported);
}

void CongestionDetector::BuildFindings(const std::map<Endpoint, Congested>& congested,
                                       const CableGraph& topology, const CongestionOptions& options,
                                       std::vector<Finding>& out) {
  // Waiting ports grouped by the device they are on, for "the ports of the peer's device".
  std::map<std::pair<std::string, bool>, std::vector<Endpoint>> waiting_by_device;
  for (const auto& [endpoint, port] : congested) {
    if (!port.pauses_peer) {
      waiting_by_device[{endpoint.node, endpoint.is_switch}].push_back(endpoint);
    }
  }
  // Edges: waiting port → waiting ports of its peer's device (other than the peer port itself).
  std::map<Endpoint, std::vector<Endpoint>> next;
  std::map<Endpoint, Endpoint> peer_of;
  for (const auto& [endpoint, port] : congested) {
    if (port.pauses_peer) {
      continue;
    }
    std::optional<Endpoint> peer = topology.PeerOf(endpoint);
    if (!peer.has_value()) {
      continue;
    }
    peer_of[endpoint] = *peer;
    auto it = waiting_by_device.find({peer->node, peer->is_switch});
    if (it == waiting_by_device.end()) {
      continue;
    }
    for (const Endpoint& downstream : it->second) {
      if (!(downstream == *peer)) {
        next[endpoint].push_back(downstream);
      }
    }
  }

  // Reverse edges, for walking from a root to its victims.
  std::map<Endpoint, std::vector<Endpoint>> previous;
  for (const auto& [from, targets] : next) {
    for (const Endpoint& to : targets) {
      previous[to].push_back(from);
    }
  }

  // Roots: waiting ports with a known peer and no waiting port beyond it.
  std::set<Endpoint> in_tree;
  for (const auto& [endpoint, peer] : peer_of) {
    if (next.count(endpoint) > 0) {
      continue;
    }
    // Reverse search: every port from which `endpoint` is reachable is a victim.
    std::map<Endpoint, uint32_t> depth;  // hops from the root
    std::vector<Endpoint> frontier = {endpoint};
    depth[endpoint] = 0;
    while (!frontier.empty()) {
      std::vector<Endpoint> following;
      for (const Endpoint& current : frontier) {
        auto upstream = previous.find(current);
        if (upstream == previous.end()) {
          continue;
        }
        for (const Endpoint& candidate : upstream->second) {
          if (depth.emplace(candidate, depth[current] + 1).second) {
            following.push_back(candidate);
          }
        }
      }
      frontier = std::move(following);
    }
    uint32_t max_depth = 0;
    for (const auto& [victim, hops] : depth) {
      max_depth = std::max(max_depth, hops);
    }
    if (max_depth == 0) {
      continue;  // a lone waiting port: reported below as plain congestion
    }
    Finding finding;
    finding.kind = "congestion_spreading";
    finding.severity = Severity::kCritical;
    finding.subject = endpoint;
    finding.peer = peer;  // the sink
    finding.has_peer = true;
    finding.depth_hops = max_depth;
    for (const auto& [victim, hops] : depth) {
      in_tree.insert(victim);
      if (!(victim == endpoint)) {
        finding.victims.push_back(victim);
      }
    }
    const Congested& root = congested.at(endpoint);
    finding.evidence = root.evidence;
    finding.summary = absl::StrCat(
        "congestion spreading from ", endpoint.ToString(), " toward ", peer.ToString(),
        " (slow receiver or incast target): ", finding.victims.size(),
        " upstream ports wait on it over ", max_depth, max_depth == 1 ? " hop" : " hops",
        "; root waits ", Percent(root.fraction), " of the time");
    out.push_back(std::move(finding));
  }

  // RoCE with topology: switches are not measured, so walk the switch graph from a source's
  // (slow receiver's) switch; paused host ports hanging off switches within reach are victims.
  for (const auto& [source, port] : congested) {
    if (!port.pauses_peer) {
      continue;
    }
    std::optional<Endpoint> tor = topology.PeerOf(source);
    if (!tor.has_value() || !tor->is_switch) {
      continue;
    }
    std::map<std::string, uint32_t> switch_hops = {{tor->node, 0}};
    std::vector<std::string> frontier = {tor->node};
    while (!frontier.empty()) {
      std::vector<std::string> following;
      for (const std::string& sw : frontier) {
        for (const Endpoint& switch_port : topology.PortsOf(sw, true)) {
          std::optional<Endpoint> far = topology.PeerOf(switch_port);
          if (far.has_value() && far->is_switch &&
              switch_hops.emplace(far->node, switch_hops[sw] + 1).second) {
            following.push_back(far->node);
          }
        }
      }
      frontier = std::move(following);
    }
    Finding finding;
    finding.kind = "congestion_spreading";
    finding.severity = Severity::kCritical;
    finding.subject = source;
    finding.peer = *tor;
    finding.has_peer = true;
    for (const auto& [endpoint, other] : congested) {
      if (other.pauses_peer || endpoint == source) {
        continue;
      }
      std::optional<Endpoint> victim_switch = topology.PeerOf(endpoint);
      if (!victim_switch.has_value()) {
        continue;
      }
      auto hops = switch_hops.find(victim_switch->node);
      if (hops == switch_hops.end()) {
        continue;
      }
      finding.victims.push_back(endpoint);
      finding.depth_hops = std::max(finding.depth_hops, hops->second + 1);
      in_tree.insert(endpoint);
    }
    if (finding.victims.empty()) {
      continue;
    }
    in_tree.insert(source);
    finding.evidence = port.evidence;
    finding.summary =
        absl::StrCat(source.ToString(), " (behind ", tor->ToString(), ") pauses its switch ",
                     Percent(port.fraction), " of the time; PFC back-pressure has spread to ",
                     finding.victims.size(), " ports up to ", finding.depth_hops, " hops away");
    out.push_back(std::move(finding));
  }

  // Without topology: RoCE sources (pausing their peers) and victims (paused) across nodes.
  std::vector<Endpoint> sources;
  std::vector<Endpoint> victims;
  for (const auto& [endpoint, port] : congested) {
    if (in_tree.count(endpoint) > 0 || peer_of.count(endpoint) > 0) {
      continue;
    }
    (port.pauses_peer ? sources : victims).push_back(endpoint);
  }
  std::set<Endpoint> reported;
  if (!sources.empty() && victims.size() >= options.min_victims_without_topology) {
    for (const Endpoint& source : sources) {
      Finding finding;
      finding.kind = "congestion_spreading";
      finding.severity = Severity::kCritical;
      finding.subject = source;
      finding.victims = victims;
      finding.evidence = congested.at(source).evidence;
      finding.summary = absl::StrCat(
          source.ToString(), " is pausing its switch port (slow receiver) while ", victims.size(),
          " other ports are being paused: PFC back-pressure is spreading (no topology: hops "
          "unknown; add a link list to see the tree)");
      out.push_back(std::move(finding));
      reported.insert(source);
    }
    reported.insert(victims.begin(), victims.end());
  }

  for (const auto& [endpoint, port] : congested) {
    if (in_tree.count(endpoint) > 0 || reported.count(endpoint) > 0) {
      continue;
    }
    Finding finding;
    finding.kind = "congestion";
    finding.severity = Severity::kWarning;
    finding.subject = endpoint;
    auto peer = peer_of.find(endpoint);
    if (peer != peer_of.end()) {
      finding.peer = peer->second;
      finding.has_peer = true;
    }
    finding.evidence = port.evidence;
    finding.summary =
        port.pauses_peer
            ? absl::StrCat(endpoint.ToString(), " pauses its peer ", Percent(port.fraction),
                           " of the time: its receive side cannot keep up")
            : absl::StrCat(endpoint.ToString(), " waits on ",
                           peer != peer_of.end() ? peer->second.ToString() : "its peer", " ",
                           Percent(port.fraction), " of the time");
    out.push_back(std::move(finding));
  }
}

}  // namespace fabricmon::detectors
