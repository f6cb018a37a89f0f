// fabricmon-aggregator: receives agent streams, keeps per-series state, serves Prometheus
// /metrics and the Diagnostics service.
//
//   fabricmon-aggregator --grpc_listen=HOST:PORT --metrics_listen=HOST:PORT [--config=FILE]
//                        [--topology_file=FILE] [--link_list=FILE]
//   fabricmon-aggregator --check_config --config=FILE [flags]
//       Load and validate as a start would (TLS files, roles, limits, topology and link-list
//       files), open no port; "config OK" (exit 0) or the errors (exit 1).

#include <malloc.h>
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/synchronization/mutex.h"
#include "daemon/aggregator/aggregator_server.h"
#include "daemon/common/clock.h"
#include "daemon/common/command_line.h"
#include "daemon/common/config_loader.h"
#include "daemon/common/handshake_failures.h"
#include "daemon/common/heap_trimmer.h"
#include "daemon/common/logging.h"
#include "daemon/common/operator_file.h"
#include "daemon/common/systemd_notify.h"
#include "fabricmon/v1/config.pb.h"

ABSL_FLAG(std::string, config, "", "AggregatorConfig in protobuf text format.");
ABSL_FLAG(std::string, grpc_listen, "",
          "HOST:PORT for agents and the CLI (default 127.0.0.1:7470).");
ABSL_FLAG(std::string, metrics_listen, "", "HOST:PORT for /metrics (default 127.0.0.1:9470).");
ABSL_FLAG(std::string, shard, "",
          "This aggregator's shard name, the `shard` label of what it remote-writes (overrides "
          "config; default HOST:PORT: the host name and the gRPC port).");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error.");
ABSL_FLAG(std::string, link_list, "", "Link-list topology file (overrides config link_list_file).");
ABSL_FLAG(std::string, topology_file, "",
          "ibnetdiscover output (default, -p or ibsim net format) with the fabric's cabling "
          "(overrides config topology_file).");
ABSL_FLAG(std::string, port_file, "",
          "Write the bound gRPC port to this file once listening (for --grpc_listen=...:0). "
          "Created before anything listens (exit 2 if it cannot be) and renamed into place.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "Write the bound /metrics port to this file once serving (for --metrics_listen=...:0). "
          "Created before anything listens (exit 2 if it cannot be) and renamed into place.");
ABSL_FLAG(bool, insecure_plaintext, false,
          "Serve agents and the CLI WITHOUT TLS (same as tls { insecure_plaintext: true }). "
          "Without TLS files and without this the aggregator refuses to start.");
ABSL_FLAG(bool, check_config, false,
          "Load and validate the configuration (with the overriding flags applied) as a start "
          "would, print \"config OK\" or the errors, and exit; no port is opened.");

namespace fabricmon {
namespace {

// How often the aggregator gives its heap's free pages back (HeapTrimmer): what gRPC and a
// reconnect storm freed stays resident otherwise, about a sixth of the RSS at 400 agents.
constexpr absl::Duration kHeapTrimInterval = absl::Seconds(30);

// Startup errors on stderr, with the journal priority when stderr is the journal.
std::ostream& Err() {
  return std::cerr << JournalPrefix(LogLevel::kError) << "fabricmon-aggregator: ";
}

// Starts the aggregator and serves until SIGTERM/SIGINT. With `check` (--check_config) it runs
// every check a start makes, loads every file, and returns before it opens a port or starts a
// thread: kExitOk ("config OK") or kExitFailure with the errors.
int Run(const v1::AggregatorConfig& config, bool check) {
  // A configuration error: exit status 2 for a start (systemd does not restart it), 1 for
  // --check_config.
  const int bad_config = check ? kExitFailure : kExitUsage;
  absl::StatusOr<aggregator::AggregatorSettings> settings =
      aggregator::ResolveAggregatorSettings(config);
  if (!settings.ok()) {
    Err() << settings.status().message() << "\n";
    return bad_config;
  }
  // Blocked before any thread starts (the recorder's, remote write's, gRPC's), so that only
  // ServeUntilSignal takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<std::unique_ptr<aggregator::AggregatorServer>> server =
      aggregator::AggregatorServer::Create(*std::move(settings), RealClock::Get(),
                                           check ? aggregator::AggregatorServer::Mode::kCheck
                                                 : aggregator::AggregatorServer::Mode::kServe);
  if (!server.ok()) {
    Err() << server.status().message() << "\n";
    return bad_config;
  }
  if (check) {
    // Everything a start reads and checks has been; the port file and the listeners are what a
    // start does next, and --check_config does not.
    std::cout << "config OK\n";
    return kExitOk;
  }
  // The port files are created before anything listens: an unwritable path stops the start.
  std::optional<PortFile> port_file;
  std::optional<PortFile> metrics_port_file;
  struct PortFileFlag {
    const absl::Flag<std::string>* flag;
    absl::string_view name;
    std::optional<PortFile>* file;
  };
  for (const PortFileFlag& wanted :
       {PortFileFlag{&FLAGS_port_file, "port_file", &port_file},
        PortFileFlag{&FLAGS_metrics_port_file, "metrics_port_file", &metrics_port_file}}) {
    const std::string path = absl::GetFlag(*wanted.flag);
    if (path.empty()) {
      continue;
    }
    absl::StatusOr<PortFile> prepared = PortFile::Prepare(path, wanted.name);
    if (!prepared.ok()) {
      Err() << prepared.status() << "\n";
      return kExitUsage;
    }
    *wanted.file = *std::move(prepared);
  }
  if (absl::Status started = (*server)->Start(std::move(port_file), std::move(metrics_port_file));
      !started.ok()) {
    Err() << started.message() << "\n";
    return kExitUsage;
  }
  // systemd Type=notify (deploy/systemd/fabricmon-aggregator.service): both listeners are bound.
  // Best effort; a no-op outside systemd (NOTIFY_SOCKET unset).
  NotifyReady((*server)->ReadyStatus());
  HeapTrimmer heap_trimmer(kHeapTrimInterval);
  heap_trimmer.Start();
  (*server)->ServeUntilSignal(stop_signals);
  NotifyStopping();
  heap_trimmer.Stop();
  FABRICMON_LOG(Info) << "stopping";
  (*server)->Shutdown();
  return kExitOk;
}

}  // namespace
}  // namespace fabricmon

