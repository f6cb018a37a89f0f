#include "daemon/exposition/http_server_limits.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"

namespace fabricmon::exposition {

absl::Status ValidateHttpServerLimits(const HttpServerLimits& limits, absl::string_view prefix) {
  if (limits.request_timeout_ms < kMinRequestTimeoutMs ||
      limits.request_timeout_ms > kMaxRequestTimeoutMs) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "request_timeout_ms must be between ", kMinRequestTimeoutMs, " and ",
                     kMaxRequestTimeoutMs, ", not ", limits.request_timeout_ms));
  }
  if (limits.max_connections < kMinMaxConnections || limits.max_connections > kMaxMaxConnections) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "max_connections must be between ",
                                                   kMinMaxConnections, " and ", kMaxMaxConnections,
                                                   ", not ", limits.max_connections));
  }
  return absl::OkStatus();
}

std::vector<std::string> CivetwebOptions(const std::string& address,
                                         const HttpServerLimits& limits) {
  // clang-format off: name, value pairs.
  return {
      "listening_ports",
      address,
      "num_threads",
      absl::StrCat(limits.max_connections),
      "request_timeout_ms",
      absl::StrCat(limits.request_timeout_ms),
      // No connection outlives its response (see the header).
      "enable_keep_alive",
      "no",
      "keep_alive_timeout_ms",
      "500",
      // A scraper's GET with its headers is well under 1 KiB; each worker holds a buffer this
      // large, and a request header block beyond it is answered 413 and closed.
      "max_request_size",
      "8192",
      // Accepted connections waiting for a worker; more wait in the kernel's backlog.
      "connection_queue",
      absl::StrCat(limits.max_connections),
      "listen_backlog",
      "1024",
  };
  // clang-format on
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartExposer(const std::string& address,
                                                                  const HttpServerLimits& limits,
                                                                  const CivetCallbacks* callbacks) {
  try {
    // civetweb reports a failed bind (and a rejected option) by throwing; it must not escape.
    return std::make_unique<prometheus::Exposer>(CivetwebOptions(address, limits), callbacks);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", e.what()));
  }
}

}  // namespace fabricmon::exposition
