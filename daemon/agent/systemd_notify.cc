#include "daemon/agent/systemd_notify.h"

#ifdef FABRICMON_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace fabricmon {

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
