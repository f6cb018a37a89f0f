#pragma once

// Real components wired together for the streaming tests: an aggregator built by the same
// AggregatorServer as fabricmon-aggregator (store, telemetry and diagnostics services, detection
// engine, /metrics on a real prometheus Exposer), an agent built as AgentDaemon builds it (Agent
// + a real collector + StreamClient), both speaking gRPC over an in-process channel or loopback
// TCP. Nothing of ours is mocked; the only stand-in is how an in-process "aggregator restart" is
// staged (see AggregatorHarness).

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectors/core/collector.h"
#include "daemon/agent/agent.h"
#include "daemon/agent/stream_client.h"
#include "daemon/aggregator/agent_stream.h"
#include "daemon/aggregator/aggregator_server.h"
#include "daemon/aggregator/diagnostics_service.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/aggregator/metrics_server.h"
#include "daemon/common/clock.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"
#include "fabricmon/v1/telemetry.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace fabricmon::testing {

enum class Transport { kInProcess, kTcp };

// Points TMPDIR (where TempTree creates its trees) at /dev/shm when the test runner set none and
// the machine has it. A copied sysfs tree is ~500 files: created on the build disk, a copy took
// up to 2 s per test process (ctest runs each case in its own); in memory, 60 ms.
void PreferMemoryForTempTrees();

// Polls `condition` every few milliseconds until it holds or `timeout` passes; returns whether
// it held. Tests wait for states, never for durations.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(10));

struct AggregatorOptions {
  store::StoreOptions store;
  // Its authorization (null: nobody is an operator or a sweeper, plaintext) serves both services;
  // a recorder given here records (AggregatorServer makes none).
  aggregator::StreamOptions stream;
  int64_t stale_after_nanos = int64_t{30} * 1000000000;
  // The aggregator's clock (streams, store, exporter, diagnostics; borrowed, must outlive the
  // harness): a FakeClock steps the new-series rate limit by hand. nullptr: the real clock.
  Clock* clock = nullptr;
};

// The AggregatorServer settings `options` stand for: plaintext, the given store and stream
// options, default detectors.
aggregator::AggregatorSettings SettingsFor(const AggregatorOptions& options);

// Everything one aggregator process holds: an AggregatorServer that is never started (the
// harness serves its services on a gRPC server of its own, which survives "restarts"). Destroying
// it loses all state, as a restart does. /metrics: when given a MetricsServer (borrowed), the
// state serves its exporter there for its lifetime and is scraped over HTTP; otherwise scrapes
// call the exporter directly (the same text without civetweb, whose shutdown takes ~2 s a
// process).
class AggregatorState {
 public:
  // Null when the server could not be built from `options` (logged).
  static std::unique_ptr<AggregatorState> Create(const AggregatorOptions& options,
                                                 aggregator::MetricsServer* metrics_server);
  ~AggregatorState();

  store::SeriesStore& store() { return server_->store(); }
  aggregator::IngestStats& stats() { return server_->stats(); }
  aggregator::TelemetryService& telemetry() { return server_->telemetry(); }
  aggregator::DiagnosticsService& diagnostics() { return server_->diagnostics(); }
  const std::shared_ptr<aggregator::MetricsExporter>& exporter() const {
    return server_->exporter();
  }
  aggregator::AggregatorServer& server() { return *server_; }
  int metrics_port() const { return metrics_port_; }  // 0 without a MetricsServer

 private:
  AggregatorState(std::unique_ptr<aggregator::AggregatorServer> server,
                  aggregator::MetricsServer* metrics_server);

  std::unique_ptr<aggregator::AggregatorServer> server_;
  aggregator::MetricsServer* const metrics_server_;
  int metrics_port_ = 0;
};

// The aggregator's /metrics server on 127.0.0.1:0, or nullptr (logged) if it could not listen.
std::unique_ptr<aggregator::MetricsServer> MakeMetricsServer();

// Serves an AggregatorState over the chosen transport and can lose it and start a fresh one
// while the agent's channel stays the same.
//
// TCP: a real restart. The server is shut down (its calls cancelled), the state destroyed, and a
// new server bound to the same port.
// In-process: a grpc::Server cannot be restarted and its in-process channel dies with it, so one
// server lives for the whole test and forwards each call to the current state. "Down" means new
// streams are refused with UNAVAILABLE and the live ones are ended server-side, which the store
// does through its takeover path (the cancel it holds for the stream owning each node).
class AggregatorHarness {
 public:
  // `metrics_server` (nullable, borrowed) serves /metrics over HTTP; it must outlive the harness.
  AggregatorHarness(Transport transport, AggregatorOptions options,
                    aggregator::MetricsServer* metrics_server = nullptr);
  ~AggregatorHarness();

  // Starts serving a fresh state. Returns false (and logs why) if the server did not start.
  bool Start();
  // Stops serving: every stream of the current state has ended when this returns. The state is
  // kept for inspection until Start() replaces it.
  void StopServing();

  // The agent's channel; the same object for the whole test.
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  // TCP: "127.0.0.1:PORT" (the same across restarts), once started; "" in-process.
  std::string address() const;
  AggregatorState& state() { return *state_; }
  bool serving() const { return serving_; }

