#include "collectors/rdma_qp/rdma_netlink_parser.h"

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/collectors/rdma_qp/netlink_builder.h"

namespace fabricmon::collectors::rdma_qp {
namespace {

using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::testing::HasSubstr;
using testing::NetlinkBuilder;

constexpr uint8_t kGsi = 1, kRc = 2, kUd = 4;
constexpr uint8_t kInit = 1, kRtr = 2, kRts = 3, kErr = 6;

// Two devices, each one message, RC/UD/GSI QPs of users and the kernel, then NLMSG_DONE.
std::string TwoDeviceDump() {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "mlx5_0").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Qp(1, kGsi, kRts, 0, "ib_core").Qp(0x120, kRc, kRts, 4242).End();
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(1, "mlx5_1").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Qp(0x200, kUd, kRtr, 4242, "", /*port=*/0).End();
  b.Done();
  return b.bytes();
}

TEST(RdmaNetlinkParserTest, ParsesTwoDeviceDump) {
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(TwoDeviceDump());
  ASSERT_THAT(reply, IsOk());
  EXPECT_TRUE(reply->done);
  EXPECT_EQ(reply->error, 0);
  EXPECT_EQ(reply->messages, 2);
  ASSERT_EQ(reply->devices.size(), 2u);
  EXPECT_EQ(reply->devices[0].index, 0u);
  EXPECT_EQ(reply->devices[0].name, "mlx5_0");
  EXPECT_EQ(reply->devices[1].index, 1u);
  EXPECT_EQ(reply->devices[1].name, "mlx5_1");
  ASSERT_EQ(reply->qps.size(), 3u);

  const QpEntry& gsi = reply->qps[0];
  EXPECT_EQ(gsi.device_index, 0u);
  EXPECT_EQ(gsi.device_name, "mlx5_0");
  EXPECT_EQ(gsi.port, 1u);
  EXPECT_EQ(gsi.lqpn, 1u);
  EXPECT_EQ(QpTypeName(gsi.type), "gsi");
  EXPECT_EQ(QpStateName(gsi.state), "rts");
  EXPECT_FALSE(gsi.pid.has_value());
  EXPECT_EQ(gsi.kernel_owner, "ib_core");

  const QpEntry& rc = reply->qps[1];
  EXPECT_EQ(rc.lqpn, 0x120u);
  EXPECT_EQ(QpTypeName(rc.type), "rc");
  ASSERT_TRUE(rc.pid.has_value());
  EXPECT_EQ(*rc.pid, 4242u);
  EXPECT_EQ(rc.kernel_owner, "");

  const QpEntry& ud = reply->qps[2];
  EXPECT_EQ(ud.device_index, 1u);
  EXPECT_EQ(ud.device_name, "mlx5_1");
  EXPECT_EQ(ud.port, 0u);  // not bound to a port yet: no PORT_INDEX
  EXPECT_EQ(QpTypeName(ud.type), "ud");
  EXPECT_EQ(QpStateName(ud.state), "rtr");
}

TEST(RdmaNetlinkParserTest, ParsesOneDeviceSplitOverMessages) {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(3, "rocep1s0").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Qp(10, kRc, kRts, 7).Qp(11, kRc, kInit, 7).End();
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(3, "rocep1s0").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Qp(12, kRc, kErr, 8).End();
  // A message with the handle and an empty table (a page with no QP) and an unknown attribute.
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(3, "rocep1s0").U32(1000, 5);
  b.Begin(RDMA_NLDEV_ATTR_RES_QP).End();
  const std::string first = b.bytes();
  b.Done();
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(b.bytes());
  ASSERT_THAT(reply, IsOk());
  EXPECT_TRUE(reply->done);
  EXPECT_EQ(reply->messages, 3);
  ASSERT_EQ(reply->devices.size(), 1u);
  ASSERT_EQ(reply->qps.size(), 3u);
  EXPECT_EQ(reply->qps[2].lqpn, 12u);
  EXPECT_EQ(QpStateName(reply->qps[2].state), "err");

  // Without the NLMSG_DONE the same bytes parse, not done (the collector waits for more).
  absl::StatusOr<RdmaNetlinkReply> partial = ParseRdmaNetlink(first);
  ASSERT_THAT(partial, IsOk());
  EXPECT_FALSE(partial->done);
  EXPECT_EQ(partial->qps.size(), 3u);
}

TEST(RdmaNetlinkParserTest, ParsesDeviceList) {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_GET).Handle(0, "mlx5_0").U32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  b.Str(RDMA_NLDEV_ATTR_FW_VERSION, "28.39.1002");
  b.Message(RDMA_NLDEV_CMD_GET).Handle(2, "mlx5_2");
  b.Done();
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(b.bytes());
  ASSERT_THAT(reply, IsOk());
  ASSERT_EQ(reply->devices.size(), 2u);
  EXPECT_EQ(reply->devices[1].index, 2u);
  EXPECT_EQ(reply->devices[1].name, "mlx5_2");
  EXPECT_TRUE(reply->qps.empty());
}

