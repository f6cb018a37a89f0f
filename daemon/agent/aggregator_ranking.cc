#include "daemon/agent/aggregator_ranking.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fabricmon::agent {

absl::StatusOr<AggregatorAddress> ParseAggregatorAddress(absl::string_view text) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("aggregator \"", text, "\": ", why));
  };
  if (text.empty()) {
    return invalid("empty address");
  }
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return invalid("contains whitespace or a control character");
    }
  }
  AggregatorAddress address;
  absl::string_view port_text;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) {
      return invalid("unbalanced '[' (an IPv6 address is written [ADDRESS]:PORT)");
    }
    address.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      return invalid("no :PORT after the IPv6 address");
    }
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      return invalid("no :PORT");
    }
    address.host = std::string(text.substr(0, colon));
    if (address.host.find(':') != std::string::npos) {
      return invalid("an IPv6 address is written [ADDRESS]:PORT");
    }
    port_text = text.substr(colon + 1);
  }
  if (address.host.empty()) {
    return invalid("empty host");
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port == 0 || port > 65535 ||
      port_text.find_first_not_of("0123456789") != absl::string_view::npos) {
    return invalid("the port must be a number in 1..65535");
  }
  address.port = static_cast<uint16_t>(port);
  address.text = std::string(text);
  return address;
}

absl::StatusOr<std::vector<AggregatorAddress>> ParseAggregatorList(
    const std::vector<std::string>& entries) {
  std::vector<AggregatorAddress> addresses;
  std::set<std::string> seen;
  for (const std::string& entry : entries) {
    for (absl::string_view part : absl::StrSplit(entry, ',')) {
      absl::StatusOr<AggregatorAddress> parsed = ParseAggregatorAddress(part);
      if (!parsed.ok()) {
        return parsed.status();
      }
      if (!seen.insert(parsed->text).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("aggregator \"", parsed->text, "\" is listed twice"));
      }
      addresses.push_back(*std::move(parsed));
    }
  }
  return addresses;
}

uint64_t RendezvousWeight(absl::string_view node, absl::string_view address) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  auto mix = [&hash](absl::string_view bytes) {
    for (unsigned char c : bytes) {
      hash ^= c;
      hash *= 0x100000001b3ull;  // FNV-1a 64 prime
    }
  };
  mix(node);
  mix(absl::string_view("\0", 1));  // "ab"+"c" and "a"+"bc" must differ
  mix(address);
  // splitmix64's finalizer (Steele, Lea & Flood 2014): FNV alone clusters for inputs that differ
  // only at the end, as aggregator-0, aggregator-1, ... do.
  hash ^= hash >> 30;
  hash *= 0xbf58476d1ce4e5b9ull;
  hash ^= hash >> 27;
  hash *= 0x94d049bb133111ebull;
  hash ^= hash >> 31;
  return hash;
}

std::vector<std::string> RankAggregators(absl::string_view node,
                                         std::vector<std::string> addresses) {
  std::vector<std::pair<uint64_t, std::string>> weighted;
  weighted.reserve(addresses.size());
  for (std::string& address : addresses) {
    weighted.emplace_back(RendezvousWeight(node, address), std::move(address));
  }
  std::sort(weighted.begin(), weighted.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> ranked;
  ranked.reserve(weighted.size());
  for (auto& [weight, address] : weighted) {
    ranked.push_back(std::move(address));
  }
  return ranked;
}

}  // namespace fabricmon::agent
