#include "daemon/aggregator/aggregator_server.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/fabric_model/ibnetdiscover_parser.h"
#include "daemon/aggregator/recording_metrics.h"
#include "daemon/aggregator/serving_probe.h"
#include "daemon/common/handshake_failures.h"
#include "daemon/common/logging.h"
#include "daemon/common/systemd_notify.h"
#include "daemon/detectors/straggler.h"
#include "daemon/exposition/http_server_limits.h"

namespace fabricmon::aggregator {
namespace {

// Largest link list accepted (refused above, never cut): a few million cables.
constexpr size_t kMaxLinkListFileBytes = size_t{64} << 20;
constexpr int64_t kNanosPerSecond = 1000000000;

absl::Status Refuse(absl::string_view line) { return absl::InvalidArgumentError(line); }

// Hands the cabling in an ibnetdiscover file to the detectors. InvalidArgument naming the line
// on a malformed file.
absl::Status LoadTopologyFile(const std::string& path, detectors::DetectionEngine& engine) {
  // A regular file within the parser's limit, refused (never cut) above it.
  absl::StatusOr<std::string> text =
      ReadOperatorFile(path, fabric_model::kMaxTopologyFileBytes, "topology_file");
  if (!text.ok()) {
    return text.status();
  }
  absl::StatusOr<fabric_model::ParsedSubnet> parsed = fabric_model::ParseIbnetdiscover(*text);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const fabric_model::Subnet& topology = parsed->topology;
  v1::Inventory fabric;
  fabric_model::AppendToInventory(topology, fabric);
  FABRICMON_LOG(Info) << "topology_file " << path << ": " << topology.nodes.size() << " nodes ("
                      << topology.CountNodes(fabric_model::NodeType::kSwitch) << " switches), "
                      << fabric.fabric_links_size() << " links";
  engine.SetStaticFabric(std::move(fabric));
  return absl::OkStatus();
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
    options.max_age_nanos = int64_t{config.max_age_s()} * kNanosPerSecond;
  }
  if (absl::Status valid = recording::ValidateRecorderOptions(options); !valid.ok()) {
    return valid;
  }
  return options;
}

// The shard name: `shard`, or HOST:PORT of this aggregator (the host name and the gRPC port, as
// agents list it; a StatefulSet pod's host name is stable). InvalidArgument for a name that
// cannot be a label value as written (control characters, over 256 bytes).
absl::StatusOr<std::string> ShardName(const v1::AggregatorConfig& config) {
  std::string shard = config.shard();
  if (shard.empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
      std::snprintf(host, sizeof(host), "localhost");
    }
    const std::string listen =
        config.grpc_listen().empty() ? "127.0.0.1:7470" : config.grpc_listen();
    const size_t colon = listen.rfind(':');
    const std::string port = colon == std::string::npos ? "7470" : listen.substr(colon + 1);
    // Port 0 (a free port, tests) would name every such shard alike: the host alone.
    shard = port == "0" ? std::string(host) : absl::StrCat(host, ":", port);
  }
  if (shard.size() > 256) {
    return absl::InvalidArgumentError("shard: longer than 256 bytes");
  }
  for (unsigned char c : shard) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("shard: contains a control character");
    }
  }
  return shard;
}

}  // namespace

