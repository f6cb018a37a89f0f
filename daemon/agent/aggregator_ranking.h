#pragma once

// Which aggregator a node streams to: rendezvous (highest random weight) hashing of the node name
// against each aggregator's address (Thaler & Ravishankar, "Using name-based mappings to increase
// hit rates", 1998). Every agent computes the same ranking from the same list with no
// coordination; nodes spread evenly over the aggregators; removing one moves only the nodes it
// carried (each to its own next choice, spread over the rest), and adding one takes an even share
// from every other. Pure functions, no I/O.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricmon::agent {

// HOST:PORT as the operator wrote it: a host name, an IPv4 address or a bracketed IPv6 address.
struct AggregatorAddress {
  std::string host;  // without brackets
  uint16_t port = 0;
  std::string text;  // HOST:PORT as given (IPv6 bracketed)
};

// Parses one HOST:PORT. InvalidArgument naming the problem (no port, port out of 1..65535, empty
// host, unbalanced brackets, whitespace).
absl::StatusOr<AggregatorAddress> ParseAggregatorAddress(absl::string_view text);

// Parses a list of HOST:PORT (each entry may itself be a comma-separated list, as the
// --aggregator flag takes it). InvalidArgument for an empty entry, a bad address or the same
// address twice (it would weigh twice in the ranking).
absl::StatusOr<std::vector<AggregatorAddress>> ParseAggregatorList(
    const std::vector<std::string>& entries);

// The weight of `address` for `node`: a stable 64-bit hash (FNV-1a, then the splitmix64
// finalizer so that addresses differing in one character get unrelated weights). Stable across
// processes, builds and machines: every agent and every test computes the same value.
uint64_t RendezvousWeight(absl::string_view node, absl::string_view address);

// `addresses` ordered by decreasing weight for `node` (ties, practically impossible, by address):
// the first is the node's primary, the next its first fallback, and so on.
std::vector<std::string> RankAggregators(absl::string_view node,
                                         std::vector<std::string> addresses);

}  // namespace fabricmon::agent
