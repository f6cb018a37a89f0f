#include "tests/integration/aggregator_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::testing {
namespace {

// HttpGet from a thread that joined `netns` first (a network namespace is per thread), so the
// rest of the process stays where it is.
absl::StatusOr<std::string> HttpGetIn(const std::string& netns, int port) {
  absl::StatusOr<std::string> result = absl::InternalError("not run");
  std::thread thread([&] {
    const std::string path = "/var/run/netns/" + netns;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      result = absl::InternalError(absl::StrCat("cannot enter ", path, ": ", strerror(errno)));
      if (fd >= 0) {
        close(fd);
      }
      return;
    }
    close(fd);
    result = HttpGet(port, "/metrics");
  });
  thread.join();
  return result;
}

}  // namespace

AggregatorProcess::AggregatorProcess(std::string work_dir, std::string netns)
    : work_dir_(std::move(work_dir)), netns_(std::move(netns)) {}

AggregatorProcess::~AggregatorProcess() { Kill(); }

bool AggregatorProcess::Start(const std::string& grpc_host) {
  Kill();
  ++starts_;
  const std::string port_file = absl::StrCat(work_dir_, "/aggregator-", starts_, ".port");
  const std::string metrics_port_file = MetricsPortFile(port_file);
  unlink(port_file.c_str());
  unlink(metrics_port_file.c_str());
  std::vector<std::string> argv;
  if (!netns_.empty()) {
    argv = {"/usr/bin/env", "ip", "netns", "exec", netns_};
  }
  argv.insert(argv.end(),
              {BuildPath("daemon/aggregator/fabricmon-aggregator"), "--insecure_plaintext",
               absl::StrCat("--grpc_listen=", grpc_host, ":", grpc_port_),
               "--metrics_listen=127.0.0.1:0", "--port_file=" + port_file,
               "--metrics_port_file=" + metrics_port_file, "--log_level=warning"});
  process_ = std::make_unique<DaemonProcess>();
  if (!process_->Start(argv, work_dir_ + "/aggregator.log")) {
    return false;
  }
  const AggregatorPorts ports = WaitForAggregatorPorts(port_file, *process_, absl::Seconds(30));
  if (!ports.up()) {
    return false;
  }
  grpc_port_ = ports.grpc;
  metrics_port_ = ports.metrics;
  return Scrape().ok();
}

void AggregatorProcess::Kill() {
  if (process_ != nullptr) {
    process_->Kill();  // SIGKILL also ends a stopped process
  }
}

void AggregatorProcess::Hang() {
  if (process_ != nullptr && process_->running()) {
    kill(process_->pid(), SIGSTOP);
  }
}

void AggregatorProcess::Continue() {
  if (process_ != nullptr && process_->running()) {
    kill(process_->pid(), SIGCONT);
  }
}

absl::StatusOr<std::string> AggregatorProcess::Scrape() {
  absl::StatusOr<std::string> body = absl::UnavailableError("no aggregator process");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int attempt = 0; attempt < 200 && absl::Now() < deadline; ++attempt) {
    if (process_ == nullptr || !process_->running()) {
      return absl::UnavailableError("the aggregator process is not running");
    }
    body = netns_.empty() ? HttpGet(metrics_port_, "/metrics") : HttpGetIn(netns_, metrics_port_);
    if (body.ok()) {
      return body;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return body;
}

}  // namespace fabricmon::testing
