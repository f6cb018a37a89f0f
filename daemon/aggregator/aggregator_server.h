#pragma once

// The aggregator as one object: what fabricmon-aggregator runs, and what tests build in process.
//
//   AggregatorSettings  the configuration resolved and checked (TLS files read, roles compiled,
//                       limits within their bounds); ResolveAggregatorSettings() makes it from an
//                       AggregatorConfig, tests may fill it by hand.
//   AggregatorServer    owns the series store, the recording, the remote-write feed, the
//                       telemetry and diagnostics services, the detection engine and its ticker,
//                       the jobs, and (once started) the gRPC servers and /metrics.
//
// Lifecycle: Create() builds everything and loads the operator's files (link list, topology) but
// opens no port and starts no thread of its own beyond the recorder's and remote write's;
// Start() binds gRPC (and diagnostics_listen) and /metrics, writes the port files and starts the
// detector ticker; Shutdown() stops them in the order that loses nothing (metrics cleared, ticker
// stopped, streams ended, then remote write flushed). A server that is never started is a
// complete in-process aggregator whose services a test registers on a server of its own.
//
// Thread-safety: Create/Start/ServeUntilSignal/Shutdown from one thread; the accessors return
// objects that are themselves thread-safe.

#include <signal.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/aggregator/agent_stream.h"
#include "daemon/aggregator/authorization.h"
#include "daemon/aggregator/detector_ticker.h"
#include "daemon/aggregator/diagnostics_service.h"
#include "daemon/aggregator/findings_exporter.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/job_registry.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/aggregator/metrics_server.h"
#include "daemon/aggregator/remote_write_feed.h"
#include "daemon/common/clock.h"
#include "daemon/common/operator_file.h"
#include "daemon/common/tls.h"
#include "daemon/detectors/engine.h"
#include "daemon/detectors/node_traffic.h"
#include "daemon/recording/recorder.h"
#include "daemon/remote_write/config.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/config.pb.h"
#include "grpcpp/grpcpp.h"

namespace fabricmon::aggregator {

struct AggregatorSettings {
  TransportSecurity security;  // plaintext only when asked for explicitly
  std::shared_ptr<const Authorization> authorization;
  store::StoreOptions store;
  // max_message_bytes, require_peer_identity; the server sets authorization, the recorder and
  // the batch observer.
  StreamOptions stream;
  int64_t stale_after_nanos = int64_t{30} * 1000000000;
  MetricsServerOptions metrics;
  std::optional<recording::RecorderOptions> recording;  // nullopt: nothing is recorded
  std::string shard;  // the `shard` label of what it remote-writes
  std::vector<remote_write::EndpointConfig> remote_write;
  v1::DetectorThresholds detectors;
  int64_t detector_tick_nanos = 1000000000;
  int64_t agent_topology_retention_nanos = int64_t{600} * 1000000000;
  std::string link_list_file;  // empty: none
  std::string topology_file;   // empty: none
  std::string grpc_listen = "127.0.0.1:7470";
  std::string diagnostics_listen;  // empty: the Diagnostics service shares grpc_listen
  std::string metrics_listen = "127.0.0.1:9470";
};

// Reads and checks `config` as a start does (TLS files, roles, every bound). InvalidArgument
// whose message is the whole line to print; nothing is created or opened but the TLS files.
// Logs the TLS and authorization descriptions (warnings for plaintext).
absl::StatusOr<AggregatorSettings> ResolveAggregatorSettings(const v1::AggregatorConfig& config);

class AggregatorServer {
 public:
  enum class Mode {
    kServe,  // a start: the recorder and remote-write endpoints are created
    kCheck,  // --check_config: everything is loaded and checked, nothing written or sent
  };

