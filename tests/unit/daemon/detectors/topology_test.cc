#include "daemon/detectors/topology.h"

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::detectors {
namespace {

using fabricmon::testing::StatusIs;

Endpoint Host(std::string node, std::string device, uint32_t port) {
  Endpoint e;
  e.node = std::move(node);
  e.device = std::move(device);
  e.port = port;
  return e;
}

Endpoint Switch(std::string name, uint32_t port) {
  Endpoint e;
  e.node = std::move(name);
  e.port = port;
  e.is_switch = true;
  return e;
}

TEST(TopologyTest, CanonicalGuidAcceptsSysfsAndIbFormats) {
  EXPECT_EQ(CanonicalGuid("0x0002c90300a1b2c3"), "0002c90300a1b2c3");
  EXPECT_EQ(CanonicalGuid("0002:c903:00a1:b2c3"), "0002c90300a1b2c3");
  EXPECT_EQ(CanonicalGuid("0xABC"), "0000000000000abc");
  EXPECT_EQ(CanonicalGuid("not a guid"), "");
  EXPECT_EQ(CanonicalGuid("0x0123456789abcdef0"), "");
}

TEST(TopologyTest, LinkListBothDirectionsAndNetdevCanonicalised) {
  Topology topology;
  v1::Inventory inventory;
  v1::RdmaDevice* device = inventory.add_rdma_devices();
  device->set_name("mlx5_2");
  v1::RdmaPort* port = device->add_ports();
  port->set_number(1);
  port->add_netdevs("eth2");
  topology.AddInventory("node1", inventory);
  FABRICMON_ASSERT_OK(topology.AddLinkList(
      "# a comment\n"
      "node1/eth2 switch:leaf1/3   # RoCE netdev\n"
      "\n"
      "switch:leaf1/49\tswitch:spine1/1\n"));
  EXPECT_EQ(topology.link_count(), 2u);
  auto peer = topology.PeerOf(Host("node1", "mlx5_2", 1));
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(*peer, Switch("leaf1", 3));
  // The netdev spelling finds the same cable.
  EXPECT_EQ(*topology.PeerOf(Host("node1", "eth2", 1)), Switch("leaf1", 3));
  EXPECT_EQ(*topology.PeerOf(Switch("leaf1", 3)), Host("node1", "mlx5_2", 1));
  EXPECT_EQ(*topology.PeerOf(Switch("spine1", 1)), Switch("leaf1", 49));
  EXPECT_EQ(topology.PortsOf("leaf1", true).size(), 2u);
  EXPECT_FALSE(topology.PeerOf(Switch("leaf1", 4)).has_value());
}

TEST(TopologyTest, MalformedLinkListNamesTheLine) {
  Topology topology;
  absl::Status status = topology.AddLinkList("node1/mlx5_0 switch:leaf1/1\nnode2 leaf1\n");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(status.message().find("line 2"), absl::string_view::npos) << status;
  EXPECT_THAT(topology.AddLinkList("switch:leaf1/x node1/mlx5_0"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(topology.AddLinkList("a/b c/d e/f"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TopologyTest, FabricLinksResolveHostsByNodeGuid) {
  Topology topology;
  v1::Inventory host;
  v1::RdmaDevice* device = host.add_rdma_devices();
  device->set_name("mlx5_0");
  device->set_node_guid("0002:c903:0000:0001");
  topology.AddInventory("node1", host);
  v1::Inventory fabric;
  v1::FabricNode* sw = fabric.add_fabric_nodes();
  sw->set_guid("0x0002c90300000100");
  sw->set_type(v1::FabricNode::TYPE_SWITCH);
  sw->set_description("  leaf01 ");
  v1::FabricLink* link = fabric.add_fabric_links();
  link->set_a_guid("0x0002c90300000100");
  link->set_a_port(7);
  link->set_b_guid("0x0002c90300000001");
  link->set_b_port(1);
  topology.AddInventory("sweeper", fabric);
  topology.Resolve();
  auto peer = topology.PeerOf(Host("node1", "mlx5_0", 1));
  ASSERT_TRUE(peer.has_value());
  EXPECT_TRUE(peer->is_switch);
  EXPECT_EQ(peer->node, "leaf01");
  EXPECT_EQ(peer->port, 7u);
}

}  // namespace
}  // namespace fabricmon::detectors
