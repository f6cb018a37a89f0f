// RDMA netlink dump replies (ParseRdmaNetlink): the bytes a NETLINK_RDMA recv() returns for
// RDMA_NLDEV_CMD_GET and RDMA_NLDEV_CMD_RES_QP_GET dumps. Seeds in corpus/rdma_netlink/ are
// replies built like the kernel's (see tests/unit/collectors/rdma_qp/netlink_builder.h).

#include <string>

#include "collectors/rdma_qp/rdma_netlink_parser.h"
#include "tests/fuzz/fuzz_target.h"

FABRICMON_FUZZ_TARGET(rdma_netlink) {
  using namespace ::fabricmon::collectors::rdma_qp;
  const absl::string_view bytes = ::fabricmon::fuzz::AsText(data, size);

  const absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(bytes);
  if (!reply.ok()) {
    // Malformed input is only ever InvalidArgument, with a message saying where.
    FABRICMON_FUZZ_CHECK(reply.status().code() == absl::StatusCode::kInvalidArgument);
    FABRICMON_FUZZ_CHECK(!reply.status().message().empty());
    return;
  }
  FABRICMON_FUZZ_CHECK(reply->messages >= 0);
  FABRICMON_FUZZ_CHECK(reply->error >= 0);
  FABRICMON_FUZZ_CHECK(reply->error == 0 || reply->done);
  FABRICMON_FUZZ_CHECK(ReplyStatus(*reply, "fuzz").ok() == (reply->error == 0));
  // Every data message names a device, and devices are distinct.
  FABRICMON_FUZZ_CHECK(reply->devices.size() <= static_cast<size_t>(reply->messages));
  for (size_t i = 0; i < reply->devices.size(); ++i) {
    for (size_t j = i + 1; j < reply->devices.size(); ++j) {
      FABRICMON_FUZZ_CHECK(reply->devices[i].index != reply->devices[j].index);
    }
  }
  for (const QpEntry& qp : reply->qps) {
    bool known = false;
    for (const RdmaDevice& device : reply->devices) {
      known = known || device.index == qp.device_index;
    }
    FABRICMON_FUZZ_CHECK(known);
    FABRICMON_FUZZ_CHECK(qp.device_name.find('\0') == std::string::npos);
    FABRICMON_FUZZ_CHECK(qp.kernel_owner.find('\0') == std::string::npos);
    FABRICMON_FUZZ_CHECK(!QpTypeName(qp.type).empty() && !QpStateName(qp.state).empty());
  }
  // A QP entry is at least its header (4), LQPN (8), TYPE (8) and STATE (5 if last, unpadded).
  FABRICMON_FUZZ_CHECK(reply->qps.size() * 25 <= bytes.size());
}
