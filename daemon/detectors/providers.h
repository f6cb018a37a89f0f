#pragma once

// What the detection engine offers its readers (the Diagnostics service, replay): findings and
// the cables it works with. Interfaces rather than the engine itself so that a reader can be
// tested with a fixed answer; the engine implements both.

#include <string>
#include <vector>

#include "fabricmon/v1/diagnostics.pb.h"

namespace fabricmon::detectors {

// Thread-safe.
class FindingsProvider {
 public:
  virtual ~FindingsProvider() = default;
  // Active findings, plus recently cleared ones if `include_cleared`; filtered by kind if set.
  virtual std::vector<v1::Finding> Findings(bool include_cleared,
                                            const std::string& kind) const = 0;
  virtual v1::DiagnoseResponse Diagnose(const std::vector<std::string>& nodes) const = 0;
  // Active findings whose subject is on `node`.
  virtual std::vector<v1::Finding> FindingsOfNode(const std::string& node) const = 0;
};

// The cables the detectors work with. Thread-safe.
class TopologyProvider {
 public:
  virtual ~TopologyProvider() = default;
  virtual v1::GetTopologyResponse GetTopology() const = 0;
};

}  // namespace fabricmon::detectors
