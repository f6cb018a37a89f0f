#pragma once

// The aggregators an agent may stream to, in the node's rendezvous ranking (aggregator_ranking.h),
// each with its gRPC channel.
//
// What the operator lists: HOST:PORT entries (--aggregator=a:7470,b:7470 or repeated `aggregator`
// fields). A single entry whose host is a DNS name stands for every address it resolves to (a
// headless Kubernetes Service, a round-robin record): each address becomes one aggregator, ranked
// by "ADDRESS:PORT", and TLS still checks the certificate against the name (a name resolving to
// one address stays the target itself). Addresses of one family count: IPv4 when there is any,
// so a dual-stack host is one aggregator. Several entries are
// several aggregators, each resolved by gRPC as usual. Refresh() resolves the name again (the
// stream client calls it before each connection attempt and while it probes), so aggregators that
// come and go in DNS come and go in the ranking; a failed resolution keeps the last good list, and
// with none yet the name itself is the only target (gRPC then resolves and retries it itself).
//
// Thread-compatible: the stream client's connection thread is the only caller.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/agent/aggregator_ranking.h"
#include "grpcpp/grpcpp.h"

namespace fabricmon::agent {

struct AggregatorTarget {
  std::string address;  // what the ranking weighs and logs and metrics name
  int rank = 0;         // 0: the node's primary
  std::shared_ptr<grpc::Channel> channel;
};

class AggregatorDirectory {
 public:
  // Makes the channel for `address` (a gRPC target); `tls_name` is the name the server's
  // certificate must carry when it differs from the address's host (an expanded DNS name), else "".
  using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>(const std::string& address,
                                                                      const std::string& tls_name)>;
  // The addresses `host` resolves to (numeric, IPv6 without brackets), or an error.
  using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string& host)>;

  // `entries` as ParseAggregatorList takes them. InvalidArgument for a bad list.
  static absl::StatusOr<std::unique_ptr<AggregatorDirectory>> Create(
      const std::vector<std::string>& entries, std::string node_name, ChannelFactory channels,
      Resolver resolver = SystemResolver);

  // Resolves again where a name stands for several aggregators and returns the targets in rank
  // order (never empty). Channels of addresses still listed are kept: their connections and
  // backoff state survive a refresh.
  std::vector<AggregatorTarget> Refresh();

  // Whether Refresh() can change the list (a DNS name stands for the aggregators).
  bool resolves() const { return expand_.has_value(); }

  // getaddrinfo(3), TCP; the IPv4 addresses, or the IPv6 ones when there is none; sorted,
  // duplicates removed.
  static absl::StatusOr<std::vector<std::string>> SystemResolver(const std::string& host);

 private:
  AggregatorDirectory(std::vector<AggregatorAddress> listed, std::string node_name,
                      ChannelFactory channels, Resolver resolver);
  std::vector<std::string> CurrentAddresses();

  const std::vector<AggregatorAddress> listed_;
  const std::string node_name_;
  const ChannelFactory channels_;
  const Resolver resolver_;
  // The single listed name that expands to its addresses, if the list is one DNS name.
  std::optional<AggregatorAddress> expand_;
  std::vector<std::string> last_resolved_;  // "ADDRESS:PORT", the last good resolution
  bool resolve_failure_logged_ = false;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channel_cache_;
};

}  // namespace fabricmon::agent
