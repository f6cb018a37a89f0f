#include "daemon/remote_write/config.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/operator_file.h"
#include "daemon/remote_write/bearer_token_file.h"
#include "daemon/remote_write/label_set.h"
#include "daemon/remote_write/shard.h"

namespace fabricmon::remote_write {
namespace {

// Headers the client sets itself, and headers that would break the request if set twice.
bool IsReservedHeader(const std::string& name) {
  static const char* const kReserved[] = {
      "content-encoding", "content-type", "x-prometheus-remote-write-version",
      "content-length",   "host",         "transfer-encoding",
      "expect",           "connection",   "user-agent"};
  const std::string lower = absl::AsciiStrToLower(name);
  return std::find(std::begin(kReserved), std::end(kReserved), lower) != std::end(kReserved);
}

bool IsHeaderToken(const std::string& name) {
  if (name.empty()) {
    return false;
  }
  for (unsigned char c : name) {
    if (!(absl::ascii_isalnum(c) || absl::StrContains("!#$%&'*+-.^_`|~", static_cast<char>(c)))) {
      return false;
    }
  }
  return true;
}

bool IsHeaderValue(const std::string& value) {
  for (unsigned char c : value) {
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      return false;  // CR and LF above all: header injection
    }
  }
  return true;
}

// "http://host[:port]/path" or https: a scheme, a non-empty host, no whitespace.
absl::Status CheckUrl(const std::string& url) {
  std::string rest;
  if (absl::StartsWith(url, "http://")) {
    rest = url.substr(7);
  } else if (absl::StartsWith(url, "https://")) {
    rest = url.substr(8);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("url \"", RedactedUrl(url), "\" must start with http:// or https://"));
  }
  for (unsigned char c : url) {
    if (c <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError("url must not contain spaces or control characters");
    }
  }
  const size_t at = rest.find_first_of("/?#");
  std::string authority = rest.substr(0, at);
  if (const size_t user = authority.rfind('@'); user != std::string::npos) {
    authority = authority.substr(user + 1);
  }
  if (authority.empty() || authority[0] == ':') {
    return absl::InvalidArgumentError(absl::StrCat("url \"", RedactedUrl(url), "\" has no host"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status InRange(const char* field, T value, T low, T high) {
  if (value < low || value > high) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue.", field, " must lie in ", low, "..", high, ", not ", value));
  }
  return absl::OkStatus();
}

absl::StatusOr<EndpointConfig> ParseOne(const v1::RemoteWriteConfig& config) {
  EndpointConfig out;
  if (absl::Status url = CheckUrl(config.url()); !url.ok()) {
    return url;
  }
  out.http.url = config.url();
  out.endpoint.name = config.name().empty() ? RedactedUrl(config.url()) : config.name();
  const bool https = absl::StartsWith(config.url(), "https://");

  std::map<std::string, std::string> headers(config.headers().begin(), config.headers().end());
  for (const auto& [name, value] : headers) {
    if (!IsHeaderToken(name) || !IsHeaderValue(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("headers: \"", name, "\" is not a valid header name and value"));
    }
    if (IsReservedHeader(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("headers: \"", name, "\" is set by the remote-write client itself"));
    }
    if (absl::EqualsIgnoreCase(name, "authorization") && !config.bearer_token_file().empty()) {
      return absl::InvalidArgumentError(
          "headers: Authorization and bearer_token_file are mutually exclusive");
    }
    out.http.headers.emplace_back(name, value);
  }

  std::map<std::string, std::string> external(config.external_labels().begin(),
                                              config.external_labels().end());
  for (const auto& [name, value] : external) {
    if (!IsValidLabelName(name) || absl::StartsWith(name, "__")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "external_labels: \"", name, "\" is not a label name (or starts with \"__\")"));
    }
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("external_labels: \"", name, "\" has an empty value"));
    }
    out.endpoint.external_labels.emplace_back(name, value);  // std::map: sorted by name
  }

  if (!config.bearer_token_file().empty()) {
    absl::StatusOr<std::shared_ptr<BearerTokenFile>> token =
        BearerTokenFile::Create(config.bearer_token_file());
    if (!token.ok()) {
      return token.status();
    }
    out.http.bearer_token = *std::move(token);
  }

  const v1::RemoteWriteTlsConfig& tls = config.tls();
  if (!tls.ca_file().empty() || !tls.cert_file().empty() || !tls.key_file().empty()) {
    if (!https) {
      return absl::InvalidArgumentError("tls is set but the url is not https://");
    }
    if (tls.cert_file().empty() != tls.key_file().empty()) {
      return absl::InvalidArgumentError("tls: cert_file and key_file go together");
    }
    // Read now so that a missing or unreadable file stops the start rather than every request.
    for (const auto& [path, what] :
         {std::pair{tls.ca_file(), "tls ca_file"}, std::pair{tls.cert_file(), "tls cert_file"},
          std::pair{tls.key_file(), "tls key_file"}}) {
      if (!path.empty()) {
        absl::StatusOr<std::string> read = ReadOperatorFile(path, 1 << 20, what);
        if (!read.ok()) {
          return read.status();
        }
      }
    }
    out.http.ca_file = tls.ca_file();
    out.http.cert_file = tls.cert_file();
    out.http.key_file = tls.key_file();
  }

  const v1::RemoteWriteQueueConfig& q = config.queue();
  QueueOptions& queue = out.endpoint.queue;
  const uint32_t shards = q.has_shards() ? q.shards() : 4;
  const uint64_t capacity = q.has_capacity_samples() ? q.capacity_samples() : 1000000;
  // 10,000 as vmagent sends (Prometheus' own sender: 2,000): each request costs the aggregator
  // an HTTP exchange and the release of its batches' acknowledgements; at 1,000 nodes × 1 Hz,
  // 2,000 per request took 13 % more of its CPU (README, Remote write). Never above a smaller
  // capacity, which must hold one request: a config that sets only the capacity stays valid.
  const uint32_t per_send =
      q.has_max_samples_per_send()
          ? q.max_samples_per_send()
          : static_cast<uint32_t>(std::clamp<uint64_t>(capacity, 1, kDefaultMaxSamplesPerSend));
  const uint32_t deadline = q.has_batch_send_deadline_ms() ? q.batch_send_deadline_ms() : 1000;
  const uint32_t min_backoff = q.has_min_backoff_ms() ? q.min_backoff_ms() : 30;
  const uint32_t max_backoff = q.has_max_backoff_ms() ? q.max_backoff_ms() : 5000;
  const uint32_t timeout = q.has_request_timeout_ms() ? q.request_timeout_ms() : 30000;
  const uint32_t flush = q.has_flush_deadline_ms() ? q.flush_deadline_ms() : 5000;
  for (absl::Status status :
       {InRange<uint32_t>("shards", shards, 1, 256),
        InRange<uint32_t>("max_samples_per_send", per_send, 1, 100000),
        InRange<uint32_t>("batch_send_deadline_ms", deadline, 10, 60000),
        InRange<uint64_t>("capacity_samples", capacity, per_send, uint64_t{1} << 32),
        InRange<uint32_t>("min_backoff_ms", min_backoff, 1, 60000),
        InRange<uint32_t>("max_backoff_ms", max_backoff, min_backoff, 600000),
        InRange<uint32_t>("request_timeout_ms", timeout, 100, 600000),
        InRange<uint32_t>("flush_deadline_ms", flush, 0, 60000)}) {
    if (!status.ok()) {
      return status;
    }
  }
  constexpr int64_t kMs = 1000000;
  queue.shards = shards;
  queue.max_samples_per_send = per_send;
  queue.batch_send_deadline_nanos = deadline * kMs;
  queue.capacity_samples = capacity;
  queue.min_backoff_nanos = min_backoff * kMs;
  queue.max_backoff_nanos = max_backoff * kMs;
  queue.request_timeout_nanos = timeout * kMs;
  out.flush_deadline_nanos = flush * kMs;
  return out;
}

}  // namespace

