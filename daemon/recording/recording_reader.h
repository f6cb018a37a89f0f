#pragma once

// Reads a recording: one file (a segment, or what `fabricmon record export` wrote) or a whole
// recording directory (its segments in order). Files are mapped, not read into memory, so an
// exported recording of any size reads in constant memory beyond the record at hand.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/recording/record_format.h"

namespace fabricmon::recording {

// Segment files of `directory` in recording order (oldest first), full paths. NotFound when the
// directory does not exist.
absl::StatusOr<std::vector<std::string>> ListSegments(const std::string& directory);

// The first record's receive time in a segment's name, or -1 for a name that is not a segment's.
int64_t SegmentStartFromName(const std::string& file_name);
// The name a segment starting at `start_unix_nanos` gets ("segment-<20 digits>-<n>.fmrec": sorts
// in time order; n tells apart segments started in the same nanosecond).
std::string SegmentName(int64_t start_unix_nanos, uint32_t n);

struct ReadSummary {
  uint64_t files = 0;
  uint64_t records = 0;
  ReadDamage damage;  // summed over the files (bad_header: any file had one)
};

// Calls `visit` with every good record of `path` (a file or a directory), in order; stops early
// when `visit` returns false. A file that cannot be opened or mapped is an error; damage inside
// files is not (it is counted in the summary).
absl::StatusOr<ReadSummary> ReadRecording(const std::string& path,
                                          const std::function<bool(const Record&)>& visit);

}  // namespace fabricmon::recording
