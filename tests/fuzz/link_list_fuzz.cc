// Link-list files (AggregatorConfig.link_list_file / --link_list): host port ↔ switch port cabling
// for Ethernet/RoCE fabrics, parsed by detectors::CableGraph::AddLinkList, then queried the way the
// detectors query it (PortsOf, PeerOf, Canonical).

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "daemon/detectors/cable_graph.h"
#include "tests/fuzz/fuzz_target.h"

FABRICMON_FUZZ_TARGET(link_list) {
  using ::fabricmon::detectors::CableGraph;
  using ::fabricmon::detectors::Endpoint;
  const absl::string_view text = ::fabricmon::fuzz::AsText(data, size);

  CableGraph topology;
  // An inventory that maps netdev eth2 of node017 to mlx5_0 port 1, so that canonicalisation (a
  // link list naming the netdev, a collector naming the RDMA port) has work to do.
  fabricmon::v1::Inventory inventory;
  fabricmon::v1::RdmaDevice* device = inventory.add_rdma_devices();
  device->set_name("mlx5_0");
  device->set_node_guid("0x0002c90300a1b2c3");
  fabricmon::v1::RdmaPort* port = device->add_ports();
  port->set_number(1);
  port->add_netdevs("eth2");
  topology.AddInventory("node017", inventory);

  const absl::Status status = topology.AddLinkList(text);
  if (!status.ok()) {
    FABRICMON_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  }
  topology.Resolve();

  // The nodes the file may have named: NODE of "NODE/..." and "switch:NODE/...".
  std::set<std::pair<std::string, bool>> nodes;
  for (absl::string_view token : absl::StrSplit(text, absl::ByAnyChar(" \t\n#"))) {
    const bool is_switch = absl::ConsumePrefix(&token, "switch:");
    nodes.emplace(std::string(token.substr(0, token.find('/'))), is_switch);
  }
  size_t ports = 0;
  for (const auto& [name, is_switch] : nodes) {
    for (const Endpoint& endpoint : topology.PortsOf(name, is_switch)) {
      ++ports;
      FABRICMON_FUZZ_CHECK(endpoint.node == name && endpoint.is_switch == is_switch);
      FABRICMON_FUZZ_CHECK(topology.Canonical(endpoint) == endpoint);
      const std::optional<Endpoint> peer = topology.PeerOf(endpoint);
      FABRICMON_FUZZ_CHECK(peer.has_value());
      FABRICMON_FUZZ_CHECK(!(*peer == endpoint));
      (void)peer->ToString();
      // A cable reads the same from both ends, also when the file contradicted itself
      // (regressions/link_list/port_cabled_twice).
      const std::optional<Endpoint> back = topology.PeerOf(*peer);
      FABRICMON_FUZZ_CHECK(back.has_value() && *back == endpoint);
    }
  }
  FABRICMON_FUZZ_CHECK(ports <= topology.link_count() * 2);
  // What GetTopology serves: every cable once, both ends peers of each other, host end first.
  const std::vector<fabricmon::detectors::TopologyLink> links = topology.Links();
  FABRICMON_FUZZ_CHECK(links.size() == topology.link_count());
  for (const fabricmon::detectors::TopologyLink& link : links) {
    const std::optional<Endpoint> peer = topology.PeerOf(link.a);
    FABRICMON_FUZZ_CHECK(peer.has_value() && *peer == link.b);
    FABRICMON_FUZZ_CHECK(!link.a.is_switch || link.b.is_switch);
    FABRICMON_FUZZ_CHECK(link.source == fabricmon::detectors::LinkSource::kLinkList);
  }
}
