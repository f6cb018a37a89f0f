#include "tests/sim/ibsim/ibsim_env.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace fabricmon::testing {
namespace {

std::atomic<int> g_env_counter{0};

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) {
      return true;
    }
  }
  // opensm and the diags live in /usr/sbin, which a CI user's PATH may lack.
  return access(absl::StrCat("/usr/sbin/", program).c_str(), X_OK) == 0;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void SetEnv(const std::string& entry) {
  const size_t eq = entry.find('=');
  if (eq != std::string::npos) {
    setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Subprocess

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const Options& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("empty argv");
  }
  int in_pipe[2] = {-1, -1};
  int out_pipe[2] = {-1, -1};
  if ((options.pipe_stdin && pipe2(in_pipe, O_CLOEXEC) != 0) ||
      (options.pipe_stdout && pipe2(out_pipe, O_CLOEXEC) != 0)) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) {
      _exit(126);
    }
    const int null_fd = open("/dev/null", O_RDWR);
    dup2(options.pipe_stdin ? in_pipe[0] : null_fd, 0);
    if (options.pipe_stdout) {
      dup2(out_pipe[1], 1);
    } else {
      const int fd = options.stdout_path.empty()
                         ? null_fd
                         : open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
    }
    const int err_fd = options.stderr_path.empty()
                           ? null_fd
                           : open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(err_fd, 2);
    for (const std::string& entry : options.env) {
      SetEnv(entry);
    }
    // /usr/sbin holds opensm and the infiniband-diags.
    const char* path = std::getenv("PATH");
    setenv("PATH",
           absl::StrCat(path != nullptr ? path : "/usr/bin:/bin", ":/usr/sbin:/sbin").c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& arg : options.argv) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  std::unique_ptr<Subprocess> process(new Subprocess());
  process->pid_ = pid;
  if (options.pipe_stdin) {
    close(in_pipe[0]);
    process->stdin_fd_ = in_pipe[1];
  }
  if (options.pipe_stdout) {
    close(out_pipe[1]);
    process->stdout_fd_ = out_pipe[0];
  }
  return process;
}

Subprocess::~Subprocess() {
  Stop();
  CloseStdin();
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
  }
}

