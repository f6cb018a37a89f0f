#include "daemon/common/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"

namespace fabricmon {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

bool ParseLogLevel(absl::string_view text, LogLevel* level) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "debug") {
    *level = LogLevel::kDebug;
  } else if (lower == "info") {
    *level = LogLevel::kInfo;
  } else if (lower == "warning" || lower == "warn") {
    *level = LogLevel::kWarning;
  } else if (lower == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

namespace logging_internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E', 'F'};
  stream_ << kLetters[static_cast<int>(level)] << ' ' << Basename(file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write per line so concurrent threads do not interleave within a line.
  std::fwrite(line.data(), 1, line.size(), stderr);
  if (level_ == LogLevel::kFatal) {
    std::fflush(stderr);
    std::abort();
  }
}

bool ShouldLogRateLimited(std::atomic<int64_t>* last_ns, int64_t interval_ns) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_ns->load(std::memory_order_relaxed);
  // The for-loop in the macro calls this again after the body: the CAS makes that second call
  // (and concurrent callers) return false.
  if (last != 0 && now - last < interval_ns) {
    return false;
  }
  return last_ns->compare_exchange_strong(last, now);
}

}  // namespace logging_internal
}  // namespace fabricmon