namespace {
// glibc gives each thread that allocates under contention an arena of its own, up to 8 per core,
// and memory freed into one arena serves only that arena. gRPC's threads take turns reading the
// agents' streams, so each arena ends up holding the high-water mark of what its threads once
// parsed: 706-750 bytes of RSS per series at 1,000 agents x 1 Hz on 2 cores, against 583-588
// with one arena per core, at the same CPU per sample (README, Benchmarks: the ingest floor).
// One arena per core still bounds the contention by the threads that can run at once.
// MALLOC_ARENA_MAX, when set, is the operator's and wins.
void LimitMallocArenas() {
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) {
    return;
  }
  const unsigned cores = std::thread::hardware_concurrency();
  mallopt(M_ARENA_MAX, static_cast<int>(cores < 2 ? 2 : cores));
}
}  // namespace

int main(int argc, char** argv) {
  LimitMallocArenas();  // before any thread starts
  fabricmon::ProgramInfo info;
  info.name = "fabricmon-aggregator";
  info.summary =
      "fabricmon aggregator: receives the agents' streams, detects fabric faults, serves "
      "Prometheus /metrics and the fabricmon CLI";
  info.usage = {
      "fabricmon-aggregator --grpc_listen=HOST:PORT --metrics_listen=HOST:PORT [--config=FILE] "
      "[--topology_file=FILE] [--link_list=FILE] [--port_file=FILE] [--metrics_port_file=FILE] "
      "[--insecure_plaintext] [--shard=NAME]",
      "fabricmon-aggregator --check_config --config=FILE [flags]",
  };
  info.exit_statuses = {
      {"0", "normal exit (SIGTERM or SIGINT; --check_config: the config is valid)"},
      {"1", "--check_config: the configuration is invalid (the errors are printed)"},
      {"2", "bad flags or configuration, an unreadable file, a port that cannot be bound"},
  };
  info.value_names = {{"config", "FILE"},
                      {"grpc_listen", "HOST:PORT"},
                      {"link_list", "FILE"},
                      {"log_level", "LEVEL"},
                      {"metrics_listen", "HOST:PORT"},
                      {"port_file", "FILE"},
                      {"metrics_port_file", "FILE"},
                      {"shard", "NAME"},
                      {"topology_file", "FILE"}};
  info.flags_file = __FILE__;
  // absl::Mutex deadlock detection (on in this absl build) walks a lock graph on every
  // acquisition: a few percent of ingest. Lock order stays checked in the tests, which keep it on.
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
  fabricmon::v1::AggregatorConfig config;
  if (!absl::GetFlag(FLAGS_config).empty()) {
    absl::Status status = fabricmon::LoadTextConfig(absl::GetFlag(FLAGS_config), &config);
    if (!status.ok()) {
      if (check) {
        fabricmon::Err() << status.message() << "\n";
        return fabricmon::kExitFailure;
      }
      fabricmon::Err() << status << "\n";
      return fabricmon::kExitUsage;
    }
  }
  if (!absl::GetFlag(FLAGS_grpc_listen).empty()) {
    config.set_grpc_listen(absl::GetFlag(FLAGS_grpc_listen));
  }
  if (!absl::GetFlag(FLAGS_link_list).empty()) {
    config.set_link_list_file(absl::GetFlag(FLAGS_link_list));
  }
  if (!absl::GetFlag(FLAGS_topology_file).empty()) {
    config.set_topology_file(absl::GetFlag(FLAGS_topology_file));
  }
  if (absl::GetFlag(FLAGS_insecure_plaintext)) {
    config.mutable_tls()->set_insecure_plaintext(true);
  }
  if (!absl::GetFlag(FLAGS_metrics_listen).empty()) {
    config.set_metrics_listen(absl::GetFlag(FLAGS_metrics_listen));
  }
  if (!absl::GetFlag(FLAGS_shard).empty()) {
    config.set_shard(absl::GetFlag(FLAGS_shard));
  }
  return fabricmon::Run(config, check);
}
