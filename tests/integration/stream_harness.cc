#include "tests/integration/stream_harness.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "daemon/agent/collector_runner.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/common/clock.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/logging.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/wire/series_codec.h"
#include "tests/integration/metrics_text.h"

namespace fabricmon::testing {

void PreferMemoryForTempTrees() {
  if (std::getenv("TMPDIR") == nullptr && access("/dev/shm", W_OK | X_OK) == 0) {
    setenv("TMPDIR", "/dev/shm", /*overwrite=*/0);
  }
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) {
      return false;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// --- Aggregator

namespace {
Clock& ClockOf(const AggregatorOptions& options) {
  return options.clock != nullptr ? *options.clock : RealClock::Get();
}
}  // namespace

aggregator::AggregatorSettings SettingsFor(const AggregatorOptions& options) {
  aggregator::AggregatorSettings settings;
  settings.security.plaintext = true;
  settings.authorization = options.stream.authorization != nullptr
                               ? options.stream.authorization
                               : aggregator::Authorization::Empty(/*plaintext=*/true);
  settings.store = options.store;
  settings.stream = options.stream;
  settings.stale_after_nanos = options.stale_after_nanos;
  return settings;
}

std::unique_ptr<AggregatorState> AggregatorState::Create(
    const AggregatorOptions& options, aggregator::MetricsServer* metrics_server) {
  absl::StatusOr<std::unique_ptr<aggregator::AggregatorServer>> server =
      aggregator::AggregatorServer::Create(SettingsFor(options), ClockOf(options));
  if (!server.ok()) {
    FABRICMON_LOG(Error) << "cannot build the aggregator: " << server.status();
    return nullptr;
  }
  return std::unique_ptr<AggregatorState>(new AggregatorState(*std::move(server), metrics_server));
}

AggregatorState::AggregatorState(std::unique_ptr<aggregator::AggregatorServer> server,
                                 aggregator::MetricsServer* metrics_server)
    : server_(std::move(server)), metrics_server_(metrics_server) {
  if (metrics_server_ != nullptr) {
    metrics_server_->Serve(server_->exporter(), {});
    metrics_port_ = metrics_server_->port();
  }
}

AggregatorState::~AggregatorState() {
  if (metrics_server_ != nullptr) {
    metrics_server_->Clear();
  }
}

namespace {

// The telemetry service reads raw bytes (agent_stream.h says why).
using Bidi = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

// What a stream to an aggregator that is down gets: UNAVAILABLE, like a refused TCP connect.
class RefusedStream final : public Bidi {
 public:
  RefusedStream() { Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "aggregator is down")); }
  void OnDone() override { delete this; }
};

}  // namespace

class AggregatorHarness::ForwardingTelemetry final
    : public v1::Telemetry::WithRawCallbackMethod_Stream<v1::Telemetry::Service> {
 public:
  void SetTarget(aggregator::TelemetryService* target) {
    absl::MutexLock lock(&mu_);
    target_ = target;
  }
  Bidi* Stream(grpc::CallbackServerContext* context) override {
    // Holding the lock while the target creates its reactor means that once SetTarget(nullptr)
    // returns, no new stream can reach the old state.
    absl::MutexLock lock(&mu_);
    if (target_ == nullptr) {
      return new RefusedStream();
    }
    return target_->Stream(context);
  }

 private:
  absl::Mutex mu_;
  aggregator::TelemetryService* target_ ABSL_GUARDED_BY(mu_) = nullptr;
};

class AggregatorHarness::ForwardingDiagnostics final : public v1::Diagnostics::CallbackService {
 public:
  void SetTarget(aggregator::DiagnosticsService* target) {
    absl::MutexLock lock(&mu_);
    target_ = target;
  }
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* context,
                                      const v1::ListNodesRequest* request,
                                      v1::ListNodesResponse* response) override {
    absl::MutexLock lock(&mu_);
    return target_ ? target_->ListNodes(context, request, response) : Down(context);
  }
  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* context,
                                    const v1::GetNodeRequest* request,
                                    v1::NodeView* response) override {
    absl::MutexLock lock(&mu_);
    return target_ ? target_->GetNode(context, request, response) : Down(context);
  }
  grpc::ServerUnaryReactor* ListFindings(grpc::CallbackServerContext* context,
                                         const v1::ListFindingsRequest* request,
                                         v1::ListFindingsResponse* response) override {
    absl::MutexLock lock(&mu_);
    return target_ ? target_->ListFindings(context, request, response) : Down(context);
  }
  grpc::ServerUnaryReactor* Diagnose(grpc::CallbackServerContext* context,
                                     const v1::DiagnoseRequest* request,
                                     v1::DiagnoseResponse* response) override {
    absl::MutexLock lock(&mu_);
    return target_ ? target_->Diagnose(context, request, response) : Down(context);
  }

 private:
  static grpc::ServerUnaryReactor* Down(grpc::CallbackServerContext* context) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "aggregator is down"));
    return reactor;
  }

  absl::Mutex mu_;
  aggregator::DiagnosticsService* target_ ABSL_GUARDED_BY(mu_) = nullptr;
};

