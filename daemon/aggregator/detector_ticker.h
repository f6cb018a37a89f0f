#pragma once

// Ticks the detection engine on its own thread at the engine's configured cadence. The engine has
// no thread of its own (tests and replay tick it themselves); in the aggregator this thread is
// what the watchdog watches through DetectionEngine::last_tick_monotonic_nanos().

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/detectors/engine.h"

namespace fabricmon::aggregator {

class DetectorTicker {
 public:
  // Keeps a reference: `engine` must outlive the ticker.
  explicit DetectorTicker(detectors::DetectionEngine& engine) : engine_(engine) {}
  ~DetectorTicker() { Stop(); }
  DetectorTicker(const DetectorTicker&) = delete;
  DetectorTicker& operator=(const DetectorTicker&) = delete;

  // Ticks once now, then every engine.tick_nanos() until Stop(). Call at most once.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once the thread has finished its tick and exited. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  detectors::DetectionEngine& engine_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fabricmon::aggregator
