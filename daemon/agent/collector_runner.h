#pragma once

// Runs one collector the way the agent does: discovery on its own interval (or early when the
// collector asks), collection timed, and the outcome recorded as the collector health series
// fabricmon_collector_success / _duration_seconds / _discovered (node_exporter's
// scrape_collector_* meta-metrics). A collector the agent turned off by rule (IsTurnedOff) gets
// fabricmon_collector_turned_off{reason} = 1 instead of those three.

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "collectors/core/collector.h"
#include "daemon/common/clock.h"

namespace fabricmon::agent {

class CollectorRunner {
 public:
  // Keeps a reference to `clock`, which must outlive the runner.
  CollectorRunner(std::unique_ptr<collectors::Collector> collector, Clock& clock);

  // Runs Discover() if it is due (never run, interval elapsed, or the collector asked), adding
  // what it finds to `inventory`. Returns true if discovery ran.
  bool MaybeDiscover(v1::Inventory& inventory);
  // Forces Discover() now.
  absl::Status Discover(v1::Inventory& inventory);

  // Runs Collect() if the hardware was found; then appends the health series. Returns the
  // collection status (NotFound when the hardware is absent).
  absl::Status Collect(collectors::SampleSink& sink);

  collectors::Collector& collector() { return *collector_; }
  const absl::Status& discovery_status() const { return discovery_status_; }
  int64_t last_duration_ns() const { return last_duration_ns_; }

 private:
  std::unique_ptr<collectors::Collector> collector_;
  Clock& clock_;
  absl::Status discovery_status_ = absl::UnavailableError("not discovered yet");
  int64_t last_discovery_ns_ = 0;
  bool discovered_once_ = false;
  int64_t last_duration_ns_ = 0;
  collectors::SeriesDesc success_;
  collectors::SeriesDesc duration_;
  collectors::SeriesDesc present_;
  collectors::SeriesDesc turned_off_;
};

}  // namespace fabricmon::agent
