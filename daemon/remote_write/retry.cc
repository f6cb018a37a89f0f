#include "daemon/remote_write/retry.h"

#include <algorithm>

namespace fabricmon::remote_write {

Verdict Classify(int http_status) {
  if (http_status >= 200 && http_status < 300) {
    return Verdict::kDelivered;
  }
  // 429 is the receiver asking to slow down (remote-write 1.0 says to retry it like a 5xx).
  if (http_status == 0 || http_status == 429 || (http_status >= 500 && http_status < 600)) {
    return Verdict::kRetry;
  }
  return Verdict::kReject;
}

bool MayBeRefusalOfAPart(int http_status) {
  return http_status == 400 || http_status == 409 || http_status == 413;
}

int64_t Backoff::Delay(uint32_t attempt) {
  int64_t delay = min_;
  for (uint32_t i = 0; i < attempt && delay < max_; ++i) {
    delay *= 2;
  }
  delay = std::min(delay, max_);
  std::uniform_int_distribution<int64_t> jitter(delay / 2, delay);
  return jitter(random_);
}

}  // namespace fabricmon::remote_write
