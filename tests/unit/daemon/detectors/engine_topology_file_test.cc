// The engine with a static fabric parsed from real ibnetdiscover output (PSMN "X5",
// shared/fixtures/ib/ibnetdiscover) and an ibsim net file: the topology it serves (GetTopology)
// and the peer a finding on a host port gets from it. Built only with the ib_fabric parser.

#include <string>

#include "collectors/fabric_model/ibnetdiscover_parser.h"
#include "daemon/common/file_reader.h"
#include "daemon/detectors/engine.h"
#include "daemon/detectors/families.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

namespace fabricmon::detectors {
namespace {

using testing::FabricFixture;
using testing::HostCounter;

constexpr char kX5[] = "ib/ibnetdiscover/psmn_X5_voltaire-qdr_ibnetdiscover.topofile";

v1::Inventory ParsedFabric(const std::string& relative) {
  absl::StatusOr<std::string> text = ReadSmallFile(fabricmon::testing::SharedFixture(relative),
                                                   fabric_model::kMaxTopologyFileBytes);
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<fabric_model::ParsedSubnet> parsed =
      fabric_model::ParseIbnetdiscover(text.ok() ? *text : "");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  v1::Inventory inventory;
  if (parsed.ok()) {
    fabric_model::AppendToInventory(parsed->topology, inventory);
  }
  return inventory;
}

// The link whose a end is `node` port `port`, or nullptr.
const v1::TopologyLink* LinkFrom(const v1::GetTopologyResponse& response, const std::string& node,
                                 uint32_t port) {
  for (const v1::TopologyLink& link : response.links()) {
    if (link.a().node() == node && link.a().port() == port) {
      return &link;
    }
  }
  return nullptr;
}

// r510gluster1 (psmn_X5_guid-hostname.map: H-0002c90300080e84) runs an agent; its HCA's node GUID
// as sysfs writes it.
v1::Inventory R510Gluster1() {
  v1::Inventory inventory;
  v1::RdmaDevice* device = inventory.add_rdma_devices();
  device->set_name("mlx4_0");
  device->set_node_guid("0002:c903:0008:0e84");
  device->add_ports()->set_number(1);
  return inventory;
}

class EngineTopologyFileTest : public ::testing::Test {
 protected:
  EngineTopologyFileTest()
      : engine_(fabric_.store(), fabric_.clock(), v1::DetectorThresholds(), 1000000000) {}
  FabricFixture fabric_;
  DetectionEngine engine_;
};

TEST_F(EngineTopologyFileTest, ServesEveryCableOfTheFileWithHostsNamedByTheirAgents) {
  fabric_.Node("r510gluster1", R510Gluster1());
  engine_.SetStaticFabric(ParsedFabric(kX5));
  engine_.Tick();
  const v1::GetTopologyResponse topology = engine_.GetTopology();
  EXPECT_NE(topology.resolved_unix_nanos(), 0);

  // 89 CA cables + 70 inter-switch cables (as the parser counts them): none merged, although
  // most nodes share a vendor-default description.
  EXPECT_EQ(topology.links_size(), 159);
  EXPECT_EQ(topology.switches(), 11u);
  EXPECT_EQ(topology.hosts(), 89u);
  EXPECT_EQ(engine_.topology_links(), 159u);
  for (const v1::TopologyLink& link : topology.links()) {
    EXPECT_EQ(link.source(), v1::LINK_SOURCE_TOPOLOGY_FILE);
  }
  // Host cables first.
  EXPECT_FALSE(topology.links(0).a().is_switch());
  EXPECT_TRUE(topology.links(topology.links_size() - 1).a().is_switch());

  // The agent's host by node name and device; the switch by its (unique) description.
  const v1::TopologyLink* r510 = LinkFrom(topology, "r510gluster1", 1);
  ASSERT_NE(r510, nullptr);
  EXPECT_EQ(r510->a().device(), "mlx4_0");
  EXPECT_FALSE(r510->a().is_switch());
  EXPECT_EQ(r510->a().guid(), "0x0002c90300080e84");
  EXPECT_EQ(r510->b().node(), "Voltaire 4036 # 4036-8BBA");
  EXPECT_TRUE(r510->b().is_switch());
  EXPECT_EQ(r510->b().port(), 27u);
  EXPECT_EQ(r510->b().guid(), "0x0008f10500108bba");

  // A CA no agent claims, whose description ("MT25408 ConnectX Mellanox Technologies") 88 others
  // share, and its switch, whose "Voltaire 4036 - 36 QDR ports switch" 3 others share: by GUID.
  const v1::TopologyLink* ca = LinkFrom(topology, "ca:0x003048c749cd0000", 1);
  ASSERT_NE(ca, nullptr);
  EXPECT_EQ(ca->a().device(), "");
  EXPECT_FALSE(ca->a().is_switch());
  EXPECT_EQ(ca->b().node(), "0x0008f10500200b50");
  EXPECT_TRUE(ca->b().is_switch());
  EXPECT_EQ(ca->b().port(), 4u);
}

// The topology is kept between ticks and built again exactly when an input changed: a node's
// inventory (an agent connecting, an inventory update), the static fabric, the link list.
TEST_F(EngineTopologyFileTest, TheTopologyIsBuiltAgainWhenAnInputChangesAndOnlyThen) {
  engine_.SetStaticFabric(ParsedFabric(kX5));
  engine_.Tick();
  engine_.Tick();
  EXPECT_EQ(engine_.topology_builds(), 1u);
  EXPECT_EQ(LinkFrom(engine_.GetTopology(), "r510gluster1", 1), nullptr);

  std::shared_ptr<store::NodeState> node = fabric_.Node("r510gluster1", R510Gluster1());
  engine_.Tick();
  EXPECT_EQ(engine_.topology_builds(), 2u);
  EXPECT_NE(LinkFrom(engine_.GetTopology(), "r510gluster1", 1), nullptr);
  engine_.Tick();
  EXPECT_EQ(engine_.topology_builds(), 2u);

  node->SetInventory(v1::Inventory());  // the agent lost its HCA
  engine_.Tick();
  EXPECT_EQ(engine_.topology_builds(), 3u);
  EXPECT_EQ(LinkFrom(engine_.GetTopology(), "r510gluster1", 1), nullptr);
  EXPECT_NE(LinkFrom(engine_.GetTopology(), "ca:0x0002c90300080e84", 1), nullptr);

  ASSERT_TRUE(engine_.SetLinkList("r510gluster1/mlx4_0/1 switch:0x0008f10500108bba/27\n").ok());
  engine_.Tick();
  EXPECT_EQ(engine_.topology_builds(), 4u);
  const auto topology = engine_.GetTopology();  // LinkFrom points into it
  const v1::TopologyLink* listed = LinkFrom(topology, "r510gluster1", 1);
  ASSERT_NE(listed, nullptr);
  EXPECT_EQ(listed->source(), v1::LINK_SOURCE_LINK_LIST);

  engine_.SetStaticFabric(v1::Inventory());
  engine_.Tick();
  EXPECT_EQ(engine_.topology_builds(), 5u);
  EXPECT_EQ(engine_.topology_links(), 1u);
}

TEST_F(EngineTopologyFileTest, AFlappingHostPortReportsThePeerSwitchPortFromTheFile) {
  fabric_.Node("r510gluster1", R510Gluster1());
  engine_.SetStaticFabric(ParsedFabric(kX5));
  const auto downed = HostCounter(families::kIbLinkDowned, "mlx4_0", 1, 8);
  for (uint64_t value : {3, 3, 4, 5}) {
    fabric_.Set("r510gluster1", downed, value);
    fabric_.Step();
  }
  engine_.Tick();
  std::vector<v1::Finding> findings = engine_.Findings(false, "link_flapping");
  ASSERT_EQ(findings.size(), 1u);
  const v1::Subject& subject = findings[0].subject();
  EXPECT_EQ(subject.node(), "r510gluster1");
  EXPECT_EQ(subject.device(), "mlx4_0");
  EXPECT_EQ(subject.port(), 1u);
  EXPECT_EQ(subject.peer_node(), "");
  EXPECT_EQ(subject.peer_device(), "Voltaire 4036 # 4036-8BBA");
  EXPECT_TRUE(subject.peer_is_switch());
  EXPECT_EQ(subject.peer_port(), 27u);
  EXPECT_THAT(findings[0].summary(), ::testing::HasSubstr("switch Voltaire 4036 # 4036-8BBA/27"));

  // Diagnose follows the same cable to the switch.
  v1::DiagnoseResponse diagnosis = engine_.Diagnose({"r510gluster1"});
  ASSERT_EQ(diagnosis.findings_size(), 1);
  EXPECT_EQ(diagnosis.findings(0).kind(), "link_flapping");
}

TEST_F(EngineTopologyFileTest, BeforeTheFirstTickTheTopologyIsResolvedOnDemand) {
  engine_.SetStaticFabric(ParsedFabric(kX5));
  const v1::GetTopologyResponse topology = engine_.GetTopology();
  EXPECT_EQ(topology.links_size(), 159);
  EXPECT_EQ(topology.resolved_unix_nanos(), fabric_.clock().NowUnixNanos());
}

TEST_F(EngineTopologyFileTest, IbsimNetFileNodesKeepTheirIds) {
  // No GUIDs: links name nodes by their quoted id, which must not collapse into one "0x" node.
  engine_.SetStaticFabric(ParsedFabric("ib/ibsim-net-examples/net.2sw2path4hca"));
  engine_.Tick();
  const v1::GetTopologyResponse topology = engine_.GetTopology();
  EXPECT_EQ(topology.links_size(), 6);  // 4 HCA cables, 2 between the switches
  EXPECT_EQ(topology.switches(), 2u);
  EXPECT_EQ(topology.hosts(), 4u);
  const v1::TopologyLink* hca1 = LinkFrom(topology, "ca:Hca1", 1);
  ASSERT_NE(hca1, nullptr);
  EXPECT_EQ(hca1->a().guid(), "");
  EXPECT_EQ(hca1->b().node(), "Switch1");
  EXPECT_TRUE(hca1->b().is_switch());
  EXPECT_EQ(hca1->b().port(), 1u);
}

TEST_F(EngineTopologyFileTest, TheSameCableFromALinkListKeepsTheFileAsItsSource) {
  engine_.SetStaticFabric(ParsedFabric(kX5));
  // The first inter-switch cable of the file (both switches named by GUID), and a new one.
  ASSERT_TRUE(engine_
                  .SetLinkList("switch:0x0008f10500108098/34  switch:0x0002c90200417670/7\n"
                               "nodeX/mlx5_0/1  switch:leaf01/1\n")
                  .ok());
  engine_.Tick();
  const v1::GetTopologyResponse topology = engine_.GetTopology();
  EXPECT_EQ(topology.links_size(), 160);
  const v1::TopologyLink* both = LinkFrom(topology, "0x0002c90200417670", 7);
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(both->b().node(), "0x0008f10500108098");
  EXPECT_EQ(both->b().port(), 34u);
  EXPECT_EQ(both->source(), v1::LINK_SOURCE_TOPOLOGY_FILE);
  const v1::TopologyLink* listed = LinkFrom(topology, "nodeX", 1);
  ASSERT_NE(listed, nullptr);
  EXPECT_EQ(listed->source(), v1::LINK_SOURCE_LINK_LIST);
  EXPECT_EQ(listed->b().node(), "leaf01");
  EXPECT_EQ(listed->a().guid(), "");
}

}  // namespace
}  // namespace fabricmon::detectors
