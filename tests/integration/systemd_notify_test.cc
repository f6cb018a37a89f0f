// The built fabricmon-agent under a stand-in for systemd's notify socket (Type=notify with
// WatchdogSec=): READY=1 with a STATUS= once every collector has run, WATCHDOG=1 pings while it
// runs, STOPPING=1 and exit status 0 on SIGTERM. The agent talks through libsystemd's sd_notify,
// so this checks the real datagrams, not our wrapper.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/metrics_text.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_tree.h"

extern char** environ;

namespace fabricmon::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// The receiving end of NOTIFY_SOCKET: a unix datagram socket bound to a path.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (fd_ < 0 || path_.size() >= sizeof(address.sun_path)) {
      return;
    }
    std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) {
      close(fd_);
    }
  }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }

  // The next datagram, or "" if none arrives before `deadline`.
  std::string Receive(absl::Time deadline) {
    const int64_t wait_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd p{fd_, POLLIN, 0};
    if (wait_ms <= 0 || poll(&p, 1, static_cast<int>(wait_ms)) != 1) {
      return "";
    }
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

// A child process killed if the test leaves early.
class Child {
 public:
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status;
      waitpid(pid_, &status, 0);
    }
  }
  // Starts `argv` with `env` (plus WATCHDOG_PID=<its own pid>, as systemd sets it).
  bool Start(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    std::vector<char*> args;
    for (const std::string& arg : argv) {
      args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    std::vector<std::string> environment = env;
    environment.emplace_back(64, '\0');  // WATCHDOG_PID, filled in by the child
    std::vector<char*> envp;
    for (std::string& entry : environment) {
      envp.push_back(entry.data());
    }
    envp.push_back(nullptr);
    char* watchdog_pid = envp[envp.size() - 2];
    pid_ = fork();
    if (pid_ == 0) {
      // Only async-signal-safe work between fork and exec.
      char digits[24];
      int n = 0;
      for (pid_t pid = getpid(); pid > 0; pid /= 10) {
        digits[n++] = static_cast<char>('0' + pid % 10);
      }
      const char prefix[] = "WATCHDOG_PID=";
      std::memcpy(watchdog_pid, prefix, sizeof(prefix) - 1);
      char* out = watchdog_pid + sizeof(prefix) - 1;
      while (n > 0) {
        *out++ = digits[--n];
      }
      *out = '\0';
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    return pid_ > 0;
  }
  pid_t pid() const { return pid_; }
  // Waits up to `timeout` for the child to exit; its wait status, or nullopt.
  std::optional<int> Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status = 0;
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        pid_ = -1;
        return status;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return std::nullopt;
  }

 private:
  pid_t pid_ = -1;
};

TEST(SystemdNotifyTest, AgentReportsReadyWatchdogAndStopping) {
  const std::string binary = BuildPath("daemon/agent/fabricmon-agent");
  ASSERT_EQ(access(binary.c_str(), X_OK), 0) << "not built: " << binary;
  // Same reasoning as the streaming tests: ~500 files are cheap to create only in memory.
  if (std::getenv("TMPDIR") == nullptr && access("/dev/shm", W_OK | X_OK) == 0) {
    setenv("TMPDIR", "/dev/shm", /*overwrite=*/0);
  }
  TempTree tree;
  tree.CopyTree(SharedFixture("sysfs/gpud-h100/sys"), "sys");
  NotifySocket notify(tree.root() + "/notify.sock");
  ASSERT_TRUE(notify.bound()) << notify.path();
  const int port = FreePort();
  ASSERT_NE(port, 0);

  // The environment systemd gives a Type=notify service with WatchdogSec=0.4s; anything of the
  // test runner's own NOTIFY_SOCKET/WATCHDOG_* is left out.
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!absl::StartsWith(*entry, "NOTIFY_SOCKET=") && !absl::StartsWith(*entry, "WATCHDOG_")) {
      env.emplace_back(*entry);
    }
  }
  env.push_back("NOTIFY_SOCKET=" + notify.path());
  env.push_back("WATCHDOG_USEC=400000");
  Child agent;
  ASSERT_TRUE(agent.Start({binary, "--log_level=error", "--node_name=notify-node",
                           absl::StrCat("--sysfs_root=", tree.root(), "/sys"),
                           absl::StrCat("--listen_metrics=127.0.0.1:", port)},
                          env));

  // READY=1 comes once the collectors have run; watchdog pings may come before it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<std::string> before_ready;
  std::string ready;
  while (ready.empty()) {
    std::string message = notify.Receive(deadline);
    ASSERT_FALSE(message.empty()) << "no READY=1 within 10 s";
    if (absl::StrContains(message, "READY=1")) {
      ready = message;
    } else {
      before_ready.push_back(message);
    }
  }
  const std::vector<std::string> ready_fields = absl::StrSplit(ready, '\n');
  EXPECT_THAT(ready_fields, Contains("READY=1"));
  EXPECT_THAT(ready, HasSubstr("STATUS=collecting; node notify-node"));
  for (const std::string& message : before_ready) {
    EXPECT_EQ(message, "WATCHDOG=1");
  }
  // Ready means collected: the node's own /metrics already has the fabric counters.
  absl::StatusOr<std::string> metrics = HttpGet(port, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, HasSubstr("fabricmon_ib_port_xmit_data_bytes_total{device=\"mlx5_0\""));

  // The watchdog keeps being fed while the agent runs.
  int pings = 0;
  while (pings < 3) {
    const std::string message = notify.Receive(deadline);
    ASSERT_FALSE(message.empty()) << "only " << pings << " WATCHDOG=1 after READY=1";
    EXPECT_EQ(message, "WATCHDOG=1");
    pings += message == "WATCHDOG=1" ? 1 : 0;
  }

  ASSERT_EQ(kill(agent.pid(), SIGTERM), 0);
  bool stopping = false;
  while (!stopping) {
    const std::string message = notify.Receive(deadline);
    ASSERT_FALSE(message.empty()) << "no STOPPING=1 after SIGTERM";
    stopping = message == "STOPPING=1";
    if (!stopping) {
      EXPECT_EQ(message, "WATCHDOG=1");  // a ping already on its way
    }
  }
  const std::optional<int> status = agent.Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value()) << "the agent did not exit after SIGTERM";
  ASSERT_TRUE(WIFEXITED(*status)) << "wait status " << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

}  // namespace
}  // namespace fabricmon::testing
