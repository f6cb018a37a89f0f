#pragma once

// `fabricmon replay --listen_metrics=HOST:PORT`: serves a replay's /metrics — the aggregator's own
// series exporter and findings exporter over the replay's store and detection engine, behind the
// aggregator's metrics server (same text, gzip, HTTP limits) — so that dashboards can browse the
// replay while it runs and after it ended. The values are the recorded ones at the recorded time
// the replay has reached; nodes whose recorded stream ended keep their last values (their
// fabricmon_node_up reads 0).
//
// Kept apart from fabricmon_replay, which stays free of prometheus-cpp and gRPC.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/aggregator/findings_exporter.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/aggregator/metrics_server.h"
#include "daemon/cli/replay.h"

namespace fabricmon::replay {

// InvalidArgument unless `address` is HOST:PORT ([V6]:PORT) with a port in 0..65535 (0: a free
// one), so that a typo is refused before anything is replayed.
absl::Status ValidateListenAddress(const std::string& address);

class ReplayMetricsServer {
 public:
  // Serves `run`'s state on `address`, under the HTTP limits, gzip bound and staleness of the
  // run's aggregator configuration. InvalidArgument for a malformed address or limits out of
  // range, Unavailable when it cannot bind. `run` must outlive the server.
  static absl::StatusOr<std::unique_ptr<ReplayMetricsServer>> Listen(const std::string& address,
                                                                     const ReplayRun& run);

  int port() const { return server_->port(); }

 private:
  explicit ReplayMetricsServer(std::unique_ptr<aggregator::MetricsServer> server)
      : server_(std::move(server)) {}

  std::unique_ptr<aggregator::MetricsServer> server_;
};

}  // namespace fabricmon::replay
