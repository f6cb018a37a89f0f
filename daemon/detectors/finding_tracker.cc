#include "daemon/detectors/finding_tracker.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::detectors {

namespace {

using Incidents = std::map<std::string, TrackedFinding>;
using Incident = Incidents::value_type;

// The incidents of one map by their ends (kind and end, hashed), so that a cable finding
// finds the incident it continues by looking up its own ends instead of comparing itself with
// every incident: that scan ran for every cable finding twice a tick (once over this tick's
// incidents, where it mostly finds none) and made a tick quadratic in them, at 4,000 cable
// findings 185 ms a tick (fabricmon_detector_bench's BM_FindingTrackerUpdate), which a failed
// spine's flapping links reach. Entries point into the map (std::map nodes stay put); an
// incident is removed before it leaves the map.
class CableEnds {
 public:
  void Add(const Incident& incident) {
    ForEachEnd(incident.second.finding, [&](size_t end) { by_end_[end].push_back(&incident); });
  }
  void Remove(const Incident& incident) {
    ForEachEnd(incident.second.finding, [&](size_t end) {
      auto it = by_end_.find(end);
      if (it == by_end_.end()) {
        return;
      }
      std::vector<const Incident*>& incidents = it->second;
      incidents.erase(std::remove(incidents.begin(), incidents.end(), &incident), incidents.end());
      if (incidents.empty()) {
        by_end_.erase(it);
      }
    });
  }
  // The incident that shares a cable end with `finding` (SharesCableEndWith: the hash only
  // narrows the candidates), the one with the smallest key when several do, as a scan of the map
  // in its order would find it; null when none does.
  const std::string* Find(const Finding& finding) const {
    const std::string* found = nullptr;
    if (finding.identity != Identity::kCable) {
      return found;
    }
    ForEachEnd(finding, [&](size_t end) {
      auto it = by_end_.find(end);
      if (it == by_end_.end()) {
        return;
      }
      for (const Incident* incident : it->second) {
        if (finding.SharesCableEndWith(incident->second.finding) &&
            (found == nullptr || incident->first < *found)) {
          found = &incident->first;
        }
      }
    });
    return found;
  }

 private:
  // A finding's ends: its subject, and its peer when it knows it. Every incident is indexed,
  // whatever its identity: an incident keeps its subject and peer, but the finding that
  // continues it may be of the other identity (a subject finding and a cable finding without a
  // peer have the same key), and SharesCableEndWith, asked of each candidate, decides.
  template <typename Visit>
  static void ForEachEnd(const Finding& finding, Visit visit) {
    visit(absl::HashOf(finding.kind, finding.subject));
    if (finding.has_peer) {
      visit(absl::HashOf(finding.kind, finding.peer));
    }
  }

  absl::flat_hash_map<size_t, std::vector<const Incident*>> by_end_;
};

// The key of the incident `finding` continues: its own, or for a cable the incident that already
// has one of its ends (the cable's peer came or went since, e.g. rediscovery stopped seeing a
// down cable), or null when it starts a new one.
const std::string* IncidentOf(const Finding& finding, const std::string& key,
                              const Incidents& incidents, const CableEnds& cables) {
  if (auto it = incidents.find(key); it != incidents.end()) {
    return &it->first;
  }
  return cables.Find(finding);
}

// An incident keeps the labels it was raised with (subject and peer): alerting identifies it by
// them, and a label that changes ends one alert and starts another. Everything else follows the
// detector's latest view.
void Continue(TrackedFinding& tracked, Finding finding) {
  finding.subject = std::move(tracked.finding.subject);
  finding.peer = std::move(tracked.finding.peer);
  finding.has_peer = tracked.finding.has_peer;
  tracked.finding = std::move(finding);
}

}  // namespace

void FindingTracker::Update(std::vector<Finding> current, int64_t now) {
  absl::MutexLock lock(&mu_);
  Incidents next;
  CableEnds next_cables;
  CableEnds active_cables;
  for (const Incident& incident : active_) {
    active_cables.Add(incident);
  }
  for (Finding& finding : current) {
    const std::string key = finding.Key();
    if (const std::string* seen = IncidentOf(finding, key, next, next_cables)) {
      // Two views of one incident this tick (e.g. both cable ends): keep the more severe.
      TrackedFinding& tracked = next.at(*seen);
      if (finding.severity > tracked.finding.severity) {
        Continue(tracked, std::move(finding));
      }
      continue;
    }
    TrackedFinding tracked;
    std::string incident_key = key;
    if (const std::string* active = IncidentOf(finding, key, active_, active_cables)) {
      incident_key = *active;
      auto it = active_.find(incident_key);
      active_cables.Remove(*it);
      tracked = std::move(it->second);
      active_.erase(it);
      Continue(tracked, std::move(finding));
    } else {
      tracked.id = absl::StrCat("f", next_id_++);
      tracked.onset_unix_nanos = now;
      ++raised_[{finding.kind, finding.severity}];
      tracked.finding = std::move(finding);
    }
    tracked.updated_unix_nanos = now;
    // Its ends are final: Continue() keeps an incident's subject and peer (and its kind: a finding
    // continues an incident only of its own kind).
    auto [it, inserted] = next.emplace(std::move(incident_key), std::move(tracked));
    if (inserted) {
      next_cables.Add(*it);
    }
  }
  for (auto& [key, tracked] : active_) {
    tracked.cleared_unix_nanos = now;
    recent_.push_front(std::move(tracked));
  }
  while (recent_.size() > history_limit_) {
    recent_.pop_back();
  }
  active_ = std::move(next);
}

std::vector<TrackedFinding> FindingTracker::Active() const {
  absl::MutexLock lock(&mu_);
  std::vector<TrackedFinding> out;
  out.reserve(active_.size());
  for (const auto& [key, tracked] : active_) {
    out.push_back(tracked);
  }
  return out;
}

void FindingTracker::ForEachActive(absl::FunctionRef<void(const TrackedFinding&)> visit) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, tracked] : active_) {
    visit(tracked);
  }
}

std::vector<TrackedFinding> FindingTracker::Recent() const {
  absl::MutexLock lock(&mu_);
  return std::vector<TrackedFinding>(recent_.begin(), recent_.end());
}

std::map<std::pair<std::string, Severity>, uint64_t> FindingTracker::RaisedTotals() const {
  absl::MutexLock lock(&mu_);
  return raised_;
}

}  // namespace fabricmon::detectors
