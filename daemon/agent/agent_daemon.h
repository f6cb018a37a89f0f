#pragma once

// The node agent as one object: what fabricmon-agent runs as a daemon, and what tests build in
// process (the aggregator's counterpart is aggregator::AggregatorServer).
//
//   AgentDaemonSettings  what a start checks before it starts anything: the aggregator list, the
//                        failover delays, the /metrics server's limits and, when it streams, the
//                        TLS files read. ResolveAgentDaemonSettings() makes it from an AgentConfig;
//                        --check_config runs exactly that.
//   AgentDaemon          owns the collectors (in an agent::Agent), the aggregator directory and
//                        the stream client, and (once started) the local /metrics server.
//
// Lifecycle: Create() resolves the settings, builds the collectors, discovers the hardware once
// (so the first hello carries an inventory) and wires the stream, but starts no thread of its own
// and opens no port; Start() listens on listen_metrics and starts the collector threads and the
// stream; Stop() stops collecting, gives the aggregator up to `flush` to acknowledge what is
// buffered, ends the stream and stops serving. No signal handling and no sd_notify here: the
// process (agent_main.cc) owns both and asks ready() when to say READY=1.
//
// Thread-safety: Create/Start/Stop from one thread; the accessors may be called from any.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/agent/agent.h"
#include "daemon/agent/aggregator_directory.h"
#include "daemon/agent/stream_client.h"
#include "daemon/common/clock.h"
#include "daemon/common/tls.h"
#include "daemon/exposition/http_server_limits.h"
#include "fabricmon/v1/config.pb.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace fabricmon::agent {

struct AgentDaemonSettings {
  exposition::HttpServerLimits http_limits;
  std::optional<TransportSecurity> security;  // set when streaming
  std::vector<std::string> aggregators;       // as configured (validated); empty: no streaming
  absl::Duration failover_after = absl::Seconds(10);
  absl::Duration failback_after = absl::Seconds(30);
  absl::Duration coalesce = absl::Milliseconds(200);  // stream_coalesce_ms
};

// Checks `config` as a start does: the aggregator list parses, the delays and the /metrics limits
// are within their bounds, there is something to do (an aggregator and/or listen_metrics), and
// when streaming the TLS files can be read (or plaintext was asked for). InvalidArgument (or the
// TLS loader's status) whose message is the whole line to print. Builds no collector.
absl::StatusOr<AgentDaemonSettings> ResolveAgentDaemonSettings(const v1::AgentConfig& config);

class AgentDaemon {
 public:
  // Builds the daemon from `config` (the flags' overrides applied, node_name set); `clock`
  // (borrowed) must outlive it. Logs the TLS description (warnings for plaintext). On error the
  // status's message is the whole line to print: the settings' checks, a collector that cannot be
  // built (its message is the collector registry's full status, as the agent always printed it),
  // an aggregator directory that cannot be made.
  static absl::StatusOr<std::unique_ptr<AgentDaemon>> Create(const v1::AgentConfig& config,
                                                             Clock& clock = RealClock::Get());
  ~AgentDaemon();  // Stop(absl::ZeroDuration()) when still running
  AgentDaemon(const AgentDaemon&) = delete;
  AgentDaemon& operator=(const AgentDaemon&) = delete;

  // Serves /metrics on listen_metrics (when configured), then starts the collector threads and
  // the stream. Unavailable (message: the line to print) when /metrics cannot listen; nothing is
  // started then. FailedPrecondition when called twice.
  absl::Status Start();

  // Stops collecting, waits up to `flush` for the aggregator to acknowledge the buffered batches
  // (what is not acknowledged is lost with the process: the buffer is in memory), ends the stream
  // and stops serving /metrics. Idempotent.
  void Stop(absl::Duration flush = absl::Seconds(5));

  // True once every collector has run at least once (systemd READY=1).
  bool ready() const { return agent_->ready(); }
  // The port /metrics listened on since Start(); 0 before it or without listen_metrics.
  int metrics_port() const { return metrics_port_; }
  // The stream's counters (connected, the aggregator in use, ...); nullopt when not streaming.
  std::optional<StreamClientStats> stream_stats() const;
  // Unacknowledged batches held for replay (0 once the aggregator acknowledged everything).
  size_t unacknowledged_batches() const { return agent_->buffer().size(); }

  const v1::AgentConfig& config() const { return config_; }
  const AgentDaemonSettings& settings() const { return settings_; }
  Agent& agent() { return *agent_; }

 private:
  class LocalMetrics;
  AgentDaemon(v1::AgentConfig config, AgentDaemonSettings settings, Clock& clock);
  absl::Status Build();

  const v1::AgentConfig config_;
  const AgentDaemonSettings settings_;
  Clock& clock_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<AggregatorDirectory> directory_;
  // Declared after what it references (the agent's buffer and series table, the directory), so
  // it is destroyed first.
  std::unique_ptr<StreamClient> stream_;

  // Started by Start().
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<LocalMetrics> local_metrics_;
  int metrics_port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace fabricmon::agent
