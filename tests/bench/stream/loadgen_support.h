#pragma once

// What the load-generating benchmarks share (fabricmon_load_generator: one aggregator;
// fabricmon_shard_bench: several shards and a remote-write receiver): the aggregator as a separate
// child process (its own /proc CPU and RSS), one simulated node as the agent's real streaming
// stack, a generator that ticks the nodes, and small loopback HTTP helpers for /metrics.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "daemon/agent/aggregator_directory.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/agent/replay_buffer.h"
#include "daemon/agent/series_table.h"
#include "daemon/agent/stream_client.h"
#include "tests/bench/stream/node_model.h"

namespace fabricmon::bench {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start);

// A free TCP port on 127.0.0.1 (0 if none could be bound).
int FreePort();

// GET http://127.0.0.1:port/path (HTTP/1.0, no compression): the body of a 200, else "".
std::string HttpGet(int port, const std::string& path);

// Unlabelled samples of a text exposition: name → value.
std::map<std::string, double> ParseUnlabelled(const std::string& text);

// The sum of every sample of `name` in a text exposition, labelled or not (0 when absent).
double SumOfFamily(const std::string& text, const std::string& name);
// The same sum split by the value of one label (samples without it under ""), e.g. the active
// findings by kind.
std::map<std::string, double> SumOfFamilyBy(const std::string& text, const std::string& name,
                                            const std::string& label);

