#pragma once

// AggregatorConfig.remote_write → what an Endpoint and its CurlSenders are built from, validated
// (the aggregator refuses to start, exit 2, on any error): the URL, headers, external labels,
// queue ranges (config.proto), and the files it names (bearer token, TLS), which are read now.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/remote_write/curl_sender.h"
#include "daemon/remote_write/endpoint.h"
#include "fabricmon/v1/config.pb.h"
#include "google/protobuf/repeated_field.h"

namespace fabricmon::remote_write {

struct EndpointConfig {
  EndpointOptions endpoint;
  HttpOptions http;
  int64_t flush_deadline_nanos = 0;
};

// The label naming the aggregator that sent its own series (several aggregators shard a fleet).
inline constexpr absl::string_view kShardLabel = "shard";

// InvalidArgument naming the endpoint (remote_write[i]) and the field; the file's own error
// (NotFound, PermissionDenied, ...) for an unreadable token or TLS file. The token never appears
// in a message. A non-empty `shard` (the aggregator's shard name) becomes every endpoint's
// aggregator label `shard` (on the aggregator's own series, not on agents': EndpointOptions),
// which external_labels may then not set itself.
absl::StatusOr<std::vector<EndpointConfig>> ParseRemoteWriteConfigs(
    const google::protobuf::RepeatedPtrField<v1::RemoteWriteConfig>& configs,
    absl::string_view shard = "");

// The URL without user info, query or fragment: the default endpoint name.
std::string RedactedUrl(const std::string& url);

}  // namespace fabricmon::remote_write