TEST(RdmaNetlinkParserTest, NlmsgErrorEpermIsPermissionDenied) {
  NetlinkBuilder b;
  b.Error(-EPERM);
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(b.bytes());
  ASSERT_THAT(reply, IsOk());
  EXPECT_TRUE(reply->done);
  EXPECT_EQ(reply->error, EPERM);
  const absl::Status status = ReplyStatus(*reply, "QP dump of mlx5_0");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(std::string(status.message()), HasSubstr("QP dump of mlx5_0"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(std::strerror(EPERM)));
}

// Fuzz finding (tests/fuzz/regressions/rdma_netlink/nlmsg_error_int_min): INT_MIN was negated.
// Only 0 and -1..-4095 are answers; anything else is a malformed reply, not an errno.
TEST(RdmaNetlinkParserTest, StatusesThatAreNoErrnoAreInvalid) {
  for (int bad : {std::numeric_limits<int>::min(), -4096, 1, 12}) {
    NetlinkBuilder error;
    error.Error(bad);
    EXPECT_THAT(ParseRdmaNetlink(error.bytes()), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  for (int bad : {std::numeric_limits<int>::min(), -4096}) {
    NetlinkBuilder done;
    done.Done(bad);
    EXPECT_THAT(ParseRdmaNetlink(done.bytes()), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  NetlinkBuilder largest;
  largest.Error(-4095);
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(largest.bytes());
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->error, 4095);
}

TEST(RdmaNetlinkParserTest, AckAndNegativeDoneStatus) {
  NetlinkBuilder ack;
  ack.Error(0);
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(ack.bytes());
  ASSERT_THAT(reply, IsOk());
  EXPECT_TRUE(reply->done);
  EXPECT_THAT(ReplyStatus(*reply, "x"), IsOk());

  NetlinkBuilder done;
  done.Done(-ENODEV);
  reply = ParseRdmaNetlink(done.bytes());
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->error, ENODEV);
  EXPECT_THAT(ReplyStatus(*reply, "x"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(RdmaNetlinkParserTest, StopsAtDoneAndSkipsNoop) {
  NetlinkBuilder b;
  struct nlmsghdr noop = {};
  noop.nlmsg_len = sizeof(noop);
  noop.nlmsg_type = NLMSG_NOOP;
  std::string bytes(reinterpret_cast<const char*>(&noop), sizeof(noop));
  b.Done();
  bytes += b.bytes();
  bytes += "garbage after the end";
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(bytes);
  ASSERT_THAT(reply, IsOk());
  EXPECT_TRUE(reply->done);
  EXPECT_EQ(reply->messages, 0);

  reply = ParseRdmaNetlink("");
  ASSERT_THAT(reply, IsOk());
  EXPECT_FALSE(reply->done);
}

TEST(RdmaNetlinkParserTest, AcceptsWiderIntegers) {
  // "u8/u32 at least the size": a u8 sent as 4 bytes still reads its first byte.
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "d").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY).U32(RDMA_NLDEV_ATTR_RES_LQPN, 5);
  b.U32(RDMA_NLDEV_ATTR_RES_TYPE, kUd).U32(RDMA_NLDEV_ATTR_RES_STATE, kRts).End().End();
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(b.bytes());
  ASSERT_THAT(reply, IsOk());
  ASSERT_EQ(reply->qps.size(), 1u);
  EXPECT_EQ(QpTypeName(reply->qps[0].type), "ud");
}

// --- Hostile input: each a clear InvalidArgument, never a crash or an out-of-bounds read. ------

void ExpectInvalid(const std::string& bytes, const std::string& text) {
  absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(bytes);
  ASSERT_THAT(reply, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(reply.status().message()), HasSubstr(text));
}

void SetU16(std::string& bytes, size_t offset, uint16_t value) {
  std::memcpy(&bytes[offset], &value, sizeof(value));
}
void SetU32(std::string& bytes, size_t offset, uint32_t value) {
  std::memcpy(&bytes[offset], &value, sizeof(value));
}

TEST(RdmaNetlinkParserTest, RejectsTruncatedHeader) {
  ExpectInvalid(TwoDeviceDump().substr(0, 10),
                "truncated netlink header at offset 0: 10 bytes left");
}

TEST(RdmaNetlinkParserTest, RejectsBadMessageLength) {
  std::string bytes = TwoDeviceDump();
  SetU32(bytes, 0, static_cast<uint32_t>(bytes.size() + 4));
  ExpectInvalid(bytes, "message at offset 0 has nlmsg_len");
  ExpectInvalid(bytes, "past the end of the buffer");
  SetU32(bytes, 0, 8);
  ExpectInvalid(bytes, "message at offset 0 has nlmsg_len 8 (< 16)");
}

TEST(RdmaNetlinkParserTest, RejectsAttributeLengths) {
  std::string bytes = TwoDeviceDump();
  // First attribute (DEV_INDEX) starts right after the 16-byte message header.
  SetU16(bytes, 16, 2);
  ExpectInvalid(bytes, "attribute type 1 at offset 16 has nla_len 2 (< 4)");
  SetU16(bytes, 16, 0xfff0);
  ExpectInvalid(bytes, "past the end of its container");
}

TEST(RdmaNetlinkParserTest, RejectsNestedEntryOverrunningItsParent) {
  // RES_QP with one entry, followed by another top-level attribute the entry's length grows into.
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "mlx5_0").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Qp(1, kRc, kRts, 9).End().U32(1000, 0);
  std::string bytes = b.bytes();
  // Offsets: header 16, DEV_INDEX 8, DEV_NAME "mlx5_0\0" 4+7 → 12, so RES_QP at 36, entry at 40.
  uint16_t entry_length;
  std::memcpy(&entry_length, &bytes[40], sizeof(entry_length));
  SetU16(bytes, 40, entry_length + 8);
  ExpectInvalid(bytes, "RES_QP table at offset 40: attribute type");
  ExpectInvalid(bytes, "past the end of its container");
}

TEST(RdmaNetlinkParserTest, RejectsMissingAttributes) {
  NetlinkBuilder no_lqpn;
  no_lqpn.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "d").Begin(RDMA_NLDEV_ATTR_RES_QP);
  no_lqpn.Begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY).U8(RDMA_NLDEV_ATTR_RES_TYPE, kRc);
  no_lqpn.U8(RDMA_NLDEV_ATTR_RES_STATE, kRts).End().End();
  ExpectInvalid(no_lqpn.bytes(), "lacks RES_LQPN");

  NetlinkBuilder no_state;
  no_state.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "d").Begin(RDMA_NLDEV_ATTR_RES_QP);
  no_state.Begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY).U32(RDMA_NLDEV_ATTR_RES_LQPN, 1);
  no_state.U8(RDMA_NLDEV_ATTR_RES_TYPE, kRc).End().End();
  ExpectInvalid(no_state.bytes(), "lacks RES_STATE");

  NetlinkBuilder no_index;
  no_index.Message(RDMA_NLDEV_CMD_RES_QP_GET).Str(RDMA_NLDEV_ATTR_DEV_NAME, "d");
  ExpectInvalid(no_index.bytes(), "message at offset 0 lacks DEV_INDEX");
}

