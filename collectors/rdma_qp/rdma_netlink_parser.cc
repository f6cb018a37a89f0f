#include "collectors/rdma_qp/rdma_netlink_parser.h"

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status.h"

namespace fabricmon::collectors::rdma_qp {
namespace {

// Largest errno the kernel returns (MAX_ERRNO in include/linux/err.h).
constexpr int kMaxErrno = 4095;

// Header sizes as the kernel lays them out (NLMSG_HDRLEN = 16, NLA_HDRLEN = 4).
constexpr size_t kNlmsgHeader = static_cast<size_t>(NLMSG_HDRLEN);
constexpr size_t kNlaHeader = static_cast<size_t>(NLA_HDRLEN);

// One attribute: its type (NLA_F_NESTED / NLA_F_NET_BYTEORDER masked off), payload, and the
// payload's offset in the whole buffer (for error messages).
struct Attribute {
  uint16_t type = 0;
  absl::string_view payload;
  size_t offset = 0;
};

// The attributes in `region` (which starts at `base` in the buffer), in order. `what` names the
// container in error messages.
absl::StatusOr<std::vector<Attribute>> SplitAttributes(absl::string_view region, size_t base,
                                                       absl::string_view what) {
  std::vector<Attribute> attributes;
  size_t at = 0;
  while (at < region.size()) {
    const size_t left = region.size() - at;
    if (left < kNlaHeader) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", left, " trailing bytes at offset ",
                                                     base + at,
                                                     " are too short for an attribute header"));
    }
    struct nlattr header;
    std::memcpy(&header, region.data() + at, sizeof(header));
    const uint16_t type = header.nla_type & NLA_TYPE_MASK;
    if (header.nla_len < kNlaHeader) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": attribute type ", type, " at offset ",
                                                     base + at, " has nla_len ", header.nla_len,
                                                     " (< 4)"));
    }
    if (header.nla_len > left) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": attribute type ", type, " at offset ", base + at, " has nla_len ",
                       header.nla_len, ", past the end of its container (", left, " bytes left)"));
    }
    attributes.push_back(Attribute{
        type, region.substr(at + kNlaHeader, header.nla_len - kNlaHeader), base + at + kNlaHeader});
    // The last attribute of a container need not be padded.
    at += std::min<size_t>(NLA_ALIGN(header.nla_len), left);
  }
  return attributes;
}

absl::Status ShortValue(const Attribute& attribute, absl::string_view name, size_t need) {
  return absl::InvalidArgumentError(absl::StrCat(name, " at offset ", attribute.offset, " has ",
                                                 attribute.payload.size(), " payload bytes, needs ",
                                                 need));
}

absl::StatusOr<uint32_t> ReadU32(const Attribute& attribute, absl::string_view name) {
  if (attribute.payload.size() < sizeof(uint32_t)) {
    return ShortValue(attribute, name, sizeof(uint32_t));
  }
  uint32_t value;
  std::memcpy(&value, attribute.payload.data(), sizeof(value));  // host byte order
  return value;
}

absl::StatusOr<uint8_t> ReadU8(const Attribute& attribute, absl::string_view name) {
  if (attribute.payload.empty()) {
    return ShortValue(attribute, name, 1);
  }
  return static_cast<uint8_t>(attribute.payload[0]);
}

// NLA_NUL_STRING: the value ends at the first NUL, which must lie inside the payload.
absl::StatusOr<std::string> ReadString(const Attribute& attribute, absl::string_view name) {
  const size_t nul = attribute.payload.find('\0');
  if (nul == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(name, " at offset ", attribute.offset,
                                                   " is not NUL-terminated (",
                                                   attribute.payload.size(), " bytes)"));
  }
  return std::string(attribute.payload.substr(0, nul));
}

