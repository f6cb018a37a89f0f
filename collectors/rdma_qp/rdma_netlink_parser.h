#pragma once

// Parser for RDMA netlink (NETLINK_RDMA, client RDMA_NL_NLDEV) dump replies: the device list
// (RDMA_NLDEV_CMD_GET) and the queue-pair resource table (RDMA_NLDEV_CMD_RES_QP_GET), as the
// kernel builds them in drivers/infiniband/core/nldev.c (fill_nldev_handle, fill_res_qp_entry,
// fill_res_name_pid) and as rdma-core's `rdma resource show qp` reads them.
//
// One recv() buffer holds a sequence of netlink messages (struct nlmsghdr, NLMSG_ALIGN-padded),
// each carrying attributes (struct nlattr, NLA_ALIGN-padded). A QP message looks like:
//
//   nlmsghdr { type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_QP_GET) }
//     DEV_INDEX (u32)  DEV_NAME (string)
//     RES_QP (nested)
//       RES_QP_ENTRY (nested)  PORT_INDEX? LQPN  ... RES_TYPE (u8) RES_STATE (u8)
//                              RES_PID (u32, user QPs) | RES_KERN_NAME (string, kernel QPs)
//       RES_QP_ENTRY ...
//
// Nested attributes may carry NLA_F_NESTED in nla_type; the parser masks with NLA_TYPE_MASK.
// Unknown attributes are skipped, so newer kernels that add attributes still parse.
//
// The bytes come from the kernel, but the parser trusts nothing: every length is checked against
// its container, and malformed input is an InvalidArgument naming what was wrong and at which
// byte offset of the buffer. Pure function of its input; no I/O. Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricmon::collectors::rdma_qp {

// One queue pair of one RDMA device (an RDMA_NLDEV_ATTR_RES_QP_ENTRY).
struct QpEntry {
  uint32_t device_index = 0;  // RDMA_NLDEV_ATTR_DEV_INDEX of the enclosing message
  std::string device_name;    // RDMA_NLDEV_ATTR_DEV_NAME; "" when the message had none
  uint32_t port = 0;          // RDMA_NLDEV_ATTR_PORT_INDEX; 0 before the QP is bound to a port
  uint32_t lqpn = 0;          // local QP number
  uint8_t type = 0;           // enum ib_qp_type (RDMA_NLDEV_ATTR_RES_TYPE)
  uint8_t state = 0;          // enum ib_qp_state (RDMA_NLDEV_ATTR_RES_STATE)
  // Owner: a user process (pid in the reader's pid namespace) or, for kernel QPs, the name of
  // the kernel module that created it ("ib_core", "rdma_cm", ...). Exactly one is set by the
  // kernel; a user QP whose process has exited may have neither.
  std::optional<uint32_t> pid;
  std::string kernel_owner;
};

// A device named by a message's DEV_INDEX/DEV_NAME (every message of both dumps has them).
struct RdmaDevice {
  uint32_t index = 0;
  std::string name;
};

struct RdmaNetlinkReply {
  std::vector<QpEntry> qps;
  // Distinct devices seen, in order of first appearance.
  std::vector<RdmaDevice> devices;
  // NLMSG_DONE (or NLMSG_ERROR, which also ends a dump) was seen. Bytes after it are ignored.
  bool done = false;
  // Positive errno from NLMSG_ERROR (or a negative NLMSG_DONE payload); 0 when none. An
  // NLMSG_ERROR with error 0 is an acknowledgement: done, no error.
  int error = 0;
  // Data messages parsed (NLMSG_NOOP, DONE and ERROR not counted).
  int messages = 0;
};

// Parses one or more whole netlink messages. InvalidArgument on malformed input (truncated
// header, a length past its container, a short or non-terminated value, a QP entry without
// LQPN/RES_TYPE/RES_STATE, a data message without DEV_INDEX, NLMSG_OVERRUN). An empty input
// parses to an empty reply (not done).
absl::StatusOr<RdmaNetlinkReply> ParseRdmaNetlink(absl::string_view bytes);

// The status a reply's NLMSG_ERROR stands for: OK when error is 0, else ErrnoToStatus's code
// (EPERM/EACCES → PermissionDenied, ENODEV → NotFound, EOPNOTSUPP → Unimplemented, ...) with
// `what` and strerror.
absl::Status ReplyStatus(const RdmaNetlinkReply& reply, absl::string_view what);

// A dump request (NLM_F_REQUEST | NLM_F_DUMP) for nldev `command` (RDMA_NLDEV_CMD_GET,
// RDMA_NLDEV_CMD_RES_QP_GET, ...) with sequence number `seq`, carrying DEV_INDEX when
// `device_index` is set (the resource dumps require it). The kernel assigns the port id.
std::string BuildDumpRequest(uint32_t command, std::optional<uint32_t> device_index, uint32_t seq);

// Names used as label values. ib_qp_type (include/rdma/ib_verbs.h): 0 smi, 1 gsi, 2 rc, 3 uc,
// 4 ud, 8 raw_packet, 9 xrc_ini, 10 xrc_tgt; anything else (driver types) "other".
absl::string_view QpTypeName(uint8_t type);
// ib_qp_state: 0 reset, 1 init, 2 rtr, 3 rts, 4 sqd, 5 sqe, 6 err; else "other".
absl::string_view QpStateName(uint8_t state);

}  // namespace fabricmon::collectors::rdma_qp
