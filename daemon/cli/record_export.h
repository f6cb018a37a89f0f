#pragma once

// `fabricmon record export`: cuts a time window (and optionally some nodes) out of a recording
// directory into one self-contained recording file. Self-contained: for every stream already
// open when the window starts, the messages a replay needs to make sense of its batches (its
// hello, declarations, layouts and latest inventory) come first, stamped with the window's
// start; its earlier batches are left out. Values stay true from the window's first batch on:
// the earlier batches' deltas are followed through the aggregator's wire decoder, and each
// series' first value in the window is re-encoded against the zero baseline a fresh decoder
// starts from (see record_export.cc).

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/recording/record_format.h"

namespace fabricmon::replay {

struct ExportOptions {
  int64_t from_unix_nanos = 0;
  int64_t to_unix_nanos = INT64_MAX;  // inclusive
  std::set<std::string> nodes;        // empty: every node
};

struct ExportSummary {
  uint64_t records = 0;          // written
  uint64_t carried_records = 0;  // of those, context from before the window
  uint64_t bytes = 0;
  uint64_t rebased_batches = 0;   // in-window batches re-encoded to carry absolute values
  uint64_t streams_left_out = 0;  // refused by the wire decoder before the window (as in replay)
  recording::ReadDamage damage;   // what reading the directory skipped
};

// Writes the recording file to `out`. Unavailable when a write fails (a full disk, a closed
// pipe): the output is then incomplete, and the caller must say so.
absl::StatusOr<ExportSummary> ExportRecording(const std::string& directory,
                                              const ExportOptions& options, std::FILE* out);

// "2026-03-01T03:12:00Z" (RFC 3339) or Unix seconds ("1772334720", "1772334720.5") → Unix ns.
absl::StatusOr<int64_t> ParseTime(const std::string& text);

}  // namespace fabricmon::replay