absl::StatusOr<AggregatorSettings> ResolveAggregatorSettings(const v1::AggregatorConfig& config) {
  AggregatorSettings settings;
  // Mutual TLS unless plaintext was asked for explicitly; a named file that cannot be read stops
  // the start instead of becoming an empty certificate.
  absl::StatusOr<TransportSecurity> security =
      LoadTransportSecurity(config.tls(), TlsRole::kAggregator);
  if (!security.ok()) {
    return Refuse(security.status().ToString());
  }
  settings.security = *std::move(security);
  for (const std::string& warning : settings.security.warnings) {
    FABRICMON_LOG(Warning) << warning;
  }
  if (settings.security.plaintext) {
    FABRICMON_LOG(Warning) << DescribeTransport(config.tls(), settings.security);
  } else {
    FABRICMON_LOG(Info) << "agents and the CLI: "
                        << DescribeTransport(config.tls(), settings.security)
                        << "; node names bound to client certificates";
  }

  // Roles: a pattern that is not RE2 stops the start, as any other configuration error.
  absl::StatusOr<std::shared_ptr<const Authorization>> authorization =
      Authorization::Create(config.authorization(), settings.security.plaintext);
  if (!authorization.ok()) {
    return Refuse(authorization.status().message());
  }
  settings.authorization = *std::move(authorization);
  for (const std::string& line : settings.authorization->Describe()) {
    if (settings.security.plaintext) {
      FABRICMON_LOG(Warning) << line;
    } else {
      FABRICMON_LOG(Info) << "authorization: " << line;
    }
  }

  store::StoreOptions& store = settings.store;
  if (config.samples_per_series() > 0) {
    store.samples_per_series = config.samples_per_series();
  }
  if (config.max_series_per_node() > 0) {
    store.max_series_per_node = config.max_series_per_node();
  }
  if (config.max_new_series_per_second() > 0) {
    store.new_series.per_second = config.max_new_series_per_second();
  }
  if (config.new_series_burst() > 0) {
    store.new_series.burst = config.new_series_burst();
  }
  store.series_retention_nanos =
      int64_t{config.has_series_retention_s() ? config.series_retention_s() : 900} *
      kNanosPerSecond;
  if (store.series_retention_nanos != 0 && store.series_retention_nanos < 60 * kNanosPerSecond) {
    return Refuse(absl::StrCat("series_retention_s must be 0 (keep forever) or at least 60, not ",
                               config.series_retention_s()));
  }
  if (config.metrics_gzip_max_bytes() > 0) {
    settings.metrics.gzip_max_bytes = config.metrics_gzip_max_bytes();
  }
  if (config.has_metrics_request_timeout_ms()) {
    settings.metrics.http.request_timeout_ms = config.metrics_request_timeout_ms();
  }
  if (config.has_metrics_max_connections()) {
    settings.metrics.http.max_connections = config.metrics_max_connections();
  }
  if (absl::Status valid = exposition::ValidateHttpServerLimits(settings.metrics.http, "metrics_");
      !valid.ok()) {
    return Refuse(valid.message());
  }
  // Bounded memory whatever agents send (README "Security").
  store.max_nodes = config.max_nodes() > 0 ? config.max_nodes() : 20000;
  store.max_series_total = config.max_series_total() > 0 ? config.max_series_total() : 10000000;
  store.node_retention_nanos =
      int64_t{config.has_node_retention_s() ? config.node_retention_s() : 86400} * kNanosPerSecond;
  if (store.node_retention_nanos != 0 && store.node_retention_nanos < 600 * kNanosPerSecond) {
    return Refuse(absl::StrCat("node_retention_s must be 0 (keep forever) or at least 600, not ",
                               config.node_retention_s()));
  }
  // A peer (certificate, or plaintext host) gets the budget of one node over all its names.
  store.new_series_per_peer = store.new_series;

  if (config.max_message_bytes() > 0) {
    if (config.max_message_bytes() < kMinMessageBytes ||
        config.max_message_bytes() > kMaxMessageBytes) {
      return Refuse(absl::StrCat("max_message_bytes must lie in ", kMinMessageBytes, "..",
                                 kMaxMessageBytes, " (64 KiB .. 1 GiB), not ",
                                 config.max_message_bytes()));
    }
    settings.stream.max_message_bytes = config.max_message_bytes();
  }
  absl::StatusOr<std::optional<recording::RecorderOptions>> recording =
      RecordingOptions(config.recording());
  if (!recording.ok()) {
    return Refuse(recording.status().message());
  }
  settings.recording = *std::move(recording);
  settings.stream.require_peer_identity = !settings.security.plaintext;
  settings.stale_after_nanos =
      int64_t{config.node_stale_after_ms() > 0 ? config.node_stale_after_ms() : 30000} * 1000000;

  absl::StatusOr<std::string> shard = ShardName(config);
  if (!shard.ok()) {
    return Refuse(shard.status().message());
  }
  settings.shard = *std::move(shard);
  absl::StatusOr<std::vector<remote_write::EndpointConfig>> remote_write =
      remote_write::ParseRemoteWriteConfigs(config.remote_write(), settings.shard);
  if (!remote_write.ok()) {
    return Refuse(remote_write.status().message());
  }
  settings.remote_write = *std::move(remote_write);

  if (absl::Status valid = detectors::ValidateThresholds(config.detectors()); !valid.ok()) {
    return Refuse(valid.message());
  }
  settings.detectors = config.detectors();
  settings.detector_tick_nanos =
      int64_t{config.detectors().tick_ms() > 0 ? config.detectors().tick_ms() : 1000} * 1000000;
  settings.agent_topology_retention_nanos =
      int64_t{config.has_agent_topology_retention_s() ? config.agent_topology_retention_s() : 600} *
      kNanosPerSecond;
  settings.link_list_file = config.link_list_file();
  settings.topology_file = config.topology_file();
  if (!config.grpc_listen().empty()) {
    settings.grpc_listen = config.grpc_listen();
  }
  settings.diagnostics_listen = config.diagnostics_listen();
  if (!config.metrics_listen().empty()) {
    settings.metrics_listen = config.metrics_listen();
  }
  return settings;
}

