#pragma once

// RoCE lossless-Ethernet health:
//  - pause_storm: a port paused (or pausing) for nearly all of several consecutive intervals, or
//    the NIC's own pause-storm events (tx_pause_storm_warning/error: past the minor/critical
//    watermark; at critical the NIC stops sending pause and drops; collectors/ethtool/README.md,
//    "Pause storms").
//  - ecn_misconfigured: rp_cnp_ignored rising past a rate (CNPs arrive but the reaction point is
//    disabled), or heavy PFC while no packet is ECN-marked and no CNP is sent or handled (ECN
//    thresholds not engaging: PFC does all the work; collectors/ib_sysfs/README.md, "ECN and CNP
//    counters"), for several consecutive samples; cleared after as many without.

#include <map>

#include "absl/container/flat_hash_map.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/series_key.h"

namespace fabricmon::detectors {

struct PauseStormOptions {
  double fraction = 0.8;
  uint32_t consecutive_intervals = 3;
};

class PauseStormDetector final : public Detector {
 public:
  explicit PauseStormDetector(PauseStormOptions options) : options_(options) {}
  absl::string_view name() const override { return "pause_storm"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

 private:
  struct Streak {
    uint32_t intervals = 0;
    double fraction = 0;
    Evidence evidence;
  };
  const PauseStormOptions options_;
  SeriesStates<int64_t> cursors_;
  SeriesStates<Streak> streaks_;
  std::map<Endpoint, int64_t> storm_events_;  // last time the NIC reported a storm event
  std::map<Endpoint, Evidence> storm_evidence_;
};

struct EcnOptions {
  double pause_fraction = 0.05;         // "heavy PFC"
  double cnp_ignored_per_second = 1.0;  // CNPs ignored per second on a node (0: any)
  uint32_t ticks = 3;                   // samples the condition holds (or not) to raise (clear)
};

class EcnMisconfigDetector final : public Detector {
 public:
  explicit EcnMisconfigDetector(EcnOptions options) : options_(options) {}
  absl::string_view name() const override { return "ecn_misconfigured"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

 private:
  struct NodeState {
    Debounce debounce;
    std::string summary;  // as of the last sample the condition held
    std::vector<Evidence> evidence;
  };
  const EcnOptions options_;
  std::map<std::string, NodeState> nodes_;
};

}  // namespace fabricmon::detectors
