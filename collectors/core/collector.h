#pragma once

// The collector contract. A collector turns one source of truth (a sysfs tree, the ethtool ioctl,
// NVML, a MAD port) into samples. It knows nothing of gRPC or Prometheus; the agent schedules it,
// times it and records its success.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collectors/core/sample.h"
#include "fabricmon/v1/inventory.pb.h"

namespace fabricmon::collectors {

// What `fabricmon-agent --doctor` prints for one collector: what it can read and, where it cannot,
// why and how to fix it. Built by the collector itself (Collector::Diagnose), from the outcome of
// its own Discover() and Collect(), so the doctor never re-implements a collector's checks.
struct Diagnosis {
  // True when the collector reads everything it was configured to read.
  bool works = false;
  // What it reads ("2 RDMA devices, 4 ports"); may be set when it does not fully work.
  std::string reads;
  // Why it cannot read (part of) its source; empty when `works`.
  std::string problem;
  // What an operator does about `problem` (a config option, a permission, a package).
  std::string fix;
};

// Everything a collector is told when asked to explain itself.
struct DiagnosisInput {
  absl::Status discovery;      // what Discover() returned
  absl::Status collection;     // what Collect() returned (not run: discovery's status)
  const v1::Inventory& found;  // what Discover() added to the inventory
  size_t samples = 0;          // samples Collect() emitted, health series excluded
};

// The generic explanation from statuses alone: works when both are OK; NotFound reads as
// absent hardware (fix: install it or disable the collector). Collectors that know their failure
// modes better override Collector::Diagnose and may start from this.
Diagnosis DefaultDiagnosis(absl::string_view collector, const DiagnosisInput& input);

// A status saying that the agent turned a collector off by rule (not by configuration), carrying
// the reason. The stand-in CollectorRegistry builds for such a collector returns it from
// Discover(); the agent reports it as `fabricmon_collector_turned_off` and in the hello.
absl::Status TurnedOffStatus(absl::string_view reason);
bool IsTurnedOff(const absl::Status& status);

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

  // Explains, after one Discover() and one Collect(), what the collector read and, where it could
  // not, why and how to fix it (`fabricmon-agent --doctor`). Must not touch the source again.
  virtual Diagnosis Diagnose(const DiagnosisInput& input) const {
    return DefaultDiagnosis(name(), input);
  }

  // Suggested schedule, from the collector's config.
  virtual int64_t interval_ms() const = 0;
  virtual int64_t rediscover_interval_ms() const = 0;
};

}  // namespace fabricmon::collectors
