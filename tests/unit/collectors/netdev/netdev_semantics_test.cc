#include "collectors/netdev/netdev_semantics.h"

#include <regex>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace fabricmon::collectors::netdev {
namespace {

struct KindCase {
  const char* description;
  const char* name;
  NetdevFacts facts;
  NetdevKind expected;
};

class ClassifyNetdevTest : public ::testing::TestWithParam<KindCase> {};

TEST_P(ClassifyNetdevTest, Classifies) {
  const KindCase& c = GetParam();
  EXPECT_EQ(NetdevKindName(ClassifyNetdev(c.name, c.facts)), NetdevKindName(c.expected))
      << c.description;
}

NetdevFacts Facts(std::optional<int> type, bool device, bool rdma, bool gid) {
  NetdevFacts facts;
  facts.type = type;
  facts.has_device = device;
  facts.has_rdma_device = rdma;
  facts.named_by_gid = gid;
  return facts;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ClassifyNetdevTest,
    ::testing::Values(
        KindCase{"loopback by type", "lo", Facts(772, false, false, false), NetdevKind::kLoopback},
        KindCase{"loopback renamed", "loop0", Facts(772, false, false, false),
                 NetdevKind::kLoopback},
        KindCase{"lo without readable type", "lo", Facts(std::nullopt, false, false, false),
                 NetdevKind::kLoopback},
        KindCase{"IPoIB: device/infiniband exists but type 32 wins", "ib0",
                 Facts(32, true, true, false), NetdevKind::kIpoib},
        KindCase{"IPoIB pkey child", "ib0.8001", Facts(32, true, true, false), NetdevKind::kIpoib},
        KindCase{"IPoIB even if a GID names it", "ib0", Facts(32, true, true, true),
                 NetdevKind::kIpoib},
        KindCase{"RoCE by device/infiniband", "enp1s0f0np0", Facts(1, true, true, false),
                 NetdevKind::kRdmaEthernet},
        KindCase{"RoCE by GID only", "enp1s0f0np0", Facts(1, true, false, true),
                 NetdevKind::kRdmaEthernet},
        KindCase{"RoCE LAG bond (no bus device, named by GID)", "bond0",
                 Facts(1, false, false, true), NetdevKind::kRdmaEthernet},
        KindCase{"VLAN on a RoCE port (named by GID)", "enp1s0f0np0.100",
                 Facts(1, false, false, true), NetdevKind::kRdmaEthernet},
        KindCase{"veth", "veth1234", Facts(1, false, false, false), NetdevKind::kVirtual},
        KindCase{"tun (ARPHRD_NONE, no device)", "tun0", Facts(65534, false, false, false),
                 NetdevKind::kVirtual},
        KindCase{"plain Ethernet", "eno1", Facts(1, true, false, false), NetdevKind::kEthernet},
        KindCase{"Ethernet with unreadable type", "eno1", Facts(std::nullopt, true, false, false),
                 NetdevKind::kEthernet},
        KindCase{"raw-IP WWAN with a bus device", "wwan0", Facts(519, true, false, false),
                 NetdevKind::kOther}),
    [](const ::testing::TestParamInfo<KindCase>& info) { return std::to_string(info.index); });

TEST(NetdevKindTest, NamesAndProtoValues) {
  EXPECT_EQ(NetdevKindName(NetdevKind::kEthernet), "ethernet");
  EXPECT_EQ(NetdevKindName(NetdevKind::kRdmaEthernet), "rdma_ethernet");
  EXPECT_EQ(NetdevKindName(NetdevKind::kIpoib), "ipoib");
  EXPECT_EQ(NetdevKindName(NetdevKind::kLoopback), "loopback");
  EXPECT_EQ(NetdevKindName(NetdevKind::kVirtual), "virtual");
  EXPECT_EQ(NetdevKindName(NetdevKind::kOther), "other");
  EXPECT_EQ(NetdevKindToProto(NetdevKind::kEthernet), v1::Netdev::KIND_ETHERNET);
  EXPECT_EQ(NetdevKindToProto(NetdevKind::kRdmaEthernet), v1::Netdev::KIND_RDMA_ETHERNET);
  EXPECT_EQ(NetdevKindToProto(NetdevKind::kIpoib), v1::Netdev::KIND_IPOIB);
  EXPECT_EQ(NetdevKindToProto(NetdevKind::kLoopback), v1::Netdev::KIND_LOOPBACK);
  EXPECT_EQ(NetdevKindToProto(NetdevKind::kVirtual), v1::Netdev::KIND_VIRTUAL);
  EXPECT_EQ(NetdevKindToProto(NetdevKind::kOther), v1::Netdev::KIND_UNSPECIFIED);
}

TEST(ParseOperStateTest, KernelStringsMapToIfOperCodes) {
  const std::pair<const char*, int64_t> cases[] = {
      {"unknown\n", 0}, {"notpresent\n", 1}, {"down\n", 2}, {"lowerlayerdown\n", 3},
      {"testing\n", 4}, {"dormant\n", 5},    {"up\n", 6},   {"  up  ", 6}};
  for (const auto& [text, code] : cases) {
    EXPECT_EQ(ParseOperState(text), code) << text;
  }
  EXPECT_EQ(ParseOperState(""), std::nullopt);
  EXPECT_EQ(ParseOperState("UP"), std::nullopt);
  EXPECT_EQ(ParseOperState("6"), std::nullopt);
  EXPECT_EQ(ParseOperState("upx"), std::nullopt);
}

TEST(SpecForStatisticTest, NamesAndUnits) {
  EXPECT_EQ(SpecForStatistic("rx_bytes").metric, "fabricmon_netdev_rx_bytes_total");
  EXPECT_EQ(SpecForStatistic("rx_bytes").unit, Unit::kBytes);
  EXPECT_EQ(SpecForStatistic("tx_bytes").unit, Unit::kBytes);
  EXPECT_EQ(SpecForStatistic("rx_packets").unit, Unit::kPackets);
  EXPECT_EQ(SpecForStatistic("tx_dropped").unit, Unit::kPackets);
  EXPECT_EQ(SpecForStatistic("rx_crc_errors").metric, "fabricmon_netdev_rx_crc_errors_total");
  EXPECT_EQ(SpecForStatistic("multicast").metric, "fabricmon_netdev_multicast_total");
  EXPECT_EQ(SpecForStatistic("collisions").unit, Unit::kNone);
  EXPECT_TRUE(absl::StrContains(SpecForStatistic("rx_bytes").help, "statistics/rx_bytes"));
  // A counter a future kernel adds is still exported, under a sanitized name.
  EXPECT_EQ(SpecForStatistic("Rx Weird,Thing").metric, "fabricmon_netdev_rx_weird_thing_total");
  EXPECT_EQ(SanitizeName("--"), "");
}

TEST(CuratedTcpMetricsTest, NamesAreValidAndConsistent) {
  const std::regex name_re("[a-z_][a-z0-9_]*");
  std::set<std::pair<std::string, std::string>> fields;
  std::set<std::pair<std::string, std::string>> series;
  for (const TcpMetricSpec& spec : CuratedTcpMetrics()) {
    const std::string metric(spec.metric);
    EXPECT_TRUE(std::regex_match(metric, name_re)) << metric;
    EXPECT_TRUE(absl::StartsWith(metric, "fabricmon_tcp_")) << metric;
    EXPECT_EQ(absl::EndsWith(metric, "_total"), spec.type == MetricType::kCounter) << metric;
    EXPECT_TRUE(spec.section == "Tcp" || spec.section == "TcpExt") << metric;
    EXPECT_EQ(spec.file == ProcNetFile::kSnmp, spec.section == "Tcp") << metric;
    EXPECT_FALSE(spec.help.empty()) << metric;
    EXPECT_TRUE(fields.insert({std::string(spec.section), std::string(spec.key)}).second)
        << spec.key << " listed twice";
    EXPECT_TRUE(series.insert({metric, std::string(spec.label_value)}).second)
        << metric << "{" << spec.label_value << "} listed twice";
  }
  // The must-haves.
  for (const char* key :
       {"InSegs", "OutSegs", "RetransSegs", "EstabResets", "OutRsts", "AttemptFails"}) {
    EXPECT_EQ(fields.count({"Tcp", key}), 1u) << key;
  }
  for (const char* key : {"TCPTimeouts", "TCPLostRetransmit"}) {
    EXPECT_EQ(fields.count({"TcpExt", key}), 1u) << key;
  }
}

}  // namespace
}  // namespace fabricmon::collectors::netdev
