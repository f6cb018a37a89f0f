#pragma once

// Parser for topology files in ibnetdiscover(8)'s output formats, so that the aggregator can take
// the fabric's cabling from a file (`ibnetdiscover > fabric.topo`) instead of a live sweep.
// Produces the same Subnet (and through AppendToInventory the same v1.FabricNode /
// v1.FabricLink inventory) as the ib_fabric collector's discovery.
//
// Accepted (detected from the first record):
//  * the default topology format: `vendid=` / `devid=` / `sysimgguid=` / `switchguid=` |
//    `caguid=` | `routerguid=` lines, a node header `Switch 36 "S-0008f10500200b50"  # "desc"
//    enhanced port 0 lid 9 lmc 0`, then one line per cabled port:
//    `[1]  "S-0008f10500108c5c"[15]  # "remote desc" lid 16 4xQDR` (CA ports add the local port
//    GUID and LID: `[1](2c90300080e85)  "S-..."[27]  # lid 17 lmc 0 "desc" lid 7 4xQDR`);
//  * ibsim's simplified net format (the same grammar without GUIDs, `Hca` for `Ca`, optional
//    `w=<lanes>` after a port): nodes are then known by their quoted id only;
//  * the ports report of `ibnetdiscover -p`: `SW  1719 10 0x7cfe9003009ce5b0 4x EDR - CA  134  1
//    0x7cfe9003003b4bde ( 'desc' - 'desc' )`. It names ports by port GUID only: switches (whose
//    ports share the node GUID) get their GUID, CAs are keyed by port GUID in node_id.
//
// Pure (no I/O, no libibmad). Bad input yields InvalidArgument naming the 1-based line; no input
// crashes it (tests/unit/collectors/ib_fabric feeds it hostile text).

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/fabric_model/subnet.h"

namespace fabricmon::fabric_model {

enum class TopologyFormat {
  kTopology,     // ibnetdiscover default output (GUIDs present)
  kIbsimNet,     // ibsim net file: the same grammar, no GUIDs
  kPortsReport,  // ibnetdiscover -p
};

struct ParsedSubnet {
  Subnet topology;
  TopologyFormat format = TopologyFormat::kTopology;
  // Lines the parser understood but skipped (ibsim `do ...` commands), for diagnostics.
  int skipped_lines = 0;
};

// Largest input accepted (a 10k-node fabric's file is a few MB).
inline constexpr size_t kMaxTopologyFileBytes = 64u << 20;

// Parses `text`. InvalidArgument ("line 12: ...") on malformed or contradictory input (a port
// cabled to two different peers, a port beyond the node's port count, a duplicate node), on an
// empty file and on ibsim's `include` (which needs file access).
absl::StatusOr<ParsedSubnet> ParseIbnetdiscover(absl::string_view text);

}  // namespace fabricmon::fabric_model
