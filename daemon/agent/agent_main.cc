// fabricmon-agent: the node agent.
//
//   fabricmon-agent --once [--sysfs_root=DIR] [--config=FILE]
//       Discover and collect once; print Prometheus text exposition to stdout.
//   fabricmon-agent --aggregator=HOST:PORT[,HOST:PORT...] [--node_name=NAME]
//                   [--listen_metrics=HOST:PORT [--metrics_port_file=FILE]]
//                   [--config=FILE]
//       Run: collect on schedule, stream to the aggregator, optionally serve local /metrics.
//   fabricmon-agent --check_config --config=FILE [flags]
//       Load and validate as a start would, start nothing; "config OK" (exit 0) or the errors
//       (exit 1).

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collectors/builtin.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/recording_sink.h"
#include "daemon/agent/agent_daemon.h"
#include "daemon/agent/collector_runner.h"
#include "daemon/agent/doctor.h"
#include "daemon/common/clock.h"
#include "daemon/common/command_line.h"
#include "daemon/common/config_loader.h"
#include "daemon/common/handshake_failures.h"
#include "daemon/common/logging.h"
#include "daemon/common/operator_file.h"
#include "daemon/common/systemd_notify.h"
#include "daemon/exposition/text_exposition.h"
#include "fabricmon/v1/config.pb.h"

ABSL_FLAG(bool, once, false, "Discover and collect once, print Prometheus text to stdout, exit.");
ABSL_FLAG(std::string, config, "", "AgentConfig in protobuf text format.");
ABSL_FLAG(std::string, sysfs_root, "",
          "Override the sysfs root of every sysfs-based collector (default /sys; tests and "
          "offline analysis point it at a captured tree).");
ABSL_FLAG(std::string, procfs_root, "", "Override the procfs root (default /proc).");
ABSL_FLAG(std::vector<std::string>, enable_collectors, {},
          "Collectors to enable (comma-separated), as `<name> { enabled: true }` in the config. "
          "With a captured --sysfs_root/--procfs_root, collectors that would read this host "
          "instead (nvml, rdma_qp, ethtool's ioctl, ib_fabric) are off unless enabled so.");
ABSL_FLAG(bool, doctor, false,
          "Say, one line per collector, what it can read and, where it cannot, why and how to "
          "fix it; exit 0 when every enabled collector works, 1 otherwise.");
ABSL_FLAG(std::string, aggregator, "",
          "HOST:PORT of the aggregator, or HOST:PORT,HOST:PORT,... of several (the node streams to "
          "its primary in a rendezvous ranking and fails over down it); a single host name that "
          "resolves to several addresses stands for all of them (overrides config).");
ABSL_FLAG(std::string, node_name, "", "Node name (overrides config; default: host name).");
ABSL_FLAG(std::string, listen_metrics, "",
          "HOST:PORT to serve this node's own /metrics (overrides config; empty: off).");
ABSL_FLAG(std::string, metrics_port_file, "",
          "Write the bound /metrics port to this file once serving (for --listen_metrics=...:0). "
          "Created before anything listens (exit 2 if it cannot be) and renamed into place.");
ABSL_FLAG(std::string, log_level, "warning", "debug, info, warning or error.");
ABSL_FLAG(bool, insecure_plaintext, false,
          "Stream to the aggregator WITHOUT TLS (same as tls { insecure_plaintext: true }). "
          "Without TLS files and without this the agent refuses to stream.");
ABSL_FLAG(bool, check_config, false,
          "Load and validate the configuration (with the overriding flags applied) as a start "
          "would, print \"config OK\" or the errors, and exit; nothing is started.");

namespace fabricmon {
namespace {

// Startup errors on stderr, with the journal priority when stderr is the journal.
std::ostream& Err() { return std::cerr << JournalPrefix(LogLevel::kError) << "fabricmon-agent: "; }

void ApplyOverrides(v1::AgentConfig& config) {
  const std::string root = absl::GetFlag(FLAGS_sysfs_root);
  if (!root.empty()) {
    config.mutable_collectors()->mutable_ib_sysfs()->set_sysfs_root(root);
    config.mutable_collectors()->mutable_ethtool()->set_sysfs_root(root);
    config.mutable_collectors()->mutable_netdev()->set_sysfs_root(root);
  }
  const std::string proc = absl::GetFlag(FLAGS_procfs_root);
  if (!proc.empty()) {
    config.mutable_collectors()->mutable_netdev()->set_procfs_root(proc);
    config.mutable_collectors()->mutable_rdma_qp()->set_procfs_root(proc);
  }
  if (!absl::GetFlag(FLAGS_aggregator).empty()) {
    config.clear_aggregator();
    config.add_aggregator(absl::GetFlag(FLAGS_aggregator));
  }
  if (!absl::GetFlag(FLAGS_node_name).empty()) {
    config.set_node_name(absl::GetFlag(FLAGS_node_name));
  }
  if (!absl::GetFlag(FLAGS_listen_metrics).empty()) {
    config.set_listen_metrics(absl::GetFlag(FLAGS_listen_metrics));
  }
  if (absl::GetFlag(FLAGS_insecure_plaintext)) {
    config.mutable_tls()->set_insecure_plaintext(true);
  }
  if (config.node_name().empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) == 0) {
      config.set_node_name(host);
    }
  }
}

