#include "daemon/agent/collector_runner.h"

#include <string>

#include "daemon/agent/agent_families.h"
#include "daemon/common/logging.h"

namespace fabricmon::agent {

CollectorRunner::CollectorRunner(std::unique_ptr<collectors::Collector> collector, Clock& clock)
    : collector_(std::move(collector)), clock_(clock) {
  const std::string name(collector_->name());
  const collectors::Labels labels = {{"collector", name}};
  success_ = collectors::SeriesFromSpec(kCollectorSuccessFamily, name, labels);
  duration_ = collectors::SeriesFromSpec(kCollectorDurationFamily, name, labels);
  present_ = collectors::SeriesFromSpec(kCollectorPresentFamily, name, labels);
  turned_off_ = collectors::SeriesFromSpec(kCollectorTurnedOffFamily, name,
                                           {{"collector", name}, {"reason", "capture"}});
}

bool CollectorRunner::MaybeDiscover(v1::Inventory& inventory) {
  const int64_t now = clock_.MonotonicNanos();
  const bool due = !discovered_once_ || collector_->WantsRediscovery() ||
                   now - last_discovery_ns_ >= collector_->rediscover_interval_ms() * 1000000;
  if (!due) {
    return false;
  }
  (void)Discover(inventory);  // the outcome is kept in discovery_status_ and exported
  return true;
}

absl::Status CollectorRunner::Discover(v1::Inventory& inventory) {
  discovery_status_ = collector_->Discover(inventory);
  last_discovery_ns_ = clock_.MonotonicNanos();
  discovered_once_ = true;
  if (collectors::IsTurnedOff(discovery_status_)) {
    FABRICMON_LOG(Debug) << collector_->name() << ": " << discovery_status_.message();
  } else if (absl::IsNotFound(discovery_status_)) {
    FABRICMON_LOG(Debug) << collector_->name() << ": " << discovery_status_.message();
  } else if (!discovery_status_.ok()) {
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << collector_->name() << ": discovery failed: " << discovery_status_;
  }
  return discovery_status_;
}

absl::Status CollectorRunner::Collect(collectors::SampleSink& sink) {
  if (collectors::IsTurnedOff(discovery_status_)) {
    // Not a failure and no hardware question: success/present would raise alerts for a
    // collector that was never meant to run.
    last_duration_ns_ = 0;
    sink.Add(turned_off_, 1);
    return discovery_status_;
  }
  absl::Status status = discovery_status_;
  const int64_t start = clock_.MonotonicNanos();
  if (status.ok()) {
    status = collector_->Collect(sink);
    if (!status.ok() && !absl::IsNotFound(status)) {
      FABRICMON_LOG_EVERY_MINUTE(Warning) << collector_->name() << ": collect failed: " << status;
    }
  }
  last_duration_ns_ = clock_.MonotonicNanos() - start;
  sink.Add(success_, status.ok() ? 1 : 0);
  sink.Add(duration_, static_cast<uint64_t>(last_duration_ns_));
  sink.Add(present_, absl::IsNotFound(discovery_status_) ? 0 : 1);
  return status;
}

}  // namespace fabricmon::agent