TEST(RdmaNetlinkParserTest, RejectsStringWithoutNul) {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_GET).U32(RDMA_NLDEV_ATTR_DEV_INDEX, 0);
  b.Raw(RDMA_NLDEV_ATTR_DEV_NAME, "mlx5", 4);
  ExpectInvalid(b.bytes(), "DEV_NAME at offset 28 is not NUL-terminated (4 bytes)");
}

TEST(RdmaNetlinkParserTest, RejectsShortIntegers) {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_GET).Raw(RDMA_NLDEV_ATTR_DEV_INDEX, "\x01\x00", 2);
  ExpectInvalid(b.bytes(), "DEV_INDEX at offset 20 has 2 payload bytes, needs 4");

  NetlinkBuilder empty_u8;
  empty_u8.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "d").Begin(RDMA_NLDEV_ATTR_RES_QP);
  empty_u8.Begin(RDMA_NLDEV_ATTR_RES_QP_ENTRY).Raw(RDMA_NLDEV_ATTR_RES_TYPE, "", 0).End().End();
  ExpectInvalid(empty_u8.bytes(), "RES_TYPE at offset");
}

TEST(RdmaNetlinkParserTest, RejectsShortErrorAndOverrun) {
  struct nlmsghdr header = {};
  header.nlmsg_len = sizeof(header);
  header.nlmsg_type = NLMSG_ERROR;
  ExpectInvalid(std::string(reinterpret_cast<const char*>(&header), sizeof(header)),
                "NLMSG_ERROR at offset 0 has 0 payload bytes");
  header.nlmsg_type = NLMSG_OVERRUN;
  ExpectInvalid(std::string(reinterpret_cast<const char*>(&header), sizeof(header)),
                "NLMSG_OVERRUN at offset 0");
}