// One RDMA_NLDEV_ATTR_RES_QP_ENTRY.
absl::StatusOr<QpEntry> ParseQpEntry(const Attribute& entry, uint32_t device_index,
                                     const std::string& device_name) {
  const std::string where = absl::StrCat("QP entry at offset ", entry.offset);
  FABRICMON_ASSIGN_OR_RETURN(std::vector<Attribute> attributes,
                             SplitAttributes(entry.payload, entry.offset, where));
  QpEntry qp;
  qp.device_index = device_index;
  qp.device_name = device_name;
  bool have_lqpn = false;
  bool have_type = false;
  bool have_state = false;
  for (const Attribute& attribute : attributes) {
    switch (attribute.type) {
      case RDMA_NLDEV_ATTR_PORT_INDEX: {
        FABRICMON_ASSIGN_OR_RETURN(qp.port, ReadU32(attribute, "PORT_INDEX"));
        break;
      }
      case RDMA_NLDEV_ATTR_RES_LQPN: {
        FABRICMON_ASSIGN_OR_RETURN(qp.lqpn, ReadU32(attribute, "RES_LQPN"));
        have_lqpn = true;
        break;
      }
      case RDMA_NLDEV_ATTR_RES_TYPE: {
        FABRICMON_ASSIGN_OR_RETURN(qp.type, ReadU8(attribute, "RES_TYPE"));
        have_type = true;
        break;
      }
      case RDMA_NLDEV_ATTR_RES_STATE: {
        FABRICMON_ASSIGN_OR_RETURN(qp.state, ReadU8(attribute, "RES_STATE"));
        have_state = true;
        break;
      }
      case RDMA_NLDEV_ATTR_RES_PID: {
        FABRICMON_ASSIGN_OR_RETURN(uint32_t pid, ReadU32(attribute, "RES_PID"));
        qp.pid = pid;
        break;
      }
      case RDMA_NLDEV_ATTR_RES_KERN_NAME: {
        FABRICMON_ASSIGN_OR_RETURN(qp.kernel_owner, ReadString(attribute, "RES_KERN_NAME"));
        break;
      }
      default:
        break;  // RQPN, SQ_PSN, PATH_MIG_STATE, PDN, driver attributes, ...
    }
  }
  // fill_res_qp_entry always puts these three; an entry without them cannot be counted right.
  if (!have_lqpn || !have_type || !have_state) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " lacks ", !have_lqpn ? "RES_LQPN" : (!have_type ? "RES_TYPE" : "RES_STATE")));
  }
  return qp;
}

