#pragma once

// NVLink degraded / down: CRC, replay and recovery errors rising on a link (degraded), and a GPU
// with fewer active links than its own baseline (the most it was seen with) — a link that went
// inactive (down).

#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/series_key.h"

namespace fabricmon::detectors {

struct NvlinkOptions {
  double errors_per_second = 1.0;  // CRC/replay/recovery error rate on one link
};

class NvlinkDetector final : public Detector {
 public:
  explicit NvlinkDetector(NvlinkOptions options) : options_(options) {}
  absl::string_view name() const override { return "nvlink"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

 private:
  const NvlinkOptions options_;
  // Links seen active at least once; the baseline of a GPU is how many of its links that is.
  // Never-cabled or disabled links are therefore not "down".
  std::set<Endpoint> ever_active_;
  SeriesStates<int64_t> cursors_;
};

}  // namespace fabricmon::detectors
