#pragma once

// The few pieces of protobuf's wire format the remote-write encoder writes by hand (varints,
// length-delimited and fixed64 fields), with the tags of remote_write.proto's fields. Kept beside
// the encoder so that every tag byte is named once; encoder_test checks the bytes against
// protobuf's own serialization.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fabricmon::remote_write::wire {

// Tag bytes: field number << 3 | wire type (2: length-delimited, 1: fixed64, 0: varint).
inline constexpr char kWriteRequestTimeseries = 0x0a;  // WriteRequest.timeseries = 1
inline constexpr char kTimeSeriesLabels = 0x0a;        // TimeSeries.labels = 1
inline constexpr char kTimeSeriesSamples = 0x12;       // TimeSeries.samples = 2
inline constexpr char kLabelName = 0x0a;               // Label.name = 1
inline constexpr char kLabelValue = 0x12;              // Label.value = 2
inline constexpr char kSampleValue = 0x09;             // Sample.value = 1 (double)
inline constexpr char kSampleTimestamp = 0x10;         // Sample.timestamp = 2 (int64)

// Without a loop: a millisecond timestamp is six groups of seven bits, and the feed sizes one per
// sample. 1 + (index of the highest set bit) / 7, as (bit * 9 + 73) / 64 for bit in [0, 63].
inline size_t VarintSize(uint64_t value) {
  const int highest_bit = 63 - __builtin_clzll(value | 1);
  return static_cast<size_t>((highest_bit * 9 + 73) / 64);
}

// A one-byte tag, the length, then `length` bytes.
inline size_t FieldSize(size_t length) { return 1 + VarintSize(length) + length; }

inline char* WriteVarint(uint64_t value, char* out) {
  while (value >= 0x80) {
    *out++ = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  *out++ = static_cast<char>(value);
  return out;
}

// Reads a varint of `bytes` at `*pos` and moves `*pos` past it; false (and `*pos` unchanged) when
// it runs past the end or past ten bytes.
inline bool ReadVarint(std::string_view bytes, size_t* pos, uint64_t* value) {
  uint64_t result = 0;
  for (size_t i = *pos, shift = 0; i < bytes.size() && shift < 70; ++i, shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(bytes[i]);
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (byte < 0x80) {
      *pos = i + 1;
      *value = result;
      return true;
    }
  }
  return false;
}

inline void AppendVarint(uint64_t value, std::string& out) {
  char buffer[10];
  out.append(buffer, WriteVarint(value, buffer) - buffer);
}

}  // namespace fabricmon::remote_write::wire