absl::StatusOr<std::vector<std::unique_ptr<collectors::Collector>>> CreateCollectors(
    const v1::AgentConfig& config) {
  collectors::CollectorRegistry registry;
  collectors::RegisterBuiltinCollectors(registry);
  collectors::CollectorContext context{config.collectors(), RealClock::Get()};
  return registry.CreateEnabled(context);
}

// --metrics_port_file reports the port the daemon's /metrics listens on: without a listener
// there is none to report.
absl::Status MetricsPortFileHasAListener(const v1::AgentConfig& config) {
  if (!absl::GetFlag(FLAGS_metrics_port_file).empty() && config.listen_metrics().empty()) {
    return absl::InvalidArgumentError(
        "--metrics_port_file needs a /metrics listener (--listen_metrics or the config's "
        "listen_metrics); see --help");
  }
  return absl::OkStatus();
}

int RunOnce(const v1::AgentConfig& config) {
  auto created = CreateCollectors(config);
  if (!created.ok()) {
    Err() << created.status() << "\n";
    return kExitUsage;
  }
  collectors::RecordingSink sink;
  v1::Inventory inventory;
  for (auto& collector : *created) {
    agent::CollectorRunner runner(std::move(collector), RealClock::Get());
    (void)runner.Discover(inventory);  // exported as fabricmon_collector_hardware_present
    (void)runner.Collect(sink);        // exported as fabricmon_collector_success
  }
  const std::string text = exposition::SerializeText(exposition::BuildFamilies(sink.samples()));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

// --check_config: everything a start (--once or the daemon) would check, nothing started: the
// collectors are built (their configuration validated) but never run.
int CheckConfig(const v1::AgentConfig& config, bool once) {
  if (!once) {
    if (absl::Status usable = MetricsPortFileHasAListener(config); !usable.ok()) {
      Err() << usable.message() << "\n";
      return kExitFailure;
    }
    absl::StatusOr<agent::AgentDaemonSettings> settings = agent::ResolveAgentDaemonSettings(config);
    if (!settings.ok()) {
      Err() << settings.status().message() << "\n";
      return kExitFailure;
    }
    for (const std::string& warning : settings->security.has_value() ? settings->security->warnings
                                                                     : std::vector<std::string>{}) {
      std::cout << "warning: " << warning << "\n";
    }
  }
  auto created = CreateCollectors(config);
  if (!created.ok()) {
    Err() << created.status().message() << "\n";
    return kExitFailure;
  }
  std::cout << "config OK\n";
  return kExitOk;
}

int RunDaemon(const v1::AgentConfig& config) {
  // Block the stop signals in every thread (before the daemon makes any); the main thread waits
  // for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<std::unique_ptr<agent::AgentDaemon>> daemon = agent::AgentDaemon::Create(config);
  if (!daemon.ok()) {
    Err() << daemon.status().message() << "\n";
    return kExitUsage;
  }
  // The port file is created before anything listens: an unwritable path stops the start.
  std::optional<PortFile> metrics_port_file;
  if (const std::string path = absl::GetFlag(FLAGS_metrics_port_file); !path.empty()) {
    if (absl::Status usable = MetricsPortFileHasAListener(config); !usable.ok()) {
      Err() << usable.message() << "\n";
      return kExitUsage;
    }
    absl::StatusOr<PortFile> prepared = PortFile::Prepare(path, "metrics_port_file");
    if (!prepared.ok()) {
      Err() << prepared.status() << "\n";
      return kExitUsage;
    }
    metrics_port_file = *std::move(prepared);
  }
  if (absl::Status started = (*daemon)->Start(); !started.ok()) {
    Err() << started.message() << "\n";
    return kExitUsage;
  }
  if (metrics_port_file.has_value()) {
    if (absl::Status written = metrics_port_file->Commit((*daemon)->metrics_port());
        !written.ok()) {
      Err() << written << "\n";
      (*daemon)->Stop(absl::ZeroDuration());
      return kExitUsage;
    }
  }

  const uint64_t watchdog_us = WatchdogIntervalMicros();
  // Ping at half the interval systemd expects (sd_watchdog_enabled(3)).
  const int64_t tick_ms = watchdog_us > 0 ? std::max<int64_t>(100, watchdog_us / 2000) : 1000;
  bool ready_sent = false;
  for (;;) {
    if (!ready_sent && (*daemon)->ready()) {
      NotifyReady(absl::StrCat("collecting; node ", config.node_name()));
      ready_sent = true;
    }
    if (watchdog_us > 0) {
      NotifyWatchdog();
    }
    timespec timeout{tick_ms / 1000, (tick_ms % 1000) * 1000000};
    const int signal = sigtimedwait(&stop_signals, nullptr, &timeout);
    if (signal == SIGTERM || signal == SIGINT) {
      break;
    }
  }
  NotifyStopping();
  FABRICMON_LOG(Info) << "stopping: flushing unacknowledged batches";
  // Give the aggregator a moment to acknowledge what is buffered; what is not is lost with the
  // process (the buffer is in memory), and the final stats say how much.
  (*daemon)->Stop(absl::Seconds(5));
  return 0;
}

}  // namespace
}  // namespace fabricmon

