#include "daemon/cli/record_export.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/recording/recording_reader.h"
#include "daemon/wire/batch_codec.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::replay {
namespace {

// A stream before the window: what it will need carried into the window, and its wire state.
//
// Batches are delta-encoded per stream and series id (wire::StreamEncoder), and a replay of the
// export decodes the carried stream with a fresh decoder whose baseline is zero for every id. So
// the stream's batches before the window go through the aggregator's own decoder here, and the
// first in-window value of each series whose true value differs from that zero baseline is
// re-encoded against it (its delta becomes its absolute value); every later delta is already
// right, so it is kept as recorded. This is exact and adds nothing to the stream: no synthetic
// batch, the recorded sequences and timestamps unchanged.
struct StreamContext {
  std::vector<recording::Record> records;      // hello, declarations, layouts
  std::optional<recording::Record> inventory;  // the latest inventory update
  wire::StreamDecoder decoder;
  absl::flat_hash_set<uint32_t> nonzero;  // ids whose decoded value is not the zero baseline
};

// A carried stream in the window, until every id of `pending` has been re-encoded once.
struct Rebase {
  wire::StreamDecoder decoder;
  absl::flat_hash_set<uint32_t> pending;
};

// Feeds a declarations or layouts message to `decoder` as the aggregator's ingest does; false when
// the decoder refuses it (the live stream, and a replay, would have ended there).
bool FeedContext(const v1::AgentMessage& message, wire::StreamDecoder& decoder) {
  if (message.has_declarations()) {
    for (const v1::SeriesDeclaration& declaration : message.declarations().series()) {
      if (!decoder.Declare(declaration.id()).ok()) return false;
    }
  } else if (message.has_layouts()) {
    for (const v1::Layout& layout : message.layouts().layouts()) {
      if (!decoder.AddLayout(layout).ok()) return false;
    }
  }
  return true;
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
  std::map<uint64_t, Rebase> rebasing;     // by stream, in the window
  std::set<uint64_t> left_out;             // streams the decoder refused before the window
  bool in_window = false;
  bool write_failed = false;
  std::string buffer;
  v1::AgentMessage message;  // reused: its repeated fields keep their memory
  wire::DecodedBatch decoded;
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
      if (!context.nonzero.empty()) {
        rebasing.emplace(stream, Rebase{std::move(context.decoder), std::move(context.nonzero)});
      }
    }
    open.clear();
  };
  // A carried stream's record in the window, its first value of each pending id re-encoded
  // against the zero baseline. A message the decoder refuses is passed on as recorded: the
  // replay refuses it too, and ends the stream there as the live aggregator would have.
  auto emit_rebased = [&](const recording::Record& record) {
    auto it = rebasing.find(record.stream);
    Rebase& rebase = it->second;
    bool keep_rebasing = record.type != recording::RecordType::kStreamEnd &&
                         message.ParseFromString(record.payload) &&
                         FeedContext(message, rebase.decoder);
    if (keep_rebasing && message.has_batch()) {
      v1::SampleBatch& batch = *message.mutable_batch();
      keep_rebasing = rebase.decoder.Decode(batch, &decoded).ok();
      bool rewritten = false;
      for (size_t i = 0, k = 0; keep_rebasing && i < decoded.values.size(); ++i) {
        if (!decoded.present[i]) continue;
        if (rebase.pending.erase((*decoded.series_ids)[i]) > 0) {
          batch.set_value_deltas(static_cast<int>(k), static_cast<int64_t>(decoded.values[i]));
          rewritten = true;
        }
        ++k;
      }
      if (rewritten) {
        recording::Record rebased{record.type, record.stream, record.receive_unix_nanos,
                                  record.node, message.SerializeAsString()};
        emit(rebased);
        ++summary.rebased_batches;
        if (rebase.pending.empty()) rebasing.erase(it);
        return;
      }
    }
    if (!keep_rebasing) rebasing.erase(it);
    emit(record);
  };
  absl::StatusOr<recording::ReadSummary> read =
      recording::ReadRecording(directory, [&](const recording::Record& record) {
        if (write_failed) return false;
        if (record.receive_unix_nanos > options.to_unix_nanos) return false;
        if (!options.nodes.empty() && options.nodes.count(record.node) == 0) return true;
        if (record.receive_unix_nanos >= options.from_unix_nanos) {
          if (!in_window) enter_window();
          if (left_out.count(record.stream) > 0) return true;
          if (rebasing.count(record.stream) > 0) {
            emit_rebased(record);
          } else {
            emit(record);
          }
          return true;
        }
        // Before the window: keep what a stream still open at its start will need, and follow
        // its values through the aggregator's decoder (every batch: the deltas add up).
        if (record.type == recording::RecordType::kStreamEnd) {
          open.erase(record.stream);
          left_out.erase(record.stream);
          return true;
        }
        if (!message.ParseFromString(record.payload)) {
          message.Clear();  // not a message: refused below if its stream is open
        }
        if (message.has_hello()) {
          open.erase(record.stream);
          left_out.erase(record.stream);
          open[record.stream].records.push_back(record);
          return true;
        }
        auto it = open.find(record.stream);
        if (it == open.end()) return true;  // no hello (the recording starts mid-stream)
        StreamContext& context = it->second;
        bool refused = false;
        switch (message.body_case()) {
          case v1::AgentMessage::kDeclarations:
          case v1::AgentMessage::kLayouts:
            refused = !FeedContext(message, context.decoder);
            context.records.push_back(record);
            break;
          case v1::AgentMessage::kInventory:
            context.inventory = record;
            break;
          case v1::AgentMessage::kAckRequest:
            break;  // acks concern the live stream only
          case v1::AgentMessage::kBatch:
            refused = !context.decoder.Decode(message.batch(), &decoded).ok();
            for (size_t i = 0; !refused && i < decoded.values.size(); ++i) {
              if (!decoded.present[i]) continue;
              const uint32_t id = (*decoded.series_ids)[i];
              if (decoded.values[i] != 0) {
                context.nonzero.insert(id);
              } else {
                context.nonzero.erase(id);
              }
            }
            break;
          default:
            refused = true;
            break;
        }
        if (refused) {
          // The replay of the whole recording ends the stream here, so its values from here on
          // are not known: the export leaves the rest of the stream out rather than carry it
          // with values that would be wrong.
          open.erase(it);
          left_out.insert(record.stream);
          ++summary.streams_left_out;
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
