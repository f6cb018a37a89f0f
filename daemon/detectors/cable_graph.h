#pragma once

// The fabric graph: which port is cabled to which. Built from the fabric collector's discovery
// (FabricNode/FabricLink in agents' inventories, GUIDs mapped to hosts through their RDMA
// devices' node GUIDs), from an ibnetdiscover-format file, and from a link-list file for
// Ethernet/RoCE fabrics. Nodes and ports without topology still get per-port findings; the graph
// adds the peer end of a cable and lets congestion be traced across hops.
//
// Build order: AddInventory() for every node first (it maps netdevs to RDMA ports and GUIDs to
// hosts), then AddLinkList()/AddLink(), then Resolve(). Endpoints are stored canonical, so a link
// list naming a RoCE netdev and a collector naming its RDMA device meet.
//
// Not thread-safe: built and read by the detector thread.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/detectors/finding.h"
#include "fabricmon/v1/inventory.pb.h"

namespace fabricmon::detectors {

// Canonical GUID text: 16 lower-case hex digits, from "0x0002c90300a1b2c3" or
// "0002:c903:00a1:b2c3". Empty if it is neither.
std::string CanonicalGuid(absl::string_view guid);

// Where a cable came from, ordered by how directly the source observed it: when several name the
// same cable the highest is the label kept (a live sweep confirms a file written some time ago).
// When they DISAGREE on a cable, the operator's sources (link list, topology file) win over the
// fabric collector, whatever the order: an agent is untrusted input, the operator's files are
// not. Such a disagreement is recorded (disagreements()).
enum class LinkSource : uint8_t { kLinkList = 1, kTopologyFile = 2, kFabricCollector = 3 };
// "link list", "topology file", "fabric collector".
absl::string_view LinkSourceName(LinkSource source);

// One cable: `a` is the host end when there is one, else the smaller end.
struct TopologyLink {
  Endpoint a;
  Endpoint b;
  LinkSource source = LinkSource::kLinkList;
};

// An HCA GUID that more than one node's inventory claims.
struct GuidConflict {
  std::string guid;                // canonical, 16 hex digits
  std::vector<std::string> nodes;  // sorted
};

class CableGraph {
 public:
  // Adds a cable. Endpoints are canonical: hosts as node + RDMA device (or netdev) + port,
  // switches as switch name + port with is_switch set. A port has one peer: an end already cabled
  // to another port is unplugged from it first (the graph stays symmetric, the last cable wins).
  // Returns false when that happened, i.e. the input contradicted itself.
  bool AddLink(const Endpoint& a, const Endpoint& b, LinkSource source = LinkSource::kLinkList);

  // Parses a link-list file:
  //   # comment
  //   node017/mlx5_0/1   switch:leaf01/17      host port ↔ switch port
  //   node017/eth2       switch:leaf01/18      host netdev (port 1) ↔ switch port
  //   switch:leaf01/49   switch:spine01/3      switch ↔ switch
  // InvalidArgument with the line number on a malformed line (nothing after it is added), and on
  // a port cabled twice to different peers (the lines after it are still added; the last cable
  // of the port wins).
  absl::Status AddLinkList(absl::string_view text);

  // Adds what one agent's inventory says: its RDMA devices' GUIDs (to name hosts in fabric
  // links) and any fabric links it discovered, which count as `fabric_source` (an ibnetdiscover
  // file's inventory is added with node "" and kTopologyFile). Call for every node, then Resolve().
  // A GUID two nodes claim names neither (its cables keep the bare GUID) and is reported by
  // guid_conflicts(): the first claim cannot be told from a forged one (the order of nodes is
  // their names' order, which a hostile agent chooses), so no claim wins.
  void AddInventory(const std::string& node, const v1::Inventory& inventory,
                    LinkSource fabric_source = LinkSource::kFabricCollector);
  // Turns GUID-addressed fabric links into endpoints: hosts known by GUID get their node name;
  // other fabric nodes their description when no other fabric node shares it, else "0x" + GUID
  // (many fabrics leave descriptions at the vendor default, which would merge the nodes); CAs
  // and routers no agent claims are prefixed "ca:" (never taken for a node of ours).
  void Resolve();

  std::optional<Endpoint> PeerOf(const Endpoint& endpoint) const;
  // Every cabled port of a switch or host (by node name and is_switch).
  std::vector<Endpoint> PortsOf(const std::string& node, bool is_switch) const;
  // Replaces a host netdev endpoint by its RDMA device/port where the node's inventory maps it,
  // a switch endpoint carrying a known GUID by the name the graph gives that switch (its
  // description, or "0x" + GUID when the description is shared), and a fabric CA port (no
  // device, a GUID) by the port of the node claiming that HCA, else the CA's graph name.
  Endpoint Canonical(const Endpoint& endpoint) const;
  size_t link_count() const { return peers_.size() / 2; }
  bool empty() const { return peers_.empty(); }
  // Every cable once: host cables first, then switch-to-switch, each sorted by (a, b).
  std::vector<TopologyLink> Links() const;
  // GUIDs claimed by more than one node, by GUID.
  std::vector<GuidConflict> guid_conflicts() const;
  // Fabric CAs (host HCAs seen by a sweep or named in a topology file) that no node's inventory
  // claims: hosts whose agent is missing, or that run none. (canonical GUID, description), by GUID.
  std::vector<std::pair<std::string, std::string>> UnclaimedCas() const;
  // Cables the fabric collector reported that contradict the operator's (kept) cables, one line
  // each, sorted.
  const std::set<std::string>& disagreements() const { return disagreements_; }

 private:
  std::map<Endpoint, Endpoint> peers_;
  std::map<Endpoint, LinkSource> sources_;  // same keys as peers_
  std::map<std::pair<std::string, bool>, std::vector<Endpoint>> ports_by_node_;
  // GUID → host (node, device) from agents' sysfs inventory.
  std::map<std::string, std::pair<std::string, std::string>> host_by_guid_;
  // GUID → every node that claimed it (only those with more than one are conflicts).
  std::map<std::string, std::set<std::string>> guid_claims_;
  // Ends of cables an operator source (link list, topology file) stated; the fabric collector
  // cannot unplug them.
  std::set<Endpoint> operator_ends_;
  std::set<std::string> disagreements_;
  // Canonical GUID → graph name of each switch Resolve() placed (fabric collector, topology file).
  std::map<std::string, std::string> switch_name_by_guid_;
  // Canonical GUID → graph name ("ca:" + description or "ca:0x" + GUID) of each fabric CA that no
  // agent claims.
  std::map<std::string, std::string> ca_name_by_guid_;
  // (node, netdev) → (device, port) from agents' inventory.
  std::map<std::pair<std::string, std::string>, std::pair<std::string, uint32_t>> netdev_map_;
  struct PendingNode {
    v1::FabricNode::Type type;
    std::string description;
  };
  // By canonical GUID, or by node_id for topology files without GUIDs (ibsim net files).
  std::map<std::string, PendingNode> fabric_nodes_;
  std::vector<std::pair<v1::FabricLink, LinkSource>> fabric_links_;
};

}  // namespace fabricmon::detectors
