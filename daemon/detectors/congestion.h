#pragma once

// Congestion and how it spreads.
//
// Per port:
//   IB: a port whose XmitWait grows has data to send but no credits from its peer: back-pressure.
//   Tick length is device-specific (collectors/ib_sysfs/README.md, "XmitWait ticks are
//   device-specific"), so we use a unit-free ratio over the last interval: wait = ΔXmitWait /
//   (ΔXmitWait + ΔXmitData words). A blocked port tends to 1, a busy healthy one to 0.
//   RoCE: rate(pause duration) is the fraction of time paused. direction=rx: the peer paused us
//   (we wait on it); direction=tx: we paused the peer (we are the slow receiver).
//
// Spreading (with topology): a waiting port P points at its peer's device; if that device (a
// switch) has waiting ports of its own, P's wait is caused by theirs. Following these edges ends
// at a root: a waiting port whose peer is not itself waiting — the port toward the slow receiver
// or incast target. The ports upstream of a root are its victims; the longest chain is the depth
// in hops. A tree with depth ≥ 1 is one congestion_spreading finding at its root; waiting ports
// outside any tree are single congestion findings.
// Without topology (RoCE): nodes pausing their peers (tx) are sources, nodes being paused (rx) are
// victims; one source with several victims is reported as spreading, depth unknown (0).

#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/series_key.h"

namespace fabricmon::detectors {

struct CongestionOptions {
  double wait_fraction = 0.05;   // IB XmitWait ratio that counts as congested
  double pause_fraction = 0.05;  // RoCE fraction of time paused that counts as congested
  uint32_t min_victims_without_topology = 2;
  // A congested port clears after this many of its samples in a row below half the threshold.
  uint32_t clear_samples = 3;
  // A plain congestion finding starts after this many samples of its port in a row.
  uint32_t raise_samples = 2;
};

class CongestionDetector final : public Detector {
 public:
  explicit CongestionDetector(CongestionOptions options) : options_(options) {}
  absl::string_view name() const override { return "congestion"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

  // A port that waits on its peer (IB XmitWait, RoCE rx pause) or pauses it (RoCE tx pause).
  struct Congested {
    double fraction = 0;
    bool pauses_peer = false;  // RoCE tx pause: this port's node is a slow receiver
    std::vector<Evidence> evidence;
  };
  // Builds findings from the congested ports of one tick. Exposed for tests.
  static void BuildFindings(const std::map<Endpoint, Congested>& congested,
                            const CableGraph& topology, const CongestionOptions& options,
                            std::vector<Finding>& out);

 private:
  // A congested port (see Evaluate: hysteresis).
  struct PortState {
    Congested last;       // the last reading at or above half the threshold
    uint32_t below = 0;   // samples in a row below half the threshold
    uint32_t unread = 0;  // evaluations without a reading (counts towards clearing)
    int64_t last_sample = 0;
  };
  // A finding BuildFindings produced: reported yet (an incident), and for how many samples.
  struct Reported {
    bool active = false;
    uint32_t samples = 0;
    int64_t onset = 0;  // the port's sample when BuildFindings first produced it
    int64_t last_sample = 0;
  };
  // A port read this interval: how much it waited or was paused (0 included), and when.
  struct Measured {
    const Port* port = nullptr;  // null: not measured this tick
    Congested reading;
    int64_t sampled = 0;   // the newest reading's timestamp
    int64_t from = 0;      // the start of the interval it covers
    double threshold = 0;  // IB wait_fraction, RoCE pause_fraction
  };
  // The port's entry in measured_, marked measured.
  Measured& MeasuredAt(const Port& port);
  // The entry of a measured port by its canonical endpoint (null: not measured this tick).
  const Measured* FindMeasured(const FabricView& view, const Endpoint& endpoint) const;

  const CongestionOptions options_;
  // By Port::index, kept from tick to tick (only the entries measured are reset): every port
  // series of every node looks its port up here each tick, and hashing and copying its endpoint
  // into a map was a third of the detector's time.
  std::vector<Measured> measured_;
  std::vector<uint32_t> measured_indexes_;  // this tick's, in the order first measured
  size_t data_words_hint_ = 0;              // XmitData series read by the last tick
  std::map<Endpoint, PortState> ports_;
  std::map<std::pair<std::string, Endpoint>, Reported> reported_;  // by (kind, subject)
};

}  // namespace fabricmon::detectors
