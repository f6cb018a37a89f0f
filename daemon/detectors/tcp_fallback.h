#pragma once

// TCP fallback: a node whose inter-node traffic goes through the kernel (netdev bytes on
// Ethernet or IPoIB) while its RDMA bytes stay near zero — during GPU activity, or while the
// other nodes move RDMA traffic. That is what a job that silently fell back from NCCL's IB/RoCE
// transport to sockets looks like from the counters (collectors/netdev/README.md, "The RDMA→TCP
// fallback signature").
//
// RDMA bytes: RoCE vport RDMA bytes where the ethtool collector has them, else the HCA port data
// counters (on RoCE those count RDMA only; on IB they include IPoIB, which is subtracted).
// Kernel bytes: netdev rx+tx of Ethernet, RDMA-Ethernet and IPoIB netdevs (not loopback/virtual).
//
// The QP inventory weighs in where the node has both an NVML and an rdma_qp collector: GPU
// compute processes (NVML, from the node's inventory) that own no RDMA queue pairs (rdma_qp) are
// a job that never set up its RDMA transport — enough, with the traffic shape, to report the
// fallback on their own; GPU processes that all own QPs mean the kernel traffic is most likely
// something else (storage, data loading), so the finding is only a warning then.

#include <map>
#include <string>
#include <vector>

#include "daemon/detectors/detector.h"

namespace fabricmon::detectors {

struct TcpFallbackOptions {
  double min_kernel_bytes_per_second = 100e6;  // sustained kernel traffic worth explaining
  double rdma_ratio = 0.05;                    // RDMA below this fraction of kernel bytes
  double gpu_busy = 0.5;                       // GPU utilization that means "training"
  uint32_t consecutive_ticks = 2;
};

// What a node's QP inventory says of its GPU compute processes.
struct GpuProcessQps {
  // Both lists are meaningful: the node reported GPU processes and its rdma_qp collector's last
  // cycle listed every QP-owning process (none left out by rdma_qp.max_processes).
  bool known = false;
  std::vector<uint32_t> without_qps;  // GPU processes owning no RDMA QP
  std::vector<uint32_t> with_qps;
};
GpuProcessQps InspectGpuProcessQps(const aggregator::NodeState& node);

class TcpFallbackDetector final : public Detector {
 public:
  explicit TcpFallbackDetector(TcpFallbackOptions options) : options_(options) {}
  absl::string_view name() const override { return "tcp_fallback"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

 private:
  const TcpFallbackOptions options_;
  std::map<std::string, uint32_t> streak_;
};

}  // namespace fabricmon::detectors
