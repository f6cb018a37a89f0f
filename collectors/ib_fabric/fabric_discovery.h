#pragma once

// Live subnet discovery with libibnetdisc (ibnd_discover_fabric: directed-route SMPs from the
// local port, as ibnetdiscover does), converted into a Subnet. The ibnd_fabric_t lives only
// inside DiscoverFabric (RAII; ibnd_destroy_fabric).
//
// libibnetdisc opens and closes its own umad port for the walk. Under ibsim's umad2sim, replies
// of a management class go to the last umad fd that registered it, so callers close their own
// MadPort before discovering and reopen it afterwards (the collector does).
//
// Blocking; call from one thread at a time.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "collectors/fabric_model/subnet.h"

namespace fabricmon::collectors::ib_fabric {

// The collector fills the fabric model and speaks its vocabulary.
using fabric_model::AppendToInventory;
using fabric_model::CleanDescription;
using fabric_model::FormatGuid;
using fabric_model::kPhysStateLinkUp;
using fabric_model::kPortStateActive;
using fabric_model::kPortStateDown;
using fabric_model::LaneBitsPerSecond;
using fabric_model::LanesFromWidthBits;
using fabric_model::Link;
using fabric_model::LinkSpeed;
using fabric_model::LinkSpeedName;
using fabric_model::Node;
using fabric_model::NodeType;
using fabric_model::ParseGuid;
using fabric_model::ParseLinkSpeed;
using fabric_model::PhysStateName;
using fabric_model::Port;
using fabric_model::PortStateName;
using fabric_model::SpeedFromPortInfo;
using fabric_model::Subnet;
using fabric_model::ToProtoType;

struct DiscoveryOptions {
  std::string ca;        // "" = libibumad's default
  uint32_t ca_port = 0;  // 0 = default
  uint32_t timeout_ms = 200;
  uint32_t retries = 2;
  uint32_t max_hops = 0;  // 0 = libibnetdisc's default
  uint32_t max_smps = 4;  // SMPs in flight during the walk
};

struct DiscoveryStats {
  uint64_t mads = 0;      // SMPs libibnetdisc reported using
  uint32_t max_hops = 0;  // hops of the farthest node
};

// Unavailable when the walk fails (libibnetdisc gives no reason beyond its stderr warnings).
absl::StatusOr<Subnet> DiscoverFabric(const DiscoveryOptions& options, DiscoveryStats* stats);

}  // namespace fabricmon::collectors::ib_fabric
