#include "daemon/cli/record_export.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/recording/recording_reader.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::replay {
namespace {

// What a stream open at the window's start needs carried into it, in arrival order.
struct StreamContext {
  std::vector<recording::Record> records;      // hello, declarations, layouts
  std::optional<recording::Record> inventory;  // the latest inventory update
};

// The message kind of a recorded payload, from its first byte: an AgentMessage holds one field of
// its oneof, so it starts with that field's tag (field number << 3 | 2, length-delimited). Not
// parsing every batch before the window keeps an export of the last hour of a week cheap; the
// replay parses (and checks) every record it is given.
v1::AgentMessage::BodyCase KindOf(const std::string& payload) {
  if (payload.empty() || (static_cast<uint8_t>(payload[0]) & 7) != 2) {
    return v1::AgentMessage::BODY_NOT_SET;
  }
  return static_cast<v1::AgentMessage::BodyCase>(static_cast<uint8_t>(payload[0]) >> 3);
}

}  // namespace

absl::StatusOr<int64_t> ParseTime(const std::string& text) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    if (!std::isfinite(seconds) || seconds < 0 || seconds > 9.2e9) {
      return absl::InvalidArgumentError(absl::StrCat("time '", text, "' is out of range"));
    }
    return static_cast<int64_t>(std::llround(seconds * 1e9));
  }
  absl::Time time;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &time, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "time '", text, "' is neither RFC 3339 (2026-03-01T03:12:00Z) nor Unix seconds: ", error));
  }
  return absl::ToUnixNanos(time);
}

absl::StatusOr<ExportSummary> ExportRecording(const std::string& directory,
                                              const ExportOptions& options, std::FILE* out) {
  ExportSummary summary;
  std::map<uint64_t, StreamContext> open;  // by stream, before the window
  bool in_window = false;
  bool write_failed = false;
  std::string buffer;
  auto flush = [&]() {
    if (!buffer.empty() && std::fwrite(buffer.data(), 1, buffer.size(), out) != buffer.size()) {
      write_failed = true;
    }
    summary.bytes += buffer.size();
    buffer.clear();
  };
  auto emit = [&](const recording::Record& record) {
    recording::AppendRecord(record, buffer);
    ++summary.records;
    if (buffer.size() >= (1u << 20)) flush();
  };
  buffer.append(recording::kFileHeader.data(), recording::kFileHeader.size());
  auto enter_window = [&]() {
    in_window = true;
    for (auto& [stream, context] : open) {
      for (recording::Record& record : context.records) {
        record.receive_unix_nanos = options.from_unix_nanos;
        emit(record);
        ++summary.carried_records;
      }
      if (context.inventory.has_value()) {
        context.inventory->receive_unix_nanos = options.from_unix_nanos;
        emit(*context.inventory);
        ++summary.carried_records;
      }
    }
    open.clear();
  };
  absl::StatusOr<recording::ReadSummary> read =
      recording::ReadRecording(directory, [&](const recording::Record& record) {
        if (write_failed) return false;
        if (record.receive_unix_nanos > options.to_unix_nanos) return false;
        if (!options.nodes.empty() && options.nodes.count(record.node) == 0) return true;
        if (record.receive_unix_nanos >= options.from_unix_nanos) {
          if (!in_window) enter_window();
          emit(record);
          return true;
        }
        // Before the window: keep what a stream still open at its start will need.
        if (record.type == recording::RecordType::kStreamEnd) {
          open.erase(record.stream);
          return true;
        }
        switch (KindOf(record.payload)) {
          case v1::AgentMessage::kHello:
            open[record.stream] = StreamContext{{record}, std::nullopt};
            break;
          case v1::AgentMessage::kDeclarations:
          case v1::AgentMessage::kLayouts:
            if (open.count(record.stream) > 0) open[record.stream].records.push_back(record);
            break;
          case v1::AgentMessage::kInventory:
            if (open.count(record.stream) > 0) open[record.stream].inventory = record;
            break;
          default:
            break;  // batches before the window, and records that do not parse
        }
        return true;
      });
  if (!read.ok()) {
    return read.status();
  }
  summary.damage = read->damage;
  flush();
  if (std::fflush(out) != 0) write_failed = true;
  if (write_failed) {
    return absl::UnavailableError(absl::StrCat(
        "writing the recording failed (", std::strerror(errno), "); the output is incomplete"));
  }
  return summary;
}

}  // namespace fabricmon::replay
