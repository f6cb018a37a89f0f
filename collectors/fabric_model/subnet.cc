#include "collectors/fabric_model/subnet.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::fabric_model {
namespace {

struct SpeedInfo {
  LinkSpeed speed;
  absl::string_view name;
  uint64_t lane_bps;
};

// Lane rates as the kernel's sysfs `rate` counts them (drivers/infiniband/core/sysfs.c
// rate_show with ib_port_speed), so fabric and sysfs rates agree for the same port.
constexpr SpeedInfo kSpeeds[] = {
    {LinkSpeed::kSdr, "SDR", 2'500'000'000ULL},   {LinkSpeed::kDdr, "DDR", 5'000'000'000ULL},
    {LinkSpeed::kQdr, "QDR", 10'000'000'000ULL},  {LinkSpeed::kFdr10, "FDR10", 10'000'000'000ULL},
    {LinkSpeed::kFdr, "FDR", 14'000'000'000ULL},  {LinkSpeed::kEdr, "EDR", 25'000'000'000ULL},
    {LinkSpeed::kHdr, "HDR", 50'000'000'000ULL},  {LinkSpeed::kNdr, "NDR", 100'000'000'000ULL},
    {LinkSpeed::kXdr, "XDR", 200'000'000'000ULL},
};

}  // namespace

absl::string_view LinkSpeedName(LinkSpeed speed) {
  for (const SpeedInfo& info : kSpeeds) {
    if (info.speed == speed) {
      return info.name;
    }
  }
  return "";
}

std::optional<LinkSpeed> ParseLinkSpeed(absl::string_view name) {
  for (const SpeedInfo& info : kSpeeds) {
    if (absl::EqualsIgnoreCase(info.name, name)) {
      return info.speed;
    }
  }
  return std::nullopt;
}

uint64_t LaneBitsPerSecond(LinkSpeed speed) {
  for (const SpeedInfo& info : kSpeeds) {
    if (info.speed == speed) {
      return info.lane_bps;
    }
  }
  return 0;
}

uint32_t LanesFromWidthBits(uint32_t width_bits) {
  // IBA 1.4 vol. 1 Table 147 (PortInfo.LinkWidthActive); 2X was added in IBA 1.3.1.
  switch (width_bits) {
    case 1:
      return 1;
    case 2:
      return 4;
    case 4:
      return 8;
    case 8:
      return 12;
    case 16:
      return 2;
    default:
      return 0;
  }
}

LinkSpeed SpeedFromPortInfo(uint32_t speed_active, uint32_t speed_ext_active, uint32_t mlnx_fdr10) {
  // LinkSpeedExtActive (IBA 1.4 Table 147): 0 = use LinkSpeedActive, 1 FDR, 2 EDR, 4 HDR (1.4),
  // 8 NDR (1.5). 30/31 mean "no extended speed" on some devices.
  switch (speed_ext_active) {
    case 1:
      return LinkSpeed::kFdr;
    case 2:
      return LinkSpeed::kEdr;
    case 4:
      return LinkSpeed::kHdr;
    case 8:
      return LinkSpeed::kNdr;
    default:
      break;
  }
  // Mellanox ExtendedPortInfo.LinkSpeedActive bit 0 = FDR10 (libibmad IB_MLNX_EXT_PORT_*).
  if (mlnx_fdr10 & 1) {
    return LinkSpeed::kFdr10;
  }
  switch (speed_active) {
    case 1:
      return LinkSpeed::kSdr;
    case 2:
      return LinkSpeed::kDdr;
    case 4:
      return LinkSpeed::kQdr;
    default:
      return LinkSpeed::kUnknown;
  }
}

absl::string_view PortStateName(uint32_t state) {
  switch (state) {
    case 1:
      return "Down";
    case 2:
      return "Initialize";
    case 3:
      return "Armed";
    case 4:
      return "Active";
    case 5:
      return "ActiveDefer";
    default:
      return "";
  }
}

absl::string_view PhysStateName(uint32_t phys_state) {
  switch (phys_state) {
    case 1:
      return "Sleep";
    case 2:
      return "Polling";
    case 3:
      return "Disabled";
    case 4:
      return "PortConfigurationTraining";
    case 5:
      return "LinkUp";
    case 6:
      return "LinkErrorRecovery";
    case 7:
      return "PhyTest";
    default:
      return "";
  }
}

const Port* Node::FindPort(uint32_t number) const {
  auto it = std::lower_bound(ports.begin(), ports.end(), number,
                             [](const Port& port, uint32_t n) { return port.number < n; });
  return it != ports.end() && it->number == number ? &*it : nullptr;
}

Port* Node::FindPort(uint32_t number) {
  return const_cast<Port*>(static_cast<const Node*>(this)->FindPort(number));
}

std::string Node::Key() const { return guid != 0 ? FormatGuid(guid) : node_id; }

std::optional<size_t> Subnet::FindNode(uint64_t guid) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].guid == guid) {
      return i;
    }
  }
  return std::nullopt;
}

