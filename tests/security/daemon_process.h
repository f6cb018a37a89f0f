#pragma once

// The built daemons as child processes for end-to-end tests: start with arguments, output to a
// log file, wait for --port_file, stop; plus a lookup of one sample in Prometheus text. FreePort
// and HttpGet (for /metrics) come with tests/testing/loopback.h.

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tests/testing/loopback.h"

namespace fabricmon::testing {

class DaemonProcess {
 public:
  DaemonProcess() = default;
  ~DaemonProcess();  // kills the child if it still runs
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Starts `argv` (argv[0] a path) with stdout and stderr appended to `log_path`.
  bool Start(const std::vector<std::string>& argv, std::string log_path);
  // Waits up to `timeout` for the child to exit; its exit code (or 128+signal), or nullopt.
  std::optional<int> Wait(absl::Duration timeout);
  // SIGKILL and reap.
  void Kill();
  bool running();
  // What the child wrote so far.
  std::string Log() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_path_;
};

// Polls `path` until it holds a port number (fabricmon-aggregator --port_file), the process
// exits or `timeout` passes. 0 on failure.
int WaitForPortFile(const std::string& path, DaemonProcess& process, absl::Duration timeout);

// Value of the sample written exactly as `series` (e.g.
// `fabricmon_aggregator_rejected_messages_total{reason="identity_mismatch"}`) in Prometheus text;
// nullopt if absent.
std::optional<double> SampleValue(absl::string_view text, absl::string_view series);

// Polls `condition` every 20 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout);

// Runs a command line (argv), waits for it, and returns its exit code and combined output.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout);

// The command line of the built fabricmon-aggregator as the security tests start it: `config`,
// gRPC and /metrics on loopback ports of its choosing, written to `port_file` and to
// MetricsPortFile(`port_file`): no port is picked before the start, so none can be taken meanwhile.
std::vector<std::string> AggregatorArgv(const std::string& config, const std::string& port_file);
std::string MetricsPortFile(const std::string& port_file);

// The ports an aggregator started with `port_file` and MetricsPortFile(`port_file`) wrote: each 0
// if not written within `timeout` (each) or the process exited first. The /metrics file is
// written after the gRPC one, once the page serves.
struct AggregatorPorts {
  int grpc = 0;
  int metrics = 0;
  bool up() const { return grpc != 0 && metrics != 0; }
};
AggregatorPorts WaitForAggregatorPorts(const std::string& port_file, DaemonProcess& process,
                                       absl::Duration timeout);

// TCP connections on local `port` that process `pid` has accepted and that are still established
// (its socket fds matched with /proc/<pid>/net/tcp{,6}), -1 if they cannot be read. Falls by one
// for each connection the server closes, whatever else the process opens or closes meanwhile, so
// a test can see what a server holds without timing it.
int EstablishedConnectionsOnPort(pid_t pid, int port);

}  // namespace fabricmon::testing
