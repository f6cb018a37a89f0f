#pragma once

// A tiny logging facade: one line per event to stderr ("W ib_sysfs: message"); journald adds the
// time and unit. One place to swap the backend later. No per-sample logging at INFO.
//
// Under systemd, when stderr is the journal stream (JOURNAL_STREAM names stderr's device and
// inode, systemd.exec(5)), every line starts with its sd-daemon(3) priority, "<3>" error, "<4>"
// warning, "<6>" info, "<7>" debug ("<2>" for a failed check), which journald stores as the
// entry's PRIORITY= (so `journalctl -p warning` works) and strips from the text. Elsewhere the
// output is unchanged.

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace fabricmon {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Sets the lowest level that is written. Thread-safe.
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// Parses "debug", "info", "warning", "error"; false if unknown.
bool ParseLogLevel(absl::string_view text, LogLevel* level);

// Whether `journal_stream` (JOURNAL_STREAM's value, "DEVICE:INODE"; null when unset) names the
// file open on `fd`. Pure but for fstat(fd); never fails (false on any doubt).
bool IsJournalStream(const char* journal_stream, int fd);
// The sd-daemon(3) prefix for `level` ("<4>" for kWarning) when stderr is the journal stream
// (decided once, from JOURNAL_STREAM and fd 2, on first use), else "". Thread-safe. Lines the
// programs write to stderr themselves (startup errors) start with it too.
absl::string_view JournalPrefix(LogLevel level);
// Overrides that decision (tests). Thread-safe.
void SetJournalPrefixesForTest(bool on);
// The sd-daemon(3) priority of `level`: 7 debug, 6 info, 4 warning, 3 error, 2 fatal.
int SyslogPriority(LogLevel level);

namespace logging_internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the line; aborts for kFatal
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Lets the macro below discard the stream expression when the level is off.
struct Voidify {
  void operator&(std::ostream&) {}
};

// True for the first call and then at most once per `interval_ns` per call site.
bool ShouldLogRateLimited(std::atomic<int64_t>* last_ns, int64_t interval_ns);

}  // namespace logging_internal
}  // namespace fabricmon

#define FABRICMON_LOG_LEVEL_(severity) ::fabricmon::LogLevel::k##severity

#define FABRICMON_LOG(severity)                                                                 \
  (FABRICMON_LOG_LEVEL_(severity) < ::fabricmon::MinLogLevel())                                 \
      ? (void)0                                                                                 \
      : ::fabricmon::logging_internal::Voidify() &                                              \
            ::fabricmon::logging_internal::LogMessage(FABRICMON_LOG_LEVEL_(severity), __FILE__, \
                                                      __LINE__)                                 \
                .stream()

// Logs at most once a minute per call site (per-port read errors and the like).
#define FABRICMON_LOG_EVERY_MINUTE(severity)                                           \
  for (static std::atomic<int64_t> fabricmon_last_log_ns_{0};                          \
       ::fabricmon::logging_internal::ShouldLogRateLimited(&fabricmon_last_log_ns_,    \
                                                           int64_t{60} * 1000000000);) \
  FABRICMON_LOG(severity)

// Broken invariant: log and abort. Never for input or environment faults (those are Status).
#define FABRICMON_CHECK(condition)                                                           \
  (condition) ? (void)0                                                                      \
              : ::fabricmon::logging_internal::Voidify() &                                   \
                    ::fabricmon::logging_internal::LogMessage(::fabricmon::LogLevel::kFatal, \
                                                              __FILE__, __LINE__)            \
                            .stream()                                                        \
                        << "Check failed: " #condition " "
