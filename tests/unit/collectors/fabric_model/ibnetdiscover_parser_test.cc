#include "collectors/fabric_model/ibnetdiscover_parser.h"

#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/file_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::fabric_model {
namespace {

using ::fabricmon::testing::SharedFixture;
using ::fabricmon::testing::StatusIs;
using ::testing::HasSubstr;

std::string Fixture(const std::string& relative) {
  absl::StatusOr<std::string> text = ReadSmallFile(SharedFixture(relative), 1 << 24);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

const v1::FabricLink* FindLink(const v1::Inventory& inventory, const std::string& guid,
                               uint32_t port) {
  for (const v1::FabricLink& link : inventory.fabric_links()) {
    if ((link.a_guid() == guid && link.a_port() == port) ||
        (link.b_guid() == guid && link.b_port() == port)) {
      return &link;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Real ibnetdiscover output: PSMN "X5" (shared/fixtures/ib/ibnetdiscover, PROVENANCE §5).

TEST(IbnetdiscoverParserTest, ParsesPsmnTopologyFile) {
  absl::StatusOr<ParsedSubnet> parsed =
      ParseIbnetdiscover(Fixture("ib/ibnetdiscover/psmn_X5_voltaire-qdr_ibnetdiscover.topofile"));
  ASSERT_THAT(parsed, fabricmon::testing::IsOk());
  EXPECT_EQ(parsed->format, TopologyFormat::kTopology);
  const Subnet& topology = parsed->topology;
  // PROVENANCE §5: 11 switches, 89 CAs.
  EXPECT_EQ(topology.CountNodes(NodeType::kSwitch), 11u);
  EXPECT_EQ(topology.CountNodes(NodeType::kCa), 89u);
  EXPECT_EQ(topology.nodes.size(), 100u);

  v1::Inventory inventory;
  AppendToInventory(topology, inventory);
  // 89 CA cables + 70 inter-switch cables (both ends listed in the file, counted once).
  EXPECT_EQ(inventory.fabric_links_size(), 159);
  int qdr = 0, ddr = 0;
  for (const v1::FabricLink& link : inventory.fabric_links()) {
    EXPECT_EQ(link.width(), 4u);
    qdr += link.speed() == "QDR";
    ddr += link.speed() == "DDR";
    EXPECT_EQ(link.state(), 0u) << "topology files carry no port state";
  }
  EXPECT_EQ(qdr + ddr, 159);
  EXPECT_GT(ddr, 0);

  // The node the file was generated from: "Initiated from node 0002c90300080e84".
  const v1::FabricLink* link = FindLink(inventory, "0x0002c90300080e84", 1);
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->a_guid(), "0x0002c90300080e84");
  EXPECT_EQ(link->b_guid(), "0x0008f10500108bba");
  EXPECT_EQ(link->b_port(), 27u);
  EXPECT_EQ(link->speed(), "QDR");
  EXPECT_EQ(link->rate_bits_per_second(), 40'000'000'000u);

  std::optional<size_t> sw = topology.FindNode(0x0008f10500200b50);
  ASSERT_TRUE(sw.has_value());
  const Node& node = topology.nodes[*sw];
  EXPECT_EQ(node.type, NodeType::kSwitch);
  EXPECT_EQ(node.description, "Voltaire 4036 - 36 QDR ports switch");
  EXPECT_EQ(node.num_ports, 36u);
  EXPECT_EQ(node.lid, 9u);
  EXPECT_EQ(node.vendor_id, 0x8f1u);
  EXPECT_EQ(node.device_id, 0x5a5au);
  EXPECT_EQ(node.sys_image_guid, 0x8f10500200b51u);
  EXPECT_EQ(node.node_id, "S-0008f10500200b50");
  // CA ports carry their LID and port GUID.
  std::optional<size_t> ca = topology.FindNode(0x0002c90300080e84);
  ASSERT_TRUE(ca.has_value());
  const Port* ca_port = topology.nodes[*ca].FindPort(1);
  ASSERT_NE(ca_port, nullptr);
  EXPECT_EQ(ca_port->lid, 17u);
  EXPECT_EQ(ca_port->guid, 0x2c90300080e85u);
  EXPECT_EQ(topology.nodes[*ca].lid, 17u);
  // Every inventory node has a GUID, and every link end names one.
  for (const v1::FabricNode& n : inventory.fabric_nodes()) {
    EXPECT_EQ(n.guid().size(), 18u) << n.ShortDebugString();
  }
}

TEST(IbnetdiscoverParserTest, InventoryIsDeterministic) {
  const std::string text = Fixture("ib/ibnetdiscover/psmn_X5_voltaire-qdr_ibnetdiscover.topofile");
  absl::StatusOr<ParsedSubnet> a = ParseIbnetdiscover(text);
  absl::StatusOr<ParsedSubnet> b = ParseIbnetdiscover(text);
  ASSERT_TRUE(a.ok() && b.ok());
  v1::Inventory ia, ib;
  AppendToInventory(a->topology, ia);
  AppendToInventory(b->topology, ib);
  EXPECT_EQ(ia.SerializeAsString(), ib.SerializeAsString());
}

// ---------------------------------------------------------------------------------------------
// ibnetdiscover -p (treydock/infiniband_exporter fixtures, OSC fabrics, edited upstream).

TEST(IbnetdiscoverParserTest, ParsesPortsReport) {
  absl::StatusOr<ParsedSubnet> parsed =
      ParseIbnetdiscover(Fixture("ib/treydock_infiniband_exporter/ibnetdiscover/test.out"));
  ASSERT_THAT(parsed, fabricmon::testing::IsOk());
  EXPECT_EQ(parsed->format, TopologyFormat::kPortsReport);
  v1::Inventory inventory;
  AppendToInventory(parsed->topology, inventory);
  // Links: 134↔1719/10, 133↔1719/11, 1432↔2052/35, 1719/1↔1516/1.
  EXPECT_EQ(inventory.fabric_links_size(), 4);
  const v1::FabricLink* link = FindLink(inventory, "0x7cfe9003009ce5b0", 10);
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->width(), 4u);
  EXPECT_EQ(link->speed(), "EDR");
  // Switches by node GUID; CAs by port GUID in node_id (-p carries no node GUID).
  std::optional<size_t> sw = parsed->topology.FindNode(0x7cfe9003009ce5b0);
  ASSERT_TRUE(sw.has_value());
  EXPECT_EQ(parsed->topology.nodes[*sw].description, "ib-i1l1s01");
  EXPECT_EQ(parsed->topology.nodes[*sw].lid, 1719u);
  bool found_ca = false;
  for (const Node& node : parsed->topology.nodes) {
    if (node.node_id == "0x7cfe9003003b4bde") {
      found_ca = true;
      EXPECT_EQ(node.type, NodeType::kCa);
      EXPECT_EQ(node.guid, 0u);
      EXPECT_EQ(node.description, "o0001 HCA-1");
      EXPECT_EQ(node.lid, 134u);
    }
  }
  EXPECT_TRUE(found_ca);
  // An unconnected port with an unknown speed ("4x ???") is kept as a port without a peer.
  std::optional<size_t> other = parsed->topology.FindNode(0x506b4b03005c2740);
  ASSERT_TRUE(other.has_value());
  const Port* p37 = parsed->topology.nodes[*other].FindPort(37);
  ASSERT_NE(p37, nullptr);
  EXPECT_FALSE(p37->remote_node.has_value());
  EXPECT_EQ(p37->width, 4u);
  EXPECT_EQ(p37->speed, LinkSpeed::kUnknown);
}

TEST(IbnetdiscoverParserTest, PortsReportTrimsDescriptionsAndAcceptsUnquoted) {
  absl::StatusOr<ParsedSubnet> parsed =
      ParseIbnetdiscover(Fixture("ib/treydock_infiniband_exporter/ibnetdiscover/test3.out"));
  ASSERT_THAT(parsed, fabricmon::testing::IsOk());
  ASSERT_EQ(parsed->topology.nodes.size(), 1u);
  for (const Node& node : parsed->topology.nodes) {
    EXPECT_EQ(node.description, "Infiniscale-IV Mellanox Technologies");
    EXPECT_EQ(node.type, NodeType::kSwitch);
  }
}

TEST(IbnetdiscoverParserTest, RejectsContradictoryCablingWithLineNumber) {
  // test2.out is edited upstream: port 1 of the SHARP "Aggregation Node" 0x946dae0300630bfe is
  // cabled to port 81 of two different switches (lines 1 and 5). A topology cannot be both.
  absl::StatusOr<ParsedSubnet> parsed =
      ParseIbnetdiscover(Fixture("ib/treydock_infiniband_exporter/ibnetdiscover/test2.out"));
  ASSERT_THAT(parsed, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(parsed.status().message(), HasSubstr("line 5:"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("already cabled"));
}

// ---------------------------------------------------------------------------------------------
// ibsim's net examples: the same grammar without GUIDs.

struct IbsimExample {
  const char* file;
  size_t switches;
  size_t cas;
  int links;
};

class IbsimNetExampleTest : public ::testing::TestWithParam<IbsimExample> {};

TEST_P(IbsimNetExampleTest, Parses) {
  const IbsimExample& example = GetParam();
  absl::StatusOr<ParsedSubnet> parsed =
      ParseIbnetdiscover(Fixture(absl::StrCat("ib/ibsim-net-examples/", example.file)));
  ASSERT_THAT(parsed, fabricmon::testing::IsOk());
  EXPECT_EQ(parsed->format, TopologyFormat::kIbsimNet);
  EXPECT_EQ(parsed->topology.CountNodes(NodeType::kSwitch), example.switches);
  EXPECT_EQ(parsed->topology.CountNodes(NodeType::kCa), example.cas);
  v1::Inventory inventory;
  AppendToInventory(parsed->topology, inventory);
  EXPECT_EQ(inventory.fabric_links_size(), example.links);
  for (const v1::FabricNode& node : inventory.fabric_nodes()) {
    EXPECT_TRUE(node.guid().empty());
    EXPECT_FALSE(node.node_id().empty());
    EXPECT_EQ(node.description(), node.node_id());
  }
  for (const v1::FabricLink& link : inventory.fabric_links()) {
    EXPECT_FALSE(link.a_guid().empty());  // node ids stand in for GUIDs
  }
}

INSTANTIATE_TEST_SUITE_P(NetExamples, IbsimNetExampleTest,
                         ::testing::Values(IbsimExample{"net", 2, 2, 4},
                                           IbsimExample{"net.1", 1, 2, 2},
                                           IbsimExample{"net.2sw2path", 2, 2, 4},
                                           IbsimExample{"net.2sw2path4hca", 2, 4, 6},
                                           IbsimExample{"net.2sw2path4hca2port", 2, 2, 6}),
                         [](const ::testing::TestParamInfo<IbsimExample>& info) {
                           std::string name = info.param.file;
                           for (char& c : name) {
                             if (c == '.') c = '_';
                           }
                           return name;
                         });

TEST(IbnetdiscoverParserTest, IbsimWidthOption) {
  absl::StatusOr<ParsedSubnet> parsed =
      ParseIbnetdiscover("Switch 8 \"S1\"\n[1] \"H1\"[1] w=12\n\nHca 1 \"H1\"\n[1] \"S1\"[1]\n");
  ASSERT_THAT(parsed, fabricmon::testing::IsOk());
  v1::Inventory inventory;
  AppendToInventory(parsed->topology, inventory);
  ASSERT_EQ(inventory.fabric_links_size(), 1);
  EXPECT_EQ(inventory.fabric_links(0).width(), 12u);
}

// ---------------------------------------------------------------------------------------------
// Hostile input: a Status with a line number, never a crash.

struct BadInput {
  const char* name;
  std::string text;
  const char* message;  // substring of the error
};

class HostileInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(HostileInputTest, FailsWithLineNumber) {
  absl::StatusOr<ParsedSubnet> parsed = ParseIbnetdiscover(GetParam().text);
  ASSERT_THAT(parsed, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(parsed.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Table, HostileInputTest,
    ::testing::Values(
        BadInput{"Empty", "", "no nodes"}, BadInput{"OnlyComments", "# nothing\n#\n\n", "no nodes"},
        BadInput{"Garbage", "hello world\n", "line 1:"},
        BadInput{"Binary", std::string("Switch 8 \"a\0b\"\n", 16), "NUL"},
        BadInput{"PortBeforeHeader", "[1] \"x\"[1]\n", "line 1: port line outside"},
        BadInput{"UnterminatedQuote", "Switch 8 \"S1\n", "line 1: expected the quoted node id"},
        BadInput{"MissingPortCount", "Switch \"S1\"\n", "line 1: expected the port count"},
        BadInput{"HugePortCount", "Switch 99999999999999 \"S1\"\n", "line 1"},
        BadInput{"PortOutOfRange", "Switch 8 \"S1\"\n[9] \"H\"[1]\n", "line 2: port 9 is outside"},
        BadInput{"PortZero", "Switch 8 \"S1\"\n[0] \"H\"[1]\n", "line 2: port 0 is outside"},
        BadInput{"MissingRemotePort", "Switch 8 \"S1\"\n[1] \"H\"\n", "line 2: expected [port]"},
        BadInput{"BadRemotePort", "Switch 8 \"S1\"\n[1] \"H\"[x]\n", "line 2"},
        BadInput{"TrailingJunk", "Switch 8 \"S1\"\n[1] \"H\"[1] junk\n", "line 2: unexpected"},
        BadInput{"DuplicateNode", "Switch 8 \"S1\"\n\nSwitch 8 \"S1\"\n",
                 "line 3: node \"S1\" is defined twice"},
        BadInput{"SelfCable", "Switch 8 \"S1\"\n[1] \"S1\"[1]\n", "itself"},
        BadInput{"DoubleCable", "Switch 8 \"S1\"\n[1] \"H1\"[1]\n[2] \"H1\"[1]\n\nHca 1 \"H1\"\n",
                 "line 3: port 1 of \"H1\" is already cabled"},
        BadInput{"FarEndTooSmall", "Switch 8 \"S1\"\n[1] \"H1\"[2]\n\nHca 1 \"H1\"\n",
                 "line 4: \"H1\" has 1 ports"},
        BadInput{"UndefinedIbsimNode", "Switch 8 \"S1\"\n[1] \"H1\"[1]\n", "never defined"},
        BadInput{"BadGuidLine", "switchguid=0xZZ\nSwitch 8 \"S1\"\n", "line 1: bad value"},
        BadInput{"UnknownKey", "colour=0x1\n", "line 1: unknown key"},
        BadInput{"TypeMismatch", "caguid=0x1\nSwitch 8 \"S1\"\n", "line 2: node type disagrees"},
        BadInput{"Include", "include other.net\n", "line 1: ibsim 'include'"},
        BadInput{"BadWidth", "Switch 8 \"S1\"\n[1] \"H\"[1] w=many\n", "line 2: bad w="},
        BadInput{"ReportMissingFields", "SW 12\n", "line 1: expected <lid> <port> <guid>"},
        BadInput{"ReportBadPeer", "SW 1 1 0x1 4x QDR - XX 2 1 0x2 ( 'a' - 'b' )\n",
                 "line 1: expected CA, SW or RT"},
        BadInput{"ReportUnclosed", "SW 1 1 0x1 4x QDR - CA 2 1 0x2 ( 'a' - 'b'\n",
                 "line 1: expected ( 'local desc'"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

TEST(IbnetdiscoverParserTest, RejectsOversizedInputWithoutReadingIt) {
  const std::string big(kMaxTopologyFileBytes + 1, '#');
  EXPECT_THAT(ParseIbnetdiscover(big), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(IbnetdiscoverParserTest, AcceptsCrlfAndGroupedHeadings) {
  absl::StatusOr<ParsedSubnet> parsed = ParseIbnetdiscover(
      "Chassis 1 (guid 0x1)\r\nswitchguid=0x10(10)\r\nSwitch\t4 \"S-0000000000000010\"\t\t# "
      "\"leaf\" base port 0 lid 3 lmc 0\r\n[1][ext 1]\t\"H-0000000000000020\"[1](21) \t\t# "
      "\"node1 mlx5_0\" lid 7 2xNDR\r\n");
  ASSERT_THAT(parsed, fabricmon::testing::IsOk());
  EXPECT_EQ(parsed->skipped_lines, 1);
  v1::Inventory inventory;
  AppendToInventory(parsed->topology, inventory);
  ASSERT_EQ(inventory.fabric_links_size(), 1);
  EXPECT_EQ(inventory.fabric_links(0).width(), 2u);
  EXPECT_EQ(inventory.fabric_links(0).speed(), "NDR");
  EXPECT_EQ(inventory.fabric_links(0).rate_bits_per_second(), 200'000'000'000u);
  // The placeholder CA (its record is not in the file) takes its LID from the comment.
  std::optional<size_t> ca = parsed->topology.FindNode(0x20);
  ASSERT_TRUE(ca.has_value());
  EXPECT_EQ(parsed->topology.nodes[*ca].description, "node1 mlx5_0");
  EXPECT_EQ(parsed->topology.nodes[*ca].lid, 7u);
}

// Mutations of a real file (truncation, byte flips, line shuffles) must never crash; most fail
// cleanly, some still parse. Deterministic seed.
TEST(IbnetdiscoverParserTest, SurvivesMutatedInput) {
  const std::string base =
      Fixture("ib/ibnetdiscover/psmn_X5_voltaire-qdr_ibnetdiscover.topofile").substr(0, 6000) +
      Fixture("ib/treydock_infiniband_exporter/ibnetdiscover/test.out");
  std::mt19937 rng(20240601);
  const std::string alphabet = "[]()\"'#=x0123456789abcdefSHCRW- \t\n\r\xff";
  int failed = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string text = base.substr(0, rng() % (base.size() + 1));
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips && !text.empty(); ++f) {
      text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
    }
    absl::StatusOr<ParsedSubnet> parsed = ParseIbnetdiscover(text);
    if (!parsed.ok()) {
      ++failed;
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    } else {
      v1::Inventory inventory;
      AppendToInventory(parsed->topology, inventory);  // must not crash either
    }
  }
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace fabricmon::fabric_model
