#pragma once

// Records what the aggregator accepted, per node, into rotating segment files in one directory
// (record_format.h), bounded by bytes and by age, oldest segment dropped first.
//
// Ingest must never wait on a disk: Record*() frame the message into an in-memory queue under a
// short lock and return; a writer thread of the recorder's own appends the queue to the current
// segment. A full queue drops what does not fit (counted as errors{kind="queue_full"}); a failed
// write (disk full, file size limit, I/O error) stops the recording for good, with one log line
// and errors{kind="write"}, and Record*() become no-ops. A crash leaves at worst a torn tail,
// which readers skip.
//
// Thread-safe.

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/common/clock.h"

namespace fabricmon::recording {

struct RecorderOptions {
  std::string directory;                                   // created if absent
  uint64_t max_bytes = uint64_t{1} << 30;                  // all segments together
  int64_t max_age_nanos = int64_t{86400} * 1'000'000'000;  // 0: no age limit
  // A segment is closed when it reaches this size or age; 0 derives them from the bounds
  // (an eighth of each, within 64 KiB..256 MiB and 1 s..1 h), so that dropping the oldest
  // segment gives back a small part of the budget.
  uint64_t segment_bytes = 0;
  int64_t segment_age_nanos = 0;
  // What may wait for the writer thread; beyond it records are dropped (queue_full).
  size_t queue_bytes = size_t{64} << 20;
  // The writer takes the queue once it holds this much, or after max_write_delay: fewer, larger
  // writes, and blocks large enough to compress well. A crash loses what was still queued.
  size_t write_bytes = size_t{256} << 10;
  absl::Duration max_write_delay = absl::Seconds(1);
  // zstd level of the blocks written (each write is one block); 0: records written as they are.
  int zstd_level = 1;
};

// The configured bounds make sense: InvalidArgument naming the problem otherwise.
absl::Status ValidateRecorderOptions(const RecorderOptions& options);

enum class RecordingError : uint8_t {
  kWrite = 0,      // a write failed: recording stopped
  kQueueFull = 1,  // the writer fell behind: records dropped
  kOpen = 2,       // a new segment could not be created: recording stopped
  kDelete = 3,     // an old segment could not be removed (retention)
  kCount = 4,
};
absl::string_view RecordingErrorName(RecordingError error);  // "write", "queue_full", ...

class Recorder {
 public:
  // Creates the directory if needed, takes stock of segments earlier runs left (they count
  // towards the bounds) and starts the writer thread. An error when the directory cannot be
  // created or read, or the options are invalid.
  static absl::StatusOr<std::unique_ptr<Recorder>> Start(RecorderOptions options,
                                                         const Clock& clock);
  // Writes what is queued, then stops the writer thread.
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // An accepted AgentMessage of `node`'s stream `stream`, serialized.
  void RecordMessage(uint64_t stream, absl::string_view node, absl::string_view payload)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `node`'s stream `stream` ended.
  void RecordStreamEnd(uint64_t stream, absl::string_view node) ABSL_LOCKS_EXCLUDED(mu_);
  // Until everything queued before the call is written (or recording has stopped). Tests and
  // shutdown.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

  // Records accepted into the queue since start (tests wait on it).
  uint64_t records_queued() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return enqueued_records_;
  }

  // For /metrics.
  bool active() const { return active_.load(std::memory_order_relaxed); }
  uint64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }
  uint64_t segments() const { return segment_count_.load(std::memory_order_relaxed); }
  uint64_t bytes_on_disk() const { return bytes_on_disk_.load(std::memory_order_relaxed); }
  // The first receive time in the oldest segment kept; 0 with no segment.
  int64_t oldest_unix_nanos() const { return oldest_unix_nanos_.load(std::memory_order_relaxed); }
  uint64_t errors(RecordingError kind) const {
    return errors_[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
  }
  const RecorderOptions& options() const { return options_; }

 private:
  struct Segment {
    std::string path;
    int64_t start_unix_nanos = 0;
    uint64_t bytes = 0;
  };

  Recorder(RecorderOptions options, const Clock& clock);
  void Enqueue(uint8_t type, uint64_t stream, absl::string_view node, absl::string_view payload)
      ABSL_LOCKS_EXCLUDED(mu_);
  void WriterLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Writer thread only (no lock needed: only it touches the files and segments_).
  void WriteChunk(const std::string& chunk, int64_t first_unix_nanos);
  bool OpenSegment(int64_t start_unix_nanos);
  void CloseSegment();
  void ApplyRetention(int64_t now_unix_nanos);
  void Stop(RecordingError why, const std::string& message);
  void Count(RecordingError kind) {
    errors_[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  }
  void PublishSegments();

  const RecorderOptions options_;
  const Clock& clock_;

  absl::Mutex mu_;
  std::string queue_ ABSL_GUARDED_BY(mu_);  // framed records waiting for the writer
  int64_t queue_first_unix_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_unix_nanos_ ABSL_GUARDED_BY(mu_) = 0;    // receive times never go backwards
  uint64_t enqueued_records_ ABSL_GUARDED_BY(mu_) = 0;  // records queued so far
  uint64_t written_records_ ABSL_GUARDED_BY(mu_) = 0;   // of those, written (or dropped)
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> active_{true};

  // Writer thread's.
  std::deque<Segment> segments_;
  int fd_ = -1;
  int64_t segment_opened_unix_nanos_ = 0;
  uint32_t name_counter_ = 0;
  uint64_t total_bytes_ = 0;

  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> segment_count_{0};
  std::atomic<uint64_t> bytes_on_disk_{0};
  std::atomic<int64_t> oldest_unix_nanos_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(RecordingError::kCount)> errors_{};
  std::string block_;  // writer thread: a chunk compressed
  std::thread writer_;
};

}  // namespace fabricmon::recording
