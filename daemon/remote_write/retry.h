#pragma once

// What a remote-write response means for the batch that got it, and how long to wait before
// trying again. Pure, thread-safe.

#include <cstdint>
#include <random>

namespace fabricmon::remote_write {

// The outcome of one HTTP attempt: the status code, or 0 when no response came (connection
// refused, reset, timeout, TLS failure).
enum class Verdict {
  kDelivered,  // 2xx
  kRetry,      // 5xx, 429, no response: the receiver may take it later
  kReject,     // any other code (4xx, and codes a receiver should never send): retrying cannot
               // help, so the batch is dropped and counted
};
Verdict Classify(int http_status);

// Whether a refusal (kReject) may be of some of the request's samples only, so that the same
// samples in smaller requests may partly be accepted: 400 (Prometheus refuses a whole request
// for one out-of-order or duplicate sample, e.g. a batch an agent replays after a failover that
// was already delivered; Mimir and Cortex for one invalid or too old series), 409 (Thanos
// Receive's conflict: out of order, duplicate) and 413 (the request too large). Not 401, 403,
// 404 and the like: every part would be refused alike.
bool MayBeRefusalOfAPart(int http_status);

// Exponential backoff with jitter: attempt n (0 for the first retry) waits a uniformly random
// time in [d/2, d] where d = min(max, min × 2^n). The jitter spreads the retries of the shards
// (and of many aggregators) that all failed at the same moment of a receiver's outage.
class Backoff {
 public:
  // Both in nanoseconds, 0 < min ≤ max.
  Backoff(int64_t min_nanos, int64_t max_nanos, uint64_t seed)
      : min_(min_nanos), max_(max_nanos), random_(seed) {}
  int64_t Delay(uint32_t attempt);

 private:
  const int64_t min_;
  const int64_t max_;
  std::mt19937_64 random_;
};

}  // namespace fabricmon::remote_write
