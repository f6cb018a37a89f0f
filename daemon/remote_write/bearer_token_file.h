#pragma once

// The bearer token of a remote_write endpoint, read from a file that may be rotated under the
// running aggregator (a Kubernetes projected service-account token is replaced about every hour,
// by swapping a symlink). Current() returns the token to send now: at most once per
// `recheck_nanos` it stat()s the file (never per sample, never per request when requests are
// faster than that) and, when the file's identity or times or size changed, reads it again.
//
// A re-read that fails (unreadable, larger than the limit, empty, control characters inside)
// keeps the last good token: a receiver that still accepts it loses nothing, and one that does
// not answers 401/403, which is counted per request as any refusal. The failure is logged and
// counted once per change of the file (the next attempt waits for the file to change again), so a
// broken file neither floods the log nor costs a read per request.
//
// Thread-safety: Current() and the counters from any thread (every sender of an endpoint shares
// one BearerTokenFile).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/clock.h"

namespace fabricmon::remote_write {

class BearerTokenFile {
 public:
  static constexpr size_t kMaxTokenBytes = 64 << 10;
  static constexpr int64_t kDefaultRecheckNanos = int64_t{1} * 1000 * 1000 * 1000;

  // Reads the token now: the file's own error (NotFound, PermissionDenied, ...) or
  // InvalidArgument (too large, no token) stops the start. Keeps a reference to `clock`. The
  // token never appears in a message.
  static absl::StatusOr<std::shared_ptr<BearerTokenFile>> Create(
      std::string path, const Clock& clock = RealClock::Get(),
      int64_t recheck_nanos = kDefaultRecheckNanos);

  // The token to send (never empty).
  std::string Current() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return path_; }
  // Re-reads that found a new token / that failed and kept the last good one.
  uint64_t reloads() const { return reloads_.load(); }
  uint64_t reload_failures() const { return reload_failures_.load(); }

  // What tells a changed file apart (stat of the path, following symlinks); all zero when the
  // path could not be stat()ed.
  struct Signature {
    uint64_t device = 0;
    uint64_t inode = 0;
    int64_t size = 0;
    int64_t mtime_nanos = 0;
    int64_t ctime_nanos = 0;
    bool operator==(const Signature& other) const;
  };

 private:
  BearerTokenFile(std::string path, const Clock& clock, int64_t recheck_nanos)
      : path_(std::move(path)), clock_(clock), recheck_nanos_(recheck_nanos) {}

  const std::string path_;
  const Clock& clock_;
  const int64_t recheck_nanos_;
  std::atomic<uint64_t> reloads_{0};
  std::atomic<uint64_t> reload_failures_{0};

  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  Signature signature_ ABSL_GUARDED_BY(mu_);
  int64_t next_check_nanos_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fabricmon::remote_write
