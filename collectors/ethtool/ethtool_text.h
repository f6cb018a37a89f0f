#pragma once

// Parser for `ethtool -S <netdev>` text captures: the seam that lets tests (and offline analysis
// of captures taken on other machines) feed the ethtool collector without the SIOCETHTOOL ioctl.
// Pure functions; thread-compatible.
//
// Both layouts found in real captures are accepted (tests use the shared fixtures;
// collectors/ethtool/README.md, "ethtool -S text layouts"):
//   NIC statistics:                 <- optional header (any "Word words:" line with no value)
//        rx_packets: 333854100      <- ethtool's own "     %s: %llu" lines
//   rx_packets: 845320277           <- the same without header or indentation (ethq's copy)

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricmon::collectors::ethtool {

// One statistic of the ETH_SS_STATS string set.
struct EthtoolStat {
  // The key as the driver spelled it. The parser removes only the leading indentation ethtool
  // adds; trailing spaces that belong to the kernel string are kept (one mlx5 version has
  // "tx_pause_storm_warning_events "; collectors/ethtool/README.md, "Trailing-space keys"):
  // consumers normalise with NormalizeStatKey(), exactly as they do for strings read through the
  // ioctl.
  std::string key;
  uint64_t value = 0;
};

struct ParsedEthtoolText {
  std::vector<EthtoolStat> stats;  // in file order (= the driver's string-set order)
  size_t header_lines = 0;         // "NIC statistics:" and similar section headers
  size_t rejected_lines = 0;       // lines that are neither blank, a header, nor "key: u64"
};

// Parses an `ethtool -S` capture. A line is a statistic when it is "<key>: <unsigned decimal>"
// (the last ':' separates key and value; the value must fit in 64 bits, no sign, no suffix).
// Everything else is counted in `rejected_lines` and skipped: negative numbers, values past
// 2^64-1, garbage, NUL bytes. Empty input gives an empty, OK result (a driver with an empty set).
// Returns InvalidArgument for text that is recognisably not `ethtool -S` output — the plain
// `ethtool <netdev>` settings dump ("Settings for eth1:") — so a wrong capture fails loudly
// instead of yielding a handful of stray "statistics" such as "PHYAD: 0".
absl::StatusOr<ParsedEthtoolText> ParseEthtoolStatsText(absl::string_view text);

// The canonical form of a key from the ioctl or a capture: the kernel string up to its first NUL
// with surrounding ASCII whitespace removed (a trailing space in one mlx5 en_stats.c version;
// collectors/ethtool/README.md, "Trailing-space keys").
std::string NormalizeStatKey(absl::string_view raw);

// Parses `ethtool -i <netdev>` output (or a file holding just the driver name) and returns the
// driver: the value of the "driver:" line, else the first non-empty line. Empty if none.
std::string ParseEthtoolDriverText(absl::string_view text);

}  // namespace fabricmon::collectors::ethtool