AggregatorHarness::AggregatorHarness(Transport transport, AggregatorOptions options,
                                     aggregator::MetricsServer* metrics_server)
    : transport_(transport), options_(std::move(options)), metrics_server_(metrics_server) {}

AggregatorHarness::~AggregatorHarness() {
  if (serving_) {
    StopServing();
  }
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  state_.reset();
}

bool AggregatorHarness::Start() {
  state_.reset();
  state_ = AggregatorState::Create(options_, metrics_server_);
  if (state_ == nullptr || (metrics_server_ != nullptr && state_->metrics_port() == 0)) {
    return false;
  }
  if (transport_ == Transport::kTcp) {
    grpc::ServerBuilder builder;
    // The first start picks a free port; a restart binds the same one, as a restarted aggregator
    // process would, so the agent's channel reconnects to it.
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port_), grpc::InsecureServerCredentials(),
                             &port_);
    builder.SetMaxReceiveMessageSize(
        aggregator::GrpcReceiveLimit(options_.stream.max_message_bytes));
    builder.RegisterService(&state_->telemetry());
    builder.RegisterService(&state_->diagnostics());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      FABRICMON_LOG(Error) << "cannot start the aggregator's gRPC server";
      return false;
    }
    if (channel_ == nullptr) {
      // gRPC's own reconnect backoff starts at 1 s; keep it short like the agent's own, so a
      // restarted aggregator is found within a few cycles.
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
      channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port_),
                                           grpc::InsecureChannelCredentials(), args);
    }
  } else {
    if (server_ == nullptr) {
      forward_telemetry_ = std::make_unique<ForwardingTelemetry>();
      forward_diagnostics_ = std::make_unique<ForwardingDiagnostics>();
      grpc::ServerBuilder builder;
      builder.SetMaxReceiveMessageSize(
          aggregator::GrpcReceiveLimit(options_.stream.max_message_bytes));
      builder.RegisterService(forward_telemetry_.get());
      builder.RegisterService(forward_diagnostics_.get());
      server_ = builder.BuildAndStart();
      if (server_ == nullptr) {
        FABRICMON_LOG(Error) << "cannot start the in-process gRPC server";
        return false;
      }
      channel_ = server_->InProcessChannel(grpc::ChannelArguments());
    }
    forward_telemetry_->SetTarget(&state_->telemetry());
    forward_diagnostics_->SetTarget(&state_->diagnostics());
  }
  serving_ = true;
  return true;
}

std::string AggregatorHarness::address() const {
  return transport_ == Transport::kTcp && port_ != 0 ? absl::StrCat("127.0.0.1:", port_) : "";
}

void AggregatorHarness::StopServing() {
  if (!serving_) {
    return;
  }
  serving_ = false;
  if (transport_ == Transport::kTcp) {
    // A deadline of now cancels every open call at once, as a killed process would.
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  } else {
    forward_telemetry_->SetTarget(nullptr);
    forward_diagnostics_->SetTarget(nullptr);
    for (const std::shared_ptr<store::NodeState>& node : state_->store().Nodes()) {
      const store::NodeState::Summary summary = node->GetSummary(true);
      if (!summary.connected) {
        continue;
      }
      // A reconnect of the same agent instance takes the node over, and the store cancels the
      // stream that owned it. Same identity, so the node keeps what it stored (the test
      // inspects it), only its stream count grows.
      v1::Hello takeover;
      takeover.set_node_name(summary.name);
      takeover.set_boot_id(summary.boot_id);
      takeover.set_agent_version(summary.agent_version);
      takeover.set_agent_instance_id(summary.agent_instance_id);
      *takeover.mutable_inventory() = summary.inventory;
      for (const v1::CollectorStatus& collector : summary.collectors) {
        *takeover.add_collectors() = collector;
      }
      (void)state_->store().Attach(takeover, /*stream_token=*/0, nullptr,
                                   ClockOf(options_).NowUnixNanos());
    }
  }
  // The reactors reference the state: it may only go once every stream is done.
  if (!WaitFor([&] { return state_->stats().streams_active.load() == 0; })) {
    FABRICMON_LOG(Error) << "streams still open after the aggregator stopped serving";
  }
}