int main(int argc, char** argv) {
  fabricmon::ProgramInfo info;
  info.name = "fabricmon-agent";
  info.summary = "fabricmon node agent: reads fabric counters and streams them to the aggregator";
  info.usage = {
      "fabricmon-agent --once [--sysfs_root=DIR] [--procfs_root=DIR] [--config=FILE] "
      "[--enable_collectors=A,B]",
      "fabricmon-agent --doctor [--config=FILE] [--sysfs_root=DIR] [--procfs_root=DIR] "
      "[--enable_collectors=A,B]",
      "fabricmon-agent --aggregator=HOST:PORT[,HOST:PORT...] [--node_name=NAME] "
      "[--listen_metrics=HOST:PORT [--metrics_port_file=FILE]] [--config=FILE] "
      "[--insecure_plaintext]",
      "fabricmon-agent --check_config --config=FILE [flags]",
  };
  info.exit_statuses = {
      {"0",
       "normal exit (SIGTERM, --once done, --check_config: the config is valid, --doctor: "
       "every enabled collector works)"},
      {"1",
       "--check_config: the configuration is invalid (the errors are printed); "
       "--doctor: an enabled collector cannot read what it needs"},
      {"2", "bad flags or configuration: an unknown flag, a bad value, an unreadable file"},
  };
  info.value_names = {{"aggregator", "HOST:PORT[,...]"},
                      {"config", "FILE"},
                      {"listen_metrics", "HOST:PORT"},
                      {"metrics_port_file", "FILE"},
                      {"log_level", "LEVEL"},
                      {"node_name", "NAME"},
                      {"procfs_root", "DIR"},
                      {"sysfs_root", "DIR"},
                      {"enable_collectors", "A,B"}};
  info.flags_file = __FILE__;
  // absl::Mutex deadlock detection (on in this absl build) walks a lock graph on every
  // acquisition: about 1 % of the agent's CPU. Lock order stays checked in the tests.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  fabricmon::ParsedCommandLine parsed = fabricmon::ParseCommandLine(argc, argv, info);
  if (parsed.exit_status.has_value()) {
    return *parsed.exit_status;
  }
  if (parsed.positional.size() > 1) {
    fabricmon::Err() << "unexpected argument '" << parsed.positional[1] << "'; see --help\n";
    return fabricmon::kExitUsage;
  }
  const bool check = absl::GetFlag(FLAGS_check_config);

  fabricmon::LogLevel level;
  if (!fabricmon::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    fabricmon::Err() << "unknown --log_level '" << absl::GetFlag(FLAGS_log_level)
                     << "' (debug, info, warning or error); see --help\n";
    return fabricmon::kExitUsage;
  }
  fabricmon::SetMinLogLevel(level);
  fabricmon::RouteGrpcLogs();

  fabricmon::v1::AgentConfig config;
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (!config_path.empty()) {
    absl::Status status = fabricmon::LoadTextConfig(config_path, &config);
    if (!status.ok()) {
      if (check) {
        fabricmon::Err() << status.message() << "\n";
        return fabricmon::kExitFailure;
      }
      fabricmon::Err() << status << "\n";
      return fabricmon::kExitUsage;
    }
  }
  fabricmon::ApplyOverrides(config);
  if (absl::Status enabled = fabricmon::collectors::EnableCollectors(
          absl::GetFlag(FLAGS_enable_collectors), *config.mutable_collectors());
      !enabled.ok()) {
    fabricmon::Err() << "--enable_collectors: " << enabled.message() << "; see --help\n";
    return fabricmon::kExitUsage;
  }
  // A flag the run would ignore is refused: the operator meant something by it.
  if (!absl::GetFlag(FLAGS_metrics_port_file).empty() &&
      (absl::GetFlag(FLAGS_once) || absl::GetFlag(FLAGS_doctor))) {
    fabricmon::Err() << "--metrics_port_file names the port the daemon serves /metrics on; "
                     << (absl::GetFlag(FLAGS_once) ? "--once" : "--doctor")
                     << " serves nothing; see --help\n";
    return fabricmon::kExitUsage;
  }
  if (absl::GetFlag(FLAGS_doctor)) {
    return fabricmon::agent::RunDoctor(config, std::cout);
  }

  if (check) {
    return fabricmon::CheckConfig(config, absl::GetFlag(FLAGS_once));
  }
  if (absl::GetFlag(FLAGS_once)) {
    return fabricmon::RunOnce(config);
  }
  return fabricmon::RunDaemon(config);
}
