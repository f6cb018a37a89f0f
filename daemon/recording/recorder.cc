#include "daemon/recording/recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/logging.h"
#include "daemon/common/thread_name.h"
#include "daemon/recording/record_format.h"
#include "daemon/recording/recording_reader.h"

namespace fabricmon::recording {
namespace {

constexpr uint64_t kMinMaxBytes = uint64_t{1} << 20;
constexpr int64_t kNanosPerSecond = 1'000'000'000;

uint64_t SegmentBytes(const RecorderOptions& options) {
  if (options.segment_bytes > 0) return options.segment_bytes;
  return std::clamp<uint64_t>(options.max_bytes / 8, uint64_t{64} << 10, uint64_t{256} << 20);
}

int64_t SegmentAge(const RecorderOptions& options) {
  if (options.segment_age_nanos > 0) return options.segment_age_nanos;
  if (options.max_age_nanos == 0) return 3600 * kNanosPerSecond;
  return std::clamp<int64_t>(options.max_age_nanos / 8, kNanosPerSecond, 3600 * kNanosPerSecond);
}

// Creates `path` and its missing parents (mode 0750: recordings hold the fleet's telemetry).
absl::Status MakeDirectories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = slash == std::string::npos ? path : path.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot create ", prefix, ": ", std::strerror(errno)));
    }
    if (slash == std::string::npos) break;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " is not writable: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view RecordingErrorName(RecordingError error) {
  switch (error) {
    case RecordingError::kWrite:
      return "write";
    case RecordingError::kQueueFull:
      return "queue_full";
    case RecordingError::kOpen:
      return "open";
    case RecordingError::kDelete:
      return "delete";
    case RecordingError::kCount:
      break;
  }
  return "unknown";
}

absl::Status ValidateRecorderOptions(const RecorderOptions& options) {
  if (options.directory.empty() || options.directory[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "recording.directory must be an absolute path, not '", options.directory, "'"));
  }
  if (options.max_bytes < kMinMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("recording.max_bytes must be at least ",
                                                   kMinMaxBytes, " (1 MiB), not ",
                                                   options.max_bytes));
  }
  if (options.max_age_nanos != 0 && options.max_age_nanos < 60 * kNanosPerSecond) {
    return absl::InvalidArgumentError(
        absl::StrCat("recording.max_age_s must be 0 (no age limit) or at least 60, not ",
                     options.max_age_nanos / kNanosPerSecond));
  }
  if (options.queue_bytes == 0) {
    return absl::InvalidArgumentError("recording queue of 0 bytes");
  }
  return absl::OkStatus();
}

Recorder::Recorder(RecorderOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

absl::StatusOr<std::unique_ptr<Recorder>> Recorder::Start(RecorderOptions options,
                                                          const Clock& clock) {
  if (absl::Status valid = ValidateRecorderOptions(options); !valid.ok()) {
    return valid;
  }
  if (absl::Status made = MakeDirectories(options.directory); !made.ok()) {
    return made;
  }
  absl::StatusOr<std::vector<std::string>> existing = ListSegments(options.directory);
  if (!existing.ok()) {
    return existing.status();
  }
  std::unique_ptr<Recorder> recorder(new Recorder(std::move(options), clock));
  for (const std::string& path : *existing) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    const std::string name = path.substr(path.rfind('/') + 1);
    recorder->segments_.push_back(
        Segment{path, SegmentStartFromName(name), static_cast<uint64_t>(st.st_size)});
    recorder->total_bytes_ += static_cast<uint64_t>(st.st_size);
  }
  recorder->ApplyRetention(clock.NowUnixNanos());
  recorder->PublishSegments();
  recorder->writer_ = std::thread([r = recorder.get()] { r->WriterLoop(); });
  return recorder;
}

Recorder::~Recorder() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
  CloseSegment();
}

void Recorder::RecordMessage(uint64_t stream, absl::string_view node, absl::string_view payload) {
  Enqueue(static_cast<uint8_t>(RecordType::kMessage), stream, node, payload);
}

void Recorder::RecordStreamEnd(uint64_t stream, absl::string_view node) {
  Enqueue(static_cast<uint8_t>(RecordType::kStreamEnd), stream, node, {});
}

void Recorder::Enqueue(uint8_t type, uint64_t stream, absl::string_view node,
                       absl::string_view payload) {
  if (!active_.load(std::memory_order_relaxed)) {
    return;
  }
  // Node names are checked by the hello (≤ 253 bytes) and payloads by max_message_bytes; a
  // caller breaking that is a bug, and the record is left out rather than written damaged.
  if (node.size() > kMaxNodeNameBytes ||
      payload.size() > kMaxBodyBytes - kBodyFixedBytes - node.size()) {
    return;
  }
  const size_t framed = kRecordPrefixBytes + kBodyFixedBytes + node.size() + payload.size();
  absl::MutexLock lock(&mu_);
  if (queue_.size() + framed > options_.queue_bytes) {
    Count(RecordingError::kQueueFull);
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "recording: the writer is behind by " << queue_.size()
        << " bytes; records dropped (fabricmon_recording_errors_total{kind=\"queue_full\"})";
    return;
  }
  // Stamped under the lock, so that receive times in the files never go backwards (a wall
  // clock stepped back holds at the last time until it catches up).
  const int64_t now = std::max(clock_.NowUnixNanos(), last_unix_nanos_);
  last_unix_nanos_ = now;
  if (queue_.empty()) {
    queue_first_unix_nanos_ = now;
  }
  AppendRecord(static_cast<RecordType>(type), stream, now, node, payload, queue_);
  ++enqueued_records_;
}

void Recorder::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = enqueued_records_;
  flush_requested_ = true;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return written_records_ >= target || !active_.load(std::memory_order_relaxed);
  };
  mu_.Await(absl::Condition(&done));
}

