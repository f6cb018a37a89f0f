#pragma once

// The built fabricmon-aggregator as a child process (plaintext, loopback or a test-made network
// namespace) that a test can hang (SIGSTOP), resume, kill (SIGKILL) and start again on the same
// gRPC port, as an operator's restart would; and its /metrics. For the outage tests: what an
// agent sees when the real process stops answering or dies.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tests/security/daemon_process.h"

namespace fabricmon::testing {

class AggregatorProcess {
 public:
  // Logs and port files go to `work_dir`. With `netns` (a name under /var/run/netns), the process
  // runs there (`ip netns exec`) and Scrape() connects from inside it.
  explicit AggregatorProcess(std::string work_dir, std::string netns = "");
  ~AggregatorProcess();  // kills the process if it runs (also when stopped)

  // Starts the process listening for agents on `grpc_host`: on a port of its choosing the first
  // time, on the same port after that; /metrics on a port of its choosing each time (both read
  // from its port files, so no port picked beforehand can be taken meanwhile). Waits (bounded)
  // until both are bound and /metrics answers. False, with the reason in the log, if it did not
  // start.
  bool Start(const std::string& grpc_host = "127.0.0.1");
  void Kill();      // SIGKILL: no shutdown, the kernel resets its connections
  void Hang();      // SIGSTOP: connections stay open, nothing is read or answered
  void Continue();  // SIGCONT

  int grpc_port() const { return grpc_port_; }
  // GET /metrics (retried, bounded, while the exposer comes up after a start).
  absl::StatusOr<std::string> Scrape();
  std::string Log() const { return process_ ? process_->Log() : ""; }

 private:
  const std::string work_dir_;
  const std::string netns_;
  std::unique_ptr<DaemonProcess> process_;
  int starts_ = 0;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

}  // namespace fabricmon::testing