absl::StatusOr<std::unique_ptr<AggregatorServer>> AggregatorServer::Create(
    AggregatorSettings settings, Clock& clock, Mode mode) {
  std::unique_ptr<AggregatorServer> server(new AggregatorServer(std::move(settings), clock, mode));
  if (absl::Status built = server->Build(); !built.ok()) {
    return built;
  }
  return server;
}

AggregatorServer::AggregatorServer(AggregatorSettings settings, Clock& clock, Mode mode)
    : settings_(std::move(settings)), clock_(clock), mode_(mode) {}

AggregatorServer::~AggregatorServer() { Shutdown(); }

absl::Status AggregatorServer::Build() {
  if (absl::Status valid = detectors::ValidateThresholds(settings_.detectors); !valid.ok()) {
    return Refuse(valid.message());
  }
  static_assert(static_cast<size_t>(HandshakeFailure::kCount) == kHandshakeFailureKinds);
  if (!settings_.security.plaintext && mode_ == Mode::kServe) {
    // gRPC refuses bad client certificates before any of our code runs; its log is the one place
    // that sees them (handshake_failures.h). The hook is process-wide: one serving aggregator
    // per process.
    WatchHandshakeFailures([stats = &stats_](HandshakeFailure failure) {
      ++stats->handshakes_refused[static_cast<size_t>(failure)];
    });
  }
  store_ = std::make_unique<store::SeriesStore>(settings_.store);
  StreamOptions stream = settings_.stream;
  stream.authorization = settings_.authorization;
  // Created (directory, earlier segments counted) only by a start; a directory that cannot be
  // made or written stops it.
  if (settings_.recording.has_value() && mode_ == Mode::kServe) {
    absl::StatusOr<std::unique_ptr<recording::Recorder>> started =
        recording::Recorder::Start(*settings_.recording, clock_);
    if (!started.ok()) {
      return Refuse(absl::StrCat("recording: ", started.status().message()));
    }
    recorder_ = *std::move(started);
    stream.recorder = recorder_.get();
    FABRICMON_LOG(Info) << "recording accepted agent messages to " << recorder_->options().directory
                        << " (at most " << recorder_->options().max_bytes << " bytes, "
                        << recorder_->options().max_age_nanos / kNanosPerSecond << " s; "
                        << recorder_->segments() << " segments kept from before)";
  }
  // Remote write: endpoints (their senders and threads) are made before any stream can store a
  // batch (not for --check_config).
  if (mode_ == Mode::kServe && !settings_.remote_write.empty()) {
    std::vector<RemoteWriteFeed::EndpointEntry> endpoints;
    for (const remote_write::EndpointConfig& endpoint_config : settings_.remote_write) {
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
              clock_);
      if (!endpoint.ok()) {
        return Refuse(absl::StrCat("remote_write ", endpoint_config.endpoint.name, ": ",
                                   endpoint.status().ToString()));
      }
      FABRICMON_LOG(Info) << "remote_write to " << (*endpoint)->name() << " ("
                          << endpoint_config.endpoint.queue.shards << " shards)";
      endpoints.push_back({*std::move(endpoint), endpoint_config.flush_deadline_nanos,
                           endpoint_config.http.bearer_token});
    }
    remote_write_feed_ = std::make_shared<RemoteWriteFeed>(std::move(endpoints), clock_);
    stream.batch_observer = remote_write_feed_;
    // Batches now settle on the feed's threads: their acks wait for the stream's next read (a
    // second, an agent's usual interval), so as not to cost a send each, and at most 2 s: 1.75 s
    // and the rest of the flusher's 250 ms round (ack_flusher.h).
    ack_flusher_ = std::make_unique<AckFlusher>(absl::Milliseconds(1750), absl::Milliseconds(250));
    stream.ack_flusher = ack_flusher_.get();
  }
  telemetry_ = std::make_unique<TelemetryService>(*store_, stats_, stream, clock_);
  diagnostics_ = std::make_unique<DiagnosticsService>(*store_, clock_, settings_.stale_after_nanos,
                                                      settings_.authorization, &stats_);
  engine_ = std::make_shared<detectors::DetectionEngine>(*store_, clock_, settings_.detectors,
                                                         settings_.detector_tick_nanos);
  // Jobs registered by operators (Slurm prolog, `fabricmon job start`): read by the straggler
  // detector and Diagnose, kept in memory only.
  jobs_ = std::make_shared<JobRegistry>(clock_);
  engine_->AddDetector(std::make_unique<detectors::StragglerDetector>(
      detectors::StragglerOptionsFrom(settings_.detectors), *jobs_));
  traffic_ = std::make_unique<detectors::NodeTrafficReader>(*store_, clock_);
  engine_->SetAgentTopologyRetention(settings_.agent_topology_retention_nanos);
  if (absl::Status loaded = LoadOperatorFiles(); !loaded.ok()) {
    return loaded;
  }
  diagnostics_->SetFindingsProvider(engine_.get());
  diagnostics_->SetTopologyProvider(engine_.get());
  diagnostics_->SetJobRegistry(jobs_.get());
  diagnostics_->SetTrafficProvider(traffic_.get());
  exporter_ = std::make_shared<MetricsExporter>(*store_, stats_, clock_,
                                                ExporterOptions{settings_.stale_after_nanos});
  findings_exporter_ = std::make_shared<FindingsExporter>(*engine_);
  return absl::OkStatus();
}

