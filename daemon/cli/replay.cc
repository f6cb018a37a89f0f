#include "daemon/cli/replay.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/aggregator/ingest_session.h"
#include "daemon/common/clock.h"
#include "daemon/detectors/engine.h"
#include "daemon/recording/recording_reader.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::replay {
namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;

// Recorded time: set by the replay before each message and tick. Monotonic time runs with it
// from an origin of 1 s (what a fresh process's monotonic clock roughly reads).
class ReplayClock final : public Clock {
 public:
  int64_t NowUnixNanos() const override { return unix_.load(std::memory_order_relaxed); }
  int64_t MonotonicNanos() const override {
    return unix_.load(std::memory_order_relaxed) - origin_.load(std::memory_order_relaxed) +
           kNanosPerSecond;
  }
  // Called by the replay's thread only; read by a /metrics server's threads too.
  void Set(int64_t unix_nanos) {
    if (origin_.load(std::memory_order_relaxed) == 0) {
      origin_.store(unix_nanos, std::memory_order_relaxed);
    }
    unix_.store(std::max(unix_nanos, unix_.load(std::memory_order_relaxed)),
                std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> unix_{0};
  std::atomic<int64_t> origin_{0};
};

// The store limits the aggregator derives from the same configuration (aggregator_main.cc).
store::StoreOptions StoreOptionsFor(const v1::AggregatorConfig& config) {
  store::StoreOptions options;
  if (config.samples_per_series() > 0) options.samples_per_series = config.samples_per_series();
  if (config.max_series_per_node() > 0) options.max_series_per_node = config.max_series_per_node();
  if (config.max_new_series_per_second() > 0) {
    options.new_series.per_second = config.max_new_series_per_second();
  }
  if (config.new_series_burst() > 0) options.new_series.burst = config.new_series_burst();
  options.series_retention_nanos =
      int64_t{config.has_series_retention_s() ? config.series_retention_s() : 900} *
      kNanosPerSecond;
  options.max_nodes = config.max_nodes() > 0 ? config.max_nodes() : 20000;
  options.max_series_total = config.max_series_total() > 0 ? config.max_series_total() : 10000000;
  options.node_retention_nanos =
      int64_t{config.has_node_retention_s() ? config.node_retention_s() : 86400} * kNanosPerSecond;
  // No per-peer budget: the recording holds what the aggregator admitted, from whichever peer.
  return options;
}

// One recorded agent stream: the ingest the live stream ran (IngestSession), fed the recorded
// messages instead of the network's.
struct Stream {
  Stream(store::SeriesStore& store, aggregator::IngestStats& stats, Clock& clock)
      : session(store, stats, clock) {}
  aggregator::IngestSession session;
  bool broken = false;  // a message was refused: the live stream ended there
};

}  // namespace

class Replayer {
 public:
  explicit Replayer(const ReplayOptions& options)
      : options_(options),
        store_(StoreOptionsFor(options.config)),
        tick_nanos_(int64_t{options.config.detectors().tick_ms() > 0
                                ? options.config.detectors().tick_ms()
                                : 1000} *
                    1'000'000),
        engine_(store_, clock_, options.config.detectors(), tick_nanos_) {}

  absl::Status Setup() {
    if (absl::Status valid = detectors::ValidateThresholds(options_.config.detectors());
        !valid.ok()) {
      return valid;
    }
    engine_.SetAgentTopologyRetention(int64_t{options_.config.has_agent_topology_retention_s()
                                                  ? options_.config.agent_topology_retention_s()
                                                  : 600} *
                                      kNanosPerSecond);
    if (!options_.link_list.empty()) {
      if (absl::Status set = engine_.SetLinkList(options_.link_list); !set.ok()) {
        return set;
      }
    }
    if (options_.fabric.has_value()) {
      engine_.SetStaticFabric(*options_.fabric);
    }
    return absl::OkStatus();
  }

  void SetOnEvent(const std::function<void(const TimelineEvent&)>* on_event) {
    on_event_ = on_event;
  }
  const store::SeriesStore& store() const { return store_; }
  const detectors::DetectionEngine& engine() const { return engine_; }
  const aggregator::IngestStats& stats() const { return stats_; }
  const Clock& clock() const { return clock_; }

