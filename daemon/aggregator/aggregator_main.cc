// fabricmon-aggregator: receives agent streams, keeps per-series state, serves Prometheus
// /metrics and the Diagnostics service.
//
//   fabricmon-aggregator --grpc_listen=HOST:PORT --metrics_listen=HOST:PORT [--config=FILE]
//                        [--topology_file=FILE] [--link_list=FILE]
//   fabricmon-aggregator --check_config --config=FILE [flags]
//       Load and validate as a start would (TLS files, roles, limits, topology and link-list
//       files), open no port; "config OK" (exit 0) or the errors (exit 1).

#include <signal.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "daemon/aggregator/agent_stream.h"
#include "daemon/aggregator/authorization.h"
#include "daemon/aggregator/detector_ticker.h"
#include "daemon/aggregator/diagnostics_service.h"
#include "daemon/aggregator/findings_exporter.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/aggregator/metrics_server.h"
#include "daemon/aggregator/recording_metrics.h"
#include "daemon/aggregator/remote_write_feed.h"
#include "daemon/store/series_store.h"
#include "daemon/aggregator/serving_probe.h"
#include "daemon/common/clock.h"
#include "daemon/common/command_line.h"
#include "daemon/common/config_loader.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/handshake_failures.h"
#include "daemon/common/logging.h"
#include "daemon/common/operator_file.h"
#include "daemon/common/systemd_notify.h"
#include "daemon/common/tls.h"
#include "daemon/detectors/engine.h"
#include "daemon/detectors/node_traffic.h"
#include "daemon/detectors/straggler.h"
#include "daemon/exposition/http_server_limits.h"
#include "daemon/recording/recorder.h"
#include "daemon/remote_write/config.h"
#ifdef FABRICMON_HAVE_IB_TOPOLOGY
#include "collectors/fabric_model/ibnetdiscover_parser.h"
#endif
#include "fabricmon/v1/config.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, config, "", "AggregatorConfig in protobuf text format.");
ABSL_FLAG(std::string, grpc_listen, "", "HOST:PORT for agents and the CLI (default 127.0.0.1:7470).");
ABSL_FLAG(std::string, metrics_listen, "", "HOST:PORT for /metrics (default 127.0.0.1:9470).");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error.");
ABSL_FLAG(std::string, link_list, "", "Link-list topology file (overrides config link_list_file).");
ABSL_FLAG(std::string, topology_file, "",
          "ibnetdiscover output (default, -p or ibsim net format) with the fabric's cabling "
          "(overrides config topology_file).");
ABSL_FLAG(std::string, port_file, "",
          "Write the bound gRPC port to this file once listening (for --grpc_listen=...:0). "
          "Created before anything listens (exit 2 if it cannot be) and renamed into place.");
ABSL_FLAG(bool, insecure_plaintext, false,
          "Serve agents and the CLI WITHOUT TLS (same as tls { insecure_plaintext: true }). "
          "Without TLS files and without this the aggregator refuses to start.");
ABSL_FLAG(bool, check_config, false,
          "Load and validate the configuration (with the overriding flags applied) as a start "
          "would, print \"config OK\" or the errors, and exit; no port is opened.");

