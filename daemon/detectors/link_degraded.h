#pragma once

// Link degraded: physical-layer and link-integrity errors rising on a port — symbol errors,
// receive errors, local link integrity and buffer overrun errors, self-healed link error
// recoveries (IB); PCS symbol and CRC errors (RoCE). The precursor of flaps: the link still works
// but retransmits and retrains.

#include <deque>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/series_key.h"

namespace fabricmon::detectors {

struct LinkDegradedOptions {
  int64_t window_nanos = int64_t{300} * 1000000000;
  uint64_t errors_in_window = 10;  // error events within the window that make a link degraded
};

class LinkDegradedDetector final : public Detector {
 public:
  explicit LinkDegradedDetector(LinkDegradedOptions options) : options_(options) {}
  absl::string_view name() const override { return "link_degraded"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

 private:
  struct PortErrors {
    std::deque<std::pair<int64_t, uint64_t>> events;  // (time, errors)
    uint64_t recoveries = 0;                          // self-healed recoveries in the window
    std::map<std::string, Evidence> evidence;         // by family
  };
  const LinkDegradedOptions options_;
  SeriesStates<int64_t> cursors_;
  // Hashed: looked up per error event; the findings are emitted in endpoint order.
  absl::flat_hash_map<Endpoint, PortErrors> ports_;
};

}  // namespace fabricmon::detectors