std::vector<Link> Subnet::Links() const {
  std::vector<std::string> keys;
  keys.reserve(nodes.size());
  for (const Node& node : nodes) {
    keys.push_back(node.Key());
  }
  using End = std::pair<std::string, uint32_t>;
  std::set<std::pair<End, End>> seen;
  std::vector<std::tuple<End, End, Link>> links;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Port& port : nodes[i].ports) {
      if (!port.remote_node.has_value() || *port.remote_node >= nodes.size()) {
        continue;
      }
      Link link{i, port.number, *port.remote_node, port.remote_port};
      End a{keys[link.a_node], link.a_port};
      End b{keys[link.b_node], link.b_port};
      if (b < a) {
        std::swap(a, b);
        std::swap(link.a_node, link.b_node);
        std::swap(link.a_port, link.b_port);
      }
      if (seen.insert({a, b}).second) {
        links.emplace_back(std::move(a), std::move(b), link);
      }
    }
  }
  std::sort(links.begin(), links.end(), [](const auto& x, const auto& y) {
    return std::tie(std::get<0>(x), std::get<1>(x)) < std::tie(std::get<0>(y), std::get<1>(y));
  });
  std::vector<Link> out;
  out.reserve(links.size());
  for (auto& entry : links) {
    out.push_back(std::get<2>(entry));
  }
  return out;
}

size_t Subnet::CountNodes(NodeType type) const {
  return static_cast<size_t>(std::count_if(nodes.begin(), nodes.end(),
                                           [type](const Node& node) { return node.type == type; }));
}

std::string FormatGuid(uint64_t guid) {
  char buffer[19];
  std::snprintf(buffer, sizeof(buffer), "0x%016llx", static_cast<unsigned long long>(guid));
  return buffer;
}

std::optional<uint64_t> ParseGuid(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (absl::StartsWithIgnoreCase(text, "0x")) {
    text.remove_prefix(2);
  }
  if (text.empty() || text.size() > 16) {
    return std::nullopt;
  }
  uint64_t value = 0;
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return std::nullopt;
    }
  }
  if (!absl::SimpleHexAtoi(text, &value)) {
    return std::nullopt;
  }
  return value;
}

std::string CleanDescription(absl::string_view raw) {
  // The field is 64 bytes, NUL padded (IBA 14.2.5.2); cut at the first NUL.
  const size_t nul = raw.find('\0');
  if (nul != absl::string_view::npos) {
    raw = raw.substr(0, nul);
  }
  std::string out;
  out.reserve(raw.size());
  for (char c : raw) {
    const unsigned char u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u == 0x7f ? ' ' : c);
  }
  return std::string(absl::StripAsciiWhitespace(out));
}

v1::FabricNode::Type ToProtoType(NodeType type) {
  switch (type) {
    case NodeType::kCa:
      return v1::FabricNode::TYPE_CA;
    case NodeType::kSwitch:
      return v1::FabricNode::TYPE_SWITCH;
    case NodeType::kRouter:
      return v1::FabricNode::TYPE_ROUTER;
    case NodeType::kUnknown:
      break;
  }
  return v1::FabricNode::TYPE_UNSPECIFIED;
}

void AppendToInventory(const Subnet& topology, v1::Inventory& inventory) {
  std::vector<size_t> order(topology.nodes.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::vector<std::string> keys;
  keys.reserve(topology.nodes.size());
  for (const Node& node : topology.nodes) {
    keys.push_back(node.Key());
  }
  std::sort(order.begin(), order.end(), [&keys](size_t a, size_t b) { return keys[a] < keys[b]; });
  for (size_t i : order) {
    const Node& node = topology.nodes[i];
    v1::FabricNode* out = inventory.add_fabric_nodes();
    out->set_guid(node.guid != 0 ? FormatGuid(node.guid) : "");
    out->set_type(ToProtoType(node.type));
    out->set_description(node.description);
    out->set_lid(node.lid);
    out->set_num_ports(node.num_ports);
    out->set_node_id(node.node_id);
    out->set_sys_image_guid(node.sys_image_guid != 0 ? FormatGuid(node.sys_image_guid) : "");
    out->set_vendor_id(node.vendor_id);
    out->set_device_id(node.device_id);
  }
  for (const Link& link : topology.Links()) {
    const Node& a = topology.nodes[link.a_node];
    const Node& b = topology.nodes[link.b_node];
    const Port* a_port = a.FindPort(link.a_port);
    const Port* b_port = b.FindPort(link.b_port);
    v1::FabricLink* out = inventory.add_fabric_links();
    out->set_a_guid(keys[link.a_node]);
    out->set_a_port(link.a_port);
    out->set_b_guid(keys[link.b_node]);
    out->set_b_port(link.b_port);
    // Width and speed are properties of the link; take the a end's and fall back to the b end's
    // (a topology file may only describe one side).
    uint32_t width = a_port != nullptr ? a_port->width : 0;
    LinkSpeed speed = a_port != nullptr ? a_port->speed : LinkSpeed::kUnknown;
    if (width == 0 && b_port != nullptr) {
      width = b_port->width;
    }
    if (speed == LinkSpeed::kUnknown && b_port != nullptr) {
      speed = b_port->speed;
    }
    out->set_width(width);
    out->set_speed(std::string(LinkSpeedName(speed)));
    out->set_state(a_port != nullptr ? a_port->state : 0);
    out->set_phys_state(a_port != nullptr ? a_port->phys_state : 0);
    out->set_rate_bits_per_second(width * LaneBitsPerSecond(speed));
  }
}

}  // namespace fabricmon::fabric_model