namespace fabricmon {
namespace {

// Startup errors on stderr, with the journal priority when stderr is the journal.
std::ostream& Err() {
  return std::cerr << JournalPrefix(LogLevel::kError) << "fabricmon-aggregator: ";
}

// Largest link list accepted (refused above, never cut): a few million cables.
constexpr size_t kMaxLinkListFileBytes = size_t{64} << 20;

// Hands the cabling in an ibnetdiscover file to the detectors. InvalidArgument naming the line
// on a malformed file; Unimplemented in a build without the ib_fabric collector's parser.
absl::Status LoadTopologyFile(const std::string& path, detectors::DetectionEngine& engine) {
#ifdef FABRICMON_HAVE_IB_TOPOLOGY
  // A regular file within the parser's limit, refused (never cut) above it.
  absl::StatusOr<std::string> text =
      ReadOperatorFile(path, collectors::ib_fabric::kMaxTopologyFileBytes, "topology_file");
  if (!text.ok()) {
    return text.status();
  }
  absl::StatusOr<collectors::ib_fabric::ParsedTopology> parsed =
      collectors::ib_fabric::ParseIbnetdiscover(*text);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const collectors::ib_fabric::Topology& topology = parsed->topology;
  v1::Inventory fabric;
  collectors::ib_fabric::AppendToInventory(topology, fabric);
  FABRICMON_LOG(Info) << "topology_file " << path << ": " << topology.nodes.size() << " nodes ("
                      << topology.CountNodes(collectors::ib_fabric::NodeType::kSwitch)
                      << " switches), " << fabric.fabric_links_size() << " links";
  engine.SetStaticFabric(std::move(fabric));
  return absl::OkStatus();
#else
  (void)path;
  (void)engine;
  return absl::UnimplementedError(
      "this build has no ibnetdiscover parser (collectors/ib_fabric was left out: "
      "FABRICMON_WITH_IBMAD=OFF or FABRICMON_SKIP_COLLECTORS); use link_list_file instead");
#endif
}

// recording { ... } as recorder options; nullopt when nothing is to be recorded, InvalidArgument
// on bounds that make no sense.
absl::StatusOr<std::optional<recording::RecorderOptions>> RecordingOptions(
    const v1::RecordingConfig& config) {
  if (config.directory().empty()) {
    if (config.has_max_bytes() || config.has_max_age_s()) {
      return absl::InvalidArgumentError(
          "recording: max_bytes or max_age_s without a directory records nothing; set "
          "recording.directory");
    }
    return std::nullopt;
  }
  recording::RecorderOptions options;
  options.directory = config.directory();
  if (config.has_max_bytes()) {
    options.max_bytes = config.max_bytes();
  }
  if (config.has_max_age_s()) {
    options.max_age_nanos = int64_t{config.max_age_s()} * 1000000000;
  }
  if (absl::Status valid = recording::ValidateRecorderOptions(options); !valid.ok()) {
    return valid;
  }
  return options;
}

// Starts the aggregator and serves until SIGTERM/SIGINT. With `check` (--check_config) it runs
// every check a start makes, loads every file, and returns before it opens a port or starts a
// thread: kExitOk ("config OK") or kExitFailure with the errors.
// Waits for SIGTERM/SIGINT. Under a systemd watchdog (WATCHDOG_USEC), pings WATCHDOG=1 at half
// its interval, but only while the detector thread ticks and the gRPC server answers a probe:
// a stalled loop stops the pings, and systemd restarts the aggregator (WatchdogSec=).
void WatchdogLoop(const sigset_t& stop_signals, const Clock& clock,
                  const detectors::DetectionEngine& engine, grpc::Server& server,
                  int64_t detector_tick_nanos, const std::string& ready_status) {
  const uint64_t watchdog_us = WatchdogIntervalMicros();
  const int64_t tick_ms = watchdog_us > 0 ? std::max<int64_t>(100, watchdog_us / 2000) : 1000;
  // A loop may stay silent for one watchdog interval (two probes, one per ping), and the
  // detector for three of its ticks if that is longer (a slow tick over a large fabric is not a
  // stall). So a stall stops the pings within about WatchdogSec, and systemd restarts the
  // aggregator WatchdogSec later.
  const int64_t watchdog_nanos = static_cast<int64_t>(watchdog_us) * 1000;
  const int64_t detector_silence = std::max(watchdog_nanos, 3 * detector_tick_nanos);
  aggregator::ServingProbe probe(server.InProcessChannel(grpc::ChannelArguments()), clock);
  const int64_t started = clock.MonotonicNanos();
  bool stalled = false;
  for (;;) {
    if (watchdog_us > 0) {
      const int64_t last_tick = engine.last_tick_monotonic_nanos();
      const int64_t last_answer = probe.last_answer_nanos();
      absl::Status progress = CheckProgress(
          {{"detector thread", last_tick > 0 ? last_tick : started, detector_silence},
           {"gRPC server", last_answer > 0 ? last_answer : started, watchdog_nanos}},
          clock.MonotonicNanos());
      if (progress.ok()) {
        NotifyWatchdog();
        if (stalled) {
          FABRICMON_LOG(Warning) << "watchdog: progress again, pinging systemd";
          NotifyStatus(ready_status);
          stalled = false;
        }
      } else if (!stalled) {
        FABRICMON_LOG(Error) << "watchdog: " << progress.message()
                             << "; no more WATCHDOG=1, systemd will restart the aggregator";
        NotifyStatus(absl::StrCat("stalled: ", progress.message()));
        stalled = true;
      }
      probe.Probe(absl::Milliseconds(tick_ms));
    }
    timespec timeout{tick_ms / 1000, (tick_ms % 1000) * 1000000};
    const int signal = sigtimedwait(&stop_signals, nullptr, &timeout);
    if (signal == SIGTERM || signal == SIGINT) {
      return;
    }
  }
}

int Run(const v1::AggregatorConfig& config, bool check) {
  // A configuration error: exit status 2 for a start (systemd does not restart it), 1 for
  // --check_config.
  const int bad_config = check ? kExitFailure : kExitUsage;
  // Mutual TLS unless plaintext was asked for explicitly; a named file that cannot be read stops
  // the start (exit 2) instead of becoming an empty certificate.
  absl::StatusOr<TransportSecurity> security =
      LoadTransportSecurity(config.tls(), TlsRole::kAggregator);
  if (!security.ok()) {
    Err() << security.status() << "\n";
    return bad_config;
  }
  for (const std::string& warning : security->warnings) {
    FABRICMON_LOG(Warning) << warning;
  }
  if (security->plaintext) {
    FABRICMON_LOG(Warning) << DescribeTransport(config.tls(), *security);
  } else {
    FABRICMON_LOG(Info) << "agents and the CLI: " << DescribeTransport(config.tls(), *security)
                        << "; node names bound to client certificates";
  }

  // Roles: a pattern that is not RE2 stops the start, as any other configuration error.
  absl::StatusOr<std::shared_ptr<const aggregator::Authorization>> authorization =
      aggregator::Authorization::Create(config.authorization(), security->plaintext);
  if (!authorization.ok()) {
    Err() << authorization.status().message() << "\n";
    return bad_config;
  }
  for (const std::string& line : (*authorization)->Describe()) {
    if (security->plaintext) {
      FABRICMON_LOG(Warning) << line;
    } else {
      FABRICMON_LOG(Info) << "authorization: " << line;
    }
  }

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Clock& clock = RealClock::Get();
  store::StoreOptions store_options;
  if (config.samples_per_series() > 0) {
    store_options.samples_per_series = config.samples_per_series();
  }
  if (config.max_series_per_node() > 0) {
    store_options.max_series_per_node = config.max_series_per_node();
  }
  if (config.max_new_series_per_second() > 0) {
    store_options.new_series.per_second = config.max_new_series_per_second();
  }
  if (config.new_series_burst() > 0) {
    store_options.new_series.burst = config.new_series_burst();
  }
  store_options.series_retention_nanos =
      int64_t{config.has_series_retention_s() ? config.series_retention_s() : 900} * 1000000000;
  if (store_options.series_retention_nanos != 0 && store_options.series_retention_nanos < 60e9) {
    Err() << "series_retention_s must be 0 (keep forever) or at least "
                 "60, not "
              << config.series_retention_s() << "\n";
    return bad_config;
  }
  aggregator::MetricsServerOptions metrics_options;
  if (config.metrics_gzip_max_bytes() > 0) {
    metrics_options.gzip_max_bytes = config.metrics_gzip_max_bytes();
  }
  if (config.has_metrics_request_timeout_ms()) {
    metrics_options.http.request_timeout_ms = config.metrics_request_timeout_ms();
  }
  if (config.has_metrics_max_connections()) {
    metrics_options.http.max_connections = config.metrics_max_connections();
  }
  if (absl::Status valid = exposition::ValidateHttpServerLimits(metrics_options.http, "metrics_");
      !valid.ok()) {
    Err() << valid.message() << "\n";
    return bad_config;
  }
  // Bounded memory whatever agents send (README "Security").
  store_options.max_nodes = config.max_nodes() > 0 ? config.max_nodes() : 20000;
  store_options.max_series_total =
      config.max_series_total() > 0 ? config.max_series_total() : 10000000;
  store_options.node_retention_nanos =
      int64_t{config.has_node_retention_s() ? config.node_retention_s() : 86400} * 1000000000;
  if (store_options.node_retention_nanos != 0 && store_options.node_retention_nanos < 600e9) {
    Err() << "node_retention_s must be 0 (keep forever) or at least "
                 "600, not "
              << config.node_retention_s() << "\n";
    return bad_config;
  }
  // A peer (certificate, or plaintext host) gets the budget of one node over all its names.
  store_options.new_series_per_peer = store_options.new_series;
  store::SeriesStore store(store_options);
  aggregator::IngestStats stats;
  aggregator::StreamOptions stream_options;
  if (config.max_message_bytes() > 0) {
    if (config.max_message_bytes() < aggregator::kMinMessageBytes ||
        config.max_message_bytes() > aggregator::kMaxMessageBytes) {
      Err() << "max_message_bytes must lie in "
                << aggregator::kMinMessageBytes << ".." << aggregator::kMaxMessageBytes
                << " (64 KiB .. 1 GiB), not " << config.max_message_bytes() << "\n";
      return bad_config;
    }
    stream_options.max_message_bytes = config.max_message_bytes();
  }
  absl::StatusOr<std::optional<recording::RecorderOptions>> recording_options =
      RecordingOptions(config.recording());
  if (!recording_options.ok()) {
    Err() << recording_options.status().message() << "\n";
    return bad_config;
  }
  stream_options.require_peer_identity = !security->plaintext;
  stream_options.authorization = *authorization;
  const int64_t stale_after =
      int64_t{config.node_stale_after_ms() > 0 ? config.node_stale_after_ms() : 30000} * 1000000;

  static_assert(static_cast<size_t>(HandshakeFailure::kCount) == aggregator::kHandshakeFailureKinds);
  if (!security->plaintext && !check) {
    // gRPC refuses bad client certificates before any of our code runs; its log is the one place
    // that sees them (handshake_failures.h).
    WatchHandshakeFailures([&stats](HandshakeFailure failure) {
      ++stats.handshakes_refused[static_cast<size_t>(failure)];
    });
  }
  // Created (directory, earlier segments counted) only by a start; a directory that cannot be
  // made or written stops it.
  std::shared_ptr<recording::Recorder> recorder;
  if (recording_options->has_value() && !check) {
    absl::StatusOr<std::unique_ptr<recording::Recorder>> started =
        recording::Recorder::Start(**recording_options, clock);
    if (!started.ok()) {
      Err() << "recording: " << started.status().message() << "\n";
      return bad_config;
    }
    recorder = *std::move(started);
    stream_options.recorder = recorder.get();
    FABRICMON_LOG(Info) << "recording accepted agent messages to " << recorder->options().directory
                        << " (at most " << recorder->options().max_bytes << " bytes, "
                        << recorder->options().max_age_nanos / 1000000000 << " s; "
                        << recorder->segments() << " segments kept from before)";
  }
  absl::StatusOr<std::vector<remote_write::EndpointConfig>> remote_write_configs =
      remote_write::ParseRemoteWriteConfigs(config.remote_write());
  if (!remote_write_configs.ok()) {
    Err() << remote_write_configs.status().message() << "\n";
    return bad_config;
  }
  // Remote write: endpoints (their senders and threads) are made before any stream can store a
  // batch (not for --check_config).
  std::shared_ptr<aggregator::RemoteWriteFeed> remote_write_feed;
  if (!check && !remote_write_configs->empty()) {
    std::vector<aggregator::RemoteWriteFeed::EndpointEntry> endpoints;
    for (remote_write::EndpointConfig& endpoint_config : *remote_write_configs) {
      const remote_write::HttpOptions http = endpoint_config.http;
      absl::StatusOr<std::unique_ptr<remote_write::Endpoint>> endpoint =
          remote_write::Endpoint::Create(
              endpoint_config.endpoint,
              [http]() -> absl::StatusOr<std::unique_ptr<remote_write::Sender>> {
                absl::StatusOr<std::unique_ptr<remote_write::CurlSender>> sender =
                    remote_write::CurlSender::Create(http);
                if (!sender.ok()) {
                  return sender.status();
                }
                return std::unique_ptr<remote_write::Sender>(*std::move(sender));
              },
              clock);
      if (!endpoint.ok()) {
        Err() << "remote_write " << endpoint_config.endpoint.name << ": " << endpoint.status()
              << "\n";
        return 2;
      }
      FABRICMON_LOG(Info) << "remote_write to " << (*endpoint)->name() << " ("
                          << endpoint_config.endpoint.queue.shards << " shards)";
      endpoints.push_back({*std::move(endpoint), endpoint_config.flush_deadline_nanos});
    }
    remote_write_feed = std::make_shared<aggregator::RemoteWriteFeed>(std::move(endpoints), clock);
    stream_options.batch_observer = remote_write_feed;
  }
  aggregator::TelemetryService telemetry(store, stats, stream_options, clock);
  aggregator::DiagnosticsService diagnostics(store, clock, stale_after, *authorization, &stats);
  if (absl::Status valid = detectors::ValidateThresholds(config.detectors()); !valid.ok()) {
    Err() << valid.message() << "\n";
    return bad_config;
  }
  const int64_t tick = int64_t{config.detectors().tick_ms() > 0 ? config.detectors().tick_ms() : 1000} * 1000000;
  auto engine = std::make_shared<detectors::DetectionEngine>(store, clock, config.detectors(), tick);
  // Jobs registered by operators (Slurm prolog, `fabricmon job start`): read by the straggler
  // detector and Diagnose, kept in memory only.
  auto jobs = std::make_shared<aggregator::JobRegistry>(clock);
  engine->AddDetector(std::make_unique<detectors::StragglerDetector>(
      detectors::StragglerOptionsFrom(config.detectors()), *jobs));
  detectors::NodeTrafficReader traffic(store, clock);
  engine->SetAgentTopologyRetention(
      int64_t{config.has_agent_topology_retention_s() ? config.agent_topology_retention_s() : 600} *
      1000000000);
  if (!config.link_list_file().empty()) {
    absl::StatusOr<std::string> text =
        ReadOperatorFile(config.link_list_file(), kMaxLinkListFileBytes, "link_list_file");
    absl::Status status = text.ok() ? engine->SetLinkList(*text) : text.status();
    if (!status.ok()) {
      Err() << "link_list_file: " << status << "\n";
      return bad_config;
    }
  }
  if (!config.topology_file().empty()) {
    absl::Status status = LoadTopologyFile(config.topology_file(), *engine);
    if (!status.ok()) {
      Err() << "topology_file " << config.topology_file() << ": "
                << status << "\n";
      return bad_config;
    }
  }
  if (check) {
    // Everything a start reads and checks has been; the port file and the listeners are what a
    // start does next, and --check_config does not.
    std::cout << "config OK\n";
    return kExitOk;
  }
  // The port file is created before anything listens: an unwritable path stops the start.
  std::optional<PortFile> port_file;
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    absl::StatusOr<PortFile> prepared = PortFile::Prepare(absl::GetFlag(FLAGS_port_file));
    if (!prepared.ok()) {
      Err() << prepared.status() << "\n";
      return 2;
    }
    port_file = *std::move(prepared);
  }
  diagnostics.SetFindingsProvider(engine.get());
  diagnostics.SetTopologyProvider(engine.get());
  diagnostics.SetJobRegistry(jobs.get());
  diagnostics.SetTrafficProvider(&traffic);
  const std::string grpc_listen = config.grpc_listen().empty() ? "127.0.0.1:7470" : config.grpc_listen();
  int bound_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(grpc_listen, MakeServerCredentials(*security), &bound_port);
  builder.SetMaxReceiveMessageSize(aggregator::GrpcReceiveLimit(stream_options.max_message_bytes));
  builder.RegisterService(&telemetry);
  // diagnostics_listen: the Diagnostics service (the CLI) on a server of its own, with the same
  // credentials, and not on grpc_listen; unset, both services share grpc_listen.
  const bool own_diagnostics = !config.diagnostics_listen().empty();
  std::unique_ptr<grpc::Server> diagnostics_server;
  int diagnostics_port = 0;
  if (own_diagnostics) {
    grpc::ServerBuilder diagnostics_builder;
    diagnostics_builder.AddListeningPort(config.diagnostics_listen(),
                                         MakeServerCredentials(*security), &diagnostics_port);
    diagnostics_builder.RegisterService(&diagnostics);
    diagnostics_server = diagnostics_builder.BuildAndStart();
    if (diagnostics_server == nullptr || diagnostics_port == 0) {
      Err() << "cannot listen on " << config.diagnostics_listen()
                << " (diagnostics_listen)\n";
      return 2;
    }
  } else {
    builder.RegisterService(&diagnostics);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    Err() << "cannot listen on " << grpc_listen << "\n";
    if (diagnostics_server != nullptr) {
      diagnostics_server->Shutdown();
    }
    return 2;
  }
  if (own_diagnostics) {
    FABRICMON_LOG(Info) << "telemetry on port " << bound_port << ", diagnostics on "
                        << config.diagnostics_listen() << " (port " << diagnostics_port << ")";
  } else {
    FABRICMON_LOG(Info) << "telemetry and diagnostics on port " << bound_port;
  }
  if (port_file.has_value()) {
    // Written whole and renamed into place: a reader never sees a partial number.
    if (absl::Status written = port_file->Commit(bound_port); !written.ok()) {
      Err() << written << "\n";
      server->Shutdown();
      return 2;
    }
  }

