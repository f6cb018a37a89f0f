#include "daemon/remote_write/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "daemon/remote_write/protobuf_wire.h"
#include "snappy.h"

namespace fabricmon::remote_write {
namespace {

// What DecodeWriteRequest inflates at most (a hostile length header must not allocate more).
constexpr size_t kMaxDecodedBytes = size_t{256} << 20;
constexpr uint64_t kStaleNaNBits = 0x7ff0000000000002ULL;  // Prometheus' value.StaleNaN

uint64_t DoubleBits(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// The Sample message's size. proto3 leaves out a field at its default: a value whose bits are
// all zero (+0.0, not -0.0) and a zero timestamp.
size_t SampleMessageSize(int64_t timestamp_ms, uint64_t value_bits) {
  return (value_bits != 0 ? 9 : 0) +
         (timestamp_ms != 0 ? 1 + wire::VarintSize(static_cast<uint64_t>(timestamp_ms)) : 0);
}

char* WriteSample(int64_t timestamp_ms, uint64_t value_bits, size_t message_size, char* out) {
  *out++ = wire::kTimeSeriesSamples;
  out = wire::WriteVarint(message_size, out);
  if (value_bits != 0) {
    *out++ = wire::kSampleValue;
    for (int i = 0; i < 8; ++i) {  // fixed64: little-endian, whatever the host's order
      *out++ = static_cast<char>(value_bits >> (8 * i));
    }
  }
  if (timestamp_ms != 0) {
    *out++ = wire::kSampleTimestamp;
    out = wire::WriteVarint(static_cast<uint64_t>(timestamp_ms), out);
  }
  return out;
}

}  // namespace

double StaleNaN() {
  double value;
  std::memcpy(&value, &kStaleNaNBits, sizeof(value));
  return value;
}

bool IsStaleNaN(double value) { return DoubleBits(value) == kStaleNaNBits; }

LabelMerger::LabelMerger(const LabelPairs& external_labels, const LabelPairs& aggregator_labels) {
  auto encode = [](const LabelPairs& labels) {
    std::vector<ExternalLabel> out;
    for (const auto& [name, value] : labels) {
      ExternalLabel& label = out.emplace_back();
      label.name = name;
      AppendEncodedLabel(name, value, label.encoded);
    }
    return out;
  };
  agent_external_ = encode(external_labels);
  LabelPairs all = external_labels;
  all.insert(all.end(), aggregator_labels.begin(), aggregator_labels.end());
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  aggregator_external_ = encode(all);
}

// Both lists sorted by name; on a tie the series' own label wins. The series' names are read back
// from its encoded labels (each a tag, a length, then the Label message, whose name field comes
// first).
void LabelMerger::Append(std::string_view own, SeriesOrigin origin, std::string& out) const {
  const std::vector<ExternalLabel>& external =
      origin == SeriesOrigin::kAgent ? agent_external_ : aggregator_external_;
  size_t j = 0;
  size_t pos = 0;
  while (pos < own.size() && j < external.size()) {
    size_t cursor = pos + 1;  // past the TimeSeries.labels tag
    uint64_t length = 0;
    if (!wire::ReadVarint(own, &cursor, &length) || length > own.size() - cursor) {
      break;  // cannot happen (label_set.h wrote these bytes); the rest go after them
    }
    const size_t end = cursor + length;
    std::string_view name;
    if (cursor < end && own[cursor] == wire::kLabelName) {
      size_t at = cursor + 1;
      uint64_t name_length = 0;
      if (wire::ReadVarint(own, &at, &name_length) && name_length <= end - at) {
        name = own.substr(at, name_length);
      }
    }
    // External labels sorting before this one go first; one of the same name is left out.
    for (; j < external.size() && external[j].name <= name; ++j) {
      if (external[j].name < name) {
        out.append(external[j].encoded);
      }
    }
    out.append(own.substr(pos, end - pos));
    pos = end;
  }
  out.append(own.substr(pos));
  for (; j < external.size(); ++j) {
    out.append(external[j].encoded);
  }
}

void EncodedSamples::Add(absl::string_view labels, int64_t timestamp_ms, double value) {
  const uint64_t bits = DoubleBits(value);
  const size_t sample_size = SampleMessageSize(timestamp_ms, bits);
  const size_t series_size = labels.size() + wire::FieldSize(sample_size);
  const size_t field_size = wire::FieldSize(series_size);
  if (buffer_.size() - used_ < field_size) {
    buffer_.resize(std::max(2 * buffer_.size(), used_ + field_size));  // geometric
  }
  char* const begin = buffer_.data() + used_;
  char* out = begin;
  *out++ = wire::kWriteRequestTimeseries;
  out = wire::WriteVarint(series_size, out);
  std::memcpy(out, labels.data(), labels.size());
  out = WriteSample(timestamp_ms, bits, sample_size, out + labels.size());
  used_ += static_cast<size_t>(out - begin);
  ends_.push_back(used_);
}

void EncodeSamples(absl::Span<const PendingSample> samples, const LabelMerger& labels,
                   EncodedSamples& out) {
  std::string merged;
  for (const PendingSample& sample : samples) {
    merged.clear();
    labels.Append(*sample.series, merged);
    out.Add(merged, sample.timestamp_ms, sample.value);
  }
}

CompressedSamples CompressSamples(const EncodedSamples& run, size_t begin, size_t end,
                                  std::string& scratch) {
  CompressedSamples out;
  const size_t from = run.begin(begin);
  const size_t size = run.begin(end) - from;
  const size_t bound = snappy::MaxCompressedLength(size);
  if (scratch.size() < bound) {
    scratch.resize(bound);  // only grows: resize() zero-fills what it adds
  }
  size_t compressed_size = 0;
  snappy::RawCompress(run.bytes().data() + from, size, scratch.data(), &compressed_size);
  // snappy's preamble is the length as a varint: the elements follow it.
  const size_t preamble = wire::VarintSize(size);
  out.elements.assign(scratch.data() + preamble, compressed_size - preamble);
  out.raw_size = size;
  out.samples = end - begin;
  out.enqueued_monotonic_nanos = run.enqueued_monotonic_nanos;
  return out;
}

void JoinRequest(absl::Span<const CompressedSamples> runs, std::string& body) {
  size_t raw_size = 0;
  size_t size = 0;
  for (const CompressedSamples& run : runs) {
    raw_size += run.raw_size;
    size += run.elements.size();
  }
  body.clear();
  body.reserve(wire::VarintSize(raw_size) + size);
  wire::AppendVarint(raw_size, body);
  for (const CompressedSamples& run : runs) {
    body.append(run.elements);
  }
}

std::string EncodeWriteRequest(absl::Span<const PendingSample> samples,
                               const LabelPairs& external_labels,
                               const LabelPairs& aggregator_labels) {
  EncodedSamples encoded;
  EncodeSamples(samples, LabelMerger(external_labels, aggregator_labels), encoded);
  std::string scratch;
  std::string body;
  JoinRequest({CompressSamples(encoded, 0, encoded.size(), scratch)}, body);
  return body;
}

absl::StatusOr<v1::prompb::WriteRequest> DecodeWriteRequest(absl::string_view body) {
  size_t length = 0;
  if (!snappy::GetUncompressedLength(body.data(), body.size(), &length)) {
    return absl::DataLossError("body is not snappy block-compressed");
  }
  if (length > kMaxDecodedBytes) {
    return absl::DataLossError("body would decompress to more than 256 MiB");
  }
  std::string raw;
  if (!snappy::Uncompress(body.data(), body.size(), &raw)) {
    return absl::DataLossError("body is not snappy block-compressed");
  }
  v1::prompb::WriteRequest request;
  if (!request.ParseFromString(raw)) {
    return absl::DataLossError("body is not a remote-write WriteRequest");
  }
  return request;
}

}  // namespace fabricmon::remote_write
