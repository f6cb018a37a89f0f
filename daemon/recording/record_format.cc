#include "daemon/recording/record_format.h"

#include <zlib.h>
#include <zstd.h>

#include <cstring>

namespace fabricmon::recording {
namespace {

void PutU16(uint16_t v, std::string& out) {
  char b[2] = {static_cast<char>(v), static_cast<char>(v >> 8)};
  out.append(b, 2);
}

void PutU32(uint32_t v, char* b) {
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
}

void PutU64(uint64_t v, std::string& out) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out.append(b, 8);
}

uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<uint8_t>(p[i]);
  }
  return v;
}

uint32_t Crc(absl::string_view bytes) {
  // zlib's crc32 takes a uInt length; bodies stay below kMaxBodyBytes (< 4 GiB).
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

}  // namespace

void AppendRecord(RecordType type, uint64_t stream, int64_t receive_unix_nanos,
                  absl::string_view node, absl::string_view payload, std::string& out) {
  const size_t start = out.size();
  out.append(kRecordMagic.data(), kRecordMagic.size());
  out.append(8, '\0');  // length and CRC, filled in below
  const size_t body_start = out.size();
  out.push_back(static_cast<char>(type));
  PutU64(stream, out);
  PutU64(static_cast<uint64_t>(receive_unix_nanos), out);
  PutU16(static_cast<uint16_t>(node.size()), out);
  out.append(node.data(), node.size());
  out.append(payload.data(), payload.size());
  const absl::string_view body(out.data() + body_start, out.size() - body_start);
  PutU32(static_cast<uint32_t>(body.size()), &out[start + 4]);
  PutU32(Crc(body), &out[start + 8]);
}

void AppendRecord(const Record& record, std::string& out) {
  AppendRecord(record.type, record.stream, record.receive_unix_nanos, record.node, record.payload,
               out);
}

bool ParseBody(absl::string_view body, Record& record) {
  if (body.size() < kBodyFixedBytes) {
    return false;
  }
  const uint8_t type = static_cast<uint8_t>(body[0]);
  if (type != static_cast<uint8_t>(RecordType::kMessage) &&
      type != static_cast<uint8_t>(RecordType::kStreamEnd) &&
      type != static_cast<uint8_t>(RecordType::kZstdBlock)) {
    return false;
  }
  const size_t node_size = GetLE(body.data() + 17, 2);
  if (node_size > kMaxNodeNameBytes || kBodyFixedBytes + node_size > body.size()) {
    return false;
  }
  record.type = static_cast<RecordType>(type);
  record.stream = GetLE(body.data() + 1, 8);
  record.receive_unix_nanos = static_cast<int64_t>(GetLE(body.data() + 9, 8));
  record.node.assign(body.data() + kBodyFixedBytes, node_size);
  const absl::string_view payload = body.substr(kBodyFixedBytes + node_size);
  record.payload.assign(payload.data(), payload.size());
  return true;
}

bool AppendZstdBlock(absl::string_view framed, int64_t receive_unix_nanos, int level,
                     std::string& out) {
  std::string compressed(ZSTD_compressBound(framed.size()), '\0');
  const size_t n =
      ZSTD_compress(compressed.data(), compressed.size(), framed.data(), framed.size(), level);
  if (ZSTD_isError(n) || n > kMaxBodyBytes - kBodyFixedBytes) {
    return false;
  }
  compressed.resize(n);
  AppendRecord(RecordType::kZstdBlock, 0, receive_unix_nanos, "", compressed, out);
  return true;
}

struct RecordParser::Inner {
  std::string content;
  std::unique_ptr<RecordParser> parser;
};

RecordParser::~RecordParser() = default;

