#include "daemon/agent/agent_daemon.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectors/builtin.h"
#include "collectors/core/collector_registry.h"
#include "daemon/agent/aggregator_ranking.h"
#include "daemon/common/build_info.h"
#include "daemon/common/logging.h"
#include "daemon/exposition/text_exposition.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace fabricmon::agent {
namespace {

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

}  // namespace

// Serves the agent's latest samples at /metrics, built at scrape time.
class AgentDaemon::LocalMetrics final : public prometheus::Collectable {
 public:
  explicit LocalMetrics(const Agent& agent) : agent_(agent) {}
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
  const Agent& agent_;
};

absl::StatusOr<AgentDaemonSettings> ResolveAgentDaemonSettings(const v1::AgentConfig& config) {
  AgentDaemonSettings settings;
  settings.aggregators.assign(config.aggregator().begin(), config.aggregator().end());
  if (!settings.aggregators.empty()) {
    absl::StatusOr<std::vector<AggregatorAddress>> parsed =
        ParseAggregatorList(settings.aggregators);
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
  settings.failover_after = *failover;
  absl::StatusOr<absl::Duration> failback =
      DelayField(config.has_failback_after_ms(), config.failback_after_ms(), "failback_after_ms",
                 30000, 100, 3600000);
  if (!failback.ok()) {
    return failback.status();
  }
  settings.failback_after = *failback;
  absl::StatusOr<absl::Duration> coalesce =
      DelayField(config.has_stream_coalesce_ms(), config.stream_coalesce_ms(), "stream_coalesce_ms",
                 200, 0, 1000);
  if (!coalesce.ok()) {
    return coalesce.status();
  }
  settings.coalesce = *coalesce;
  if (settings.aggregators.empty() && config.listen_metrics().empty()) {
    return absl::InvalidArgumentError(
        "nothing to do: give --aggregator and/or --listen_metrics (or --once)");
  }
  if (config.has_metrics_request_timeout_ms()) {
    settings.http_limits.request_timeout_ms = config.metrics_request_timeout_ms();
  }
  if (config.has_metrics_max_connections()) {
    settings.http_limits.max_connections = config.metrics_max_connections();
  }
  if (absl::Status valid = exposition::ValidateHttpServerLimits(settings.http_limits, "metrics_");
      !valid.ok()) {
    return valid;
  }
  // Streaming needs mutual TLS or the explicit plaintext opt-in; a named file that cannot be read
  // stops the start instead of becoming an empty certificate.
  if (!settings.aggregators.empty()) {
    absl::StatusOr<TransportSecurity> loaded = LoadTransportSecurity(config.tls(), TlsRole::kAgent);
    if (!loaded.ok()) {
      return loaded.status();
    }
    settings.security = *std::move(loaded);
  }
  return settings;
}

absl::StatusOr<std::unique_ptr<AgentDaemon>> AgentDaemon::Create(const v1::AgentConfig& config,
                                                                 Clock& clock) {
  absl::StatusOr<AgentDaemonSettings> settings = ResolveAgentDaemonSettings(config);
  if (!settings.ok()) {
    return settings.status();
  }
  std::unique_ptr<AgentDaemon> daemon(new AgentDaemon(config, *std::move(settings), clock));
  if (absl::Status built = daemon->Build(); !built.ok()) {
    return built;
  }
  return daemon;
}

AgentDaemon::AgentDaemon(v1::AgentConfig config, AgentDaemonSettings settings, Clock& clock)
    : config_(std::move(config)), settings_(std::move(settings)), clock_(clock) {}

AgentDaemon::~AgentDaemon() {
  if (started_) {
    Stop(absl::ZeroDuration());
  }
}

absl::Status AgentDaemon::Build() {
  const std::optional<TransportSecurity>& security = settings_.security;
  if (security.has_value()) {
    for (const std::string& warning : security->warnings) {
      FABRICMON_LOG(Warning) << warning;
    }
    if (security->plaintext) {
      FABRICMON_LOG(Warning) << DescribeTransport(config_.tls(), *security);
    } else {
      FABRICMON_LOG(Info) << "aggregator " << absl::StrJoin(settings_.aggregators, ",") << ": "
                          << DescribeTransport(config_.tls(), *security);
    }
  }

  collectors::CollectorRegistry registry;
  collectors::RegisterBuiltinCollectors(registry);
  collectors::CollectorContext context{config_.collectors(), clock_};
  absl::StatusOr<std::vector<std::unique_ptr<collectors::Collector>>> created =
      registry.CreateEnabled(context);
  if (!created.ok()) {
    // The agent has always printed this one with its code ("INVALID_ARGUMENT: ..."); the
    // operator-facing line stays the same.
    return absl::Status(created.status().code(), created.status().ToString());
  }
  AgentOptions options;
  options.node_name = config_.node_name();
  if (config_.replay_buffer_bytes() > 0) {
    options.replay_buffer_bytes = config_.replay_buffer_bytes();
  }
  agent_ = std::make_unique<Agent>(options, *std::move(created), clock_);
  agent_->DiscoverAll();
  if (settings_.aggregators.empty()) {
    return absl::OkStatus();
  }

  StreamClientOptions stream_options;
  if (config_.reconnect_initial_backoff_ms() > 0) {
    stream_options.initial_backoff = absl::Milliseconds(config_.reconnect_initial_backoff_ms());
  }
  if (config_.reconnect_max_backoff_ms() > 0) {
    stream_options.max_backoff = absl::Milliseconds(config_.reconnect_max_backoff_ms());
  }
  const grpc::ChannelArguments args =
      AgentChannelArguments(stream_options.initial_backoff, stream_options.max_backoff);
  std::shared_ptr<grpc::ChannelCredentials> credentials = MakeChannelCredentials(*security);
  const bool plaintext = security->plaintext;
  absl::StatusOr<std::unique_ptr<AggregatorDirectory>> directory = AggregatorDirectory::Create(
      settings_.aggregators, config_.node_name(),
      [args, credentials, plaintext](const std::string& address, const std::string& tls_name) {
        grpc::ChannelArguments channel_args = args;
        if (!tls_name.empty() && !plaintext) {
          // An address a DNS name expanded to: the certificate still names the service.
          channel_args.SetSslTargetNameOverride(tls_name);
        }
        return grpc::CreateCustomChannel(address, credentials, channel_args);
      });
  if (!directory.ok()) {  // the settings validated the list; resolving can still fail
    return directory.status();
  }
  directory_ = *std::move(directory);

  const uint64_t instance_id = NewAgentInstanceId();
  const std::string boot_id = ReadBootId();
  stream_options.directory = directory_.get();
  stream_options.failover_after = settings_.failover_after;
  stream_options.failback_after = settings_.failback_after;
  stream_options.coalesce = settings_.coalesce;
  stream_options.node_name = config_.node_name();
  stream_options.boot_id = boot_id;
  stream_options.agent_version = std::string(ProjectVersion());
  stream_options.agent_instance_id = instance_id;
  Agent* agent = agent_.get();
  stream_ = std::make_unique<StreamClient>(
      stream_options, agent_->buffer(), agent_->series(), [agent, boot_id, instance_id] {
        return agent->MakeHello(boot_id, std::string(ProjectVersion()), instance_id);
      });
  agent_->AttachStream(stream_.get());
  return absl::OkStatus();
}

absl::Status AgentDaemon::Start() {
  if (started_) {
    return absl::FailedPreconditionError("the agent daemon was started already");
  }
  if (!config_.listen_metrics().empty()) {
    // Timeouts and enough workers that slow or many clients cannot block a scrape.
    absl::StatusOr<std::unique_ptr<prometheus::Exposer>> exposer =
        exposition::StartExposer(config_.listen_metrics(), settings_.http_limits);
    if (!exposer.ok()) {
      return exposer.status();
    }
    exposer_ = *std::move(exposer);
    const std::vector<int> ports = exposer_->GetListeningPorts();
    metrics_port_ = ports.empty() ? 0 : ports.front();
    local_metrics_ = std::make_shared<LocalMetrics>(*agent_);
    exposer_->RegisterCollectable(local_metrics_);
    FABRICMON_LOG(Info) << "serving /metrics on " << config_.listen_metrics();
  }
  started_ = true;
  agent_->Start();
  if (stream_ != nullptr) {
    stream_->Start();
  }
  return absl::OkStatus();
}

void AgentDaemon::Stop(absl::Duration flush) {
  if (!started_ || stopped_) {
    return;
  }
  stopped_ = true;
  agent_->Stop();
  if (stream_ != nullptr) {
    stream_->Stop(flush);
  }
  if (exposer_ != nullptr && local_metrics_ != nullptr) {
    exposer_->RemoveCollectable(local_metrics_);
  }
  exposer_.reset();
}

std::optional<StreamClientStats> AgentDaemon::stream_stats() const {
  if (stream_ == nullptr) {
    return std::nullopt;
  }
  return stream_->stats();
}

}  // namespace fabricmon::agent
