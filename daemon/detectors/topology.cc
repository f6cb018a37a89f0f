#include "daemon/detectors/topology.h"

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

bool Topology::AddLink(const Endpoint& raw_a, const Endpoint& raw_b) {
  const Endpoint a = Canonical(raw_a);
  const Endpoint b = Canonical(raw_b);
  if (a == b) {
    return true;
  }
  bool consistent = true;
  // Unplugs `end` from a peer other than `keep`, so that no port keeps pointing at an end that
  // now points elsewhere (PeerOf(PeerOf(x)) == x for every cabled x).
  auto unplug = [this, &consistent](const Endpoint& end, const Endpoint& keep) {
    auto it = peers_.find(end);
    if (it == peers_.end() || it->second == keep) {
      return;
    }
    consistent = false;
    const Endpoint old_peer = it->second;
    for (const Endpoint& gone : {end, old_peer}) {
      peers_.erase(gone);
      std::vector<Endpoint>& ports = ports_by_node_[{gone.node, gone.is_switch}];
      ports.erase(std::remove(ports.begin(), ports.end(), gone), ports.end());
    }
  };
  unplug(a, b);
  unplug(b, a);
  auto add = [this](const Endpoint& from, const Endpoint& to) {
    auto [it, inserted] = peers_.insert_or_assign(from, to);
    (void)it;
    if (inserted) {
      ports_by_node_[{from.node, from.is_switch}].push_back(from);
    }
  };
  add(a, b);
  add(b, a);
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

absl::Status Topology::AddLinkList(absl::string_view text) {
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
    if (!AddLink(*a, *b) && contradiction.ok()) {
      contradiction = absl::InvalidArgumentError(absl::StrCat(
          "link list line ", line_number, ": ", Canonical(*a).ToString(), " or ",
          Canonical(*b).ToString(), " is already cabled to another port"));
    }
  }
  return contradiction;
}

void Topology::AddInventory(const std::string& node, const v1::Inventory& inventory) {
  for (const v1::RdmaDevice& device : inventory.rdma_devices()) {
    const std::string guid = CanonicalGuid(device.node_guid());
    if (!guid.empty()) {
      host_by_guid_[guid] = {node, device.name()};
    }
    for (const v1::RdmaPort& port : device.ports()) {
      for (const std::string& netdev : port.netdevs()) {
        netdev_map_[{node, netdev}] = {device.name(), port.number()};
      }
    }
  }
  for (const v1::FabricNode& fabric_node : inventory.fabric_nodes()) {
    const std::string guid = CanonicalGuid(fabric_node.guid());
    if (!guid.empty()) {
      fabric_nodes_[guid] = {fabric_node.type(),
                             std::string(absl::StripAsciiWhitespace(fabric_node.description()))};
    }
  }
  for (const v1::FabricLink& link : inventory.fabric_links()) {
    fabric_links_.push_back(link);
  }
}

void Topology::Resolve() {
  auto endpoint_of = [this](const std::string& raw_guid, uint32_t port) {
    Endpoint endpoint;
    const std::string guid = CanonicalGuid(raw_guid);
    endpoint.guid = guid;
    endpoint.port = port;
    auto host = host_by_guid_.find(guid);
    if (host != host_by_guid_.end()) {
      endpoint.node = host->second.first;
      endpoint.device = host->second.second;
      return endpoint;
    }
    auto node = fabric_nodes_.find(guid);
    const bool is_switch = node != fabric_nodes_.end() && node->second.type == v1::FabricNode::TYPE_SWITCH;
    endpoint.is_switch = is_switch;
    endpoint.node = node != fabric_nodes_.end() && !node->second.description.empty()
                        ? node->second.description
                        : absl::StrCat("0x", guid);
    return endpoint;
  };
  for (const v1::FabricLink& link : fabric_links_) {
    AddLink(endpoint_of(link.a_guid(), link.a_port()), endpoint_of(link.b_guid(), link.b_port()));
  }
  fabric_links_.clear();
}

Endpoint Topology::Canonical(const Endpoint& endpoint) const {
  if (endpoint.is_switch || endpoint.device.empty()) {
    return endpoint;
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

std::optional<Endpoint> Topology::PeerOf(const Endpoint& endpoint) const {
  auto it = peers_.find(Canonical(endpoint));
  if (it == peers_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::vector<Endpoint> Topology::PortsOf(const std::string& node, bool is_switch) const {
  auto it = ports_by_node_.find({node, is_switch});
  return it == ports_by_node_.end() ? std::vector<Endpoint>() : it->second;
}

}  // namespace fabricmon::detectors
