#include "daemon/detectors/roce_detectors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/detectors/families.h"

namespace fabricmon::detectors {

using store::Series;
using store::StoredSample;

void PauseStormDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  const int64_t now = view.now_unix_nanos();
  std::map<Endpoint, std::pair<double, Evidence>> storming;
  view.ForEachSeries(families::kRocePauseDuration, [&](const std::string& node,
                                                       const Series& series) {
    const SeriesKey key = view.KeyOf(series);
    Streak& streak = streaks_[key];
    ForEachNewPair(
        series, &cursors_[key], [&](const StoredSample& previous, const StoredSample& current) {
          const double seconds =
              static_cast<double>(current.timestamp_unix_nanos - previous.timestamp_unix_nanos) /
              1e9;
          const double fraction =
              seconds > 0 ? static_cast<double>(RawIncrease(series.desc, previous, current)) *
                                series.desc->scale / seconds
                          : 0;
          if (fraction >= options_.fraction) {
            ++streak.intervals;
            streak.fraction = fraction;
            streak.evidence = MakeEvidence(
                series.desc, static_cast<double>(current.raw) * series.desc->scale, fraction,
                absl::StrFormat("paused %.0f%% of the interval", 100 * std::min(1.0, fraction)));
          } else {
            streak.intervals = 0;
          }
        });
    if (streak.intervals >= options_.consecutive_intervals) {
      storming[view.PortOf(node, series).endpoint] = {streak.fraction, streak.evidence};
    }
  });
  for (const char* family : {families::kRocePauseStormWarning, families::kRocePauseStormError}) {
    view.ForEachChangingSeries(family, [&](const std::string& node, const Series& series) {
      const SeriesKey key = view.KeyOf(series);
      ForEachNewPair(series, &cursors_[key],
                     [&](const StoredSample& previous, const StoredSample& current) {
                       if (RawIncrease(series.desc, previous, current) > 0) {
                         const Endpoint& endpoint = view.PortOf(node, series).endpoint;
                         storm_events_[endpoint] = current.timestamp_unix_nanos;
                         storm_evidence_[endpoint] =
                             MakeEvidence(series.desc, static_cast<double>(current.raw), 0,
                                          "the NIC's pause-storm watchdog fired");
                       }
                     });
    });
  }
  // A storm event keeps the finding up for a minute: the counters only say it happened.
  for (const auto& [endpoint, when] : storm_events_) {
    if (now - when <= int64_t{60} * 1000000000) {
      auto& entry = storming[endpoint];
      entry.second = storm_evidence_[endpoint];
      entry.first = std::max(entry.first, 1.0);
    }
  }
  for (const auto& [endpoint, entry] : storming) {
    Finding finding;
    finding.kind = "pause_storm";
    finding.severity = Severity::kCritical;
    finding.subject = endpoint;
    if (std::optional<Endpoint> peer = view.topology().PeerOf(endpoint)) {
      finding.peer = *peer;
      finding.has_peer = true;
    }
    finding.evidence.push_back(entry.second);
    finding.summary = absl::StrCat(
        endpoint.ToString(),
        " is in a PFC pause storm: paused continuously (the priority is stalled; a stuck receiver "
        "or a NIC that stopped draining — at the critical watermark the NIC disables pause and "
        "drops)");
    out.push_back(std::move(finding));
  }
}

void EcnMisconfigDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  // Per node: rate of each family, summed over devices.
  struct NodeRates {
    double cnp_ignored = 0;
    double ecn_marks = 0;
    double cnp_sent = 0;
    double cnp_handled = 0;
    double max_pause = 0;
    bool has_cc_counters = false;
    std::vector<Evidence> evidence;
  };
  std::map<std::string, NodeRates> nodes;
  // The newest sample behind each node's rates: the debounce counts samples, not ticks.
  std::map<std::string, int64_t> sampled;
  auto note_sample = [&](const std::string& node, const Series& series) {
    if (const StoredSample* latest = series.Latest()) {
      int64_t& newest = sampled[node];
      newest = std::max(newest, latest->timestamp_unix_nanos);
    }
  };
  auto sum_rate = [&](const char* family, double NodeRates::*field, bool cc) {
    view.ForEachSeries(family, [&](const std::string& node, const Series& series) {
      NodeRates& rates = nodes[node];
      rates.has_cc_counters = rates.has_cc_counters || cc;
      note_sample(node, series);
      const store::Rate rate = series.CurrentRate();
      if (rate.kind == store::Rate::Kind::kOk) {
        rates.*field += rate.per_second;
        if (family == families::kIbRpCnpIgnored && rate.per_second > 0) {
          rates.evidence.push_back(
              MakeEvidence(series.desc, static_cast<double>(series.Latest()->raw), rate.per_second,
                           "CNPs arrive but the reaction point ignores them"));
        }
      }
    });
  };
  sum_rate(families::kIbRpCnpIgnored, &NodeRates::cnp_ignored, true);
  sum_rate(families::kIbNpEcnMarked, &NodeRates::ecn_marks, true);
  sum_rate(families::kIbNpCnpSent, &NodeRates::cnp_sent, true);
  sum_rate(families::kIbRpCnpHandled, &NodeRates::cnp_handled, true);
  sum_rate(families::kRoceEcnMarked, &NodeRates::ecn_marks, true);
  view.ForEachSeries(
      families::kRocePauseDuration, [&](const std::string& node, const Series& series) {
        note_sample(node, series);
        const store::Rate rate = series.CurrentRate();
        if (rate.kind == store::Rate::Kind::kOk && rate.per_second > nodes[node].max_pause) {
          nodes[node].max_pause = rate.per_second;
          if (rate.per_second >= options_.pause_fraction) {
            nodes[node].evidence.push_back(MakeEvidence(
                series.desc, static_cast<double>(series.Latest()->raw) * series.desc->scale,
                rate.per_second, "heavy PFC"));
          }
        }
      });
  ForgetNodesNotIn(view, nodes_);
  for (auto& [node, rates] : nodes) {
    std::string summary;
    const bool ignoring = options_.cnp_ignored_per_second > 0
                              ? rates.cnp_ignored >= options_.cnp_ignored_per_second
                              : rates.cnp_ignored > 0;
    if (ignoring) {
      summary = absl::StrFormat(
          "%s ignores %.1f CNPs/s (rp_cnp_ignored rising): congestion control is disabled on the "
          "sender side while the network asks it to slow down — configuration drift",
          node, rates.cnp_ignored);
    } else if (rates.has_cc_counters && rates.max_pause >= options_.pause_fraction &&
               rates.ecn_marks == 0 && rates.cnp_sent == 0 && rates.cnp_handled == 0) {
      summary = absl::StrFormat(
          "%s is paused %.0f%% of the time by PFC but sees no ECN marks and no CNPs: ECN "
          "thresholds are not engaging, PFC does all the congestion control",
          node, rates.max_pause * 100);
    }
    NodeState& state =
        nodes_.try_emplace(node, NodeState{Debounce(options_.ticks), "", {}}).first->second;
    const bool holds = !summary.empty();
    if (holds) {
      state.summary = std::move(summary);
      state.evidence = std::move(rates.evidence);
    }
    // While clearing, the finding keeps the words of the last sample it held.
    if (!state.debounce.Observe(holds, sampled[node]) || state.summary.empty()) {
      continue;
    }
    Finding finding;
    finding.kind = "ecn_misconfigured";
    finding.severity = Severity::kWarning;
    finding.subject.node = node;
    finding.summary = state.summary;
    finding.evidence = state.evidence;
    out.push_back(std::move(finding));
  }
}

}  // namespace fabricmon::detectors
