#pragma once

// The subnet as fabricmon sees it: nodes (switches, CAs, routers), their ports and which port
// is cabled to which. Built from a live discovery (fabric_discovery.h, libibnetdisc) or from an
// ibnetdiscover topology file (ibnetdiscover_parser.h); both turn into the same
// v1.FabricNode / v1.FabricLink inventory through AppendToInventory().
//
// Pure data and pure functions: no libibmad, so the aggregator can link this without rdma-core.
// Encodings follow the IBA PortInfo attribute (IBA 1.4 vol. 1, 14.2.5.6).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "fabricmon/v1/inventory.pb.h"

namespace fabricmon::fabric_model {

// NodeInfo.NodeType (IBA 14.2.5.3): 1 CA, 2 switch, 3 router.
enum class NodeType : uint8_t { kUnknown = 0, kCa = 1, kSwitch = 2, kRouter = 3 };

// Per-lane link speed. PortInfo.LinkSpeedActive gives SDR/DDR/QDR, LinkSpeedExtActive (when
// CapabilityMask.IsExtendedSpeedsSupported) FDR/EDR/HDR/NDR, and Mellanox's ExtendedPortInfo
// FDR10; XDR only comes from topology files in this build (rdma-core 44 has no decoder for it).
enum class LinkSpeed : uint8_t {
  kUnknown = 0,
  kSdr,
  kDdr,
  kQdr,
  kFdr10,
  kFdr,
  kEdr,
  kHdr,
  kNdr,
  kXdr,
};

// "SDR", "QDR", ..., "" for kUnknown.
absl::string_view LinkSpeedName(LinkSpeed speed);
// Inverse of LinkSpeedName (case-insensitive); nullopt if unknown.
std::optional<LinkSpeed> ParseLinkSpeed(absl::string_view name);
// Nominal signalling rate of one lane in bits per second, the figure sysfs `rate` multiplies by
// the width (kernel ib_sysfs rate_show: SDR 2.5, DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25,
// HDR 50, NDR 100, XDR 200 Gb/s). 0 for kUnknown.
uint64_t LaneBitsPerSecond(LinkSpeed speed);

// PortInfo.LinkWidthActive bit → lanes: 1 → 1X, 2 → 4X, 4 → 8X, 8 → 12X, 16 → 2X (IBA 1.4
// Table 147). 0 for anything else.
uint32_t LanesFromWidthBits(uint32_t width_bits);
// PortInfo.LinkSpeedActive (1 SDR, 2 DDR, 4 QDR), LinkSpeedExtActive (1 FDR, 2 EDR, 4 HDR,
// 8 NDR; 0 = not in use) and Mellanox ExtendedPortInfo.LinkSpeedActive (bit 0 = FDR10) to a
// speed. The extended speed wins, then FDR10, then the base speed (as ibnetdiscover decides).
LinkSpeed SpeedFromPortInfo(uint32_t speed_active, uint32_t speed_ext_active, uint32_t mlnx_fdr10);

// PortInfo.PortState (1 Down, 2 Init, 3 Armed, 4 Active, 5 ActiveDefer) and
// PortInfo.PortPhysicalState (1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining,
// 5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest) names; "" for 0 / unknown codes.
absl::string_view PortStateName(uint32_t state);
absl::string_view PhysStateName(uint32_t phys_state);

inline constexpr uint32_t kPortStateDown = 1;
inline constexpr uint32_t kPortStateActive = 4;
inline constexpr uint32_t kPhysStateLinkUp = 5;

struct Port {
  uint32_t number = 0;
  uint64_t guid = 0;        // port GUID (0 when unknown; switch ports share the node's)
  uint32_t lid = 0;         // base LID of a CA/router port; 0 for switch external ports
  uint32_t state = 0;       // PortInfo.PortState; 0 unknown
  uint32_t phys_state = 0;  // PortInfo.PortPhysicalState; 0 unknown
  uint32_t width = 0;       // active lanes; 0 unknown (also: unreliable when the port is Down)
  LinkSpeed speed = LinkSpeed::kUnknown;
  // The cabled peer, when the port has one: index into Subnet::nodes and its port number.
  std::optional<size_t> remote_node;
  uint32_t remote_port = 0;
};

struct Node {
  uint64_t guid = 0;    // node GUID; 0 when the source has none (ibsim net files)
  std::string node_id;  // id in a topology file ("S-0008f10500200b50", "Switch1"); may be ""
  NodeType type = NodeType::kUnknown;
  std::string description;  // NodeDescription, trimmed of whitespace and NULs
  uint32_t lid = 0;         // switch: port 0 LID; CA/router: first port with a LID
  uint32_t num_ports = 0;
  uint64_t sys_image_guid = 0;
  uint32_t vendor_id = 0;
  uint32_t device_id = 0;
  // PortInfo.CapabilityMask.IsExtendedSpeedsSupported (port 0's for a switch): whether
  // LinkSpeedExtActive may be read. Known from discovery only.
  bool extended_speeds = false;
  std::vector<Port> ports;  // sorted by number; only ports the source knows about

  // The port with `number`, or nullptr.
  const Port* FindPort(uint32_t number) const;
  Port* FindPort(uint32_t number);
  // The key links use for this node: the GUID string when known, else node_id.
  std::string Key() const;
};

struct Link {
  size_t a_node = 0;
  uint32_t a_port = 0;
  size_t b_node = 0;
  uint32_t b_port = 0;
};

// A whole subnet. Value type; not thread-safe to mutate concurrently.
struct Subnet {
  std::vector<Node> nodes;

  // Index of the node with `guid`, or nullopt.
  std::optional<size_t> FindNode(uint64_t guid) const;
  // Every cabled port pair once, a end first in (key, port) order; links sorted. A port whose
  // peer does not name it back is still listed (the peer's view may be missing in a file).
  std::vector<Link> Links() const;
  size_t CountNodes(NodeType type) const;
};

// "0x" + 16 lower-case hex digits.
std::string FormatGuid(uint64_t guid);
// Accepts "0x2c90200417670", "0002c90200417670", "2c90200417670" (1–16 hex digits, optional
// 0x/0X prefix, surrounding whitespace). nullopt otherwise.
std::optional<uint64_t> ParseGuid(absl::string_view text);

// Node descriptions come from a 64-byte MAD field: NUL padded, often with trailing spaces (real
// ibnetdiscover -p captures show ' 5FB0406-spine-IB02 '; tests use the shared fixtures). Strips
// NULs, whitespace and non-printable characters at both ends; interior bytes are kept, except that
// control characters become spaces.
std::string CleanDescription(absl::string_view raw);

v1::FabricNode::Type ToProtoType(NodeType type);

// Appends the nodes (sorted by key) and links (Subnet::Links order) to `inventory`.
void AppendToInventory(const Subnet& topology, v1::Inventory& inventory);

}  // namespace fabricmon::fabric_model