TEST(RdmaNetlinkParserTest, EveryTruncationAndBitFlipIsHandled) {
  const std::string full = TwoDeviceDump();
  for (size_t length = 0; length < full.size(); ++length) {
    absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(full.substr(0, length));
    if (reply.ok()) {
      EXPECT_FALSE(reply->done) << length;  // NLMSG_DONE is the last message
    } else {
      EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument) << length;
    }
  }
  for (size_t i = 0; i < full.size(); ++i) {
    std::string flipped = full;
    flipped[i] = static_cast<char>(flipped[i] ^ 0xa5);
    absl::StatusOr<RdmaNetlinkReply> reply = ParseRdmaNetlink(flipped);
    if (!reply.ok()) {
      EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument) << i;
    }
  }
}

TEST(RdmaNetlinkParserTest, NamesTypesAndStates) {
  const std::pair<uint8_t, const char*> types[] = {
      {0, "smi"},        {1, "gsi"},     {2, "rc"},       {3, "uc"},    {4, "ud"},
      {8, "raw_packet"}, {9, "xrc_ini"}, {10, "xrc_tgt"}, {5, "other"}, {0xff, "other"}};
  for (const auto& [type, name] : types) {
    EXPECT_EQ(QpTypeName(type), name) << int{type};
  }
  const char* states[] = {"reset", "init", "rtr", "rts", "sqd", "sqe", "err"};
  for (uint8_t state = 0; state < 7; ++state) {
    EXPECT_EQ(QpStateName(state), states[state]);
  }
  EXPECT_EQ(QpStateName(7), "other");
}

TEST(RdmaNetlinkParserTest, BuildsDumpRequest) {
  const std::string request = BuildDumpRequest(RDMA_NLDEV_CMD_RES_QP_GET, 5, 77);
  ASSERT_EQ(request.size(), 24u);
  struct nlmsghdr header;
  std::memcpy(&header, request.data(), sizeof(header));
  EXPECT_EQ(header.nlmsg_len, 24u);
  EXPECT_EQ(header.nlmsg_type, RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_QP_GET));
  EXPECT_EQ(header.nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
  EXPECT_EQ(header.nlmsg_seq, 77u);
  struct nlattr attribute;
  std::memcpy(&attribute, request.data() + 16, sizeof(attribute));
  EXPECT_EQ(attribute.nla_len, 8u);
  EXPECT_EQ(attribute.nla_type, RDMA_NLDEV_ATTR_DEV_INDEX);
  uint32_t index;
  std::memcpy(&index, request.data() + 20, sizeof(index));
  EXPECT_EQ(index, 5u);

  EXPECT_EQ(BuildDumpRequest(RDMA_NLDEV_CMD_GET, std::nullopt, 1).size(), 16u);
}

}  // namespace
}  // namespace fabricmon::collectors::rdma_qp
