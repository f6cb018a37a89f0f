#pragma once

// The collector contract. A collector turns one source of truth (a sysfs tree, the ethtool ioctl,
// NVML, a MAD port) into samples. It knows nothing of gRPC or Prometheus; the agent schedules it,
// times it and records its success.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collectors/core/sample.h"
#include "fabricmon/v1/inventory.pb.h"

namespace fabricmon::collectors {

class Collector {
 public:
  virtual ~Collector() = default;

  // Stable name ("ib_sysfs"); used in config, labels and logs.
  virtual absl::string_view name() const = 0;

  // Scans for hardware and prepares what Collect() reads (opens files, builds series). Adds what
  // it found to `inventory`. Called at start and then every rediscover interval, so devices that
  // appear or vanish are picked up without a restart.
  // Returns NotFound when the hardware is absent (not an error: logged at debug, collector idle
  // until the next discovery); other codes are real failures.
  virtual absl::Status Discover(v1::Inventory& inventory) = 0;

  // Reads current values into `sink`. A failure of one file or device must not hide the others:
  // such failures are counted in the collector's own error series and Collect still returns OK.
  // A non-OK status means nothing useful was collected this cycle.
  virtual absl::Status Collect(SampleSink& sink) = 0;

  // True when Collect() saw a device or file vanish: the agent then re-runs Discover() early
  // instead of waiting for the rediscover interval.
  virtual bool WantsRediscovery() const { return false; }

  // Suggested schedule, from the collector's config.
  virtual int64_t interval_ms() const = 0;
  virtual int64_t rediscover_interval_ms() const = 0;
};

}  // namespace fabricmon::collectors
