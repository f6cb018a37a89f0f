#pragma once

// Builds RDMA netlink reply bytes the way the kernel lays them out (nlmsghdr, NLA_ALIGN-padded
// nlattr, nested tables with NLA_F_NESTED), for the parser and collector tests.

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fabricmon::collectors::rdma_qp::testing {

class NetlinkBuilder {
 public:
  // Starts a data message of nldev command `command` (ends the previous message).
  NetlinkBuilder& Message(uint32_t command, uint32_t seq = 1) {
    return Start(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, command), seq);
  }
  // NLMSG_DONE with its int payload (0 or a negative errno).
  NetlinkBuilder& Done(int status = 0, uint32_t seq = 1) {
    Start(NLMSG_DONE, seq);
    Append(&status, sizeof(status));
    return *this;
  }
  // NLMSG_ERROR: struct nlmsgerr (negative errno, then the request header).
  NetlinkBuilder& Error(int negative_errno, uint32_t seq = 1) {
    Start(NLMSG_ERROR, seq);
    Append(&negative_errno, sizeof(negative_errno));
    struct nlmsghdr request = {};
    request.nlmsg_len = sizeof(request);
    Append(&request, sizeof(request));
    return *this;
  }
  NetlinkBuilder& U32(uint16_t type, uint32_t value) { return Raw(type, &value, sizeof(value)); }
  NetlinkBuilder& U8(uint16_t type, uint8_t value) { return Raw(type, &value, sizeof(value)); }
  // A NUL-terminated string (nla_put_string).
  NetlinkBuilder& Str(uint16_t type, const std::string& value) {
    return Raw(type, value.c_str(), value.size() + 1);
  }
  NetlinkBuilder& Raw(uint16_t type, const void* data, size_t size) {
    struct nlattr header = {};
    header.nla_len = static_cast<uint16_t>(NLA_HDRLEN + size);
    header.nla_type = type;
    Append(&header, sizeof(header));
    Append(data, size);
    Pad();
    return *this;
  }
  // Opens a nested attribute (NLA_F_NESTED set, as nla_nest_start does); End() closes it.
  NetlinkBuilder& Begin(uint16_t type) {
    nests_.push_back(bytes_.size());
    struct nlattr header = {};
    header.nla_type = type | NLA_F_NESTED;
    Append(&header, sizeof(header));
    return *this;
  }
  NetlinkBuilder& End() {
    const size_t start = nests_.back();
    nests_.pop_back();
    const uint16_t length = static_cast<uint16_t>(bytes_.size() - start);
    std::memcpy(&bytes_[start], &length, sizeof(length));
    return *this;
  }
  // One QP entry (the attributes fill_res_qp_entry puts). pid 0 = none; kern "" = none.
  NetlinkBuilder& Qp(uint32_t lqpn, uint8_t type, uint8_t state, uint32_t pid,
                     const std::string& kern = "", uint32_t port = 1) {
    Begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY);
    if (port != 0) {
      U32(RDMA_NLDEV_ATTR_PORT_INDEX, port);
    }
    U32(RDMA_NLDEV_ATTR_RES_LQPN, lqpn);
    U32(RDMA_NLDEV_ATTR_RES_SQ_PSN, 0x1234);  // not read by the parser
    U8(RDMA_NLDEV_ATTR_RES_TYPE, type);
    U8(RDMA_NLDEV_ATTR_RES_STATE, state);
    if (pid != 0) {
      U32(RDMA_NLDEV_ATTR_RES_PID, pid);
    }
    if (!kern.empty()) {
      Str(RDMA_NLDEV_ATTR_RES_KERN_NAME, kern);
    }
    return End();
  }
  // Device handle (fill_nldev_handle).
  NetlinkBuilder& Handle(uint32_t index, const std::string& name) {
    U32(RDMA_NLDEV_ATTR_DEV_INDEX, index);
    return Str(RDMA_NLDEV_ATTR_DEV_NAME, name);
  }

  // The bytes so far, with the current message's length filled in.
  std::string bytes() {
    Finish();
    return bytes_;
  }

 private:
  NetlinkBuilder& Start(uint16_t type, uint32_t seq) {
    Finish();
    message_ = bytes_.size();
    struct nlmsghdr header = {};
    header.nlmsg_type = type;
    header.nlmsg_flags = NLM_F_MULTI;
    header.nlmsg_seq = seq;
    Append(&header, sizeof(header));
    return *this;
  }
  void Finish() {
    if (message_ == std::string::npos) {
      return;
    }
    const uint32_t length = static_cast<uint32_t>(bytes_.size() - message_);
    std::memcpy(&bytes_[message_], &length, sizeof(length));
    Pad();
  }
  void Append(const void* data, size_t size) {
    bytes_.append(static_cast<const char*>(data), size);
  }
  void Pad() { bytes_.append(NLA_ALIGN(bytes_.size()) - bytes_.size(), '\0'); }

  std::string bytes_;
  size_t message_ = std::string::npos;
  std::vector<size_t> nests_;
};

}  // namespace fabricmon::collectors::rdma_qp::testing