  void Apply(const recording::Record& record) {
    ++summary_.records;
    if (summary_.first_unix_nanos == 0) {
      summary_.first_unix_nanos = record.receive_unix_nanos;
      next_tick_ = record.receive_unix_nanos + tick_nanos_;
      wall_start_ = absl::Now();
    }
    TickUntil(record.receive_unix_nanos);
    clock_.Set(record.receive_unix_nanos);
    summary_.last_unix_nanos = clock_.NowUnixNanos();
    if (record.type == recording::RecordType::kStreamEnd) {
      auto it = streams_.find(record.stream);
      if (it != streams_.end()) {
        it->second->session.Detach(record.stream);
        streams_.erase(it);
      }
      return;
    }
    v1::AgentMessage& message = message_;  // reused: its repeated fields keep their memory
    if (!message.ParseFromString(record.payload)) {
      Refuse(record.stream);
      return;
    }
    if (message.has_hello()) {
      Hello(record, message.hello());
      return;
    }
    auto it = streams_.find(record.stream);
    if (it == streams_.end() || it->second->broken || it->second->session.node() == nullptr ||
        it->second->session.node()->name() != record.node) {
      ++summary_.refused_messages;  // no hello for it (the recording starts mid-stream)
      return;
    }
    aggregator::IngestSession& session = it->second->session;
    bool ok = false;
    switch (message.body_case()) {
      case v1::AgentMessage::kDeclarations:
        ok = !session.Declare(message.declarations()).has_value();
        break;
      case v1::AgentMessage::kLayouts:
        ok = !session.AddLayouts(message.layouts()).has_value();
        break;
      case v1::AgentMessage::kBatch: {
        auto handled = session.Batch(message.batch());
        if (auto* result = std::get_if<aggregator::IngestSession::BatchResult>(&handled)) {
          ok = true;
          if (result->stored) {
            ++summary_.batches;
            summary_.samples += result->samples;
          }
        }
        break;
      }
      case v1::AgentMessage::kInventory:
        session.SetInventory(message.inventory().inventory());
        ok = true;
        break;
      case v1::AgentMessage::kAckRequest:
        ok = true;  // acks concern the live stream only (aggregators do not record these)
        break;
      default:
        break;
    }
    if (!ok) {
      Refuse(record.stream);
    }
  }

  // Ticks through the end of the recording, so that what its last samples raise is seen.
  void Finish() {
    if (summary_.first_unix_nanos != 0) {
      TickUntil(summary_.last_unix_nanos + tick_nanos_);
    }
  }

  ReplaySummary summary() const { return summary_; }

 private:
  void Refuse(uint64_t stream) {
    ++summary_.refused_messages;
    auto it = streams_.find(stream);
    if (it != streams_.end()) it->second->broken = true;
  }

  void Hello(const recording::Record& record, const v1::Hello& hello) {
    if (hello.node_name() != record.node) {
      Refuse(record.stream);
      return;
    }
    std::unique_ptr<Stream>& stream = streams_[record.stream];
    if (stream == nullptr) {
      stream = std::make_unique<Stream>(store_, stats_, clock_);
    }
    // No cancel (a takeover is the recording's next records) and no peer bucket (the recording
    // holds what the aggregator admitted, from whichever peer).
    if (std::holds_alternative<aggregator::IngestError>(
            stream->session.Attach(hello, record.stream, [] {}))) {
      stream->broken = true;
      ++summary_.refused_messages;
      return;
    }
    ++summary_.streams;
  }

  void TickUntil(int64_t unix_nanos) {
    while (next_tick_ <= unix_nanos) {
      clock_.Set(next_tick_);
      Pace(next_tick_);
      engine_.Tick();
      ++summary_.ticks;
      Diff(next_tick_);
      next_tick_ += tick_nanos_;
    }
  }

  // --speed: waits until `unix_nanos` is due in wall-clock time.
  void Pace(int64_t unix_nanos) {
    if (options_.speed <= 0) return;
    const absl::Duration recorded = absl::Nanoseconds(unix_nanos - summary_.first_unix_nanos);
    const absl::Time due = wall_start_ + recorded / options_.speed;
    const absl::Time now = absl::Now();
    if (due > now) absl::SleepFor(due - now);
  }

