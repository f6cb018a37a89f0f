#pragma once

// The agent's side of the telemetry stream: one gRPC bidi stream (callback API) that sends the
// hello, then every buffered cycle after the aggregator's last stored sequence, then new cycles as
// they are pushed, and applies the aggregator's acks to the replay buffer. When the stream ends it
// reconnects with exponential backoff and full jitter, so thousands of agents do not stampede a
// restarted aggregator.
//
// With several aggregators (an AggregatorDirectory) the client streams to the node's primary in
// the rendezvous ranking. When the aggregator in use has held no stream for `failover_after` (it
// died, refuses, or never answers; plus up to a quarter of it, drawn per outage, so that the
// nodes of a dead aggregator do not all reach the survivors at once), the client moves to the next
// in the ranking; the new aggregator's hello ack says what it has of this node, and everything
// after that and after the last acknowledgement is replayed from the buffer, so the move loses
// nothing within the buffer's bound. While on a fallback it probes the better-ranked aggregators'
// channels; once one has been reachable without a break for `failback_after` (hysteresis: an
// aggregator that crash-loops does not pull nodes back and forth) the client lets the fallback
// acknowledge what it was sent, ends that stream and returns.
//
// Threads: one connection thread owned by the client (joined by Stop()); reactions run on gRPC's
// callback threads. Push-side callers only call Notify().

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/agent/aggregator_directory.h"
#include "daemon/agent/replay_buffer.h"
#include "daemon/agent/series_table.h"
#include "daemon/common/clock.h"
#include "fabricmon/v1/telemetry.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace fabricmon::agent {

struct StreamClientOptions {
  // Either one fixed channel (no failover) ...
  std::shared_ptr<grpc::Channel> channel;
  // ... or the aggregators to choose from (borrowed, must outlive the client; used only on the
  // connection thread). When set, `channel` is ignored.
  AggregatorDirectory* directory = nullptr;
  // With several aggregators: how long the one in use may hold no stream before the next in rank
  // takes over, and how long a better-ranked one must stay reachable before the client returns.
  absl::Duration failover_after = absl::Seconds(10);
  absl::Duration failback_after = absl::Seconds(30);
  std::string node_name;
  std::string boot_id;
  std::string agent_version;
  uint64_t agent_instance_id = 0;
  uint32_t min_interval_ms = 1000;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  uint64_t jitter_seed = 0;  // 0: from the instance id
  // How long a batch may be held to go out in one message (SampleBatches) with the batches after
  // it (a fast agent's: a 1 Hz one is never held); zero: every batch is written at once. See
  // Reactor::CoalesceLocked.
  absl::Duration coalesce = absl::Milliseconds(200);
};

// Counters for self-metrics; all monotonic.
struct StreamClientStats {
  uint64_t connects = 0;  // streams that reached HelloAck
  uint64_t connect_attempts = 0;
  uint64_t batches_sent = 0;
  uint64_t coalesced_batches = 0;  // of those, held to go out in one message with the next
  uint64_t replayed_batches = 0;   // sent after a reconnect with sequence ≤ the previous stream's
  uint64_t acks_received = 0;      // Ack messages (not counting the HelloAck)
  uint64_t bytes_sent = 0;
  uint64_t rejects = 0;
  bool connected = false;
  std::string last_error;
  uint64_t failovers = 0;   // moves to the next aggregator in rank (the one in use was unreachable)
  uint64_t failbacks = 0;   // returns to a better-ranked aggregator once it was reachable again
  std::string aggregator;   // the aggregator in use (its address; "" with a fixed channel)
  int aggregator_rank = 0;  // its rank for this node (0: primary)
};

class StreamClient {
 public:
  // Provides the current hello content (collectors and inventory); called on every connect.
  using HelloProvider = std::function<v1::Hello()>;

  // Keeps references to `buffer` and `series`, which must outlive the client.
  StreamClient(StreamClientOptions options, ReplayBuffer& buffer, const SeriesTable& series,
               HelloProvider hello);
  ~StreamClient();  // Stop()s if needed

  void Start();
  // A new cycle was pushed to the buffer, or the inventory changed: send what is pending.
  void Notify();
  // Queues an inventory update for the current stream (and future hellos carry it anyway).
  void SendInventory(const v1::Inventory& inventory);
  // These series ids are about to name other series (SeriesTable reuse): the current stream
  // declares them again when next used; later streams start fresh anyway.
  void ForgetSeries(absl::Span<const uint32_t> ids);
  // Waits up to `flush` for the buffer to be fully acknowledged, then ends the stream and joins
  // the connection thread. Idempotent.
  void Stop(absl::Duration flush);

  StreamClientStats stats() const;

 private:
  class Reactor;
  void ConnectionLoop();
  std::vector<AggregatorTarget> Targets();
  // Waits for `reactor`'s stream to end. Ends it early when it is not established by
  // `failover_deadline` (and there is somewhere else to go), or, on a fallback (rank > 0), when a
  // better-ranked aggregator has been reachable for failback_after: then returns its address.
  std::optional<std::string> Supervise(Reactor& reactor, std::vector<AggregatorTarget>& targets,
                                       const std::string& current, absl::Time failover_deadline);
  absl::Duration NextBackoff(absl::Duration current);

  const StreamClientOptions options_;
  ReplayBuffer& buffer_;
  const SeriesTable& series_;
  const HelloProvider hello_;

  // Lock order: mu_ → Reactor::mu_ → stats_mu_. Holding mu_ while calling into the active
  // reactor keeps the connection thread from destroying it meanwhile.
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Reactor* active_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Stop() is flushing: every batch asks for its ack (SampleBatch.ack_later unset).
  std::atomic<bool> flushing_{false};
  mutable absl::Mutex stats_mu_;
  StreamClientStats stats_ ABSL_GUARDED_BY(stats_mu_);
  uint64_t highest_sent_ ABSL_GUARDED_BY(stats_mu_) = 0;  // for replay accounting
  uint64_t rng_state_ ABSL_GUARDED_BY(stats_mu_);
  std::thread thread_;
  friend class Reactor;
};

// A random 64-bit agent instance id (from /dev/urandom, falling back to time and pid).
// The arguments of the channel fabricmon-agent streams on: keepalive through quiet streams, no
// bandwidth-delay probing, and the channel's own reconnect backoff bounded by the stream's
// (`initial_backoff`, `max_backoff`; unset: gRPC's own, 1 s growing to 120 s). The load
// generator uses them too, so that its simulated nodes cost an aggregator what agents do.
grpc::ChannelArguments AgentChannelArguments(std::optional<absl::Duration> initial_backoff,
                                             std::optional<absl::Duration> max_backoff);

uint64_t NewAgentInstanceId();
// The kernel's boot id, or "" when unavailable.
std::string ReadBootId();

}  // namespace fabricmon::agent
