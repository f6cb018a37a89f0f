#include "daemon/agent/aggregator_directory.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"

namespace fabricmon::agent {
namespace {

bool IsNumericAddress(const std::string& host) {
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

std::string JoinHostPort(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port)
                                             : absl::StrCat(host, ":", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AggregatorDirectory>> AggregatorDirectory::Create(
    const std::vector<std::string>& entries, std::string node_name, ChannelFactory channels,
    Resolver resolver) {
  absl::StatusOr<std::vector<AggregatorAddress>> listed = ParseAggregatorList(entries);
  if (!listed.ok()) {
    return listed.status();
  }
  if (listed->empty()) {
    return absl::InvalidArgumentError("no aggregator address given");
  }
  return std::unique_ptr<AggregatorDirectory>(new AggregatorDirectory(
      *std::move(listed), std::move(node_name), std::move(channels), std::move(resolver)));
}

AggregatorDirectory::AggregatorDirectory(std::vector<AggregatorAddress> listed,
                                         std::string node_name, ChannelFactory channels,
                                         Resolver resolver)
    : listed_(std::move(listed)),
      node_name_(std::move(node_name)),
      channels_(std::move(channels)),
      resolver_(std::move(resolver)) {
  if (listed_.size() == 1 && !IsNumericAddress(listed_.front().host)) {
    expand_ = listed_.front();
  }
}

std::vector<std::string> AggregatorDirectory::CurrentAddresses() {
  if (!expand_.has_value()) {
    std::vector<std::string> addresses;
    for (const AggregatorAddress& address : listed_) {
      addresses.push_back(address.text);
    }
    return addresses;
  }
  absl::StatusOr<std::vector<std::string>> resolved = resolver_(expand_->host);
  if (resolved.ok() && !resolved->empty()) {
    std::vector<std::string> addresses;
    for (const std::string& host : *resolved) {
      addresses.push_back(JoinHostPort(host, expand_->port));
    }
    std::sort(addresses.begin(), addresses.end());
    addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
    if (addresses != last_resolved_) {
      FABRICMON_LOG(Info) << expand_->text << " resolves to " << addresses.size()
                          << " aggregator(s): " << absl::StrJoin(addresses, ", ");
    }
    last_resolved_ = std::move(addresses);
    resolve_failure_logged_ = false;
  } else if (!resolve_failure_logged_) {
    resolve_failure_logged_ = true;
    FABRICMON_LOG(Warning) << "cannot resolve " << expand_->host << ": "
                           << (resolved.ok() ? "no address" : resolved.status().message())
                           << (last_resolved_.empty() ? "; trying the name itself"
                                                      : "; keeping the last addresses");
  }
  // A name for one server stays the target itself, as when it was the only way to name the
  // aggregator: gRPC resolves it, and nothing changes for a single-aggregator deployment.
  if (last_resolved_.size() <= 1) {
    return {expand_->text};
  }
  return last_resolved_;
}

std::vector<AggregatorTarget> AggregatorDirectory::Refresh() {
  std::vector<std::string> ranked = RankAggregators(node_name_, CurrentAddresses());
  std::map<std::string, std::shared_ptr<grpc::Channel>> kept;
  std::vector<AggregatorTarget> targets;
  for (size_t i = 0; i < ranked.size(); ++i) {
    AggregatorTarget target;
    target.address = ranked[i];
    target.rank = static_cast<int>(i);
    auto cached = channel_cache_.find(target.address);
    if (cached != channel_cache_.end()) {
      target.channel = cached->second;
    } else {
      const bool expanded = expand_.has_value() && target.address != expand_->text;
      target.channel = channels_(target.address, expanded ? expand_->host : std::string());
    }
    kept[target.address] = target.channel;
    targets.push_back(std::move(target));
  }
  channel_cache_ = std::move(kept);
  return targets;
}

absl::StatusOr<std::vector<std::string>> AggregatorDirectory::SystemResolver(
    const std::string& host) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("getaddrinfo: ", gai_strerror(rc)));
  }
  std::vector<std::string> addresses;
  // One family: a dual-stack host answers with an IPv4 and an IPv6 address for the same server,
  // which must not count as two aggregators. IPv4 when there is any (as most resolvers order).
  bool any_ipv4 = false;
  for (addrinfo* entry = result; entry != nullptr; entry = entry->ai_next) {
    any_ipv4 = any_ipv4 || entry->ai_family == AF_INET;
  }
  for (addrinfo* entry = result; entry != nullptr; entry = entry->ai_next) {
    if (any_ipv4 && entry->ai_family != AF_INET) {
      continue;
    }
    char text[INET6_ADDRSTRLEN] = {0};
    const void* raw = nullptr;
    if (entry->ai_family == AF_INET) {
      raw = &reinterpret_cast<const sockaddr_in*>(entry->ai_addr)->sin_addr;
    } else if (entry->ai_family == AF_INET6) {
      raw = &reinterpret_cast<const sockaddr_in6*>(entry->ai_addr)->sin6_addr;
    } else {
      continue;
    }
    if (inet_ntop(entry->ai_family, raw, text, sizeof(text)) != nullptr) {
      addresses.emplace_back(text);
    }
  }
  freeaddrinfo(result);
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  return addresses;
}

}  // namespace fabricmon::agent
