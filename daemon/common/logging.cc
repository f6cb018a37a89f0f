#include "daemon/common/logging.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace fabricmon {
namespace {
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};
// -1: not decided yet; 0: plain lines; 1: journal priority prefixes.
std::atomic<int> g_journal{-1};

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

bool IsJournalStream(const char* journal_stream, int fd) {
  if (journal_stream == nullptr) {
    return false;
  }
  std::vector<absl::string_view> parts = absl::StrSplit(journal_stream, ':');
  uint64_t device = 0;
  uint64_t inode = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &device) ||
      !absl::SimpleAtoi(parts[1], &inode)) {
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return false;
  }
  // A child that inherited JOURNAL_STREAM but writes stderr elsewhere (a redirect, a terminal)
  // keeps plain lines: only the stream systemd set up gets prefixes (systemd.exec(5)).
  return static_cast<uint64_t>(st.st_dev) == device && static_cast<uint64_t>(st.st_ino) == inode;
}

int SyslogPriority(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 7;  // LOG_DEBUG
    case LogLevel::kInfo:
      return 6;  // LOG_INFO
    case LogLevel::kWarning:
      return 4;  // LOG_WARNING
    case LogLevel::kError:
      return 3;  // LOG_ERR
    case LogLevel::kFatal:
      return 2;  // LOG_CRIT
  }
  return 3;
}

absl::string_view JournalPrefix(LogLevel level) {
  int journal = g_journal.load(std::memory_order_relaxed);
  if (journal < 0) {
    journal = IsJournalStream(std::getenv("JOURNAL_STREAM"), 2) ? 1 : 0;
    g_journal.store(journal, std::memory_order_relaxed);
  }
  if (journal == 0) {
    return "";
  }
  static constexpr absl::string_view kPrefixes[] = {"<7>", "<6>", "<4>", "<3>", "<2>"};
  const int index = static_cast<int>(level);
  return index >= 0 && index < 5 ? kPrefixes[index] : "<3>";
}

void SetJournalPrefixesForTest(bool on) { g_journal.store(on ? 1 : 0); }

namespace logging_internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E', 'F'};
  stream_ << JournalPrefix(level) << kLetters[static_cast<int>(level)] << ' ' << Basename(file)
          << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  std::string line = stream_.str();
  const absl::string_view prefix = JournalPrefix(level_);
  if (!prefix.empty() && line.find('\n') != std::string::npos) {
    // journald splits at newlines: each piece of a multi-line message keeps the priority.
    line = absl::StrReplaceAll(line, {{"\n", absl::StrCat("\n", prefix)}});
  }
  line += '\n';
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
