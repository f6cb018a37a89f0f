#pragma once

// The recording's on-disk format: what the aggregator accepted from each agent, as it arrived.
//
// A file (a segment, or an exported recording) is an 8-byte header followed by records:
//
//   header  "FMREC\x01\r\n"
//   record  magic "FMr\x01" | u32 body length | u32 CRC-32 (zlib) of the body | body
//   body    u8 type | u64 stream | i64 receive time (Unix ns) | u16 node length | node | payload
//
// Integers are little-endian. `stream` tells one agent stream from the next of the same node (a
// reconnect, a takeover); `payload` is a serialized fabricmon.v1.AgentMessage for kMessage and
// empty for kStreamEnd. The magic lets a reader find the next record after a damaged one: a torn
// tail (a crash mid-write) or flipped bytes cost the records they touch, not the file.
//
// kZstdBlock holds other records, compressed: its payload is one zstd frame whose content is
// framed records as above (no header, no blocks within). Readers hand out the records inside;
// a damaged block costs its records.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace fabricmon::recording {

inline constexpr absl::string_view kFileHeader{"FMREC\x01\r\n", 8};
inline constexpr absl::string_view kRecordMagic{"FMr\x01", 4};
inline constexpr size_t kRecordPrefixBytes = 12;  // magic, length, CRC
inline constexpr size_t kBodyFixedBytes = 1 + 8 + 8 + 2;
// Larger than any message the aggregator accepts (max_message_bytes ≤ 1 GiB) plus the header;
// a length above it is damage, not a record.
inline constexpr uint32_t kMaxBodyBytes = (1u << 30) + 4096;
inline constexpr size_t kMaxNodeNameBytes = 253;

enum class RecordType : uint8_t {
  kMessage = 1,    // an AgentMessage the aggregator accepted (hello, declarations, layouts, ...)
  kStreamEnd = 2,  // the stream ended (the agent went away, or the aggregator ended it)
  kZstdBlock = 3,  // records compressed together (never returned by RecordParser)
};

struct Record {
  RecordType type = RecordType::kMessage;
  uint64_t stream = 0;
  int64_t receive_unix_nanos = 0;
  std::string node;
  std::string payload;
};

// Appends `record`, framed, to `out`. The caller keeps node names within kMaxNodeNameBytes and
// payloads within kMaxBodyBytes (the aggregator's own limits are far below).
void AppendRecord(const Record& record, std::string& out);
// Same, from parts (no copy of the payload into a Record first).
void AppendRecord(RecordType type, uint64_t stream, int64_t receive_unix_nanos,
                  absl::string_view node, absl::string_view payload, std::string& out);

// What reading a file came across besides good records.
struct ReadDamage {
  uint64_t skipped_bytes = 0;    // bytes of damaged records and garbage between records
  uint64_t damaged_regions = 0;  // places where a record failed its checks
  bool torn_tail = false;        // the file ends inside a record (a crash mid-write)
  bool bad_header = false;       // not a recording file at all (nothing was read)
};

// `framed` (records as AppendRecord wrote them, without a file header) compressed into one
// kZstdBlock record appended to `out`, stamped `receive_unix_nanos`; false (nothing appended)
// when zstd fails or the block would exceed kMaxBodyBytes.
bool AppendZstdBlock(absl::string_view framed, int64_t receive_unix_nanos, int level,
                     std::string& out);

// Reads records from a file's bytes (header included). Never trusts a byte: a record is returned
// only when its magic, length, CRC and body layout all check out; otherwise the reader counts the
// damage and resynchronises on the next magic. Compressed blocks are opened and their records
// returned in order.
class RecordParser {
 public:
  explicit RecordParser(absl::string_view file);
  ~RecordParser();
  // The next good record, or false at the end.
  bool Next(Record& record);
  const ReadDamage& damage() const { return damage_; }

 private:
  struct Inner;  // the records of a decompressed block
  // Skips to the next record magic at or after pos_ + 1, counting what is skipped.
  void Resync();
  // Next record of data_ from pos_, blocks not opened.
  bool NextFramed(Record& record);
  // Decompresses a block's payload and starts reading its records; false when it is damaged.
  bool OpenBlock(const std::string& payload);

  absl::string_view data_;
  size_t pos_ = 0;
  ReadDamage damage_;
  bool inner_only_ = false;  // reading a block's content: no header, no nested blocks
  std::unique_ptr<Inner> inner_;
};

// Parses one record body (no prefix); false when its layout does not check out.
bool ParseBody(absl::string_view body, Record& record);

}  // namespace fabricmon::recording
