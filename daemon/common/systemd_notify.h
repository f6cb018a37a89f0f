#pragma once

// sd_notify(3) wrapper: READY=1, WATCHDOG=1, STATUS=..., STOPPING=1. A no-op outside systemd
// (NOTIFY_SOCKET unset) and when built without libsystemd. Used by both daemons.
//
// The watchdog vouches for progress, not just for a live main thread: a daemon pings only while
// CheckProgress() says every loop it depends on moved recently.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace fabricmon {

void NotifyReady(const std::string& status);
void NotifyStatus(const std::string& status);
void NotifyStopping();
void NotifyWatchdog();
// The watchdog interval systemd asked for (WATCHDOG_USEC), or 0 if none.
uint64_t WatchdogIntervalMicros();

// A loop whose progress the watchdog ping stands for (the aggregator's detector thread, its
// gRPC server).
struct LoopProgress {
  std::string name;
  // Monotonic time of its last progress, or of the daemon's start before the first.
  int64_t last_progress_nanos = 0;
  // Longer than this without progress: stalled.
  int64_t max_silence_nanos = 0;
};

// OK when every loop made progress within its max_silence_nanos before `now_nanos` (same
// monotonic clock); otherwise Unavailable naming each stalled loop and how long it has been
// silent. Pure.
absl::Status CheckProgress(const std::vector<LoopProgress>& loops, int64_t now_nanos);

}  // namespace fabricmon
