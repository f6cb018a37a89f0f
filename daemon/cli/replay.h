#pragma once

// Replays a recording (recording_reader.h) through the aggregator's series store and detection
// engine, offline: the clock is the recorded receive times, the engine ticks at the configured
// tick interval of recorded time, and every change of the findings (raised, escalated,
// de-escalated, cleared) is reported with the recorded time it happened at. The same recording
// and configuration give the same timeline, byte for byte.
//
// Each recorded message is applied by the aggregator's own ingest (aggregator::IngestSession, what
// AgentStream runs): hello → attach, declarations, layouts and batches through the wire decoder
// into the store, inventory updates, stream ends → detach. A recording is untrusted input: a
// record that does not parse, or that the session refuses, ends its stream in the replay as it
// would have live, and is counted.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/common/clock.h"
#include "daemon/detectors/engine.h"
#include "daemon/recording/record_format.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/config.pb.h"
#include "fabricmon/v1/diagnostics.pb.h"
#include "fabricmon/v1/inventory.pb.h"

namespace fabricmon::replay {

struct ReplayOptions {
  // The aggregator's configuration: store limits, detector thresholds and tick_ms. Its
  // link_list_file and topology_file are not read here (the caller passes their content).
  v1::AggregatorConfig config;
  std::string link_list;                // a link-list file's content, or empty
  std::optional<v1::Inventory> fabric;  // cabling parsed from an ibnetdiscover file
  // Recorded seconds per wall-clock second; 0: as fast as possible.
  double speed = 0;
};

enum class EventKind { kRaised, kEscalated, kDeescalated, kCleared };
const char* EventKindName(EventKind kind);  // "raised", "escalated", "deescalated", "cleared"

struct TimelineEvent {
  int64_t at_unix_nanos = 0;  // recorded time of the tick that saw the change
  EventKind kind = EventKind::kRaised;
  v1::Finding finding;  // as the CLI's `findings` shows it (cleared: its last state)
};

struct ReplaySummary {
  uint64_t records = 0;
  uint64_t streams = 0;
  uint64_t batches = 0;           // batches stored
  uint64_t samples = 0;           // samples stored
  uint64_t refused_messages = 0;  // records that did not parse or that the store refused
  uint64_t ticks = 0;
  int64_t first_unix_nanos = 0;
  int64_t last_unix_nanos = 0;
  recording::ReadDamage damage;
};

class Replayer;

// One replay's state (the store, the engine, the ingest counters and the recorded-time clock),
// kept after the replay so that a caller can go on serving it (replay_metrics.h serves /metrics
// over it while the replay runs and after it ended). The state is thread-safe to read while
// Run() runs, as the aggregator's is while it ingests.
class ReplayRun {
 public:
  // InvalidArgument for a configuration the aggregator would refuse.
  static absl::StatusOr<std::unique_ptr<ReplayRun>> Create(ReplayOptions options);
  ~ReplayRun();
  ReplayRun(const ReplayRun&) = delete;
  ReplayRun& operator=(const ReplayRun&) = delete;

  // Replays `path` (a recording file or directory), calling `on_event` in timeline order. Once
  // per run. The reader's errors for a path that cannot be read.
  absl::StatusOr<ReplaySummary> Run(const std::string& path,
                                    const std::function<void(const TimelineEvent&)>& on_event);

  const ReplayOptions& options() const { return options_; }
  const store::SeriesStore& store() const;
  const detectors::DetectionEngine& engine() const;
  const aggregator::IngestStats& ingest_stats() const;
  const Clock& clock() const;  // the recorded time the replay has reached

 private:
  explicit ReplayRun(ReplayOptions options);

  const ReplayOptions options_;
  std::unique_ptr<Replayer> replayer_;
  bool ran_ = false;
};

// Replays `path` (a recording file or directory), calling `on_event` in timeline order.
// InvalidArgument for a configuration the aggregator would refuse; the reader's errors for a
// path that cannot be read.
absl::StatusOr<ReplaySummary> Replay(const std::string& path, const ReplayOptions& options,
                                     const std::function<void(const TimelineEvent&)>& on_event);

}  // namespace fabricmon::replay