std::unique_ptr<aggregator::MetricsServer> MakeMetricsServer() {
  absl::StatusOr<std::unique_ptr<aggregator::MetricsServer>> server =
      aggregator::MetricsServer::Listen("127.0.0.1:0");
  if (!server.ok()) {
    FABRICMON_LOG(Error) << "cannot start a metrics server: " << server.status();
    return nullptr;
  }
  return std::move(*server);
}

std::string AggregatorHarness::Scrape() {
  if (state_->metrics_port() == 0) {
    return exposition::SerializeText(state_->exporter()->Collect());
  }
  absl::StatusOr<std::string> body = HttpGet(state_->metrics_port(), "/metrics");
  if (!body.ok()) {
    FABRICMON_LOG(Error) << "scrape failed: " << body.status();
    return "";
  }
  return *body;
}

std::optional<store::NodeState::Summary> AggregatorHarness::Node(const std::string& name) {
  std::shared_ptr<store::NodeState> node = state_->store().Find(name);
  if (node == nullptr) {
    return std::nullopt;
  }
  return node->GetSummary(true);
}

// --- Counter mutator

void WriteCounterInPlace(const std::string& path, uint64_t value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  FABRICMON_CHECK(fd >= 0) << path;
  const std::string text = absl::StrCat(value);
  FABRICMON_CHECK(pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()))
      << path;
  close(fd);
}

CounterMutator::CounterMutator(std::string sysfs_root) {
  const std::string class_dir = JoinPath(sysfs_root, "class/infiniband");
  absl::StatusOr<std::vector<std::string>> devices = ListDirectory(class_dir);
  FABRICMON_CHECK(devices.ok()) << devices.status();
  struct Moving {
    const char* file;
    uint64_t step;
  };
  const Moving moving[] = {
      {"counters/port_xmit_data", 5003},      {"counters/port_rcv_data", 4999},
      {"counters/port_xmit_packets", 101},    {"counters/port_rcv_packets", 97},
      {"counters/unicast_xmit_packets", 101}, {"counters/unicast_rcv_packets", 97},
      {"counters/port_xmit_wait", 77},        {"hw_counters/rx_write_requests", 13},
      {"hw_counters/rx_read_requests", 3},
  };
  for (const std::string& device : *devices) {
    for (const Moving& m : moving) {
      const std::string path = JoinPath(class_dir, absl::StrCat(device, "/ports/1/", m.file));
      absl::StatusOr<std::string> text = ReadTrimmed(path);
      uint64_t value = 0;
      if (text.ok() && absl::SimpleAtoi(*text, &value)) {
        files_.push_back({path, value, m.step});
      }
    }
  }
}

CounterMutator::~CounterMutator() { Stop(); }

void CounterMutator::Start() {
  thread_ = std::thread([this] {
    for (;;) {
      Round();
      ++rounds_;
      absl::MutexLock lock(&mu_);
      // Pacing only: a few rounds per collection cycle.
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(20))) {
        return;
      }
    }
  });
}

void CounterMutator::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

void CounterMutator::Round() {
  for (File& file : files_) {
    file.value += file.step;
    WriteCounterInPlace(file.path, file.value);
  }
}

// --- Agent

AgentHarness::AgentHarness(std::string sysfs_root, std::shared_ptr<grpc::Channel> channel,
                           AgentHarnessOptions options)
    : sysfs_root_(std::move(sysfs_root)),
      channel_(std::move(channel)),
      options_(std::move(options)) {}

AgentHarness::~AgentHarness() {
  Stop();
  // The stream client references the agent's buffer and series table.
  stream_.reset();
  agent_.reset();
}

bool AgentHarness::Start() {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(sysfs_root_);
  config.set_interval_ms(static_cast<uint32_t>(options_.interval_ms));
  absl::StatusOr<std::unique_ptr<collectors::IbSysfsCollector>> collector =
      collectors::IbSysfsCollector::Create(config);
  if (!collector.ok()) {
    FABRICMON_LOG(Error) << collector.status();
    return false;
  }
  std::vector<std::unique_ptr<collectors::Collector>> collectors;
  collectors.push_back(*std::move(collector));
  agent::AgentOptions agent_options;
  agent_options.node_name = options_.node_name;
  agent_options.replay_buffer_bytes = options_.replay_buffer_bytes;
  agent_ = std::make_unique<agent::Agent>(agent_options, std::move(collectors), RealClock::Get());
  agent_->DiscoverAll();

  agent::StreamClientOptions stream_options;
  stream_options.channel = channel_;
  stream_options.directory = options_.directory;
  stream_options.failover_after = options_.failover_after;
  stream_options.failback_after = options_.failback_after;
  stream_options.coalesce = options_.coalesce;
  stream_options.node_name = options_.node_name;
  stream_options.boot_id = options_.boot_id;
  stream_options.agent_version = "test";
  stream_options.agent_instance_id = options_.instance_id;
  stream_options.min_interval_ms = static_cast<uint32_t>(options_.interval_ms);
  stream_options.initial_backoff = absl::Milliseconds(20);
  stream_options.max_backoff = absl::Milliseconds(200);
  agent::Agent* agent = agent_.get();
  const AgentHarnessOptions options = options_;
  stream_ = std::make_unique<agent::StreamClient>(
      stream_options, agent_->buffer(), agent_->series(),
      [agent, options] { return agent->MakeHello(options.boot_id, "test", options.instance_id); });
  agent_->AttachStream(stream_.get());
  agent_->Start();
  stream_->Start();
  return true;
}

