// The engine's topology under untrusted agents: an agent's switch topology ages out when the agent
// has been gone for the retention window, a GUID two nodes claim is reported (GetTopology and
// fabricmon_topology_guid_conflicts), and the operator's link list wins over a sweep that
// contradicts it (reported as a disagreement).

#include <string>

#include "daemon/detectors/engine.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "tests/unit/daemon/detectors/detector_test_util.h"

namespace fabricmon::detectors {
namespace {

using testing::Exported;
using testing::FabricFixture;

v1::Inventory Hca(const std::string& guid) {
  v1::Inventory host;
  v1::RdmaDevice* hca = host.add_rdma_devices();
  hca->set_name("mlx5_0");
  hca->set_node_guid(guid);
  hca->add_ports()->set_number(1);
  return host;
}

// leaf01 port 7 cabled to the HCA with node GUID `hca_guid`.
v1::Inventory Sweep(const std::string& hca_guid) {
  v1::Inventory fabric;
  v1::FabricNode* sw = fabric.add_fabric_nodes();
  sw->set_guid("0x0002c90300000100");
  sw->set_type(v1::FabricNode::TYPE_SWITCH);
  sw->set_description("leaf01");
  v1::FabricLink* link = fabric.add_fabric_links();
  link->set_a_guid("0x0002c90300000100");
  link->set_a_port(7);
  link->set_b_guid(hca_guid);
  link->set_b_port(1);
  return fabric;
}

double Gauge(const DetectionEngine& engine, const std::string& name) {
  for (const prometheus::MetricFamily& family : Exported(engine)) {
    if (family.name == name && !family.metric.empty()) {
      return family.metric[0].gauge.value;
    }
  }
  return -1;
}

class EngineTopologyTrustTest : public ::testing::Test {
 protected:
  EngineTopologyTrustTest()
      : engine_(fabric_.store(), fabric_.clock(), v1::DetectorThresholds(), 1000000000) {}
  FabricFixture fabric_;
  DetectionEngine engine_;
};

TEST_F(EngineTopologyTrustTest, ASweepersTopologyAgesOutAfterTheRetention) {
  engine_.SetAgentTopologyRetention(int64_t{600} * 1000000000);
  fabric_.Node("node1", Hca("0x0002c90300000001"));
  fabric_.Node("sweeper", Sweep("0x0002c90300000001"));
  engine_.Tick();
  ASSERT_EQ(engine_.GetTopology().links_size(), 1);

  fabric_.Disconnect("sweeper");
  fabric_.clock().AdvanceMillis(600'000);  // gone exactly the window: still counts
  engine_.Tick();
  EXPECT_EQ(engine_.GetTopology().links_size(), 1);
  fabric_.clock().AdvanceMillis(1'000);  // longer than the window
  engine_.Tick();
  EXPECT_EQ(engine_.GetTopology().links_size(), 0);
  EXPECT_EQ(engine_.topology_links(), 0u);
}

TEST_F(EngineTopologyTrustTest, AConnectedSweeperNeverAgesOut) {
  engine_.SetAgentTopologyRetention(int64_t{60} * 1000000000);
  fabric_.Node("node1", Hca("0x0002c90300000001"));
  fabric_.Node("sweeper", Sweep("0x0002c90300000001"));
  fabric_.clock().AdvanceMillis(3'600'000);
  engine_.Tick();
  EXPECT_EQ(engine_.GetTopology().links_size(), 1);
}

TEST_F(EngineTopologyTrustTest, AGuidConflictIsServedAndCounted) {
  fabric_.Node("node1", Hca("0x0002c90300000001"));
  fabric_.Node("node2", Hca("0002:c903:0000:0001"));
  fabric_.Node("sweeper", Sweep("0x0002c90300000001"));
  engine_.Tick();
  const v1::GetTopologyResponse topology = engine_.GetTopology();
  ASSERT_EQ(topology.guid_conflicts_size(), 1);
  EXPECT_EQ(topology.guid_conflicts(0).guid(), "0x0002c90300000001");
  ASSERT_EQ(topology.guid_conflicts(0).nodes_size(), 2);
  EXPECT_EQ(topology.guid_conflicts(0).nodes(0), "node1");
  EXPECT_EQ(topology.guid_conflicts(0).nodes(1), "node2");
  ASSERT_EQ(topology.links_size(), 1);
  EXPECT_EQ(topology.links(0).a().node(), "ca:0x0002c90300000001");  // neither node's
  EXPECT_EQ(Gauge(engine_, "fabricmon_topology_guid_conflicts"), 1);
}

TEST_F(EngineTopologyTrustTest, TheLinkListWinsAndTheDisagreementIsServedAndCounted) {
  ASSERT_TRUE(engine_.SetLinkList("node1/mlx5_0/1 switch:leaf01/7\n").ok());
  fabric_.Node("node3", Hca("0x0002c90300000003"));
  fabric_.Node("sweeper", Sweep("0x0002c90300000003"));
  engine_.Tick();
  const v1::GetTopologyResponse topology = engine_.GetTopology();
  ASSERT_EQ(topology.links_size(), 1);
  EXPECT_EQ(topology.links(0).a().node(), "node1");
  EXPECT_EQ(topology.links(0).source(), v1::LINK_SOURCE_LINK_LIST);
  ASSERT_EQ(topology.disagreements_size(), 1);
  EXPECT_NE(topology.disagreements(0).find("node3"), std::string::npos);
  EXPECT_EQ(Gauge(engine_, "fabricmon_topology_disagreements"), 1);
}

}  // namespace
}  // namespace fabricmon::detectors
