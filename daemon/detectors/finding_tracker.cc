#include "daemon/detectors/finding_tracker.h"

#include "absl/strings/str_cat.h"

namespace fabricmon::detectors {

namespace {

// The key of the incident `finding` continues: its own, or for a cable the incident that already
// has one of its ends (the cable's peer came or went since, e.g. rediscovery stopped seeing a
// down cable), or "" when it starts a new one.
const std::string* IncidentOf(const Finding& finding, const std::string& key,
                              const std::map<std::string, TrackedFinding>& incidents) {
  if (auto it = incidents.find(key); it != incidents.end()) {
    return &it->first;
  }
  if (finding.identity != Identity::kCable) {
    return nullptr;
  }
  for (const auto& [incident_key, tracked] : incidents) {
    if (finding.SharesCableEndWith(tracked.finding)) {
      return &incident_key;
    }
  }
  return nullptr;
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
  std::map<std::string, TrackedFinding> next;
  for (Finding& finding : current) {
    const std::string key = finding.Key();
    if (const std::string* seen = IncidentOf(finding, key, next)) {
      // Two views of one incident this tick (e.g. both cable ends): keep the more severe.
      TrackedFinding& tracked = next.at(*seen);
      if (finding.severity > tracked.finding.severity) {
        Continue(tracked, std::move(finding));
      }
      continue;
    }
    TrackedFinding tracked;
    std::string incident_key = key;
    if (const std::string* active = IncidentOf(finding, key, active_)) {
      incident_key = *active;
      auto it = active_.find(incident_key);
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
    next.emplace(std::move(incident_key), std::move(tracked));
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