  const std::string metrics_listen =
      config.metrics_listen().empty() ? "127.0.0.1:9470" : config.metrics_listen();
  absl::StatusOr<std::unique_ptr<aggregator::MetricsServer>> metrics =
      aggregator::MetricsServer::Listen(metrics_listen, metrics_options);
  if (!metrics.ok()) {
    Err() << metrics.status().message() << "\n";
    server->Shutdown();
    return 2;
  }
  auto exporter = std::make_shared<aggregator::MetricsExporter>(
      store, stats, clock, aggregator::ExporterOptions{stale_after});
  auto findings_exporter = std::make_shared<aggregator::FindingsExporter>(*engine);
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables = {findings_exporter, jobs};
  if (recorder != nullptr) {
    collectables.push_back(std::make_shared<aggregator::RecordingMetrics>(recorder));
  }
  if (remote_write_feed != nullptr) {
    collectables.push_back(remote_write_feed);
    remote_write_feed->ForwardEachTick(
        [engine] { return engine->last_tick_monotonic_nanos(); },
        // Everything /metrics serves beside the stored samples, so that remote storage alone
        // serves the dashboards and alerts: findings, node health, jobs, the recording's state.
        [findings_exporter, exporter, jobs, recorder] {
          std::vector<prometheus::MetricFamily> families = findings_exporter->Collect();
          auto append = [&families](std::vector<prometheus::MetricFamily> more) {
            for (prometheus::MetricFamily& family : more) families.push_back(std::move(family));
          };
          append(exporter->HealthFamilies());
          append(jobs->Collect());
          if (recorder != nullptr) append(aggregator::RecordingMetrics(recorder).Collect());
          return families;
        },
        std::max<int64_t>(tick / 4, 10000000));
  }
  (*metrics)->Serve(exporter, std::move(collectables));
  aggregator::DetectorTicker detector_ticker(*engine);
  detector_ticker.Start();
  FABRICMON_LOG(Info) << "/metrics on " << metrics_listen << " (port " << (*metrics)->port() << ")";

