#pragma once

// sd_notify(3) wrapper: READY=1, WATCHDOG=1, STATUS=..., STOPPING=1. A no-op outside systemd
// (NOTIFY_SOCKET unset) and when built without libsystemd.

#include <cstdint>
#include <string>

namespace fabricmon {

void NotifyReady(const std::string& status);
void NotifyStatus(const std::string& status);
void NotifyStopping();
void NotifyWatchdog();
// The watchdog interval systemd asked for (WATCHDOG_USEC), or 0 if none.
uint64_t WatchdogIntervalMicros();

}  // namespace fabricmon
