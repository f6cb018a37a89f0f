#include "daemon/detectors/cable_graph.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fabricmon::detectors {

std::string CanonicalGuid(absl::string_view guid) {
  guid = absl::StripAsciiWhitespace(guid);
  absl::ConsumePrefix(&guid, "0x");
  absl::ConsumePrefix(&guid, "0X");
  std::string hex;
  for (char c : guid) {
    if (c == ':') {
      continue;
    }
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return "";
    }
    hex.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
  }
  if (hex.empty() || hex.size() > 16) {
    return "";
  }
  return std::string(16 - hex.size(), '0') + hex;
}

absl::string_view LinkSourceName(LinkSource source) {
  switch (source) {
    case LinkSource::kLinkList:
      return "link list";
    case LinkSource::kTopologyFile:
      return "topology file";
    case LinkSource::kFabricCollector:
      return "fabric collector";
  }
  return "link list";
}

bool CableGraph::AddLink(const Endpoint& raw_a, const Endpoint& raw_b, LinkSource source) {
  const Endpoint a = Canonical(raw_a);
  const Endpoint b = Canonical(raw_b);
  if (a == b) {
    return true;
  }
  const bool from_operator = source != LinkSource::kFabricCollector;
  bool same_cable = false;
  if (auto it = peers_.find(a); it != peers_.end() && it->second == b) {
    same_cable = true;
    const LinkSource old_source = sources_[a];
    source = std::max(source, old_source);  // the same cable again, maybe from a better source
  }
  // Where the collector and the operator disagree on a port, the operator's cable stays.
  if (!same_cable) {
    for (const Endpoint* end : {&a, &b}) {
      auto it = peers_.find(*end);
      if (it == peers_.end()) {
        continue;
      }
      const Endpoint& other = end == &a ? b : a;
      if (it->second == other) {
        continue;
      }
      const bool old_from_operator = operator_ends_.count(*end) > 0;
      if (!from_operator && old_from_operator) {
        disagreements_.insert(absl::StrCat(
            "fabric collector: ", a.ToString(), " <-> ", b.ToString(), ", but the ",
            // A cable the collector confirmed is labelled by it; its operator source is not kept.
            sources_[*end] == LinkSource::kFabricCollector ? "operator's topology"
                                                           : LinkSourceName(sources_[*end]),
            ": ", end->ToString(), " <-> ", it->second.ToString()));
        return false;
      }
      if (from_operator && !old_from_operator) {
        disagreements_.insert(absl::StrCat(
            "fabric collector: ", end->ToString(), " <-> ", it->second.ToString(), ", but the ",
            LinkSourceName(source), ": ", a.ToString(), " <-> ", b.ToString()));
      }
    }
  }
  bool consistent = true;
  // Unplugs `end` from a peer other than `keep`, so that no port keeps pointing at an end that
  // now points elsewhere (PeerOf(PeerOf(x)) == x for every cabled x).
  auto unplug = [this, &consistent, from_operator](const Endpoint& end, const Endpoint& keep) {
    auto it = peers_.find(end);
    if (it == peers_.end() || it->second == keep) {
      return;
    }
    // An operator's cable replacing a collector's is no contradiction in the operator's input
    // (it is a disagreement, recorded above).
    if (!from_operator || operator_ends_.count(end) > 0) {
      consistent = false;
    }
    const Endpoint old_peer = it->second;
    for (const Endpoint& gone : {end, old_peer}) {
      peers_.erase(gone);
      sources_.erase(gone);
      operator_ends_.erase(gone);
      std::vector<Endpoint>& ports = ports_by_node_[{gone.node, gone.is_switch}];
      ports.erase(std::remove(ports.begin(), ports.end(), gone), ports.end());
    }
  };
  unplug(a, b);
  unplug(b, a);
  auto add = [this, source](const Endpoint& from, const Endpoint& to) {
    auto [it, inserted] = peers_.insert_or_assign(from, to);
    (void)it;
    sources_[from] = source;
    if (inserted) {
      ports_by_node_[{from.node, from.is_switch}].push_back(from);
    }
  };
  add(a, b);
  add(b, a);
  if (from_operator) {
    operator_ends_.insert(a);
    operator_ends_.insert(b);
  }
  return consistent;
}