  // systemd Type=notify (deploy/systemd/fabricmon-aggregator.service): both listeners are bound.
  // Best effort; a no-op outside systemd (NOTIFY_SOCKET unset).
  const std::string ready_status =
      absl::StrFormat("agents and CLI on port %d (%s), /metrics on port %d", bound_port,
                      security->plaintext ? "INSECURE plaintext" : "mutual TLS",
                      (*metrics)->port());
  NotifyReady(ready_status);
  WatchdogLoop(stop_signals, clock, *engine, *server, tick, ready_status);
  NotifyStopping();
  FABRICMON_LOG(Info) << "stopping";
  (*metrics)->Clear();
  detector_ticker.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (diagnostics_server != nullptr) {
    diagnostics_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  if (remote_write_feed != nullptr) {
    // After the streams: nothing more is stored, so what is pending is all there is to flush.
    remote_write_feed->Shutdown();
  }
  return 0;
}

}  // namespace
}  // namespace fabricmon

int main(int argc, char** argv) {
  fabricmon::ProgramInfo info;
  info.name = "fabricmon-aggregator";
  info.summary =
      "fabricmon aggregator: receives the agents' streams, detects fabric faults, serves "
      "Prometheus /metrics and the fabricmon CLI";
  info.usage = {
      "fabricmon-aggregator --grpc_listen=HOST:PORT --metrics_listen=HOST:PORT [--config=FILE] "
      "[--topology_file=FILE] [--link_list=FILE] [--port_file=FILE] [--insecure_plaintext]",
      "fabricmon-aggregator --check_config --config=FILE [flags]",
  };
  info.exit_statuses = {
      {"0", "normal exit (SIGTERM or SIGINT; --check_config: the config is valid)"},
      {"1", "--check_config: the configuration is invalid (the errors are printed)"},
      {"2", "bad flags or configuration, an unreadable file, a port that cannot be bound"},
  };
  info.value_names = {{"config", "FILE"},       {"grpc_listen", "HOST:PORT"},
                      {"link_list", "FILE"},    {"log_level", "LEVEL"},
                      {"metrics_listen", "HOST:PORT"}, {"port_file", "FILE"},
                      {"topology_file", "FILE"}};
  info.flags_file = __FILE__;
  // absl::Mutex deadlock detection (on in this absl build) walks a lock graph on every
  // acquisition: a few percent of ingest (issue 19's profile). Lock order stays checked in the
  // tests, which keep it on.
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
  return fabricmon::Run(config, check);
}