void Recorder::WriterLoop() {
  NameThisThread("recorder");
  std::string chunk;
  for (;;) {
    int64_t first = 0;
    uint64_t taken = 0;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return queue_.size() >= options_.write_bytes || flush_requested_ || stopping_;
      };
      // Wakes at least every max_write_delay: writes what is queued, closes an old segment and
      // applies max_age while idle.
      mu_.AwaitWithTimeout(absl::Condition(&ready), options_.max_write_delay);
      flush_requested_ = false;
      chunk.clear();
      chunk.swap(queue_);
      first = queue_first_unix_nanos_;
      taken = enqueued_records_;
      stopping = stopping_;
    }
    if (!chunk.empty() && active_.load(std::memory_order_relaxed)) {
      WriteChunk(chunk, first);
    }
    const int64_t now = clock_.NowUnixNanos();
    if (fd_ >= 0 && now - segment_opened_unix_nanos_ >= SegmentAge(options_)) {
      CloseSegment();  // the next record opens a new one
    }
    ApplyRetention(now);
    PublishSegments();
    {
      absl::MutexLock lock(&mu_);
      written_records_ = taken;
    }
    if (stopping) {
      return;
    }
    if (chunk.capacity() > (size_t{4} << 20)) {
      std::string().swap(chunk);  // give back a burst's memory
    }
  }
}

void Recorder::WriteChunk(const std::string& chunk, int64_t first_unix_nanos) {
  if (fd_ >= 0 && !segments_.empty() && segments_.back().bytes >= SegmentBytes(options_)) {
    CloseSegment();
  }
  if (fd_ < 0 && !OpenSegment(first_unix_nanos)) {
    return;
  }
  absl::string_view bytes = chunk;
  if (options_.zstd_level > 0) {
    block_.clear();
    // A block that fails to compress is written as it is (the format allows both).
    if (AppendZstdBlock(chunk, first_unix_nanos, options_.zstd_level, block_)) {
      bytes = block_;
    }
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // A partial write leaves a torn record at the tail, which readers skip.
      const int error = n < 0 ? errno : ENOSPC;
      segments_.back().bytes += done;
      total_bytes_ += done;
      bytes_written_.fetch_add(done, std::memory_order_relaxed);
      Stop(RecordingError::kWrite,
           absl::StrCat("writing ", segments_.back().path, ": ", std::strerror(error)));
      return;
    }
    done += static_cast<size_t>(n);
  }
  segments_.back().bytes += done;
  total_bytes_ += done;
  bytes_written_.fetch_add(done, std::memory_order_relaxed);
  if (block_.capacity() > (size_t{4} << 20)) {
    std::string().swap(block_);
  }
}

bool Recorder::OpenSegment(int64_t start_unix_nanos) {
  // A name no earlier segment has (two segments may start in one nanosecond).
  std::string path;
  for (;;) {
    path = JoinPath(options_.directory, "/" + SegmentName(start_unix_nanos, name_counter_++));
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0640);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0) {
    Stop(RecordingError::kOpen, absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
    return false;
  }
  segments_.push_back(Segment{path, start_unix_nanos, 0});
  segment_opened_unix_nanos_ = clock_.NowUnixNanos();
  size_t done = 0;
  while (done < kFileHeader.size()) {
    const ssize_t n = write(fd_, kFileHeader.data() + done, kFileHeader.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Stop(RecordingError::kWrite,
           absl::StrCat("writing ", path, ": ", std::strerror(n < 0 ? errno : ENOSPC)));
      return false;
    }
    done += static_cast<size_t>(n);
  }
  segments_.back().bytes += done;
  total_bytes_ += done;
  bytes_written_.fetch_add(done, std::memory_order_relaxed);
  return true;
}

void Recorder::CloseSegment() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

void Recorder::ApplyRetention(int64_t now_unix_nanos) {
  // The segment being written is never dropped; segment_bytes ≤ max_bytes / 8 keeps the total
  // within the bound once older ones are gone.
  const size_t keep = fd_ >= 0 ? 1 : 0;
  while (segments_.size() > keep) {
    const bool over_bytes = total_bytes_ > options_.max_bytes;
    // A segment holds records up to the next one's start (or up to now, for the last).
    const int64_t end = segments_.size() > 1 ? segments_[1].start_unix_nanos : now_unix_nanos;
    const bool too_old =
        options_.max_age_nanos > 0 && end < now_unix_nanos - options_.max_age_nanos;
    if (!over_bytes && !too_old) break;
    const Segment& oldest = segments_.front();
    if (unlink(oldest.path.c_str()) != 0 && errno != ENOENT) {
      Count(RecordingError::kDelete);
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "recording: cannot remove " << oldest.path << ": " << std::strerror(errno);
      break;  // tried again next round; never skip to a newer one
    }
    total_bytes_ -= std::min(total_bytes_, oldest.bytes);
    segments_.pop_front();
  }
}

void Recorder::PublishSegments() {
  segment_count_.store(segments_.size(), std::memory_order_relaxed);
  bytes_on_disk_.store(total_bytes_, std::memory_order_relaxed);
  oldest_unix_nanos_.store(segments_.empty() ? 0 : segments_.front().start_unix_nanos,
                           std::memory_order_relaxed);
}

void Recorder::Stop(RecordingError why, const std::string& message) {
  Count(why);
  active_.store(false, std::memory_order_relaxed);
  CloseSegment();
  FABRICMON_LOG(Error) << "recording stopped: " << message
                       << "; ingest goes on, nothing more is recorded until a restart "
                          "(fabricmon_recording_active 0)";
  absl::MutexLock lock(&mu_);
  queue_.clear();
  queue_.shrink_to_fit();
}

}  // namespace fabricmon::recording