// Waits (bounded) until `done` holds; false on timeout.
template <typename Predicate>
bool WaitUntil(Predicate done, double timeout_s, int poll_ms = 5) {
  const auto start = Clock::now();
  while (SecondsSince(start) < timeout_s) {
    if (done()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return done();
}

// The p-quantile (0..1, nearest rank) of `values`; 0 when empty.
double Percentile(std::vector<double> values, double p);

// User + system CPU seconds of this process.
double SelfCpuSeconds();
// The same of process `pid`, from /proc (0 when it cannot be read).
double ProcessCpuSeconds(pid_t pid);

// A process' CPU at one moment, for a window too short for /proc/PID/stat's clock ticks (10 ms:
// a few agents for 2 s cost the aggregator less than one tick, and the window read 0).
struct CpuSnapshot {
  double stat_seconds = 0;            // utime + stime, exited threads included
  std::map<pid_t, uint64_t> task_ns;  // /proc/PID/task/TID/schedstat run time, live threads
};
CpuSnapshot TakeCpuSnapshot(pid_t pid);
// CPU seconds between two snapshots: the threads' schedstat nanoseconds when every thread of
// `before` still runs; when one exited (its schedstat went with it), the larger of the stat
// ticks and what the live threads' schedstat saw, so a short window never reads 0.
double CpuSecondsBetween(const CpuSnapshot& before, const CpuSnapshot& after);

// The aggregator under test, as a child process that dies with us.
class AggregatorProcess {
 public:
  // `extra_config`: AggregatorConfig text added to the plaintext TLS line. `total_series`: what
  // the simulated agents declare to it together. They share one peer (the loopback address), and
  // a peer's new-series bucket is one node's (new_series_burst, default 50 000): unless
  // `extra_config` sets it, the burst is raised to hold them all, else the agents past the first
  // ~100 would be refused and the run would measure refusals. `cpu` >= 0 pins it to that CPU.
  AggregatorProcess(std::string binary, std::string workdir, int cpu,
                    const std::string& extra_config, size_t total_series);
  ~AggregatorProcess() { Stop(); }

  // Starts it; `grpc_port` 0 picks one (read back from --port_file). False on failure. Up to
  // three tries when it exits during start-up (a /metrics port taken meanwhile).
  bool Start(int grpc_port);
  // SIGTERM, then SIGKILL after 10 s. Returns the time it took to exit.
  double Stop();
  // SIGKILL (a crash: nothing flushed, no stream ended cleanly), reaped.
  void Kill();
  // SIGKILL without waiting for the exit (a large process' exit can take seconds on a loaded
  // machine; whoever times what follows the crash must not wait for it). Kill() or Stop() reaps.
  void SendKill();

  // User + system CPU seconds of the whole process (all threads, exited ones included).
  double CpuSeconds() const;
  CpuSnapshot Cpu() const { return TakeCpuSnapshot(pid_); }
  // A /proc/PID/status size in bytes, e.g. "VmRSS:" (resident) or "VmHWM:" (its peak).
  uint64_t StatusBytes(const char* key) const;
  // The /metrics text ("" on failure).
  std::string MetricsText() const;
  std::map<std::string, double> Scrape() const { return ParseUnlabelled(MetricsText()); }

  int grpc_port() const { return grpc_port_; }
  pid_t pid() const { return pid_; }
  Clock::time_point listening_since() const { return listening_; }

 private:
  const std::string binary_;
  const std::string workdir_;
  const int cpu_;
  std::string config_path_;
  std::string port_file_;
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  Clock::time_point listening_;

  enum class StartResult { kStarted, kExited, kTimedOut };
  StartResult StartOnce(int grpc_port);
};

struct SimAgentOptions {
  // Either one gRPC target ...
  std::string target;
  // ... or several aggregators (HOST:PORT), ranked per node as fabricmon-agent ranks them, with
  // its failover and failback.
  std::vector<std::string> aggregators;
  absl::Duration failover_after = absl::Seconds(10);
  absl::Duration failback_after = absl::Seconds(30);
  absl::Duration coalesce = absl::Milliseconds(200);  // the agent's stream_coalesce_ms
  absl::Duration interval = absl::Seconds(1);         // its hello's min_interval_ms
  size_t replay_buffer_bytes = 16 << 20;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  // Leave the channel's connection backoff at gRPC's defaults (1 s x1.6 up to 120 s) instead of
  // bounding it by the StreamClient backoff as fabricmon-agent does.
  bool grpc_default_channel_backoff = false;
};

// The name of simulated node `index` ("loadgen-0042").
std::string SimNodeName(int index);

// One simulated node: the agent's streaming stack (SeriesTable, CycleBuilder, ReplayBuffer,
// StreamClient on its own gRPC connection) with a value model instead of collectors.
class SimAgent {
 public:
  SimAgent(int index, const std::vector<NodeSeries>& series, Profile profile,
           const SimAgentOptions& options);

  void Start() { client_->Start(); }
  void Stop() { client_->Stop(absl::ZeroDuration()); }

  // One collection cycle: the model advances one nominal second; the cycle, stamped now, goes to
  // the buffer and the stream, exactly as Agent::RunCollector does.
  void Tick();

  const std::string& name() const { return name_; }
  agent::StreamClientStats stats() const { return client_->stats(); }
  const agent::ReplayBuffer& buffer() const { return buffer_; }

 private:
  const std::string name_;
  const std::vector<NodeSeries>& series_;
  ValueModel model_;
  agent::SeriesTable table_;
  agent::ReplayBuffer buffer_;
  agent::CycleBuilder builder_;
  std::unique_ptr<agent::AggregatorDirectory> directory_;  // outlives client_
  std::unique_ptr<agent::StreamClient> client_;
};

// Ticks every agent once per interval on one thread. Spread: the agents' ticks are spread evenly
// over the interval (nodes' collection cycles are not synchronised); else all tick back to back
// at the start of each interval.
class Generator {
 public:
  Generator(std::vector<SimAgent*> agents, absl::Duration interval, bool spread = false)
      : agents_(std::move(agents)), interval_(interval), spread_(spread) {}
  ~Generator() { Stop(); }

  void Start();
  void Stop();
  uint64_t cycles() const { return cycles_.load(); }  // agent ticks so far
  uint64_t overruns() const { return overruns_.load(); }

 private:
  void Run();

  const std::vector<SimAgent*> agents_;
  const absl::Duration interval_;
  const bool spread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> cycles_{0};
  std::atomic<uint64_t> overruns_{0};
  std::thread thread_;
};

}  // namespace fabricmon::bench
