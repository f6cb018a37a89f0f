#include "daemon/cli/replay_metrics.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/exposition/http_server_limits.h"

namespace fabricmon::replay {

absl::Status ValidateListenAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  const auto refuse = [&address](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen_metrics=", address, ": ", why, " (want HOST:PORT)"));
  };
  if (colon == std::string::npos) {
    return refuse("no port");
  }
  const absl::string_view host = absl::string_view(address).substr(0, colon);
  const absl::string_view port = absl::string_view(address).substr(colon + 1);
  uint32_t number = 0;
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &number) || number > 65535) {
    return refuse("the port must be a number in 0..65535");
  }
  if (host.empty()) {
    return refuse("no host");
  }
  const bool bracketed = host.front() == '[' && host.back() == ']' && host.size() > 2;
  if (!bracketed && host.find_first_of("[]: /") != absl::string_view::npos) {
    return refuse("a host name, an IPv4 address or a bracketed IPv6 address");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReplayMetricsServer>> ReplayMetricsServer::Listen(
    const std::string& address, const ReplayRun& run) {
  if (absl::Status valid = ValidateListenAddress(address); !valid.ok()) {
    return valid;
  }
  // The aggregator's metrics settings, from the same configuration fields (aggregator_server.cc).
  const v1::AggregatorConfig& config = run.options().config;
  aggregator::MetricsServerOptions options;
  if (config.metrics_gzip_max_bytes() > 0) {
    options.gzip_max_bytes = config.metrics_gzip_max_bytes();
  }
  if (config.has_metrics_request_timeout_ms()) {
    options.http.request_timeout_ms = config.metrics_request_timeout_ms();
  }
  if (config.has_metrics_max_connections()) {
    options.http.max_connections = config.metrics_max_connections();
  }
  if (absl::Status valid = exposition::ValidateHttpServerLimits(options.http, "metrics_");
      !valid.ok()) {
    return valid;
  }
  aggregator::ExporterOptions exporter_options;
  exporter_options.stale_after_nanos =
      int64_t{config.node_stale_after_ms() > 0 ? config.node_stale_after_ms() : 30000} * 1000000;
  exporter_options.export_down_nodes = true;

  absl::StatusOr<std::unique_ptr<aggregator::MetricsServer>> server =
      aggregator::MetricsServer::Listen(address, options);
  if (!server.ok()) {
    return server.status();
  }
  (*server)->Serve(std::make_shared<aggregator::MetricsExporter>(run.store(), run.ingest_stats(),
                                                                 run.clock(), exporter_options),
                   {std::make_shared<aggregator::FindingsExporter>(run.engine())});
  return std::unique_ptr<ReplayMetricsServer>(new ReplayMetricsServer(*std::move(server)));
}

}  // namespace fabricmon::replay
