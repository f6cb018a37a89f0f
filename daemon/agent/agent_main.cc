// fabricmon-agent: the node agent.
//
//   fabricmon-agent --once [--sysfs_root=DIR] [--config=FILE]
//       Discover and collect once; print Prometheus text exposition to stdout.
//   fabricmon-agent --aggregator=HOST:PORT[,HOST:PORT...] [--node_name=NAME]
//                   [--listen_metrics=HOST:PORT]
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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "collectors/builtin.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/recording_sink.h"
#include "daemon/agent/agent.h"
#include "daemon/agent/aggregator_directory.h"
#include "daemon/agent/aggregator_ranking.h"
#include "daemon/agent/collector_runner.h"
#include "daemon/agent/doctor.h"
#include "daemon/agent/stream_client.h"
#include "daemon/common/build_info.h"
#include "daemon/common/clock.h"
#include "daemon/common/command_line.h"
#include "daemon/common/config_loader.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/handshake_failures.h"
#include "daemon/common/logging.h"
#include "daemon/common/systemd_notify.h"
#include "daemon/common/tls.h"
#include "daemon/exposition/http_server_limits.h"
#include "daemon/exposition/text_exposition.h"
#include "fabricmon/v1/config.pb.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

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

// Serves the agent's latest samples at /metrics, built at scrape time.
class LocalMetrics final : public prometheus::Collectable {
 public:
  explicit LocalMetrics(const agent::Agent& agent) : agent_(agent) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families =
        exposition::BuildFamilies(agent_.LatestSamples());
    // prometheus-cpp's TextSerializer (what the Exposer serves) writes HELP raw; label values it
    // escapes. Hand it HELP already escaped as the text format requires, as our writer does.
    for (prometheus::MetricFamily& family : families) {
      std::string escaped;
      exposition::AppendHelp(family.help, &escaped);
      family.help = std::move(escaped);
    }
    return families;
  }

 private:
  const agent::Agent& agent_;
};

// What a start checks before it starts anything: the daemon's settings and, when it streams,
// the TLS files. --check_config runs exactly this (and builds the collectors).
struct DaemonPlan {
  exposition::HttpServerLimits http_limits;
  std::optional<TransportSecurity> security;  // set when streaming
  std::vector<std::string> aggregators;       // as configured (validated), empty: no streaming
  absl::Duration failover_after = absl::Seconds(10);
  absl::Duration failback_after = absl::Seconds(30);
};

// A delay field in milliseconds: its default when unset, InvalidArgument outside [min, max].
absl::StatusOr<absl::Duration> DelayField(bool set, uint32_t value, absl::string_view name,
                                          uint32_t default_ms, uint32_t min_ms, uint32_t max_ms) {
  if (!set) {
    return absl::Milliseconds(default_ms);
  }
  if (value < min_ms || value > max_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be within ", min_ms, "..", max_ms, " (got ", value, ")"));
  }
  return absl::Milliseconds(value);
}

absl::StatusOr<DaemonPlan> PlanDaemon(const v1::AgentConfig& config) {
  DaemonPlan plan;
  plan.aggregators.assign(config.aggregator().begin(), config.aggregator().end());
  if (!plan.aggregators.empty()) {
    absl::StatusOr<std::vector<agent::AggregatorAddress>> parsed =
        agent::ParseAggregatorList(plan.aggregators);
    if (!parsed.ok()) {
      return parsed.status();
    }
  }
  absl::StatusOr<absl::Duration> failover =
      DelayField(config.has_failover_after_ms(), config.failover_after_ms(), "failover_after_ms",
                 10000, 100, 600000);
  if (!failover.ok()) {
    return failover.status();
  }
  plan.failover_after = *failover;
  absl::StatusOr<absl::Duration> failback =
      DelayField(config.has_failback_after_ms(), config.failback_after_ms(), "failback_after_ms",
                 30000, 100, 3600000);
  if (!failback.ok()) {
    return failback.status();
  }
  plan.failback_after = *failback;
  if (plan.aggregators.empty() && config.listen_metrics().empty()) {
    return absl::InvalidArgumentError(
        "nothing to do: give --aggregator and/or --listen_metrics (or --once)");
  }
  if (config.has_metrics_request_timeout_ms()) {
    plan.http_limits.request_timeout_ms = config.metrics_request_timeout_ms();
  }
  if (config.has_metrics_max_connections()) {
    plan.http_limits.max_connections = config.metrics_max_connections();
  }
  if (absl::Status valid = exposition::ValidateHttpServerLimits(plan.http_limits, "metrics_");
      !valid.ok()) {
    return valid;
  }
  // Streaming needs mutual TLS or the explicit plaintext opt-in; a named file that cannot be read
  // stops the start (exit 2) instead of becoming an empty certificate.
  if (!plan.aggregators.empty()) {
    absl::StatusOr<TransportSecurity> loaded = LoadTransportSecurity(config.tls(), TlsRole::kAgent);
    if (!loaded.ok()) {
      return loaded.status();
    }
    plan.security = *std::move(loaded);
  }
  return plan;
}

