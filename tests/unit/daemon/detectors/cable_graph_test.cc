#include "daemon/detectors/cable_graph.h"

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

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
  CableGraph topology;
  v1::Inventory inventory;
  v1::RdmaDevice* device = inventory.add_rdma_devices();
  device->set_name("mlx5_2");
  v1::RdmaPort* port = device->add_ports();
  port->set_number(1);
  port->add_netdevs("eth2");
  topology.AddInventory("node1", inventory);
  FABRICMON_ASSERT_OK(
      topology.AddLinkList("# a comment\n"
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
  CableGraph topology;
  absl::Status status = topology.AddLinkList("node1/mlx5_0 switch:leaf1/1\nnode2 leaf1\n");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(status.message().find("line 2"), absl::string_view::npos) << status;
  EXPECT_THAT(topology.AddLinkList("switch:leaf1/x node1/mlx5_0"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(topology.AddLinkList("a/b c/d e/f"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TopologyTest, FabricLinksResolveHostsByNodeGuid) {
  CableGraph topology;
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

// Two switches with one cable, as a collector or a file reports them; both switches share
// `description` when `same_description`.
v1::Inventory TwoSwitches(bool same_description) {
  v1::Inventory fabric;
  for (const char* guid : {"0x0000000000000a01", "0x0000000000000a02"}) {
    v1::FabricNode* sw = fabric.add_fabric_nodes();
    sw->set_guid(guid);
    sw->set_type(v1::FabricNode::TYPE_SWITCH);
    sw->set_description(same_description ? "Vendor 36-port switch"
                                         : std::string("sw-") + (guid + 17));
  }
  v1::FabricLink* link = fabric.add_fabric_links();
  link->set_a_guid("0x0000000000000a01");
  link->set_a_port(1);
  link->set_b_guid("0x0000000000000a02");
  link->set_b_port(2);
  return fabric;
}

TEST(TopologyTest, SharedDescriptionsDoNotMergeFabricNodes) {
  CableGraph topology;
  topology.AddInventory("", TwoSwitches(/*same_description=*/true), LinkSource::kTopologyFile);
  topology.Resolve();
  ASSERT_EQ(topology.link_count(), 1u);
  auto peer = topology.PeerOf(Switch("0x0000000000000a01", 1));
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->node, "0x0000000000000a02");
  EXPECT_EQ(peer->guid, "0000000000000a02");

  CableGraph unique;
  unique.AddInventory("", TwoSwitches(/*same_description=*/false), LinkSource::kTopologyFile);
  unique.Resolve();
  peer = unique.PeerOf(Switch("sw-1", 1));
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->node, "sw-2");
}

// The fabric collector labels a switch port series with the switch's description and GUID; when
// the description is shared the topology names the switch by GUID, and the series' endpoint must
// still meet it (by its switch_guid).
TEST(TopologyTest, ASwitchSeriesEndpointMeetsItsSwitchByGuid) {
  CableGraph topology;
  topology.AddInventory("", TwoSwitches(/*same_description=*/true), LinkSource::kTopologyFile);
  topology.Resolve();
  Endpoint series_end = Switch("Vendor 36-port switch", 1);
  series_end.guid = "0x0000000000000a01";  // as the switch_guid label writes it
  EXPECT_EQ(topology.Canonical(series_end).node, "0x0000000000000a01");
  auto peer = topology.PeerOf(series_end);
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->node, "0x0000000000000a02");
  EXPECT_EQ(peer->port, 2u);

  // Unknown GUIDs, and switches without one (link lists), stay as they are.
  Endpoint unknown = Switch("leaf9", 3);
  unknown.guid = "0x00000000000000ff";
  EXPECT_EQ(topology.Canonical(unknown).node, "leaf9");
  EXPECT_EQ(topology.Canonical(Switch("leaf9", 3)).node, "leaf9");

  // Unique descriptions name the switch; a series endpoint by description already matches.
  CableGraph unique;
  unique.AddInventory("", TwoSwitches(/*same_description=*/false), LinkSource::kTopologyFile);
  unique.Resolve();
  Endpoint by_description = Switch("sw-1", 1);
  by_description.guid = "0000:0000:0000:0a01";
  EXPECT_EQ(unique.Canonical(by_description).node, "sw-1");
  ASSERT_TRUE(unique.PeerOf(by_description).has_value());
}

TEST(TopologyTest, LinksListEachCableOnceHostFirstWithItsMostDirectSource) {
  CableGraph topology;
  ASSERT_TRUE(topology
                  .AddLinkList("switch:sw-1/1 switch:sw-2/2\n"
                               "switch:leaf/3 node1/mlx5_0/1\n")
                  .ok());
  topology.AddInventory("sweeper", TwoSwitches(false));  // the collector sees sw-1/1 ↔ sw-2/2 too
  topology.Resolve();
  const std::vector<TopologyLink> links = topology.Links();
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[0].a, Host("node1", "mlx5_0", 1));
  EXPECT_EQ(links[0].b, Switch("leaf", 3));
  EXPECT_EQ(links[0].source, LinkSource::kLinkList);
  EXPECT_EQ(links[1].a, Switch("sw-1", 1));
  EXPECT_EQ(links[1].b, Switch("sw-2", 2));
  EXPECT_EQ(links[1].source, LinkSource::kFabricCollector);
  EXPECT_EQ(links[1].b.guid, "0000000000000a02");  // the collector's GUIDs, not the list's none
  EXPECT_EQ(LinkSourceName(links[1].source), "fabric collector");

  // Re-cabling a port drops the old cable and its source.
  ASSERT_FALSE(topology.AddLink(Switch("sw-1", 1), Switch("sw-3", 9), LinkSource::kLinkList));
  const std::vector<TopologyLink> recabled = topology.Links();
  ASSERT_EQ(recabled.size(), 2u);
  EXPECT_EQ(recabled[1].b, Switch("sw-3", 9));
  EXPECT_EQ(recabled[1].source, LinkSource::kLinkList);
}

using testing::Hca;

// A sweep that saw leaf01 port 7 cabled to the HCA with node GUID `hca_guid`, port 1.
v1::Inventory SweepLeafTo(const std::string& hca_guid, uint32_t leaf_port = 7) {
  v1::Inventory fabric;
  v1::FabricNode* sw = fabric.add_fabric_nodes();
  sw->set_guid("0x0002c90300000100");
  sw->set_type(v1::FabricNode::TYPE_SWITCH);
  sw->set_description("leaf01");
  v1::FabricLink* link = fabric.add_fabric_links();
  link->set_a_guid("0x0002c90300000100");
  link->set_a_port(leaf_port);
  link->set_b_guid(hca_guid);
  link->set_b_port(1);
  return fabric;
}

// node2 claims node1's HCA GUID: the GUID names neither (the cable keeps the bare GUID, it does
// not move to the impostor), and the conflict is reported with both claimants.
TEST(TopologyTest, AGuidTwoNodesClaimNamesNeitherAndIsReported) {
  for (bool impostor_first : {false, true}) {
    CableGraph topology;
    if (impostor_first) {
      topology.AddInventory("node0-impostor", Hca("mlx5_9", "0x0002c90300000001"));
    }
    topology.AddInventory("node1", Hca("mlx5_0", "0002:c903:0000:0001"));
    if (!impostor_first) {
      topology.AddInventory("node0-impostor", Hca("mlx5_9", "0x0002c90300000001"));
    }
    topology.AddInventory("node1", Hca("mlx5_1", "0002:c903:0000:0002"));  // its own second HCA
    topology.AddInventory("sweeper", SweepLeafTo("0x0002c90300000001"));
    topology.Resolve();
    EXPECT_FALSE(topology.PeerOf(Host("node1", "mlx5_0", 1)).has_value());
    EXPECT_FALSE(topology.PeerOf(Host("node0-impostor", "mlx5_9", 1)).has_value());
    auto peer = topology.PeerOf(Switch("leaf01", 7));
    ASSERT_TRUE(peer.has_value());
    EXPECT_EQ(peer->node, "ca:0x0002c90300000001");  // a CA of no node
    const std::vector<GuidConflict> conflicts = topology.guid_conflicts();
    ASSERT_EQ(conflicts.size(), 1u);
    EXPECT_EQ(conflicts[0].guid, "0002c90300000001");
    EXPECT_EQ(conflicts[0].nodes, (std::vector<std::string>{"node0-impostor", "node1"}));
  }
}

TEST(TopologyTest, OneNodeClaimingAGuidTwiceIsNoConflict) {
  CableGraph topology;
  topology.AddInventory("node1", Hca("mlx5_0", "0x0002c90300000001"));
  topology.AddInventory("node1", Hca("mlx5_0", "0x0002c90300000001"));
  topology.AddInventory("sweeper", SweepLeafTo("0x0002c90300000001"));
  topology.Resolve();
  EXPECT_TRUE(topology.guid_conflicts().empty());
  ASSERT_TRUE(topology.PeerOf(Host("node1", "mlx5_0", 1)).has_value());
}

// The link list cables node1/mlx5_0 to leaf01/7; a sweep says leaf01/7 goes to node3. The
// operator's cable stays whichever comes first, and the disagreement is recorded once.
TEST(TopologyTest, TheOperatorsCableWinsOverTheCollectorInEitherOrder) {
  for (bool list_first : {true, false}) {
    CableGraph topology;
    topology.AddInventory("node3", Hca("mlx5_0", "0x0002c90300000003"));
    if (list_first) {
      ASSERT_TRUE(topology.AddLinkList("node1/mlx5_0/1 switch:leaf01/7\n").ok());
    }
    topology.AddInventory("sweeper", SweepLeafTo("0x0002c90300000003"));
    topology.Resolve();
    if (!list_first) {
      // A contradiction with the collector is no error in the operator's own file.
      const absl::Status added = topology.AddLinkList("node1/mlx5_0/1 switch:leaf01/7\n");
      ASSERT_TRUE(added.ok()) << added;
    }
    auto peer = topology.PeerOf(Switch("leaf01", 7));
    ASSERT_TRUE(peer.has_value()) << list_first;
    EXPECT_EQ(*peer, Host("node1", "mlx5_0", 1)) << list_first;
    EXPECT_FALSE(topology.PeerOf(Host("node3", "mlx5_0", 1)).has_value()) << list_first;
    ASSERT_EQ(topology.disagreements().size(), 1u) << list_first;
    const std::string& line = *topology.disagreements().begin();
    EXPECT_NE(line.find("node3"), std::string::npos) << line;
    EXPECT_NE(line.find("link list"), std::string::npos) << line;
    ASSERT_EQ(topology.Links().size(), 1u);
    EXPECT_EQ(topology.Links()[0].source, LinkSource::kLinkList);
  }
}

// A topology file is the operator's too: a collector's contradicting cable loses to it.
TEST(TopologyTest, TheTopologyFileWinsOverTheCollector) {
  CableGraph topology;
  topology.AddInventory("node1", Hca("mlx5_0", "0x0002c90300000001"));
  topology.AddInventory("node3", Hca("mlx5_0", "0x0002c90300000003"));
  topology.AddInventory("sweeper", SweepLeafTo("0x0002c90300000003"));
  topology.AddInventory("", SweepLeafTo("0x0002c90300000001"), LinkSource::kTopologyFile);
  topology.Resolve();
  auto peer = topology.PeerOf(Switch("leaf01", 7));
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->node, "node1");
  EXPECT_EQ(topology.disagreements().size(), 1u);
}

// Where they agree, nothing is recorded, and the collector's confirmation labels the cable.
TEST(TopologyTest, AgreementIsNoDisagreement) {
  CableGraph topology;
  topology.AddInventory("node1", Hca("mlx5_0", "0x0002c90300000001"));
  ASSERT_TRUE(topology.AddLinkList("node1/mlx5_0/1 switch:leaf01/7\n").ok());
  topology.AddInventory("sweeper", SweepLeafTo("0x0002c90300000001"));
  topology.Resolve();
  EXPECT_TRUE(topology.disagreements().empty());
  ASSERT_EQ(topology.Links().size(), 1u);
  EXPECT_EQ(topology.Links()[0].source, LinkSource::kFabricCollector);
  // Confirmed by the collector, the cable is still the operator's: a later sweep cannot move it.
  EXPECT_FALSE(topology.AddLink(Switch("leaf01", 7), Host("node9", "mlx5_0", 1),
                                LinkSource::kFabricCollector));
  EXPECT_EQ(*topology.PeerOf(Switch("leaf01", 7)), Host("node1", "mlx5_0", 1));
  EXPECT_EQ(topology.disagreements().size(), 1u);
}

}  // namespace
}  // namespace fabricmon::detectors
