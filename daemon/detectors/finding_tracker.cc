#include "daemon/detectors/finding_tracker.h"

#include "absl/strings/str_cat.h"

namespace fabricmon::detectors {

void FindingTracker::Update(std::vector<Finding> current, int64_t now) {
  absl::MutexLock lock(&mu_);
  std::map<std::string, TrackedFinding> next;
  for (Finding& finding : current) {
    const std::string key = finding.Key();
    if (next.count(key) > 0) {
      // Two detectors' views of one thing (e.g. both cable ends): keep the more severe.
      if (finding.severity > next[key].finding.severity) {
        next[key].finding = std::move(finding);
      }
      continue;
    }
    auto it = active_.find(key);
    TrackedFinding tracked;
    if (it != active_.end()) {
      tracked = std::move(it->second);
      active_.erase(it);
      if (finding.severity > tracked.finding.severity) {
        ++raised_[{finding.kind, finding.severity}];  // an escalation counts as raised
      }
    } else {
      tracked.id = absl::StrCat("f", next_id_++);
      tracked.onset_unix_nanos = now;
      ++raised_[{finding.kind, finding.severity}];
    }
    tracked.finding = std::move(finding);
    tracked.updated_unix_nanos = now;
    next.emplace(key, std::move(tracked));
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

std::vector<TrackedFinding> FindingTracker::Recent() const {
  absl::MutexLock lock(&mu_);
  return std::vector<TrackedFinding>(recent_.begin(), recent_.end());
}

std::map<std::pair<std::string, Severity>, uint64_t> FindingTracker::RaisedTotals() const {
  absl::MutexLock lock(&mu_);
  return raised_;
}

}  // namespace fabricmon::detectors
