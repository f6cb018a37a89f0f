#pragma once

// The families of the rdma_qp collector. Pure data, no I/O.

#include "collectors/core/family_spec.h"

namespace fabricmon::collectors::rdma_qp {

inline constexpr FamilySpec kRdmaQpsFamily =
    GaugeFamily("fabricmon_rdma_qps",
                "RDMA queue pairs of a device by type (rc, uc, ud, ...) and state "
                "(reset, init, rtr, rts, sqd, sqe, err); kernel QPs included.",
                Unit::kNone);
inline constexpr FamilySpec kRdmaProcessQpsFamily =
    GaugeFamily("fabricmon_rdma_process_qps",
                "RDMA queue pairs owned by a user process, by device and type.", Unit::kNone);
inline constexpr FamilySpec kRdmaQpProcessesDroppedFamily =
    GaugeFamily("fabricmon_rdma_qp_processes_dropped",
                "Processes owning RDMA QPs left out of fabricmon_rdma_process_qps this "
                "cycle (rdma_qp.max_processes).",
                Unit::kNone);

// The kernel lists only the QPs of processes visible in the caller's PID namespace: an agent in a
// container without the host's PID namespace (Kubernetes without hostPID) sees no other process's
// QPs, so "this GPU process owns no QP" proves nothing there.
inline constexpr FamilySpec kRdmaQpSeesAllProcessesFamily =
    GaugeFamily("fabricmon_rdma_qp_sees_all_processes",
                "1 when the agent runs in the host's PID namespace, so the QP listing includes "
                "every process's QPs; 0 when other processes' QPs are hidden from it.",
                Unit::kNone);

inline constexpr FamilySpec kRdmaQpFamilies[] = {
    kRdmaQpsFamily,
    kRdmaProcessQpsFamily,
    kRdmaQpProcessesDroppedFamily,
    kRdmaQpSeesAllProcessesFamily,
};

}  // namespace fabricmon::collectors::rdma_qp