absl::Status Subprocess::WriteLine(const std::string& line) {
  if (stdin_fd_ < 0) {
    return absl::FailedPreconditionError("stdin is not a pipe (or closed)");
  }
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(stdin_fd_, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return absl::UnavailableError(absl::StrCat("write to child: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void Subprocess::CloseStdin() {
  if (stdin_fd_ >= 0) {
    close(stdin_fd_);
    stdin_fd_ = -1;
  }
}

absl::StatusOr<std::string> Subprocess::ReadUntilLine(const std::string& terminator,
                                                      absl::Duration timeout) {
  if (stdout_fd_ < 0) {
    return absl::FailedPreconditionError("stdout is not a pipe");
  }
  const absl::Time deadline = absl::Now() + timeout;
  const std::string marker = terminator + "\n";
  for (;;) {
    // A complete terminator line: at the start or after a newline.
    size_t pos = 0;
    while ((pos = buffer_.find(marker, pos)) != std::string::npos) {
      if (pos == 0 || buffer_[pos - 1] == '\n') {
        std::string out = buffer_.substr(0, pos);
        buffer_.erase(0, pos + marker.size());
        return out;
      }
      ++pos;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("no \"", terminator, "\" line within ",
                                                      absl::FormatDuration(timeout),
                                                      "; got: ", buffer_.substr(0, 2000)));
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (ready <= 0) {
      continue;
    }
    char chunk[65536];
    const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("child closed stdout; got: ", buffer_.substr(0, 2000)));
    }
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (exit_code_.has_value()) {
    return exit_code_;
  }
  if (pid_ <= 0) {
    return std::nullopt;
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (done < 0 && errno != EINTR) {
      exit_code_ = -1;
      return exit_code_;
    }
    if (absl::Now() >= deadline) {
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

void Subprocess::Stop(absl::Duration grace) {
  if (pid_ <= 0) {
    return;
  }
  if (!exit_code_.has_value()) {
    kill(-pid_, SIGTERM);
    if (!Wait(grace).has_value()) {
      kill(-pid_, SIGKILL);
      (void)Wait(absl::Seconds(5));
    }
  }
  // The leader may be gone while others in its group are not.
  kill(-pid_, SIGKILL);
}

CommandResult RunCommand(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const std::string& cwd, absl::Duration timeout) {
  CommandResult result;
  char out_template[] = "/tmp/fabricmon-cmd-out-XXXXXX";
  char err_template[] = "/tmp/fabricmon-cmd-err-XXXXXX";
  const int out_fd = mkstemp(out_template);
  const int err_fd = mkstemp(err_template);
  if (out_fd >= 0) {
    close(out_fd);
  }
  if (err_fd >= 0) {
    close(err_fd);
  }
  Subprocess::Options options;
  options.argv = argv;
  options.env = env;
  options.cwd = cwd;
  options.stdout_path = out_template;
  options.stderr_path = err_template;
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Start(options);
  if (process.ok()) {
    std::optional<int> code = (*process)->Wait(timeout);
    if (!code.has_value()) {
      result.timed_out = true;
      (*process)->Stop(absl::Milliseconds(500));
    } else {
      result.exit_code = *code;
    }
  } else {
    result.err = std::string(process.status().message());
  }
  result.out = ReadFile(out_template);
  result.err += ReadFile(err_template);
  unlink(out_template);
  unlink(err_template);
  return result;
}

// ---------------------------------------------------------------------------------------------
// IbsimEnv

bool IbsimEnv::Available(std::string* why) {
  if (!OnPath("ibsim")) {
    *why = "ibsim not installed (Debian package ibsim-utils)";
    return false;
  }
  if (!OnPath("opensm")) {
    *why = "opensm not installed";
    return false;
  }
  if (access(kUmad2simLibrary, R_OK) != 0) {
    *why = absl::StrCat(kUmad2simLibrary, " missing (ibsim-utils)");
    return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<IbsimEnv>> IbsimEnv::Start(const IbsimOptions& options) {
  std::string why;
  if (!Available(&why)) {
    return absl::FailedPreconditionError(why);
  }
  if (access(options.topology.c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("topology ", options.topology, " not readable"));
  }
  std::unique_ptr<IbsimEnv> env(new IbsimEnv());
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/fabricmon-ibsim-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  env->dir_ = pattern;
  // Unique per process and per environment: parallel ctest runs never share a simulator.
  env->socket_name_ = absl::StrCat("fmsim", getpid(), "x", g_env_counter.fetch_add(1), "x",
                                   absl::ToUnixMicros(absl::Now()) % 100000);
  env->sim_host_ = options.sim_host;
  env->opensm_timeout_ = options.opensm_timeout;

  Subprocess::Options sim;
  // -s: start the network at once; the console stays on stdin (a pipe we hold).
  sim.argv = {"ibsim", "-s", options.topology};
  sim.env = {absl::StrCat("IBSIM_SOCKNAME=", env->socket_name_)};
  sim.cwd = env->dir_;
  sim.pipe_stdin = true;
  sim.stdout_path = env->dir_ + "/ibsim.log";
  sim.stderr_path = env->dir_ + "/ibsim.err";
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Start(sim);
  if (!process.ok()) {
    return process.status();
  }
  env->ibsim_ = *std::move(process);
  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (env->CountPrompts() == 0) {
    if (!env->ibsim_->running() || env->ibsim_->Wait(absl::ZeroDuration()).has_value()) {
      return absl::UnavailableError(absl::StrCat("ibsim exited at start: ", env->ConsoleLog(),
                                                 ReadFile(env->dir_ + "/ibsim.err")));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("ibsim not ready within ", absl::FormatDuration(options.start_timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::Status sm = env->RunOpenSm();
  if (!sm.ok()) {
    return sm;
  }
  return env;
}

IbsimEnv::~IbsimEnv() {
  if (ibsim_ != nullptr) {
    (void)ibsim_->WriteLine("Quit");
    ibsim_->CloseStdin();
    if (!ibsim_->Wait(absl::Seconds(2)).has_value()) {
      ibsim_->Stop();
    }
    ibsim_->Stop();  // kills anything left in the group
  }
  if (!dir_.empty() && std::getenv("FABRICMON_KEEP_IBSIM_DIR") == nullptr) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string IbsimEnv::ConsoleLog() const { return ReadFile(dir_ + "/ibsim.log"); }

size_t IbsimEnv::CountPrompts() const {
  const std::string log = ConsoleLog();
  size_t count = 0;
  for (size_t pos = log.find("sim> "); pos != std::string::npos; pos = log.find("sim> ", pos + 1)) {
    ++count;
  }
  return count;
}

absl::StatusOr<std::string> IbsimEnv::Console(const std::string& command, absl::Duration timeout) {
  const std::string before = ConsoleLog();
  const size_t prompts = CountPrompts();
  absl::Status status = ibsim_->WriteLine(command);
  if (!status.ok()) {
    return status;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (CountPrompts() <= prompts) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("ibsim did not answer \"", command, "\""));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  std::string log = ConsoleLog();
  std::string reply = log.size() > before.size() ? log.substr(before.size()) : "";
  // ibsim answers a command it cannot apply with a "# ..." line ("# field X cannot be found in
  // attribute PortCounters", "# nodeid \"x\" not found").
  if (absl::StartsWith(reply, "# ") || absl::StrContains(reply, "\n# ") ||
      absl::StrContains(reply, "sim> # ")) {
    return absl::InvalidArgumentError(absl::StrCat("ibsim rejected \"", command, "\": ", reply));
  }
  return reply;
}

absl::Status IbsimEnv::RunOpenSm() {
  ++opensm_runs_;
  const std::string log = absl::StrCat(dir_, "/opensm", opensm_runs_, ".log");
  const absl::Time start = absl::Now();
  // -o: sweep once and exit; -f: log file in our dir (opensm's default is /var/log).
  CommandResult result = RunClient({"opensm", "-o", "-f", log}, opensm_timeout_);
  opensm_duration_ = absl::Now() - start;
  if (result.timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("opensm did not finish within ", absl::FormatDuration(opensm_timeout_)));
  }
  if (result.exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("opensm exited ", result.exit_code, ": ",
                                               result.out.substr(0, 2000),
                                               result.err.substr(0, 2000)));
  }
  return absl::OkStatus();
}

std::vector<std::string> IbsimEnv::ClientEnv() const {
  std::vector<std::string> env = {
      // umad2sim's close() of a umad fd frees only one agent; the fix in front frees all, as the
      // kernel does (see umad2sim_close_fix.c), so rediscovering clients keep their slots.
      absl::StrCat("LD_PRELOAD=", FABRICMON_UMAD2SIM_CLOSE_FIX, " ", kUmad2simLibrary),
      absl::StrCat("IBSIM_SOCKNAME=", socket_name_), absl::StrCat("OSM_TMP_DIR=", dir_),
      absl::StrCat("OSM_CACHE_DIR=", dir_)};
  if (!sim_host_.empty()) {
    env.push_back(absl::StrCat("SIM_HOST=", sim_host_));
  }
  return env;
}

CommandResult IbsimEnv::RunClient(const std::vector<std::string>& argv,
                                  absl::Duration timeout) const {
  return RunCommand(argv, ClientEnv(), dir_, timeout);
}

}  // namespace fabricmon::testing