absl::Status AggregatorServer::LoadOperatorFiles() {
  if (!settings_.link_list_file.empty()) {
    absl::StatusOr<std::string> text =
        ReadOperatorFile(settings_.link_list_file, kMaxLinkListFileBytes, "link_list_file");
    absl::Status status = text.ok() ? engine_->SetLinkList(*text) : text.status();
    if (!status.ok()) {
      return Refuse(absl::StrCat("link_list_file: ", status.ToString()));
    }
  }
  if (!settings_.topology_file.empty()) {
    absl::Status status = LoadTopologyFile(settings_.topology_file, *engine_);
    if (!status.ok()) {
      return Refuse(
          absl::StrCat("topology_file ", settings_.topology_file, ": ", status.ToString()));
    }
  }
  return absl::OkStatus();
}

std::vector<std::shared_ptr<prometheus::Collectable>> AggregatorServer::Collectables() const {
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables = {findings_exporter_, jobs_};
  if (recorder_ != nullptr) {
    collectables.push_back(std::make_shared<RecordingMetrics>(recorder_));
  }
  if (remote_write_feed_ != nullptr) {
    collectables.push_back(remote_write_feed_);
  }
  return collectables;
}

absl::Status AggregatorServer::Start(std::optional<PortFile> port_file,
                                     std::optional<PortFile> metrics_port_file) {
  if (mode_ != Mode::kServe || started_) {
    return absl::FailedPreconditionError("the aggregator was built to check, or already started");
  }
  started_ = true;
  const std::shared_ptr<grpc::ServerCredentials> credentials =
      MakeServerCredentials(settings_.security);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(settings_.grpc_listen, credentials, &grpc_port_);
  builder.SetMaxReceiveMessageSize(GrpcReceiveLimit(settings_.stream.max_message_bytes));
  // Agents ping every 20 s to notice a dead aggregator behind a silent network. A quiet stream (a
  // long collection interval) has no server data between those pings, and gRPC's default policy
  // (a data-less ping every 5 min at most, 2 strikes) answers the third with GOAWAY
  // too_many_pings: the stream would be cut every minute. Allow one every 10 s, even between
  // calls (agents keep their connection while they back off).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // No bandwidth-delay-product probing: gRPC would ping every agent's connection while batches
  // arrive, to grow its flow-control window, and with a batch a second per agent those pings,
  // their acks and their timers cost about 40 % of ingest CPU (400 agents at 1 Hz: 313–363
  // against 537–665 ns per sample, alternated runs). Batches are a kilobyte or two, far inside
  // the fixed 64 KiB window; a large hello or declaration set (megabytes, a fabric sweeper's
  // inventory) takes one round trip per 64 KiB instead, which inside a cluster is milliseconds.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.RegisterService(telemetry_.get());
  // diagnostics_listen: the Diagnostics service (the CLI) on a server of its own, with the same
  // credentials, and not on grpc_listen; unset, both services share grpc_listen.
  const bool own_diagnostics = !settings_.diagnostics_listen.empty();
  if (own_diagnostics) {
    grpc::ServerBuilder diagnostics_builder;
    diagnostics_builder.AddListeningPort(settings_.diagnostics_listen, credentials,
                                         &diagnostics_port_);
    diagnostics_builder.RegisterService(diagnostics_.get());
    diagnostics_server_ = diagnostics_builder.BuildAndStart();
    if (diagnostics_server_ == nullptr || diagnostics_port_ == 0) {
      StopStarted();
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", settings_.diagnostics_listen, " (diagnostics_listen)"));
    }
  } else {
    builder.RegisterService(diagnostics_.get());
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || grpc_port_ == 0) {
    StopStarted();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", settings_.grpc_listen));
  }
  if (own_diagnostics) {
    FABRICMON_LOG(Info) << "telemetry on port " << grpc_port_ << ", diagnostics on "
                        << settings_.diagnostics_listen << " (port " << diagnostics_port_ << ")";
  } else {
    FABRICMON_LOG(Info) << "telemetry and diagnostics on port " << grpc_port_;
  }
  if (port_file.has_value()) {
    // Written whole and renamed into place: a reader never sees a partial number.
    if (absl::Status written = port_file->Commit(grpc_port_); !written.ok()) {
      StopStarted();
      return absl::UnavailableError(written.ToString());
    }
  }

  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics =
      MetricsServer::Listen(settings_.metrics_listen, settings_.metrics);
  if (!metrics.ok()) {
    StopStarted();
    return absl::UnavailableError(metrics.status().message());
  }
  metrics_ = *std::move(metrics);
  if (remote_write_feed_ != nullptr) {
    // Everything /metrics serves beside the stored samples, so that remote storage alone serves
    // the dashboards and alerts: findings, node health, jobs, the recording's state.
    remote_write_feed_->ForwardEachTick(
        [engine = engine_] { return engine->last_tick_monotonic_nanos(); },
        [findings = findings_exporter_, exporter = exporter_, jobs = jobs_, recorder = recorder_] {
          std::vector<prometheus::MetricFamily> families = findings->Collect();
          auto append = [&families](std::vector<prometheus::MetricFamily> more) {
            for (prometheus::MetricFamily& family : more) families.push_back(std::move(family));
          };
          append(exporter->HealthFamilies());
          append(jobs->Collect());
          if (recorder != nullptr) append(RecordingMetrics(recorder).Collect());
          return families;
        },
        std::max<int64_t>(settings_.detector_tick_nanos / 4, 10000000));
  }
  metrics_->Serve(exporter_, Collectables());
  // Written once /metrics serves, so that whoever reads the port finds the page there.
  if (metrics_port_file.has_value()) {
    if (absl::Status written = metrics_port_file->Commit(metrics_->port()); !written.ok()) {
      StopStarted();
      return absl::UnavailableError(written.ToString());
    }
  }
  ticker_ = std::make_unique<DetectorTicker>(*engine_);
  ticker_->Start();
  FABRICMON_LOG(Info) << "/metrics on " << settings_.metrics_listen << " (port " << metrics_->port()
                      << ")";
  return absl::OkStatus();
}

