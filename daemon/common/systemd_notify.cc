#include "daemon/common/systemd_notify.h"

#ifdef FABRICMON_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fabricmon {

absl::Status CheckProgress(const std::vector<LoopProgress>& loops, int64_t now_nanos) {
  std::vector<std::string> stalled;
  for (const LoopProgress& loop : loops) {
    const int64_t silent = now_nanos - loop.last_progress_nanos;
    if (silent > loop.max_silence_nanos) {
      stalled.push_back(absl::StrFormat("%s made no progress for %.1f s (limit %.1f s)", loop.name,
                                        static_cast<double>(silent) / 1e9,
                                        static_cast<double>(loop.max_silence_nanos) / 1e9));
    }
  }
  if (stalled.empty()) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrJoin(stalled, "; "));
}

#ifdef FABRICMON_HAVE_SYSTEMD
void NotifyReady(const std::string& status) {
  (void)sd_notifyf(0, "READY=1\nSTATUS=%s", status.c_str());  // best effort, outside systemd too
}
void NotifyStatus(const std::string& status) { (void)sd_notifyf(0, "STATUS=%s", status.c_str()); }
void NotifyStopping() { (void)sd_notify(0, "STOPPING=1"); }
void NotifyWatchdog() { (void)sd_notify(0, "WATCHDOG=1"); }
uint64_t WatchdogIntervalMicros() {
  uint64_t usec = 0;
  return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}
#else
void NotifyReady(const std::string&) {}
void NotifyStatus(const std::string&) {}
void NotifyStopping() {}
void NotifyWatchdog() {}
uint64_t WatchdogIntervalMicros() { return 0; }
#endif

}  // namespace fabricmon