// The payload of one data message (after the nlmsghdr, which starts at `offset`).
absl::Status ParseDataMessage(absl::string_view payload, size_t offset, RdmaNetlinkReply& reply) {
  const std::string where = absl::StrCat("message at offset ", offset);
  FABRICMON_ASSIGN_OR_RETURN(std::vector<Attribute> attributes,
                             SplitAttributes(payload, offset + kNlmsgHeader, where));
  std::optional<uint32_t> device_index;
  std::string device_name;
  const Attribute* table = nullptr;
  for (const Attribute& attribute : attributes) {
    switch (attribute.type) {
      case RDMA_NLDEV_ATTR_DEV_INDEX: {
        FABRICMON_ASSIGN_OR_RETURN(uint32_t index, ReadU32(attribute, "DEV_INDEX"));
        device_index = index;
        break;
      }
      case RDMA_NLDEV_ATTR_DEV_NAME: {
        FABRICMON_ASSIGN_OR_RETURN(device_name, ReadString(attribute, "DEV_NAME"));
        break;
      }
      case RDMA_NLDEV_ATTR_RES_QP:
        table = &attribute;
        break;
      default:
        break;
    }
  }
  // fill_nldev_handle puts DEV_INDEX first in every reply of both dumps.
  if (!device_index.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " lacks DEV_INDEX"));
  }
  bool known = false;
  for (RdmaDevice& device : reply.devices) {
    if (device.index == *device_index) {
      known = true;
      if (device.name.empty()) {
        device.name = device_name;
      }
      break;
    }
  }
  if (!known) {
    reply.devices.push_back(RdmaDevice{*device_index, device_name});
  }
  if (table == nullptr) {
    return absl::OkStatus();  // a device-list message, or a QP dump page with no QP
  }
  FABRICMON_ASSIGN_OR_RETURN(
      std::vector<Attribute> entries,
      SplitAttributes(table->payload, table->offset,
                      absl::StrCat("RES_QP table at offset ", table->offset)));
  for (const Attribute& entry : entries) {
    if (entry.type != RDMA_NLDEV_ATTR_RES_QP_ENTRY) {
      continue;
    }
    FABRICMON_ASSIGN_OR_RETURN(QpEntry qp, ParseQpEntry(entry, *device_index, device_name));
    reply.qps.push_back(std::move(qp));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RdmaNetlinkReply> ParseRdmaNetlink(absl::string_view bytes) {
  RdmaNetlinkReply reply;
  size_t at = 0;
  while (at < bytes.size() && !reply.done) {
    const size_t left = bytes.size() - at;
    if (left < kNlmsgHeader) {
      return absl::InvalidArgumentError(absl::StrCat("truncated netlink header at offset ", at,
                                                     ": ", left, " bytes left, need ",
                                                     kNlmsgHeader));
    }
    struct nlmsghdr header;
    std::memcpy(&header, bytes.data() + at, sizeof(header));
    if (header.nlmsg_len < kNlmsgHeader) {
      return absl::InvalidArgumentError(
          absl::StrCat("message at offset ", at, " has nlmsg_len ", header.nlmsg_len, " (< 16)"));
    }
    if (header.nlmsg_len > left) {
      return absl::InvalidArgumentError(
          absl::StrCat("message at offset ", at, " has nlmsg_len ", header.nlmsg_len,
                       ", past the end of the buffer (", left, " bytes left)"));
    }
    const absl::string_view payload =
        bytes.substr(at + kNlmsgHeader, header.nlmsg_len - kNlmsgHeader);
    switch (header.nlmsg_type) {
      case NLMSG_NOOP:
        break;
      case NLMSG_DONE:
        // Dumps end with NLMSG_DONE carrying an int: 0, or the negative errno the dump hit.
        reply.done = true;
        if (payload.size() >= sizeof(int)) {
          int status;
          std::memcpy(&status, payload.data(), sizeof(status));
          if (status < -kMaxErrno) {
            return absl::InvalidArgumentError(absl::StrCat(
                "NLMSG_DONE at offset ", at, " carries status ", status, ", not an errno"));
          }
          if (status < 0) {
            reply.error = -status;
          }
        }
        break;
      case NLMSG_ERROR: {
        // struct nlmsgerr: the negative errno (0 = ACK), then the offending request's header.
        if (payload.size() < sizeof(int)) {
          return absl::InvalidArgumentError(absl::StrCat("NLMSG_ERROR at offset ", at, " has ",
                                                         payload.size(), " payload bytes, needs ",
                                                         sizeof(int)));
        }
        int error;
        std::memcpy(&error, payload.data(), sizeof(error));
        // The kernel sends 0 or a negative errno (-1 .. -4095); anything else is not an answer
        // (and INT_MIN cannot even be negated).
        if (error < -kMaxErrno || error > 0) {
          return absl::InvalidArgumentError(absl::StrCat("NLMSG_ERROR at offset ", at, " carries ",
                                                         error, ", not 0 or a negative errno"));
        }
        reply.done = true;
        reply.error = -error;
        break;
      }
      case NLMSG_OVERRUN:
        return absl::InvalidArgumentError(absl::StrCat("NLMSG_OVERRUN at offset ", at));
      default:
        if (header.nlmsg_type < NLMSG_MIN_TYPE) {
          return absl::InvalidArgumentError(
              absl::StrCat("message at offset ", at, " has reserved type ", header.nlmsg_type));
        }
        FABRICMON_RETURN_IF_ERROR(ParseDataMessage(payload, at, reply));
        ++reply.messages;
        break;
    }
    at += std::min<size_t>(NLMSG_ALIGN(header.nlmsg_len), left);
  }
  return reply;
}

absl::Status ReplyStatus(const RdmaNetlinkReply& reply, absl::string_view what) {
  if (reply.error == 0) {
    return absl::OkStatus();
  }
  return ::fabricmon::ErrnoToStatus(reply.error, what);
}

std::string BuildDumpRequest(uint32_t command, std::optional<uint32_t> device_index, uint32_t seq) {
  struct nlmsghdr header = {};
  header.nlmsg_len = kNlmsgHeader;
  if (device_index.has_value()) {
    header.nlmsg_len += NLA_ALIGN(kNlaHeader + sizeof(uint32_t));
  }
  header.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, command);
  header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  header.nlmsg_seq = seq;
  header.nlmsg_pid = 0;
  std::string request(header.nlmsg_len, '\0');
  std::memcpy(request.data(), &header, sizeof(header));
  if (device_index.has_value()) {
    struct nlattr attribute = {};
    attribute.nla_len = kNlaHeader + sizeof(uint32_t);
    attribute.nla_type = RDMA_NLDEV_ATTR_DEV_INDEX;
    std::memcpy(request.data() + kNlmsgHeader, &attribute, sizeof(attribute));
    const uint32_t index = *device_index;
    std::memcpy(request.data() + kNlmsgHeader + kNlaHeader, &index, sizeof(index));
  }
  return request;
}

absl::string_view QpTypeName(uint8_t type) {
  switch (type) {
    case 0:
      return "smi";
    case 1:
      return "gsi";
    case 2:
      return "rc";
    case 3:
      return "uc";
    case 4:
      return "ud";
    case 8:
      return "raw_packet";
    case 9:
      return "xrc_ini";
    case 10:
      return "xrc_tgt";
    default:
      return "other";
  }
}

absl::string_view QpStateName(uint8_t state) {
  static constexpr absl::string_view kNames[] = {"reset", "init", "rtr", "rts",
                                                 "sqd",   "sqe",  "err"};
  if (state < sizeof(kNames) / sizeof(kNames[0])) {
    return kNames[state];
  }
  return "other";
}

}  // namespace fabricmon::collectors::rdma_qp
