#pragma once

// Link flapping: N link-down events within a window. Events are counted edge-exact from counters
// (IB LinkDowned, RoCE link_down_events_phy, netdev carrier_down_count, NVLink5 failed
// recoveries), so a flap shorter than the sampling interval is still seen; observed state
// transitions (IB port state leaving ACTIVE) are counted too, for where no counter saw them (a
// saturated 8-bit LinkDowned at 255 sees nothing).
//
// Several series see the same flaps of one port: its counters, its port state, and the same port
// as other nodes report it (a CA port swept from the fabric; a switch port by every sweeper). Each
// series is an independent witness: the port's count in the window is the largest any witness
// saw, never their sum, so no flap counts twice and a counter that never moves (a RoCE port's IB
// LinkDowned) hides nothing.
//
// A flapping link stays reported until it has been quiet for the quiet period; it is one finding
// per cable (host end first) whichever end saw it, with the peer the topology named while the
// cable was up (a down cable drops out of rediscovery).

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/series_key.h"

namespace fabricmon::detectors {

struct LinkFlapOptions {
  uint32_t transitions = 2;  // events within the window that make a link flapping
  int64_t window_nanos = int64_t{300} * 1000000000;
  int64_t quiet_nanos = int64_t{600} * 1000000000;
};

class LinkFlapDetector final : public Detector {
 public:
  explicit LinkFlapDetector(LinkFlapOptions options) : options_(options) {}
  absl::string_view name() const override { return "link_flap"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

 private:
  struct Witness {
    std::deque<int64_t> events;  // timestamps of link-down events within the window
    uint64_t total = 0;
  };
  struct LinkEvents {
    const Endpoint* endpoint = nullptr;  // its key in links_
    bool listed = false;                 // in recent_: it saw an event since it was last quiet
    absl::flat_hash_map<SeriesKey, Witness> witnesses;
    int64_t last_event = 0;
    bool flapping = false;
    bool counter_saturated = false;
    std::vector<Evidence> evidence;  // latest series that saw an event
    std::optional<Endpoint> peer;    // the cable's other end, as last resolved
  };
  void Record(LinkEvents& link, const SeriesKey& witness, int64_t timestamp, uint64_t count,
              Evidence evidence);
  // The port's entry in links_, found by its index after the first lookup under a topology.
  LinkEvents& LinkOf(const FabricView& view, const Port& port);

  const LinkFlapOptions options_;
  SeriesStates<int64_t> cursors_;
  std::map<Endpoint, LinkEvents> links_;   // entries are never erased: their addresses stay
  std::vector<LinkEvents*> link_by_port_;  // by Port::index under port_epoch_
  // The links that saw an event and have not been quiet since (events in the window, or still
  // flapping): the only ones a tick has to look at. Every port of the fabric has an entry in
  // links_, and walking them all each tick was most of what this detector cost.
  std::vector<LinkEvents*> recent_;
  uint32_t port_epoch_ = 0;
};

}  // namespace fabricmon::detectors