  // Builds the aggregator from `settings`; `clock` (borrowed) must outlive it. InvalidArgument
  // (message: the line to print) on a recording directory that cannot be used, a remote-write
  // endpoint that cannot be made, thresholds out of bounds, or a link-list or topology file that
  // cannot be read or parsed.
  static absl::StatusOr<std::unique_ptr<AggregatorServer>> Create(AggregatorSettings settings,
                                                                  Clock& clock,
                                                                  Mode mode = Mode::kServe);
  ~AggregatorServer();  // Shutdown()s
  AggregatorServer(const AggregatorServer&) = delete;
  AggregatorServer& operator=(const AggregatorServer&) = delete;

  // Listens (gRPC, diagnostics_listen, /metrics), writes `port_file` (when given) once gRPC is
  // bound and `metrics_port_file` once /metrics serves, starts the detector ticker. Unavailable
  // (message: the line to print) when a listener cannot bind or a port file cannot be written;
  // what was started is stopped again. Not in Mode::kCheck (FailedPrecondition). Call at most
  // once.
  absl::Status Start(std::optional<PortFile> port_file = std::nullopt,
                     std::optional<PortFile> metrics_port_file = std::nullopt);

  // Serves until one of `stop_signals` (blocked by the caller before Create, so that no thread
  // takes them) arrives. Under a systemd watchdog (WATCHDOG_USEC) pings WATCHDOG=1 at half its
  // interval, but only while the detector thread ticks and the gRPC server answers a probe: a
  // stalled loop stops the pings and systemd restarts the aggregator (WatchdogSec=).
  void ServeUntilSignal(const sigset_t& stop_signals);

  // Stops what Start() started and flushes remote write. Idempotent.
  void Shutdown();

  // "agents and CLI on port N (mutual TLS), /metrics on port M": the sd_notify status line.
  std::string ReadyStatus() const;

  store::SeriesStore& store() { return *store_; }
  IngestStats& stats() { return stats_; }
  TelemetryService& telemetry() { return *telemetry_; }
  DiagnosticsService& diagnostics() { return *diagnostics_; }
  detectors::DetectionEngine& engine() { return *engine_; }
  JobRegistry& jobs() { return *jobs_; }
  // What feeds the remote_write endpoints; null without any.
  RemoteWriteFeed* remote_write_feed() { return remote_write_feed_.get(); }
  const std::shared_ptr<MetricsExporter>& exporter() const { return exporter_; }
  // Everything /metrics serves beside the exporter's series: findings, jobs, the recording's
  // state, remote write's own metrics.
  std::vector<std::shared_ptr<prometheus::Collectable>> Collectables() const;
  const AggregatorSettings& settings() const { return settings_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const;  // 0 before Start()

 private:
  AggregatorServer(AggregatorSettings settings, Clock& clock, Mode mode);
  absl::Status Build();
  absl::Status LoadOperatorFiles();
  void StopStarted();

  const AggregatorSettings settings_;
  Clock& clock_;
  const Mode mode_;
  IngestStats stats_;
  std::unique_ptr<store::SeriesStore> store_;
  std::shared_ptr<recording::Recorder> recorder_;
  // Before the feed: its threads settle batches, whose acks may wait here, until it is gone.
  std::unique_ptr<AckFlusher> ack_flusher_;
  std::shared_ptr<RemoteWriteFeed> remote_write_feed_;
  std::unique_ptr<TelemetryService> telemetry_;
  std::unique_ptr<DiagnosticsService> diagnostics_;
  std::shared_ptr<detectors::DetectionEngine> engine_;
  std::shared_ptr<JobRegistry> jobs_;
  std::unique_ptr<detectors::NodeTrafficReader> traffic_;
  std::shared_ptr<MetricsExporter> exporter_;
  std::shared_ptr<FindingsExporter> findings_exporter_;

  // Started by Start().
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> diagnostics_server_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<DetectorTicker> ticker_;
  int grpc_port_ = 0;
  int diagnostics_port_ = 0;
  bool started_ = false;
};

}  // namespace fabricmon::aggregator