  void Diff(int64_t at) {
    std::map<std::string, v1::Finding> now;
    for (v1::Finding& finding : engine_.Findings(/*include_cleared=*/false, "")) {
      std::string id = finding.id();
      now.emplace(std::move(id), std::move(finding));
    }
    for (auto& [id, finding] : active_) {
      if (now.count(id) == 0) {
        TimelineEvent event{at, EventKind::kCleared, std::move(finding)};
        event.finding.set_cleared_unix_nanos(at);
        (*on_event_)(event);
      }
    }
    for (const auto& [id, finding] : now) {
      auto before = active_.find(id);
      if (before == active_.end()) {
        (*on_event_)(TimelineEvent{at, EventKind::kRaised, finding});
      } else if (finding.severity() > before->second.severity()) {
        (*on_event_)(TimelineEvent{at, EventKind::kEscalated, finding});
      } else if (finding.severity() < before->second.severity()) {
        (*on_event_)(TimelineEvent{at, EventKind::kDeescalated, finding});
      }
    }
    active_ = std::move(now);
  }

  const ReplayOptions& options_;
  const std::function<void(const TimelineEvent&)>* on_event_ = nullptr;
  ReplayClock clock_;
  store::SeriesStore store_;
  const int64_t tick_nanos_;
  detectors::DetectionEngine engine_;
  aggregator::IngestStats stats_;  // what the sessions count; the summary counts its own
  std::map<uint64_t, std::unique_ptr<Stream>> streams_;
  v1::AgentMessage message_;
  std::map<std::string, v1::Finding> active_;  // by finding id, as of the last tick
  int64_t next_tick_ = 0;
  absl::Time wall_start_;
  ReplaySummary summary_;
};

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kRaised:
      return "raised";
    case EventKind::kEscalated:
      return "escalated";
    case EventKind::kDeescalated:
      return "deescalated";
    case EventKind::kCleared:
      return "cleared";
  }
  return "unknown";
}

ReplayRun::ReplayRun(ReplayOptions options)
    : options_(std::move(options)), replayer_(std::make_unique<Replayer>(options_)) {}

ReplayRun::~ReplayRun() = default;

absl::StatusOr<std::unique_ptr<ReplayRun>> ReplayRun::Create(ReplayOptions options) {
  std::unique_ptr<ReplayRun> run(new ReplayRun(std::move(options)));
  if (absl::Status ready = run->replayer_->Setup(); !ready.ok()) {
    return ready;
  }
  return run;
}

const store::SeriesStore& ReplayRun::store() const { return replayer_->store(); }
const detectors::DetectionEngine& ReplayRun::engine() const { return replayer_->engine(); }
const aggregator::IngestStats& ReplayRun::ingest_stats() const { return replayer_->stats(); }
const Clock& ReplayRun::clock() const { return replayer_->clock(); }

absl::StatusOr<ReplaySummary> ReplayRun::Run(
    const std::string& path, const std::function<void(const TimelineEvent&)>& on_event) {
  if (ran_) {
    return absl::FailedPreconditionError("a ReplayRun replays once");
  }
  ran_ = true;
  replayer_->SetOnEvent(&on_event);
  absl::StatusOr<recording::ReadSummary> read =
      recording::ReadRecording(path, [this](const recording::Record& record) {
        replayer_->Apply(record);
        return true;
      });
  if (!read.ok()) {
    replayer_->SetOnEvent(nullptr);
    return read.status();
  }
  replayer_->Finish();
  replayer_->SetOnEvent(nullptr);
  ReplaySummary summary = replayer_->summary();
  summary.damage = read->damage;
  return summary;
}

absl::StatusOr<ReplaySummary> Replay(const std::string& path, const ReplayOptions& options,
                                     const std::function<void(const TimelineEvent&)>& on_event) {
  absl::StatusOr<std::unique_ptr<ReplayRun>> run = ReplayRun::Create(options);
  if (!run.ok()) {
    return run.status();
  }
  return (*run)->Run(path, on_event);
}

}  // namespace fabricmon::replay