std::string RedactedUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  std::string out = url.substr(0, url.find_first_of("?#", start));
  const size_t path = out.find('/', start);
  const size_t at = out.rfind('@', path == std::string::npos ? std::string::npos : path);
  if (at != std::string::npos && at >= start) {
    out.erase(start, at + 1 - start);
  }
  return out;
}

absl::StatusOr<std::vector<EndpointConfig>> ParseRemoteWriteConfigs(
    const google::protobuf::RepeatedPtrField<v1::RemoteWriteConfig>& configs,
    absl::string_view shard) {
  std::vector<EndpointConfig> out;
  std::set<std::string> names;
  for (int i = 0; i < configs.size(); ++i) {
    absl::StatusOr<EndpointConfig> parsed = ParseOne(configs.Get(i));
    if (parsed.ok() && !shard.empty()) {
      LabelPairs& external = parsed->endpoint.external_labels;
      const auto at = std::lower_bound(
          external.begin(), external.end(), std::string(kShardLabel),
          [](const auto& pair, const std::string& name) { return pair.first < name; });
      if (at != external.end() && at->first == kShardLabel) {
        parsed = absl::InvalidArgumentError(
            "external_labels: \"shard\" is the aggregator's shard name (set `shard` instead)");
      } else {
        parsed->endpoint.aggregator_labels = {{std::string(kShardLabel), std::string(shard)}};
      }
    }
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(),
                          absl::StrCat("remote_write[", i, "]: ", parsed.status().message()));
    }
    if (!names.insert(parsed->endpoint.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("remote_write[", i, "]: endpoint name \"", parsed->endpoint.name,
                       "\" is used twice (set `name` to tell them apart)"));
    }
    out.push_back(*std::move(parsed));
  }
  return out;
}

}  // namespace fabricmon::remote_write