bool RecordParser::OpenBlock(const std::string& payload) {
  const unsigned long long size = ZSTD_getFrameContentSize(payload.data(), payload.size());
  // The writer always records the size; a block claiming more than a record may hold is damage
  // (and must not make the reader allocate it).
  if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR || size > kMaxBodyBytes) {
    return false;
  }
  auto inner = std::make_unique<Inner>();
  inner->content.resize(size);
  const size_t n =
      ZSTD_decompress(inner->content.data(), inner->content.size(), payload.data(), payload.size());
  if (ZSTD_isError(n) || n != size) {
    return false;
  }
  inner->parser = std::unique_ptr<RecordParser>(new RecordParser(absl::string_view()));
  inner->parser->data_ = inner->content;
  inner->parser->pos_ = 0;
  inner->parser->damage_ = ReadDamage();
  inner->parser->inner_only_ = true;
  inner_ = std::move(inner);
  return true;
}

bool RecordParser::Next(Record& record) {
  for (;;) {
    if (inner_ != nullptr) {
      if (inner_->parser->Next(record)) {
        return true;
      }
      const ReadDamage& d = inner_->parser->damage();
      damage_.skipped_bytes += d.skipped_bytes;
      damage_.damaged_regions += d.damaged_regions;
      inner_.reset();
    }
    if (!NextFramed(record)) {
      return false;
    }
    if (record.type != RecordType::kZstdBlock) {
      return true;
    }
    if (inner_only_ || !OpenBlock(record.payload)) {
      ++damage_.damaged_regions;
      damage_.skipped_bytes += record.payload.size();
    }
  }
}

RecordParser::RecordParser(absl::string_view file) : data_(file) {
  if (data_.substr(0, kFileHeader.size()) != kFileHeader) {
    damage_.bad_header = true;
    pos_ = data_.size();
    return;
  }
  pos_ = kFileHeader.size();
}

void RecordParser::Resync() {
  const size_t from = pos_ + 1;
  const size_t found = from < data_.size() ? data_.find(kRecordMagic, from) : data_.npos;
  const size_t to = found == data_.npos ? data_.size() : found;
  damage_.skipped_bytes += to - pos_;
  pos_ = to;
}

bool RecordParser::NextFramed(Record& record) {
  while (pos_ < data_.size()) {
    const size_t left = data_.size() - pos_;
    if (left < kRecordPrefixBytes) {
      // Too short even for a prefix: a torn tail if it starts like a record, garbage otherwise.
      damage_.torn_tail = kRecordMagic.substr(0, std::min(left, kRecordMagic.size())) ==
                          data_.substr(pos_, std::min(left, kRecordMagic.size()));
      ++damage_.damaged_regions;
      damage_.skipped_bytes += left;
      pos_ = data_.size();
      return false;
    }
    const char* p = data_.data() + pos_;
    if (absl::string_view(p, kRecordMagic.size()) != kRecordMagic) {
      ++damage_.damaged_regions;
      Resync();
      continue;
    }
    const uint64_t length = GetLE(p + 4, 4);
    const uint32_t crc = static_cast<uint32_t>(GetLE(p + 8, 4));
    if (length > kMaxBodyBytes || length < kBodyFixedBytes) {
      ++damage_.damaged_regions;
      Resync();
      continue;
    }
    if (length > left - kRecordPrefixBytes) {
      // The record runs past the end: torn by a crash mid-write, or its length is damaged and a
      // good record follows. Look for one before calling it a tail.
      const size_t next = data_.find(kRecordMagic, pos_ + 1);
      ++damage_.damaged_regions;
      if (next == data_.npos) {
        damage_.torn_tail = true;
        damage_.skipped_bytes += left;
        pos_ = data_.size();
        return false;
      }
      Resync();
      continue;
    }
    const absl::string_view body(p + kRecordPrefixBytes, length);
    if (Crc(body) != crc || !ParseBody(body, record)) {
      ++damage_.damaged_regions;
      Resync();
      continue;
    }
    pos_ += kRecordPrefixBytes + length;
    return true;
  }
  return false;
}

}  // namespace fabricmon::recording
