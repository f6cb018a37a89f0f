#include "tests/unit/collectors/netdev/test_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace fabricmon::collectors::netdev_testing {
namespace {

std::string MakeTempFile(const char* tag) {
  std::string pattern = absl::StrCat("/tmp/fabricmon-netdev-", tag, "-XXXXXX");
  const int fd = mkstemp(pattern.data());
  if (fd < 0) {
    return "";
  }
  close(fd);
  return pattern;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& argv,
                                                 const std::string& stdin_path) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("empty argv");
  }
  ChildProcess child;
  child.out_path_ = MakeTempFile("out");
  child.err_path_ = MakeTempFile("err");
  if (child.out_path_.empty() || child.err_path_.empty()) {
    return absl::InternalError("mkstemp failed");
  }
  std::vector<char*> args;
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  const std::string in_path = stdin_path.empty() ? "/dev/null" : stdin_path;

  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    // Child: own process group (so the test can kill everything it spawned by one id), then exec.
    setpgid(0, 0);
    const int in = open(in_path.c_str(), O_RDONLY);
    const int out = open(child.out_path_.c_str(), O_WRONLY | O_TRUNC);
    const int err = open(child.err_path_.c_str(), O_WRONLY | O_TRUNC);
    if (in < 0 || out < 0 || err < 0) {
      _exit(126);
    }
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    execvp(args[0], args.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent: whichever runs first wins, no race
  child.pid_ = pid;
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_),
      exit_code_(other.exit_code_),
      out_path_(std::move(other.out_path_)),
      err_path_(std::move(other.err_path_)) {
  other.pid_ = -1;
  other.out_path_.clear();
  other.err_path_.clear();
}

ChildProcess::~ChildProcess() {
  Stop();
  if (!out_path_.empty()) {
    unlink(out_path_.c_str());
  }
  if (!err_path_.empty()) {
    unlink(err_path_.c_str());
  }
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) {
    return exit_code_;
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      // Grandchildren left in the group (e.g. a daemonised helper) are ours too.
      kill(-pid_, SIGKILL);
      pid_ = -1;
      return exit_code_;
    }
    if (done < 0 && errno != EINTR) {
      pid_ = -1;
      return exit_code_;
    }
    if (absl::Now() >= deadline) {
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

void ChildProcess::Stop(absl::Duration grace) {
  if (pid_ <= 0) {
    return;
  }
  kill(-pid_, SIGTERM);
  if (Wait(grace).has_value()) {
    return;
  }
  kill(-pid_, SIGKILL);
  (void)Wait(absl::Seconds(5));  // SIGKILL cannot be ignored; the bound is a safety net
  pid_ = -1;
}

std::string ChildProcess::ReadOut() const { return ReadWholeFile(out_path_); }
std::string ChildProcess::ReadErr() const { return ReadWholeFile(err_path_); }

ProcessResult RunProcess(const std::vector<std::string>& argv, absl::Duration timeout,
                         const std::string& stdin_path) {
  ProcessResult result;
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(argv, stdin_path);
  if (!child.ok()) {
    result.err = child.status().ToString();
    return result;
  }
  std::optional<int> code = child->Wait(timeout);
  if (!code.has_value()) {
    result.timed_out = true;
    child->Stop(absl::Seconds(1));
  } else {
    result.exit_code = *code;
  }
  result.out = child->ReadOut();
  result.err = child->ReadErr();
  return result;
}

bool HaveProgram(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) {
    return false;
  }
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

std::optional<double> FindSample(const std::string& exposition, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line.front() == '#') {
      continue;
    }
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos || line.substr(0, space) != series) {
      continue;
    }
    double value = 0;
    if (absl::SimpleAtod(line.substr(space + 1), &value)) {
      return value;
    }
  }
  return std::nullopt;
}

}  // namespace fabricmon::collectors::netdev_testing
