#pragma once

// The seam between a queue shard and the network: one POST of one request body. Production
// uses CurlSender (curl_sender.h); tests a fake answering what they choose.

#include <cstdint>
#include <string>

namespace fabricmon::remote_write {

struct SendResult {
  int http_status = 0;  // 0: no response (see Verdict in retry.h)
  std::string error;    // why, when there was no 2xx: curl's error or the start of the body
};

class Sender {
 public:
  virtual ~Sender() = default;
  // POSTs `body` (snappy-compressed WriteRequest) and waits at most `timeout_nanos` for the
  // answer. Called from one thread at a time (each shard has its own sender).
  virtual SendResult Send(const std::string& body, int64_t timeout_nanos) = 0;
};

}  // namespace fabricmon::remote_write
