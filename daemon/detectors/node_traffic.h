#pragma once

// Each node's traffic as a handful of numbers a person (and the straggler detector) can compare
// across a job's nodes: RDMA bytes/s, kernel-network bytes/s, the worst port's wait (IB) and
// pause (RoCE) fractions, NVLink errors/s and the busiest GPU's utilization. Read from the
// series store's two newest samples of each series, as the other detectors read them.
//
// RDMA bytes: RoCE vport RDMA bytes where the ethtool collector has them, else the HCA port data
// counters in both directions (on IB these include IPoIB, which is subtracted). Ports the fabric
// collector swept (switch ports, other hosts' CAs) are not the node's own traffic.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/common/clock.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/providers.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/diagnostics.pb.h"

namespace fabricmon::detectors {

struct NodeTrafficReading {
  bool has_rdma = false;                // the node reports RDMA port counters of its own
  double rdma = 0;                      // bytes/s, in + out
  double kernel = -1;                   // bytes/s on Ethernet/IPoIB netdevs; -1: no netdev series
  double wait_fraction = -1;            // worst IB port; -1: none measured
  double pause_fraction = -1;           // worst RoCE netdev and direction; -1: none measured
  double nvlink_errors = -1;            // errors/s, all links; -1: no NVLink series
  double gpu = -1;                      // busiest GPU, 0..1; -1: no GPU series
  int64_t sampled = 0;                  // newest RDMA sample behind `rdma` (debounce key)
  std::vector<Evidence> rdma_evidence;  // the RDMA series read, with their rates
};

// A port series the fabric collector swept (a switch port, another host's CA port): not the
// reporting node's own traffic.
bool SweptFromFabric(const store::Series& series);

// Each node's netdevs by kind (the netdev_info series' `kind` label), which tells a node's own
// kernel traffic from traffic that would count it twice. Read once per tick.
class NetdevKinds {
 public:
  // From the netdev_info series of the nodes `wanted` accepts (every node when it is empty).
  explicit NetdevKinds(const FabricView& view,
                       const std::function<bool(const std::string&)>& wanted = {});
  // The kind of the netdev a netdev byte series of `node` counts, when its traffic is the node's
  // own (Ethernet, RoCE, IPoIB); nullptr for loopback and virtual netdevs (container veths and
  // bridges double-count host traffic) and for a netdev of no known kind.
  const std::string* HostKind(const std::string& node, const store::Series& series);

 private:
  ByNode<std::map<std::string, std::string, std::less<>>> kinds_;  // node → netdev → kind
};

// Readings of the nodes in `only` (every node when empty).
std::map<std::string, NodeTrafficReading> ReadNodeTraffic(const FabricView& view,
                                                          const std::set<std::string>& only);

v1::NodeTraffic ToProto(const std::string& node, const NodeTrafficReading& reading);

// The TrafficProvider of the Diagnostics service, over the store as it is when asked.
class NodeTrafficReader final : public TrafficProvider {
 public:
  // Keeps references; both must outlive the reader.
  NodeTrafficReader(const store::SeriesStore& store, const Clock& clock)
      : store_(store), clock_(clock) {}
  std::vector<v1::NodeTraffic> Traffic(const std::vector<std::string>& nodes) const override;

 private:
  const store::SeriesStore& store_;
  const Clock& clock_;
};

}  // namespace fabricmon::detectors