namespace {

absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view text) {
  Endpoint endpoint;
  if (absl::ConsumePrefix(&text, "switch:")) {
    std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
    if (parts.size() != 2 || parts[0].empty() || !absl::SimpleAtoi(parts[1], &endpoint.port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("switch endpoint '", text, "' is not switch:NAME/PORT"));
    }
    endpoint.node = std::string(parts[0]);
    endpoint.is_switch = true;
    return endpoint;
  }
  std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty() || parts[1].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("host endpoint '", text, "' is not NODE/DEVICE[/PORT]"));
  }
  endpoint.node = std::string(parts[0]);
  endpoint.device = std::string(parts[1]);
  endpoint.port = 1;
  if (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &endpoint.port)) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in '", text, "'"));
  }
  return endpoint;
}

}  // namespace

absl::Status CableGraph::AddLinkList(absl::string_view text) {
  absl::Status contradiction;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipWhitespace());
    if (fields.empty()) {
      continue;
    }
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("link list line ", line_number, ": expected two endpoints"));
    }
    absl::StatusOr<Endpoint> a = ParseEndpoint(fields[0]);
    absl::StatusOr<Endpoint> b = a.ok() ? ParseEndpoint(fields[1]) : a;
    if (!b.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("link list line ", line_number, ": ", b.status().message()));
    }
    if (!AddLink(*a, *b, LinkSource::kLinkList) && contradiction.ok()) {
      contradiction = absl::InvalidArgumentError(
          absl::StrCat("link list line ", line_number, ": ", Canonical(*a).ToString(), " or ",
                       Canonical(*b).ToString(), " is already cabled to another port"));
    }
  }
  return contradiction;
}

void CableGraph::AddInventory(const std::string& node, const v1::Inventory& inventory,
                              LinkSource fabric_source) {
  for (const v1::RdmaDevice& device : inventory.rdma_devices()) {
    const std::string guid = CanonicalGuid(device.node_guid());
    if (!guid.empty()) {
      host_by_guid_.try_emplace(guid, node, device.name());
      if (!node.empty()) {
        guid_claims_[guid].insert(node);
      }
    }
    for (const v1::RdmaPort& port : device.ports()) {
      for (const std::string& netdev : port.netdevs()) {
        netdev_map_[{node, netdev}] = {device.name(), port.number()};
      }
    }
  }
  for (const v1::FabricNode& fabric_node : inventory.fabric_nodes()) {
    const std::string key =
        fabric_node.guid().empty() ? fabric_node.node_id() : CanonicalGuid(fabric_node.guid());
    if (!key.empty()) {
      fabric_nodes_[key] = {fabric_node.type(),
                            std::string(absl::StripAsciiWhitespace(fabric_node.description()))};
    }
  }
  for (const v1::FabricLink& link : inventory.fabric_links()) {
    fabric_links_.emplace_back(link, fabric_source);
  }
}

void CableGraph::Resolve() {
  // A GUID two nodes claim names neither of them (see AddInventory).
  for (const auto& [guid, nodes] : guid_claims_) {
    if (nodes.size() > 1) {
      host_by_guid_.erase(guid);
    }
  }
  // A description two fabric nodes share (vendor defaults such as "MT25408 ConnectX Mellanox
  // Technologies") cannot name either: the two would become one endpoint.
  std::map<std::string, int> description_uses;
  for (const auto& [key, node] : fabric_nodes_) {
    ++description_uses[node.description];
  }
  auto endpoint_of = [&](const std::string& raw_key, uint32_t port) {
    Endpoint endpoint;
    endpoint.port = port;
    std::string guid = CanonicalGuid(raw_key);
    auto node = fabric_nodes_.find(guid);
    if (node == fabric_nodes_.end() && host_by_guid_.count(guid) == 0) {
      if (auto by_id = fabric_nodes_.find(raw_key); by_id != fabric_nodes_.end()) {
        node = by_id;  // a file without GUIDs names nodes by node_id ("Switch1", "Hca1")
        guid.clear();
      }
    }
    endpoint.guid = guid;
    if (auto host = host_by_guid_.find(guid); !guid.empty() && host != host_by_guid_.end()) {
      endpoint.node = host->second.first;
      endpoint.device = host->second.second;
      return endpoint;
    }
    const bool known = node != fabric_nodes_.end();
    endpoint.is_switch = known && node->second.type == v1::FabricNode::TYPE_SWITCH;
    if (known && !node->second.description.empty() &&
        description_uses[node->second.description] == 1) {
      endpoint.node = node->second.description;
    } else {
      endpoint.node = guid.empty() ? raw_key : absl::StrCat("0x", guid);
    }
    if (!endpoint.is_switch) {
      // A CA (or router) no agent claims: not a node of ours, so never a node's name.
      endpoint.node = absl::StrCat("ca:", endpoint.node);
    }
    if (!guid.empty()) {
      (endpoint.is_switch ? switch_name_by_guid_ : ca_name_by_guid_)[guid] = endpoint.node;
    }
    return endpoint;
  };
  for (const auto& [link, source] : fabric_links_) {
    AddLink(endpoint_of(link.a_guid(), link.a_port()), endpoint_of(link.b_guid(), link.b_port()),
            source);
  }
  fabric_links_.clear();
}

