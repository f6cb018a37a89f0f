#pragma once

// The aggregator's /metrics over HTTP: a prometheus::Exposer (prometheus-cpp's civetweb server)
// whose `GET /metrics` is answered with MetricsExporter::AppendText (the same bytes as
// prometheus-cpp's TextSerializer over Collect(), written straight from the store) followed by
// the text of the other collectables (the detection engine's findings), gzip-compressed at
// Z_BEST_SPEED when the scraper accepts gzip and the text is not too large to compress in time
// (MetricsServerOptions).
//
// Why not the Exposer's own handler: at a million series, building a MetricFamily per series,
// serializing it through iostreams and deflating at the default level takes several seconds per
// scrape (tests/bench/stream); this path takes a fraction of that. The exporter and collectables
// are also registered with the Exposer, so a request the fast path does not take (another method
// or URI, or one that arrives while Serve() swaps what is served) still gets the same families
// through prometheus-cpp.
//
// Thread-safe. civetweb calls the handler on its worker threads.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/exposition/http_server_limits.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

struct mg_connection;

namespace fabricmon::aggregator {

struct MetricsServerOptions {
  // Texts up to this size are gzipped for scrapers that accept it, larger ones go uncompressed
  // (AggregatorConfig.metrics_gzip_max_bytes): deflating 90 MB (a million series) at the fastest
  // level takes over a second on a 2 GHz core, more than writing the text.
  size_t gzip_max_bytes = size_t{32} << 20;
  // Timeouts and workers of the HTTP server (AggregatorConfig.metrics_request_timeout_ms,
  // metrics_max_connections): slow or many clients cannot block a scrape.
  exposition::HttpServerLimits http;
};

class MetricsServer {
 public:
  // Listens on `address` (HOST:PORT; port 0 picks a free one). Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Listen(const std::string& address,
                                                               MetricsServerOptions options = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // What /metrics serves from now on: `exporter`'s text, then each of `others`' families.
  // Replaces what was served before (a restarted aggregator state in tests).
  void Serve(std::shared_ptr<MetricsExporter> exporter,
             std::vector<std::shared_ptr<prometheus::Collectable>> others) ABSL_LOCKS_EXCLUDED(mu_);
  // Serves nothing (an empty body) until the next Serve().
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

  int port() const { return port_; }
  // Scrapes answered by the fast path (tests check that it, not the fallback, served them).
  uint64_t fast_scrapes() const { return fast_scrapes_.load(std::memory_order_relaxed); }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port,
                MetricsServerOptions options);
  // civetweb's begin_request: 0 leaves the request to the Exposer, else the HTTP status sent.
  static int BeginRequest(mg_connection* connection);
  int Handle(mg_connection* connection) ABSL_LOCKS_EXCLUDED(mu_);
  void UnregisterLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<prometheus::Exposer> exposer_;
  const int port_;
  const MetricsServerOptions options_;
  std::atomic<uint64_t> fast_scrapes_{0};

  absl::Mutex mu_;
  std::shared_ptr<MetricsExporter> exporter_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<prometheus::Collectable>> others_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricmon::aggregator
