#include "collectors/ib_fabric/fabric_discovery.h"

#include <infiniband/ibnetdisc.h>
#include <infiniband/mad.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace fabricmon::collectors::ib_fabric {
namespace {

struct FabricDeleter {
  void operator()(ibnd_fabric_t* fabric) const { ibnd_destroy_fabric(fabric); }
};
using FabricPtr = std::unique_ptr<ibnd_fabric_t, FabricDeleter>;

uint32_t Field(const uint8_t* data, MAD_FIELDS field) {
  return mad_get_field(const_cast<uint8_t*>(data), 0, field);
}

NodeType TypeOf(int type) {
  switch (type) {
    case IB_NODE_CA:
      return NodeType::kCa;
    case IB_NODE_SWITCH:
      return NodeType::kSwitch;
    case IB_NODE_ROUTER:
      return NodeType::kRouter;
    default:
      return NodeType::kUnknown;
  }
}

// PortInfo.CapabilityMask.IsExtendedSpeedsSupported (bit 14). On a switch only port 0's
// CapabilityMask is valid, so ibnetdiscover reads it there for every port; we do the same.
constexpr uint32_t kPortCapHasExtSpeeds = 1u << 14;

Port ConvertPort(const ibnd_port_t& raw, const ibnd_node_t& node) {
  Port port;
  port.number = static_cast<uint32_t>(raw.portnum);
  port.guid = raw.guid;
  port.lid = node.type == IB_NODE_SWITCH ? 0 : raw.base_lid;
  port.state = Field(raw.info, IB_PORT_STATE_F);
  port.phys_state = Field(raw.info, IB_PORT_PHYS_STATE_F);
  // C14-24.2.1: on a Down port only PortState and PortPhysicalState are valid.
  if (port.state != kPortStateDown && port.state != 0) {
    const uint8_t* cap_info = raw.info;
    if (node.type == IB_NODE_SWITCH && node.ports != nullptr && node.ports[0] != nullptr) {
      cap_info = node.ports[0]->info;
    }
    const uint32_t cap_mask = Field(cap_info, IB_PORT_CAPMASK_F);
    const uint32_t speed_ext =
        (cap_mask & kPortCapHasExtSpeeds) ? Field(raw.info, IB_PORT_LINK_SPEED_EXT_ACTIVE_F) : 0;
    port.width = LanesFromWidthBits(Field(raw.info, IB_PORT_LINK_WIDTH_ACTIVE_F));
    port.speed = SpeedFromPortInfo(Field(raw.info, IB_PORT_LINK_SPEED_ACTIVE_F), speed_ext,
                                   Field(raw.ext_info, IB_MLNX_EXT_PORT_LINK_SPEED_ACTIVE_F));
  }
  return port;
}

}  // namespace

absl::StatusOr<Subnet> DiscoverFabric(const DiscoveryOptions& options, DiscoveryStats* stats) {
  ibnd_config_t config;
  std::memset(&config, 0, sizeof(config));
  config.max_smps = std::max<uint32_t>(1, options.max_smps);
  config.timeout_ms = options.timeout_ms;
  config.retries = options.retries;
  config.max_hops = options.max_hops;
  // Mellanox ExtendedPortInfo tells FDR10 from QDR (ibnetdiscover's default too).
  config.flags = IBND_CONFIG_MLX_EPI;
  std::string ca = options.ca;
  FabricPtr fabric(ibnd_discover_fabric(ca.empty() ? nullptr : ca.data(),
                                        static_cast<int>(options.ca_port), nullptr, &config));
  if (fabric == nullptr) {
    return absl::UnavailableError(absl::StrCat("fabric discovery from ",
                                               ca.empty() ? "the default port" : ca, " port ",
                                               options.ca_port, " failed"));
  }
  if (stats != nullptr) {
    stats->mads = fabric->total_mads_used;
    stats->max_hops = fabric->maxhops_discovered;
  }

  Subnet topology;
  std::unordered_map<const ibnd_node_t*, size_t> index;
  for (const ibnd_node_t* raw = fabric->nodes; raw != nullptr; raw = raw->next) {
    index.emplace(raw, topology.nodes.size());
    Node node;
    node.guid = raw->guid;
    node.type = TypeOf(raw->type);
    node.description = CleanDescription(absl::string_view(raw->nodedesc, IB_SMP_DATA_SIZE));
    node.num_ports = static_cast<uint32_t>(std::max(0, raw->numports));
    node.sys_image_guid =
        mad_get_field64(const_cast<uint8_t*>(raw->info), 0, IB_NODE_SYSTEM_GUID_F);
    node.vendor_id = Field(raw->info, IB_NODE_VENDORID_F);
    node.device_id = Field(raw->info, IB_NODE_DEVID_F);
    if (raw->type == IB_NODE_SWITCH) {
      node.lid = raw->smalid;
    }
    {
      const ibnd_port_t* cap_port = nullptr;
      for (int p = raw->type == IB_NODE_SWITCH ? 0 : 1;
           raw->ports != nullptr && p <= raw->numports && cap_port == nullptr; ++p) {
        cap_port = raw->ports[p];
      }
      node.extended_speeds =
          cap_port != nullptr && (Field(cap_port->info, IB_PORT_CAPMASK_F) & kPortCapHasExtSpeeds);
    }
    if (raw->ports != nullptr) {
      for (int p = 1; p <= raw->numports; ++p) {
        const ibnd_port_t* port = raw->ports[p];
        if (port == nullptr) {
          continue;  // libibnetdisc did not reach it (or it does not exist)
        }
        node.ports.push_back(ConvertPort(*port, *raw));
        if (node.lid == 0 && raw->type != IB_NODE_SWITCH && port->base_lid != 0) {
          node.lid = port->base_lid;
        }
      }
    }
    topology.nodes.push_back(std::move(node));
  }
  // Second pass: peers, now that every node has an index.
  for (const ibnd_node_t* raw = fabric->nodes; raw != nullptr; raw = raw->next) {
    if (raw->ports == nullptr) {
      continue;
    }
    Node& node = topology.nodes[index[raw]];
    for (int p = 1; p <= raw->numports; ++p) {
      const ibnd_port_t* port = raw->ports[p];
      if (port == nullptr || port->remoteport == nullptr || port->remoteport->node == nullptr) {
        continue;
      }
      auto it = index.find(port->remoteport->node);
      Port* local = node.FindPort(static_cast<uint32_t>(p));
      if (it == index.end() || local == nullptr) {
        continue;
      }
      local->remote_node = it->second;
      local->remote_port = static_cast<uint32_t>(port->remoteport->portnum);
    }
  }
  return topology;
}

}  // namespace fabricmon::collectors::ib_fabric