  // The current state's /metrics text: GET over HTTP with a MetricsServer, else its exporter's.
  std::string Scrape();
  // The node's summary in the current state, if the node is known.
  std::optional<store::NodeState::Summary> Node(const std::string& name);

 private:
  class ForwardingTelemetry;
  class ForwardingDiagnostics;

  const Transport transport_;
  const AggregatorOptions options_;
  aggregator::MetricsServer* const metrics_server_;
  std::unique_ptr<AggregatorState> state_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ForwardingTelemetry> forward_telemetry_;
  std::unique_ptr<ForwardingDiagnostics> forward_diagnostics_;
  std::shared_ptr<grpc::Channel> channel_;
  int port_ = 0;
  bool serving_ = false;
};

// Makes the counters of a sysfs tree move, as traffic does, from its own thread: the traffic
// counters of every port grow by a few thousand per round, an error counter now and then.
class CounterMutator {
 public:
  // `sysfs_root` holds class/infiniband/<device>/ports/1/{counters,hw_counters}.
  explicit CounterMutator(std::string sysfs_root);
  ~CounterMutator();  // Stop()s

  void Start();
  // Joins the thread; when this returns no write is in progress or will start.
  void Stop();
  uint64_t rounds() const { return rounds_.load(); }

 private:
  struct File {
    std::string path;
    uint64_t value;
    uint64_t step;
  };
  void Round();

  std::vector<File> files_;
  std::atomic<uint64_t> rounds_{0};
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Rewrites a counter file in place. The collector keeps counter files open and preads them, so
// the inode must stay the same, and the file is not truncated (a concurrent read would see it
// empty); counter values only grow, so the new text covers the old.
void WriteCounterInPlace(const std::string& path, uint64_t value);

struct AgentHarnessOptions {
  std::string node_name = "gpu-node-1";
  std::string boot_id = "boot-1";
  uint64_t instance_id = 0x1111;
  size_t replay_buffer_bytes = 64 << 20;
  int64_t interval_ms = 100;
  // Several aggregators: the agent's directory (borrowed, must outlive the harness) and the
  // failover delays. With a directory the constructor's channel is not used.
  agent::AggregatorDirectory* directory = nullptr;
  absl::Duration failover_after = absl::Seconds(10);
  absl::Duration failback_after = absl::Seconds(30);
  absl::Duration coalesce = absl::Milliseconds(200);  // the agent's stream_coalesce_ms
};

// A node agent streaming to `channel`: the ib_sysfs collector on `sysfs_root`, plus the agent's
// own health collector, with a short reconnect backoff (20 ms, up to 200 ms).
class AgentHarness {
 public:
  AgentHarness(std::string sysfs_root, std::shared_ptr<grpc::Channel> channel,
               AgentHarnessOptions options = {});
  ~AgentHarness();  // Stop()s

  // Discovers, starts collecting and streaming. False if the collector could not be built.
  bool Start();
  // Stops the collector threads; the stream stays up (delivering what is buffered).
  void StopCollecting();
  // Stops collecting and ends the stream.
  void Stop();

  agent::Agent& agent() { return *agent_; }
  agent::StreamClient& stream() { return *stream_; }
  const AgentHarnessOptions& options() const { return options_; }

 private:
  const std::string sysfs_root_;
  const std::shared_ptr<grpc::Channel> channel_;
  const AgentHarnessOptions options_;
  std::unique_ptr<agent::Agent> agent_;
  std::unique_ptr<agent::StreamClient> stream_;
};

// The bytes one ib_sysfs cycle of the tree holds in the agent's replay buffer.
size_t IbSysfsCycleBytes(const std::string& sysfs_root);

// A hand-driven telemetry stream (the generated sync stub), for sending what a correct agent
// never would.
class RawStream {
 public:
  // The whole stream must end within `deadline` (a server that never answers fails the test
  // rather than hanging it).
  explicit RawStream(const std::shared_ptr<grpc::Channel>& channel,
                     absl::Duration deadline = absl::Seconds(10));

  bool Write(const v1::AgentMessage& message) { return stream_->Write(message); }
  std::optional<v1::AggregatorMessage> Read();
  // Half-closes, reads what is left and returns every message read and the final status.
  struct End {
    std::vector<v1::AggregatorMessage> messages;
    grpc::Status status;
  };
  End Finish();

 private:
  std::unique_ptr<v1::Telemetry::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::AggregatorMessage>> stream_;
  bool writes_done_ = false;
};

// Message builders for raw streams.
v1::AgentMessage HelloMessage(const std::string& node, const std::string& boot, uint64_t instance);
// Counters fabricmon_raw_<i>_total for i = first_index, first_index+1, ... (ids first_id,
// first_id+1, ...), one label each.
v1::AgentMessage CounterDeclarations(uint32_t first_id, int count, int first_index = 0);
v1::AgentMessage LayoutMessage(uint32_t id, const std::vector<uint32_t>& series_ids);
v1::AgentMessage BatchMessage(uint64_t sequence, int64_t timestamp_unix_nanos, uint32_t layout,
                              const std::vector<int64_t>& deltas);

}  // namespace fabricmon::testing
