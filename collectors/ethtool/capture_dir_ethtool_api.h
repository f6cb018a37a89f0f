#pragma once

// An EthtoolApi that reads `ethtool -S` text from a directory instead of issuing SIOCETHTOOL:
// EthtoolCollectorConfig.stats_dir, for simulation (tests/sim/fabric_sim rewrites the files
// between cycles) and offline replay of captures. Layout, node_exporter's fixture layout (as
// FixtureEthtoolApi::LoadDirectory):
//
//   <dir>/<netdev>/statistics   `ethtool -S <netdev>` output (ethtool_text.h parses it)
//   <dir>/<netdev>/driver       optional: `ethtool -i <netdev>` output or a bare driver name
//
// Unlike FixtureEthtoolApi, nothing is cached: every GetDriver/GetStringSet/GetStats call opens
// and parses the files again, so a writer that replaces them (write a temporary file, rename it
// over: readers never see a half-written file) is seen on the next call, key-set changes
// included. Errors as the ioctl's:
//   <dir>/<netdev> absent               NotFound (ENODEV: no such netdev)
//   `statistics` absent                  Unimplemented (EOPNOTSUPP: driver without statistics)
//   `statistics` not an `ethtool -S` dump InvalidArgument (with the path)
//   unreadable                           the errno's status (PermissionDenied, ...)
// Not thread-safe (holds no state, but the EthtoolApi contract is one thread).

#include <memory>
#include <string>

#include "collectors/ethtool/ethtool_api.h"

namespace fabricmon::collectors {

std::unique_ptr<EthtoolApi> CreateCaptureDirEthtoolApi(std::string dir);

}  // namespace fabricmon::collectors
