#pragma once

// What the detection engine offers its readers (the Diagnostics service, replay): findings, the
// cables it works with and each node's traffic; and what the detectors read from their owner: the
// registered jobs. Interfaces rather than the classes themselves so that either side can be tested
// with a fixed answer, and so that the detectors never depend on the aggregator.

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

// Each node's current traffic (RDMA, kernel, wait/pause, NVLink errors, GPU), for Diagnose's
// side-by-side view of a job. Implemented by the detectors (node_traffic.h). Thread-safe.
class TrafficProvider {
 public:
  virtual ~TrafficProvider() = default;
  // One entry per node of `nodes` the store knows, in the order given.
  virtual std::vector<v1::NodeTraffic> Traffic(const std::vector<std::string>& nodes) const = 0;
};

// The jobs registered with the aggregator (name and nodes), for detectors that compare a job's
// nodes with each other (straggler). Implemented by the aggregator's JobRegistry. Thread-safe.
class JobsProvider {
 public:
  virtual ~JobsProvider() = default;
  virtual std::vector<v1::Job> Jobs() const = 0;
};

}  // namespace fabricmon::detectors
