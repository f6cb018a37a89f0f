#pragma once

// Child processes for the netdev tests (node_exporter oracle, promtool, ip/iperf3 in network
// namespaces): every wait is bounded, every child runs in its own process group, and the group
// is killed (by its id) when the handle is stopped or destroyed, so a failing test leaves nothing
// behind. Not thread-safe.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fabricmon::collectors::netdev_testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed or not started
  bool timed_out = false;
  std::string out;  // stdout
  std::string err;  // stderr
};

class ChildProcess {
 public:
  // Starts argv (argv[0] looked up on PATH). stdin reads `stdin_path` ("" = /dev/null); stdout
  // and stderr go to temporary files read by TakeOutput().
  static absl::StatusOr<ChildProcess> Start(const std::vector<std::string>& argv,
                                            const std::string& stdin_path = "");
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess();

  // Waits up to `timeout` for the child to exit; its exit code, or nullopt if it still runs.
  std::optional<int> Wait(absl::Duration timeout);
  // SIGTERM to the child's process group, up to `grace` to exit, then SIGKILL. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(2));
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Contents of stdout and stderr so far.
  std::string ReadOut() const;
  std::string ReadErr() const;

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string out_path_;
  std::string err_path_;
};

// Runs argv to completion, at most `timeout` (then the group is killed and timed_out is set).
ProcessResult RunProcess(const std::vector<std::string>& argv, absl::Duration timeout,
                         const std::string& stdin_path = "");

// True if `program` is an executable on PATH.
bool HaveProgram(const std::string& program);

// Value of one exposition line whose text before the value is exactly `series`
// (e.g. `node_network_mtu_bytes{device="eth0"}`); nullopt if absent.
std::optional<double> FindSample(const std::string& exposition, const std::string& series);

}  // namespace fabricmon::collectors::netdev_testing
