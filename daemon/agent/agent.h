#pragma once

// The node agent: runs every collector on its own thread at its own interval (a slow collector
// never delays the others), turns each run into a Cycle in the replay buffer, hands it to the
// stream client, and keeps the latest cycle of each collector for the local /metrics endpoint.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "collectors/core/collector.h"
#include "daemon/agent/collector_runner.h"
#include "daemon/agent/cycle.h"
#include "daemon/agent/replay_buffer.h"
#include "daemon/agent/series_table.h"
#include "daemon/agent/stream_client.h"
#include "daemon/common/clock.h"
#include "daemon/exposition/text_exposition.h"
#include "fabricmon/v1/inventory.pb.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::agent {

struct AgentOptions {
  std::string node_name;
  size_t replay_buffer_bytes = 64 << 20;
};

class Agent {
 public:
  // Keeps a reference to `clock`. Collectors are owned by the agent.
  Agent(AgentOptions options, std::vector<std::unique_ptr<collectors::Collector>> collectors,
        Clock& clock);
  ~Agent();  // Stop()s

  // Runs discovery of every collector once (synchronously), so the hello has an inventory.
  void DiscoverAll();
  // Attaches the stream client (optional: without it the agent only serves local metrics).
  // Must be called before Start(). Keeps a reference.
  void AttachStream(StreamClient* client) { stream_ = client; }
  // Starts one thread per collector, plus the agent's own health collector ("agent": replay
  // buffer and stream statistics, at 1 s).
  void Start();
  // Stops and joins the collector threads. Idempotent.
  void Stop();

  // What the hello carries: node identity, collectors and the merged inventory.
  v1::Hello MakeHello(const std::string& boot_id, const std::string& version,
                      uint64_t instance_id) const;
  v1::Inventory inventory() const;

  // Latest value of every series, for the local /metrics (samples reference the series table).
  std::vector<exposition::SampleRef> LatestSamples() const;

  ReplayBuffer& buffer() { return buffer_; }
  SeriesTable& series() { return series_; }
  // True after every collector ran at least once (systemd READY).
  bool ready() const { return completed_first_cycle_.load() >= runners_.size(); }

 private:
  struct Slot;
  void RunCollector(size_t index);
  // Hands series ids released by the collectors back to the table once the aggregator has
  // acknowledged every cycle that named them (SeriesTable's three steps).
  void ReclaimSeriesIds();
  void PublishInventoryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AgentOptions options_;
  Clock& clock_;
  std::vector<std::unique_ptr<CollectorRunner>> runners_;
  SeriesTable series_;
  ReplayBuffer buffer_;
  StreamClient* stream_ = nullptr;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::Inventory> inventories_ ABSL_GUARDED_BY(mu_);  // per collector
  std::vector<absl::Status> discovery_ ABSL_GUARDED_BY(mu_);     // per collector
  std::vector<std::shared_ptr<const Cycle>> latest_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
  std::atomic<size_t> completed_first_cycle_{0};
};

}  // namespace fabricmon::agent
