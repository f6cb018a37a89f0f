#pragma once

// Limits of the HTTP servers that serve /metrics (the aggregator's metrics_listen, the agent's
// listen_metrics): prometheus-cpp's Exposer over civetweb 1.15, started with explicit civetweb
// options instead of the Exposer's defaults (2 worker threads, no keep-alive limit, civetweb's
// 30 s request timeout), under which two clients trickling a request one byte at a time hold
// every worker and block every scrape.
//
// How civetweb serves: one thread accepts and queues connections; each worker thread serves one
// connection at a time, from the first byte of the request to the end of the response. So:
//  - max_connections is the number of worker threads: that many connections are served at once
//    (civetweb 1.15 starts them all at start-up; an idle one costs a thread and a request buffer);
//    further connections wait, in arrival order, in civetweb's queue (as long as the worker
//    count) and then the kernel's listen backlog (1024) until a worker frees up; past both the
//    kernel drops new connection attempts and clients retry;
//  - request_timeout_ms bounds how long a connection may take to deliver its request (counted
//    from its first byte, however slowly it trickles) and how long a write of the response may
//    make no progress; past it the connection is closed and its worker taken by the next one;
//  - keep-alive is off: a scraper's connection ends with its response, so an idle kept-alive
//    connection never holds a worker between scrapes (Prometheus reconnects at no real cost).
// A slow client therefore holds one worker for at most request_timeout_ms; with up to
// max_connections - 1 of them a scrape is served at once, with more it waits its turn.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct CivetCallbacks;
namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace fabricmon::exposition {

struct HttpServerLimits {
  uint32_t request_timeout_ms = 10000;
  uint32_t max_connections = 256;
};

// Accepted ranges (a request timeout of at least 100 ms and at most 5 minutes; 4 to 4096
// connections served at once).
inline constexpr uint32_t kMinRequestTimeoutMs = 100;
inline constexpr uint32_t kMaxRequestTimeoutMs = 300000;
inline constexpr uint32_t kMinMaxConnections = 4;
inline constexpr uint32_t kMaxMaxConnections = 4096;

// InvalidArgument naming the field (`<prefix>request_timeout_ms`, `<prefix>max_connections`)
// when a limit is outside its range.
absl::Status ValidateHttpServerLimits(const HttpServerLimits& limits, absl::string_view prefix);

// The civetweb options for a server listening on `address` (HOST:PORT) under `limits`.
std::vector<std::string> CivetwebOptions(const std::string& address,
                                         const HttpServerLimits& limits);

// Starts an Exposer on `address` with CivetwebOptions. Unavailable ("cannot listen on ...") when
// civetweb cannot bind (it throws; the exception does not escape).
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartExposer(
    const std::string& address, const HttpServerLimits& limits,
    const CivetCallbacks* callbacks = nullptr);

}  // namespace fabricmon::exposition
