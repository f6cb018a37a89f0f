#pragma once

// Gives findings a life cycle. Each tick the detectors report what holds now; a finding seen for
// the first time gets an onset, one seen again is updated, one no longer reported is cleared and
// kept in a bounded history ("recent"). A finding is an incident: it keeps its id and the labels
// it was raised with (subject, peer) until it clears, and a cable is one incident whichever end
// reports it, with or without its peer. Detectors own their hysteresis (a flapping link stays
// reported through its quiet period), so the tracker clears as soon as a finding is absent.
//
// Thread-safe: the detector thread updates, scrapes and RPCs read.

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "daemon/detectors/finding.h"

namespace fabricmon::detectors {

class FindingTracker {
 public:
  explicit FindingTracker(size_t history_limit = 1000) : history_limit_(history_limit) {}

  // Replaces the active set with `current` (as of `now`).
  void Update(std::vector<Finding> current, int64_t now_unix_nanos) ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<TrackedFinding> Active() const ABSL_LOCKS_EXCLUDED(mu_);
  // Each active finding, in Active()'s order, without copying them (the exporters build their
  // families from every active finding each tick), under the tracker's lock: `visit` must not
  // call back into the tracker.
  void ForEachActive(absl::FunctionRef<void(const TrackedFinding&)> visit) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cleared findings, newest first.
  std::vector<TrackedFinding> Recent() const ABSL_LOCKS_EXCLUDED(mu_);
  // Incidents raised since start, by kind and the severity they were raised with (for
  // fabricmon_findings_total): an incident that escalates or changes its evidence is not counted
  // again.
  std::map<std::pair<std::string, Severity>, uint64_t> RaisedTotals() const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t history_limit_;
  mutable absl::Mutex mu_;
  std::map<std::string, TrackedFinding> active_ ABSL_GUARDED_BY(mu_);  // by key
  std::deque<TrackedFinding> recent_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, Severity>, uint64_t> raised_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace fabricmon::detectors
