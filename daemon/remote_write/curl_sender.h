#pragma once

// Sender over libcurl: HTTP(S) POST with the remote-write 1.0 headers (Content-Encoding: snappy,
// Content-Type: application/x-protobuf, X-Prometheus-Remote-Write-Version: 0.1.0), the
// endpoint's own headers, a bearer token, and TLS (a CA to verify the receiver by, a client
// certificate and key for mutual TLS). One easy handle per sender, so the connection to the
// receiver is kept between requests. The bearer token is asked of its file (bearer_token_file.h)
// before each request, so a rotated token is sent without a restart.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/remote_write/bearer_token_file.h"
#include "daemon/remote_write/sender.h"

namespace fabricmon::remote_write {

struct HttpOptions {
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;  // the endpoint's own
  // null: no Authorization header from us; else the file's current token on every request
  std::shared_ptr<BearerTokenFile> bearer_token;
  std::string ca_file;    // empty: the system's CAs
  std::string cert_file;  // client certificate (with key_file), for mutual TLS
  std::string key_file;
  std::string user_agent;
};

class CurlSender final : public Sender {
 public:
  // Internal when libcurl cannot be set up. Thread-safe to call from several threads.
  static absl::StatusOr<std::unique_ptr<CurlSender>> Create(const HttpOptions& options);
  ~CurlSender() override;

  SendResult Send(const std::string& body, int64_t timeout_nanos) override;

 private:
  CurlSender() = default;
  void* curl_ = nullptr;  // CURL*
  // Rebuilds the header list when the bearer token changed; false when libcurl is out of memory.
  bool UpdateHeaders();

  std::vector<std::string> fixed_headers_;  // every header line but Authorization
  std::shared_ptr<BearerTokenFile> bearer_token_;
  std::string token_in_headers_;  // the token headers_ carries
  void* headers_ = nullptr;       // curl_slist*
  std::string response_;          // the start of the last response body (for errors)
  char error_[256] = {};          // CURLOPT_ERRORBUFFER
};

}  // namespace fabricmon::remote_write
