#pragma once

// TCP fallback: a node whose inter-node traffic goes through the kernel (netdev bytes on
// Ethernet or IPoIB), heavy and two-way, while its RDMA bytes stay near zero. That is what a job
// that silently fell back from NCCL's IB/RoCE transport to sockets looks like from the counters
// (collectors/netdev/README.md, "The RDMA→TCP fallback signature").
//
// Preconditions, so that it pages only for a fallback: the node has RDMA hardware of its own (a
// storage, login or CPU node has nothing to fall back from), and either its GPUs are busy, or it
// moved RDMA traffic itself within rdma_history (a job restarted on sockets), or a GPU process
// owns no QP. One-way kernel traffic (a checkpoint write, a dataset read) is not a collective.
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
  // RDMA traffic of its own (≥ min_kernel_bytes_per_second) this recently qualifies a node
  // without GPU work (a job restarted on sockets). 0: only GPU work qualifies.
  int64_t rdma_history_nanos = int64_t{600} * 1000000000;
  double min_symmetry = 0.25;      // min(rx, tx) / max(rx, tx) of kernel bytes
  uint32_t consecutive_ticks = 2;  // samples to raise (and to clear)
};

// What a node's QP inventory says of its GPU compute processes.
struct GpuProcessQps {
  // Both lists are meaningful: the node reported GPU processes and its rdma_qp collector's last
  // cycle listed every QP-owning process (none left out by rdma_qp.max_processes, and the agent
  // sees every PID namespace's QPs: fabricmon_rdma_qp_sees_all_processes).
  bool known = false;
  std::vector<uint32_t> without_qps;  // GPU processes owning no RDMA QP
  std::vector<uint32_t> with_qps;
};
GpuProcessQps InspectGpuProcessQps(const store::NodeState& node);

class TcpFallbackDetector final : public Detector {
 public:
  explicit TcpFallbackDetector(TcpFallbackOptions options) : options_(options) {}
  absl::string_view name() const override { return "tcp_fallback"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

 private:
  struct NodeState {
    explicit NodeState(Debounce initial) : debounce(initial) {}
    Debounce debounce;
    int64_t last_rdma_busy = 0;  // last time its own RDMA rate was heavy
    GpuProcessQps qps;           // as of the last sample the condition held
    std::string summary;         // of the raised finding ("" while not raised)
    Finding last;
  };
  const TcpFallbackOptions options_;
  std::map<std::string, NodeState> state_;
};

}  // namespace fabricmon::detectors
