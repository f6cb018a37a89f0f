#include "collectors/fabric_model/subnet.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricmon::fabric_model {
namespace {

TEST(TopologyTest, FormatsAndParsesGuids) {
  EXPECT_EQ(FormatGuid(0x2c90200417670), "0x0002c90200417670");
  EXPECT_EQ(ParseGuid("0x2c90200417670"), 0x2c90200417670u);
  EXPECT_EQ(ParseGuid("0002c90200417670"), 0x2c90200417670u);
  EXPECT_EQ(ParseGuid(" 0XFFFFFFFFFFFFFFFF "), UINT64_MAX);
  EXPECT_FALSE(ParseGuid("").has_value());
  EXPECT_FALSE(ParseGuid("0x").has_value());
  EXPECT_FALSE(ParseGuid("0x10000000000000000").has_value());  // 17 digits
  EXPECT_FALSE(ParseGuid("0002:c903:0a1b:2c3d").has_value());
  EXPECT_FALSE(ParseGuid("-1").has_value());
}

TEST(TopologyTest, CleansNodeDescriptions) {
  EXPECT_EQ(CleanDescription(std::string("leaf01\0\0\0garbage", 16)), "leaf01");
  EXPECT_EQ(CleanDescription(" 5FB0406-spine-IB02 "), "5FB0406-spine-IB02");
  EXPECT_EQ(CleanDescription("a\tb\x01"
                             "c"),
            "a b c");
  EXPECT_EQ(CleanDescription(""), "");
}

TEST(TopologyTest, DecodesPortInfoWidthAndSpeed) {
  // IBA 1.4 Table 147.
  EXPECT_EQ(LanesFromWidthBits(1), 1u);
  EXPECT_EQ(LanesFromWidthBits(2), 4u);
  EXPECT_EQ(LanesFromWidthBits(4), 8u);
  EXPECT_EQ(LanesFromWidthBits(8), 12u);
  EXPECT_EQ(LanesFromWidthBits(16), 2u);
  EXPECT_EQ(LanesFromWidthBits(3), 0u);
  EXPECT_EQ(SpeedFromPortInfo(1, 0, 0), LinkSpeed::kSdr);
  EXPECT_EQ(SpeedFromPortInfo(4, 0, 0), LinkSpeed::kQdr);
  EXPECT_EQ(SpeedFromPortInfo(4, 0, 1), LinkSpeed::kFdr10);
  EXPECT_EQ(SpeedFromPortInfo(4, 2, 0), LinkSpeed::kEdr);
  EXPECT_EQ(SpeedFromPortInfo(4, 4, 1), LinkSpeed::kHdr);
  EXPECT_EQ(SpeedFromPortInfo(4, 8, 0), LinkSpeed::kNdr);
  EXPECT_EQ(SpeedFromPortInfo(7, 0, 0), LinkSpeed::kUnknown);
  EXPECT_EQ(SpeedFromPortInfo(4, 31, 0), LinkSpeed::kQdr);  // "no extended speed"
  // Lane rates as sysfs `rate` counts them: 4X QDR = 40 Gb/s, 4X NDR = 400 Gb/s.
  EXPECT_EQ(4 * LaneBitsPerSecond(LinkSpeed::kQdr), 40'000'000'000u);
  EXPECT_EQ(4 * LaneBitsPerSecond(LinkSpeed::kNdr), 400'000'000'000u);
  EXPECT_EQ(ParseLinkSpeed("fdr10"), LinkSpeed::kFdr10);
  EXPECT_FALSE(ParseLinkSpeed("???").has_value());
  EXPECT_EQ(PortStateName(4), "Active");
  EXPECT_EQ(PhysStateName(2), "Polling");
  EXPECT_EQ(PortStateName(9), "");
}

Subnet TwoSwitches() {
  Subnet topology;
  Node a;
  a.guid = 0x20;
  a.type = NodeType::kSwitch;
  a.description = "spine";
  a.num_ports = 4;
  Node b;
  b.guid = 0x10;
  b.type = NodeType::kSwitch;
  b.description = "leaf";
  b.num_ports = 4;
  Port a1;
  a1.number = 1;
  a1.remote_node = 1;
  a1.remote_port = 3;
  a1.width = 4;
  a1.speed = LinkSpeed::kHdr;
  a1.state = 4;
  a1.phys_state = 5;
  Port b3;
  b3.number = 3;
  b3.remote_node = 0;
  b3.remote_port = 1;
  b3.width = 4;
  b3.speed = LinkSpeed::kHdr;
  b3.state = 4;
  Port b4;  // down, no peer
  b4.number = 4;
  b4.state = 1;
  a.ports = {a1};
  b.ports = {b3, b4};
  topology.nodes = {a, b};
  return topology;
}

TEST(TopologyTest, ListsEachLinkOnceSmallerEndFirst) {
  Subnet topology = TwoSwitches();
  std::vector<Link> links = topology.Links();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].a_node, 1u);  // 0x10 sorts before 0x20
  EXPECT_EQ(links[0].a_port, 3u);
  EXPECT_EQ(links[0].b_node, 0u);
  EXPECT_EQ(links[0].b_port, 1u);
  EXPECT_EQ(topology.CountNodes(NodeType::kSwitch), 2u);
  EXPECT_EQ(topology.FindNode(0x20), 0u);
  EXPECT_FALSE(topology.FindNode(0x30).has_value());
}

TEST(TopologyTest, AppendsSortedInventory) {
  v1::Inventory inventory;
  AppendToInventory(TwoSwitches(), inventory);
  ASSERT_EQ(inventory.fabric_nodes_size(), 2);
  EXPECT_EQ(inventory.fabric_nodes(0).guid(), "0x0000000000000010");
  EXPECT_EQ(inventory.fabric_nodes(0).type(), v1::FabricNode::TYPE_SWITCH);
  ASSERT_EQ(inventory.fabric_links_size(), 1);
  const v1::FabricLink& link = inventory.fabric_links(0);
  EXPECT_EQ(link.a_guid(), "0x0000000000000010");
  EXPECT_EQ(link.a_port(), 3u);
  EXPECT_EQ(link.b_guid(), "0x0000000000000020");
  EXPECT_EQ(link.b_port(), 1u);
  EXPECT_EQ(link.width(), 4u);
  EXPECT_EQ(link.speed(), "HDR");
  EXPECT_EQ(link.state(), 4u);
  EXPECT_EQ(link.rate_bits_per_second(), 200'000'000'000u);
}

}  // namespace
}  // namespace fabricmon::fabric_model
