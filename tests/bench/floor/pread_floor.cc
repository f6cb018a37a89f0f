// fabricmon_pread_floor: the syscall floor of a sysfs counter collector, as a whole process.
//
//   fabricmon_pread_floor --files=LIST --interval_ms=100 [--duration_s=N]
//
// Opens every file named in LIST (one path a line) once, then on a fixed-rate schedule pread(2)s
// each at offset 0 into a small buffer: no parsing, no samples, no transport. That is the least
// any collector reading the same files at the same rate can cost; run_agent_floor.sh measures
// this process's CPU the way it measures the agent's and node_exporter's.
//
// Open once, like the agent: a sysfs attribute regenerates its content on every read at offset 0
// of an open descriptor, so re-opening per cycle (open + close, two more syscalls and a path
// walk per value) is not needed for fresh values, and the floor must not charge it.
//
// Runs until SIGTERM/SIGINT or --duration_s; prints what it read to stdout at exit. Exit 0, or
// 2 for usage, 1 when a file cannot be opened (a floor over fewer files would flatter it).

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;

void OnStop(int) { g_stop = 1; }

bool FlagValue(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') {
    return false;
  }
  *value = arg + n + 1;
  return true;
}

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace

int main(int argc, char** argv) {
  std::string list;
  std::string interval_text = "100";
  std::string duration_text = "0";
  for (int i = 1; i < argc; ++i) {
    if (!FlagValue(argv[i], "--files", &list) &&
        !FlagValue(argv[i], "--interval_ms", &interval_text) &&
        !FlagValue(argv[i], "--duration_s", &duration_text)) {
      std::fprintf(stderr, "usage: %s --files=LIST [--interval_ms=100] [--duration_s=N]\n",
                   argv[0]);
      return 2;
    }
  }
  char* end = nullptr;
  const long interval_ms = std::strtol(interval_text.c_str(), &end, 10);
  if (list.empty() || *end != '\0' || interval_ms <= 0) {
    std::fprintf(stderr, "%s: --files is required and --interval_ms must be positive\n", argv[0]);
    return 2;
  }
  const long duration_s = std::strtol(duration_text.c_str(), &end, 10);
  if (*end != '\0' || duration_s < 0) {
    std::fprintf(stderr, "%s: --duration_s must be a non-negative integer\n", argv[0]);
    return 2;
  }

  std::vector<int> fds;
  std::ifstream in(list);
  if (!in) {
    std::fprintf(stderr, "%s: cannot read %s\n", argv[0], list.c_str());
    return 2;
  }
  for (std::string path; std::getline(in, path);) {
    if (path.empty()) {
      continue;
    }
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::fprintf(stderr, "%s: open %s: %s\n", argv[0], path.c_str(), std::strerror(errno));
      return 1;
    }
    fds.push_back(fd);
  }
  if (fds.empty()) {
    std::fprintf(stderr, "%s: %s names no file\n", argv[0], list.c_str());
    return 1;
  }

  struct sigaction action {};
  action.sa_handler = OnStop;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  const int64_t interval_ns = int64_t{interval_ms} * 1000000;
  const int64_t stop_at = duration_s > 0 ? MonotonicNanos() + duration_s * 1000000000 : 0;
  int64_t next = MonotonicNanos();
  uint64_t cycles = 0;
  uint64_t errors = 0;
  uint64_t bytes = 0;
  char buffer[64];
  while (!g_stop && (stop_at == 0 || next < stop_at)) {
    for (const int fd : fds) {
      const ssize_t n = pread(fd, buffer, sizeof(buffer), 0);
      if (n < 0) {
        ++errors;
      } else {
        bytes += static_cast<uint64_t>(n);
      }
    }
    ++cycles;
    // Fixed rate, absolute deadlines; an overrun skips ticks rather than bursting (as the agent).
    next += interval_ns;
    const int64_t now = MonotonicNanos();
    if (next < now) {
      next = now + interval_ns - (now - next) % interval_ns;
    }
    timespec deadline{static_cast<time_t>(next / 1000000000), static_cast<long>(next % 1000000000)};
    while (!g_stop &&
           clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
    }
  }
  std::printf("pread floor: %zu files, %llu cycles, %llu bytes, %llu read errors\n", fds.size(),
              static_cast<unsigned long long>(cycles), static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(errors));
  for (const int fd : fds) {
    close(fd);
  }
  return 0;
}