void AgentHarness::StopCollecting() {
  if (agent_ != nullptr) {
    agent_->Stop();
  }
}

void AgentHarness::Stop() {
  StopCollecting();
  if (stream_ != nullptr) {
    stream_->Stop(absl::ZeroDuration());
  }
}

size_t IbSysfsCycleBytes(const std::string& sysfs_root) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(sysfs_root);
  absl::StatusOr<std::unique_ptr<collectors::IbSysfsCollector>> collector =
      collectors::IbSysfsCollector::Create(config);
  FABRICMON_CHECK(collector.ok()) << collector.status();
  agent::CollectorRunner runner(*std::move(collector), RealClock::Get());
  v1::Inventory inventory;
  FABRICMON_CHECK(runner.Discover(inventory).ok());
  agent::SeriesTable table;
  agent::CycleBuilder builder(table);
  (void)runner.Collect(builder);  // the health series count too; the status does not matter
  return builder.Finish(0, 0).ByteSize();
}

// --- Raw streams

RawStream::RawStream(const std::shared_ptr<grpc::Channel>& channel, absl::Duration deadline)
    : stub_(v1::Telemetry::NewStub(channel)) {
  // A server that never answers must fail the test, not hang it.
  context_.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  stream_ = stub_->Stream(&context_);
}

std::optional<v1::AggregatorMessage> RawStream::Read() {
  v1::AggregatorMessage message;
  if (stream_->Read(&message)) {
    return message;
  }
  return std::nullopt;
}

RawStream::End RawStream::Finish() {
  End end;
  if (!writes_done_) {
    writes_done_ = true;
    (void)stream_->WritesDone();  // fails when the server already finished; reads tell why
  }
  v1::AggregatorMessage message;
  while (stream_->Read(&message)) {
    end.messages.push_back(message);
  }
  end.status = stream_->Finish();
  return end;
}

v1::AgentMessage HelloMessage(const std::string& node, const std::string& boot, uint64_t instance) {
  v1::AgentMessage message;
  v1::Hello* hello = message.mutable_hello();
  hello->set_node_name(node);
  hello->set_boot_id(boot);
  hello->set_agent_version("raw");
  hello->set_protocol_revision(v1::PROTOCOL_REVISION_1);
  hello->set_agent_instance_id(instance);
  hello->set_min_interval_ms(1000);
  return message;
}

v1::AgentMessage CounterDeclarations(uint32_t first_id, int count, int first_index) {
  v1::AgentMessage message;
  for (int i = 0; i < count; ++i) {
    const int index = first_index + i;
    *message.mutable_declarations()->add_series() = wire::ToDeclaration(
        collectors::CounterSeries("raw", absl::StrCat("fabricmon_raw_", index, "_total"), "raw",
                                  collectors::Unit::kNone, 64, collectors::Overflow::kWraps, 1.0,
                                  {{"index", absl::StrCat(index)}}),
        first_id + static_cast<uint32_t>(i));
  }
  return message;
}

v1::AgentMessage LayoutMessage(uint32_t id, const std::vector<uint32_t>& series_ids) {
  v1::AgentMessage message;
  v1::Layout* layout = message.mutable_layouts()->add_layouts();
  layout->set_id(id);
  layout->mutable_series_ids()->Assign(series_ids.begin(), series_ids.end());
  return message;
}

v1::AgentMessage BatchMessage(uint64_t sequence, int64_t timestamp_unix_nanos, uint32_t layout,
                              const std::vector<int64_t>& deltas) {
  v1::AgentMessage message;
  v1::SampleBatch* batch = message.mutable_batch();
  batch->set_sequence(sequence);
  batch->set_timestamp_unix_nanos(timestamp_unix_nanos);
  batch->set_layout_id(layout);
  batch->mutable_value_deltas()->Assign(deltas.begin(), deltas.end());
  return message;
}

}  // namespace fabricmon::testing
