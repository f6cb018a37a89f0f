#include "tests/security/daemon_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::testing {

DaemonProcess::~DaemonProcess() { Kill(); }

bool DaemonProcess::Start(const std::vector<std::string>& argv, std::string log_path) {
  log_path_ = std::move(log_path);
  std::vector<char*> args;
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return false;
  }
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd);
  return pid_ > 0;
}

std::optional<int> DaemonProcess::Wait(absl::Duration timeout) {
  if (exit_code_.has_value() || pid_ <= 0) {
    return exit_code_;
  }
  const absl::Time deadline = absl::Now() + timeout;
  do {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    absl::SleepFor(absl::Milliseconds(10));
  } while (absl::Now() < deadline);
  return std::nullopt;
}

void DaemonProcess::Kill() {
  if (pid_ > 0 && !exit_code_.has_value()) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    exit_code_ = 128 + SIGKILL;
  }
}

bool DaemonProcess::running() { return pid_ > 0 && !Wait(absl::ZeroDuration()).has_value(); }

std::string DaemonProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int WaitForPortFile(const std::string& path, DaemonProcess& process, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0) {
      return port;
    }
    if (!process.running()) {
      return 0;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
}

std::optional<double> SampleValue(absl::string_view text, absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, series) && absl::ConsumePrefix(&line, " ")) {
      double value = 0;
      if (absl::SimpleAtod(absl::StripAsciiWhitespace(line), &value)) {
        return value;
      }
    }
  }
  return std::nullopt;
}

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (condition()) {
      return true;
    }
    if (absl::Now() >= deadline) {
      return false;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout) {
  char path[] = "/tmp/fabricmon-command-XXXXXX";
  const int fd = mkstemp(path);
  if (fd >= 0) {
    close(fd);
  }
  CommandResult result;
  DaemonProcess process;
  if (!process.Start(argv, path)) {
    unlink(path);
    return result;
  }
  std::optional<int> code = process.Wait(timeout);
  if (!code.has_value()) {
    process.Kill();
    code = -1;
  }
  result.exit_code = *code;
  result.output = process.Log();
  unlink(path);
  return result;
}

std::vector<std::string> AggregatorArgv(const std::string& config, const std::string& port_file) {
  return {BuildPath("daemon/aggregator/fabricmon-aggregator"),
          "--config=" + config,
          "--grpc_listen=127.0.0.1:0",
          "--port_file=" + port_file,
          "--metrics_listen=127.0.0.1:0",
          "--metrics_port_file=" + MetricsPortFile(port_file),
          "--log_level=info"};
}

std::string MetricsPortFile(const std::string& port_file) { return port_file + ".metrics"; }

AggregatorPorts WaitForAggregatorPorts(const std::string& port_file, DaemonProcess& process,
                                       absl::Duration timeout) {
  AggregatorPorts ports;
  ports.grpc = WaitForPortFile(port_file, process, timeout);
  if (ports.grpc != 0) {
    ports.metrics = WaitForPortFile(MetricsPortFile(port_file), process, timeout);
  }
  return ports;
}

int EstablishedConnectionsOnPort(pid_t pid, int port) {
  // Socket inodes of established connections whose local end is `port` (hex in the table).
  const std::string port_hex = absl::StrFormat(":%04X", port);
  std::set<std::string> inodes;
  bool read_any = false;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/net/", table));
    if (!in) {
      continue;
    }
    read_any = true;
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() > 9 && absl::EndsWith(fields[1], port_hex) && fields[3] == "01") {
        inodes.insert(fields[9]);
      }
    }
  }
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* fds = opendir(dir.c_str());
  if (fds == nullptr || !read_any) {
    if (fds != nullptr) closedir(fds);
    return -1;
  }
  int held = 0;
  while (dirent* entry = readdir(fds)) {
    char target[64];
    const ssize_t n =
        readlink(absl::StrCat(dir, "/", entry->d_name).c_str(), target, sizeof(target) - 1);
    absl::string_view link(target, n > 0 ? n : 0);
    // "socket:[12345]"
    if (absl::ConsumePrefix(&link, "socket:[") && absl::ConsumeSuffix(&link, "]") &&
        inodes.count(std::string(link)) > 0) {
      ++held;
    }
  }
  closedir(fds);
  return held;
}

}  // namespace fabricmon::testing