// --check_config: everything a start (--once or the daemon) would check, nothing started: the
// collectors are built (their configuration validated) but never run.
int CheckConfig(const v1::AgentConfig& config, bool once) {
  if (!once) {
    absl::StatusOr<DaemonPlan> plan = PlanDaemon(config);
    if (!plan.ok()) {
      Err() << plan.status().message() << "\n";
      return kExitFailure;
    }
    for (const std::string& warning :
         plan->security.has_value() ? plan->security->warnings : std::vector<std::string>{}) {
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
  absl::StatusOr<DaemonPlan> plan = PlanDaemon(config);
  if (!plan.ok()) {
    Err() << plan.status().message() << "\n";
    return kExitUsage;
  }
  const exposition::HttpServerLimits& http_limits = plan->http_limits;
  std::optional<TransportSecurity>& security = plan->security;
  if (security.has_value()) {
    for (const std::string& warning : security->warnings) {
      FABRICMON_LOG(Warning) << warning;
    }
    if (security->plaintext) {
      FABRICMON_LOG(Warning) << DescribeTransport(config.tls(), *security);
    } else {
      FABRICMON_LOG(Info) << "aggregator " << absl::StrJoin(plan->aggregators, ",") << ": "
                          << DescribeTransport(config.tls(), *security);
    }
  }
  // Block the stop signals in every thread; the main thread waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto created = CreateCollectors(config);
  if (!created.ok()) {
    Err() << created.status() << "\n";
    return kExitUsage;
  }
  agent::AgentOptions options;
  options.node_name = config.node_name();
  if (config.replay_buffer_bytes() > 0) {
    options.replay_buffer_bytes = config.replay_buffer_bytes();
  }
  agent::Agent agent(options, *std::move(created), RealClock::Get());
  agent.DiscoverAll();

  const uint64_t instance_id = agent::NewAgentInstanceId();
  const std::string boot_id = agent::ReadBootId();
  std::unique_ptr<agent::AggregatorDirectory> directory;
  std::unique_ptr<agent::StreamClient> stream;
  if (!plan->aggregators.empty()) {
    agent::StreamClientOptions stream_options;
    if (config.reconnect_initial_backoff_ms() > 0) {
      stream_options.initial_backoff = absl::Milliseconds(config.reconnect_initial_backoff_ms());
    }
    if (config.reconnect_max_backoff_ms() > 0) {
      stream_options.max_backoff = absl::Milliseconds(config.reconnect_max_backoff_ms());
    }
    grpc::ChannelArguments args;
    // Detect a dead aggregator or a silent partition within ~30 s even with no RPC traffic.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // The channel has its own connection backoff (gRPC default: 1 s growing ×1.6 to 120 s) and
    // fails every stream attempt at once while it waits, so after a long aggregator outage the
    // agent would stay away up to 120 s whatever reconnect_max_backoff_ms says. Bound it by the
    // same policy; StreamClient's jittered backoff keeps restarts from stampeding.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(stream_options.initial_backoff)));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(stream_options.max_backoff)));
    std::shared_ptr<grpc::ChannelCredentials> credentials = MakeChannelCredentials(*security);
    const bool plaintext = security->plaintext;
    absl::StatusOr<std::unique_ptr<agent::AggregatorDirectory>> created_directory =
        agent::AggregatorDirectory::Create(
            plan->aggregators, config.node_name(),
            [args, credentials, plaintext](const std::string& address,
                                           const std::string& tls_name) {
              grpc::ChannelArguments channel_args = args;
              if (!tls_name.empty() && !plaintext) {
                // An address a DNS name expanded to: the certificate still names the service.
                channel_args.SetSslTargetNameOverride(tls_name);
              }
              return grpc::CreateCustomChannel(address, credentials, channel_args);
            });
    if (!created_directory.ok()) {  // PlanDaemon validated the list
      Err() << created_directory.status().message() << "\n";
      return kExitUsage;
    }
    directory = *std::move(created_directory);
    stream_options.directory = directory.get();
    stream_options.failover_after = plan->failover_after;
    stream_options.failback_after = plan->failback_after;
    stream_options.node_name = config.node_name();
    stream_options.boot_id = boot_id;
    stream_options.agent_version = std::string(ProjectVersion());
    stream_options.agent_instance_id = instance_id;
    stream = std::make_unique<agent::StreamClient>(
        stream_options, agent.buffer(), agent.series(), [&agent, boot_id, instance_id] {
          return agent.MakeHello(boot_id, std::string(ProjectVersion()), instance_id);
        });
    agent.AttachStream(stream.get());
  }

  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<LocalMetrics> local_metrics;
  if (!config.listen_metrics().empty()) {
    // Timeouts and enough workers that slow or many clients cannot block a scrape.
    absl::StatusOr<std::unique_ptr<prometheus::Exposer>> started =
        exposition::StartExposer(config.listen_metrics(), http_limits);
    if (!started.ok()) {
      Err() << started.status().message() << "\n";
      return kExitUsage;
    }
    exposer = *std::move(started);
    local_metrics = std::make_shared<LocalMetrics>(agent);
    exposer->RegisterCollectable(local_metrics);
    FABRICMON_LOG(Info) << "serving /metrics on " << config.listen_metrics();
  }

  agent.Start();
  if (stream != nullptr) {
    stream->Start();
  }

  const uint64_t watchdog_us = WatchdogIntervalMicros();
  // Ping at half the interval systemd expects (sd_watchdog_enabled(3)).
  const int64_t tick_ms = watchdog_us > 0 ? std::max<int64_t>(100, watchdog_us / 2000) : 1000;
  bool ready_sent = false;
  for (;;) {
    if (!ready_sent && agent.ready()) {
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
  agent.Stop();
  if (stream != nullptr) {
    // Give the aggregator a moment to acknowledge what is buffered; what is not is lost with the
    // process (the buffer is in memory), and the final stats say how much.
    stream->Stop(absl::Seconds(5));
  }
  if (exposer != nullptr && local_metrics != nullptr) {
    exposer->RemoveCollectable(local_metrics);
  }
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
      "[--listen_metrics=HOST:PORT] [--config=FILE] [--insecure_plaintext]",
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