int AggregatorServer::metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }

std::string AggregatorServer::ReadyStatus() const {
  return absl::StrFormat("agents and CLI on port %d (%s), /metrics on port %d", grpc_port_,
                         settings_.security.plaintext ? "INSECURE plaintext" : "mutual TLS",
                         metrics_port());
}

void AggregatorServer::ServeUntilSignal(const sigset_t& stop_signals) {
  const std::string ready_status = ReadyStatus();
  const uint64_t watchdog_us = WatchdogIntervalMicros();
  const int64_t tick_ms = watchdog_us > 0 ? std::max<int64_t>(100, watchdog_us / 2000) : 1000;
  // A loop may stay silent for one watchdog interval (two probes, one per ping), and the
  // detector for three of its ticks if that is longer (a slow tick over a large fabric is not a
  // stall). So a stall stops the pings within about WatchdogSec, and systemd restarts the
  // aggregator WatchdogSec later.
  const int64_t watchdog_nanos = static_cast<int64_t>(watchdog_us) * 1000;
  const int64_t detector_silence = std::max(watchdog_nanos, 3 * settings_.detector_tick_nanos);
  std::optional<ServingProbe> probe;
  if (server_ != nullptr) {
    probe.emplace(server_->InProcessChannel(grpc::ChannelArguments()), clock_);
  }
  const int64_t started = clock_.MonotonicNanos();
  bool stalled = false;
  for (;;) {
    if (watchdog_us > 0 && probe.has_value()) {
      const int64_t last_tick = engine_->last_tick_monotonic_nanos();
      const int64_t last_answer = probe->last_answer_nanos();
      absl::Status progress =
          CheckProgress({{"detector thread", last_tick > 0 ? last_tick : started, detector_silence},
                         {"gRPC server", last_answer > 0 ? last_answer : started, watchdog_nanos}},
                        clock_.MonotonicNanos());
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
      probe->Probe(absl::Milliseconds(tick_ms));
    }
    timespec timeout{tick_ms / 1000, (tick_ms % 1000) * 1000000};
    const int signal = sigtimedwait(&stop_signals, nullptr, &timeout);
    if (signal == SIGTERM || signal == SIGINT) {
      return;
    }
  }
}

void AggregatorServer::StopStarted() {
  if (metrics_ != nullptr) {
    metrics_->Clear();
  }
  if (ticker_ != nullptr) {
    ticker_->Stop();
  }
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  if (server_ != nullptr) {
    server_->Shutdown(deadline);
  }
  if (diagnostics_server_ != nullptr) {
    diagnostics_server_->Shutdown(deadline);
  }
}

void AggregatorServer::Shutdown() {
  if (started_) {
    started_ = false;
    StopStarted();
  }
  if (remote_write_feed_ != nullptr) {
    // After the streams: nothing more is stored, so what is pending is all there is to flush.
    remote_write_feed_->Shutdown();
  }
}

}  // namespace fabricmon::aggregator