std::vector<TopologyLink> CableGraph::Links() const {
  std::vector<TopologyLink> links;
  links.reserve(peers_.size() / 2);
  for (const auto& [from, to] : peers_) {
    if (!(from < to)) {
      continue;  // each cable once
    }
    TopologyLink link;
    // The stored values carry the latest GUIDs (a key keeps the first inserted copy).
    link.a = peers_.at(to);
    link.b = to;
    if (link.a.is_switch && !link.b.is_switch) {
      std::swap(link.a, link.b);
    }
    auto source = sources_.find(from);
    link.source = source != sources_.end() ? source->second : LinkSource::kLinkList;
    links.push_back(std::move(link));
  }
  std::sort(links.begin(), links.end(), [](const TopologyLink& x, const TopologyLink& y) {
    if (x.a.is_switch != y.a.is_switch) return !x.a.is_switch;  // host cables first
    if (!(x.a == y.a)) return x.a < y.a;
    return x.b < y.b;
  });
  return links;
}

std::vector<GuidConflict> CableGraph::guid_conflicts() const {
  std::vector<GuidConflict> conflicts;
  for (const auto& [guid, nodes] : guid_claims_) {
    if (nodes.size() > 1) {
      conflicts.push_back({guid, std::vector<std::string>(nodes.begin(), nodes.end())});
    }
  }
  return conflicts;
}

std::vector<std::pair<std::string, std::string>> CableGraph::UnclaimedCas() const {
  std::vector<std::pair<std::string, std::string>> unclaimed;
  for (const auto& [key, node] : fabric_nodes_) {
    if (node.type != v1::FabricNode::TYPE_CA || CanonicalGuid(key) != key) {
      continue;  // switches, routers, and files without GUIDs (nothing to claim them by)
    }
    if (guid_claims_.count(key) == 0) {
      unclaimed.emplace_back(key, node.description);
    }
  }
  return unclaimed;
}

Endpoint CableGraph::Canonical(const Endpoint& endpoint) const {
  if (endpoint.is_switch) {
    // A switch port series names its switch by description; the graph names a switch whose
    // description is shared by its GUID. The GUID decides.
    if (endpoint.guid.empty() || switch_name_by_guid_.empty()) {
      return endpoint;
    }
    auto it = switch_name_by_guid_.find(CanonicalGuid(endpoint.guid));
    if (it == switch_name_by_guid_.end() || it->second == endpoint.node) {
      return endpoint;
    }
    Endpoint canonical = endpoint;
    canonical.node = it->second;
    return canonical;
  }
  if (endpoint.device.empty()) {
    if (endpoint.guid.empty() || endpoint.gpu >= 0) {
      return endpoint;  // a node-level subject
    }
    // A CA port seen from the fabric: the port of the node whose agent claims the HCA, else the
    // name the graph gives the CA.
    const std::string guid = CanonicalGuid(endpoint.guid);
    Endpoint canonical = endpoint;
    if (auto host = host_by_guid_.find(guid);
        host != host_by_guid_.end() && !host->second.first.empty()) {
      canonical.node = host->second.first;
      canonical.device = host->second.second;
      canonical.guid = guid;
    } else if (auto ca = ca_name_by_guid_.find(guid); ca != ca_name_by_guid_.end()) {
      canonical.node = ca->second;
    }
    return canonical;
  }
  auto it = netdev_map_.find({endpoint.node, endpoint.device});
  if (it == netdev_map_.end()) {
    return endpoint;
  }
  Endpoint canonical = endpoint;
  canonical.device = it->second.first;
  canonical.port = it->second.second;
  return canonical;
}

std::optional<Endpoint> CableGraph::PeerOf(const Endpoint& endpoint) const {
  auto it = peers_.find(Canonical(endpoint));
  if (it == peers_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::vector<Endpoint> CableGraph::PortsOf(const std::string& node, bool is_switch) const {
  auto it = ports_by_node_.find({node, is_switch});
  return it == ports_by_node_.end() ? std::vector<Endpoint>() : it->second;
}

}  // namespace fabricmon::detectors
