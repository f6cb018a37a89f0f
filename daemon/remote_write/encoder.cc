#include "daemon/remote_write/encoder.h"

#include <cmath>
#include <cstring>

#include "daemon/remote_write/protobuf_wire.h"
#include "snappy.h"

namespace fabricmon::remote_write {
namespace {

// What DecodeWriteRequest inflates at most (a hostile length header must not allocate more).
constexpr size_t kMaxDecodedBytes = size_t{256} << 20;
constexpr uint64_t kStaleNaNBits = 0x7ff0000000000002ULL;  // Prometheus' value.StaleNaN
constexpr size_t kNoSample = ~size_t{0};

uint64_t DoubleBits(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// The Sample message's size. proto3 leaves out a field at its default: a value whose bits are
// all zero (+0.0, not -0.0) and a zero timestamp.
size_t SampleMessageSize(const PendingSample& sample) {
  return (DoubleBits(sample.value) != 0 ? 9 : 0) +
         (sample.timestamp_ms != 0
              ? 1 + wire::VarintSize(static_cast<uint64_t>(sample.timestamp_ms))
              : 0);
}

char* WriteSample(const PendingSample& sample, size_t message_size, char* out) {
  *out++ = wire::kTimeSeriesSamples;
  out = wire::WriteVarint(message_size, out);
  const uint64_t bits = DoubleBits(sample.value);
  if (bits != 0) {
    *out++ = wire::kSampleValue;
    for (int i = 0; i < 8; ++i) {  // fixed64: little-endian, whatever the host's order
      *out++ = static_cast<char>(bits >> (8 * i));
    }
  }
  if (sample.timestamp_ms != 0) {
    *out++ = wire::kSampleTimestamp;
    out = wire::WriteVarint(static_cast<uint64_t>(sample.timestamp_ms), out);
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

RequestEncoder::RequestEncoder(const LabelPairs& external_labels)
    : external_labels_(external_labels) {
  for (const auto& [name, value] : external_labels_) {
    AppendEncodedLabel(name, value, external_encoded_);
    external_encoded_ends_.push_back(static_cast<uint32_t>(external_encoded_.size()));
  }
}

// Both lists sorted by name; on a tie the series' own label wins. Copies encoded bytes only.
void RequestEncoder::AppendMergedLabels(const LabelSet& set) {
  if (external_labels_.empty()) {
    labels_.append(set.encoded);
    return;
  }
  const LabelPairs& own = set.labels;
  const LabelPairs& external = external_labels_;
  auto append_own = [&](size_t i) {
    const uint32_t begin = i == 0 ? 0 : set.encoded_ends[i - 1];
    labels_.append(set.encoded, begin, set.encoded_ends[i] - begin);
  };
  auto append_external = [&](size_t j) {
    const uint32_t begin = j == 0 ? 0 : external_encoded_ends_[j - 1];
    labels_.append(external_encoded_, begin, external_encoded_ends_[j] - begin);
  };
  size_t i = 0;
  size_t j = 0;
  while (i < own.size() || j < external.size()) {
    if (j == external.size() || (i < own.size() && own[i].first <= external[j].first)) {
      if (j < external.size() && own[i].first == external[j].first) {
        ++j;  // never override the series' label
      }
      append_own(i++);
    } else {
      append_external(j++);
    }
  }
}

void RequestEncoder::Encode(absl::Span<const PendingSample> samples, std::string& body) {
  series_index_.clear();
  series_.clear();
  labels_.clear();
  next_.assign(samples.size(), kNoSample);
  // Pass 1: group the samples by series and size every part, so that pass 2 writes each
  // length prefix before its message without moving bytes.
  for (size_t k = 0; k < samples.size(); ++k) {
    const PendingSample& sample = samples[k];
    const size_t sample_size = wire::FieldSize(SampleMessageSize(sample));
    auto [it, inserted] = series_index_.try_emplace(sample.series.get(), series_.size());
    if (inserted) {
      const size_t begin = labels_.size();
      AppendMergedLabels(*sample.series);
      series_.push_back({begin, labels_.size(), k, k, sample_size});
    } else {
      Series& series = series_[it->second];
      next_[series.last_sample] = k;
      series.last_sample = k;
      series.samples_size += sample_size;
    }
  }
  size_t total = 0;
  for (const Series& series : series_) {
    total += wire::FieldSize(series.labels_end - series.labels_begin + series.samples_size);
  }
  raw_.resize(total);
  char* out = raw_.data();
  for (const Series& series : series_) {
    const size_t labels_size = series.labels_end - series.labels_begin;
    *out++ = wire::kWriteRequestTimeseries;
    out = wire::WriteVarint(labels_size + series.samples_size, out);
    std::memcpy(out, labels_.data() + series.labels_begin, labels_size);
    out += labels_size;
    for (size_t k = series.first_sample; k != kNoSample; k = next_[k]) {
      out = WriteSample(samples[k], SampleMessageSize(samples[k]), out);
    }
  }
  body.clear();
  snappy::Compress(raw_.data(), raw_.size(), &body);
}

std::string EncodeWriteRequest(absl::Span<const PendingSample> samples,
                               const LabelPairs& external_labels) {
  RequestEncoder encoder(external_labels);
  std::string body;
  encoder.Encode(samples, body);
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
