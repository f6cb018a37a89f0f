#include "daemon/remote_write/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

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

RequestEncoder::RequestEncoder(const LabelPairs& external_labels,
                               const LabelPairs& aggregator_labels) {
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

// Both lists sorted by name; on a tie the series' own label wins. Copies encoded bytes only: the
// series' names are read back from its encoded labels (each a tag, a length, then the Label
// message, whose name field comes first), so a series costs one contiguous read.
void RequestEncoder::AppendMergedLabels(const LabelSet& set) {
  const std::vector<ExternalLabel>& external =
      set.origin == SeriesOrigin::kAgent ? agent_external_ : aggregator_external_;
  const std::string_view own = set.encoded;
  size_t j = 0;
  size_t run_begin = 0;  // own labels not yet copied start here
  size_t pos = 0;
  while (pos < own.size() && j < external.size()) {
    size_t cursor = pos + 1;  // past the TimeSeries.labels tag
    uint64_t length = 0;
    if (!wire::ReadVarint(own, &cursor, &length) || length > own.size() - cursor) {
      break;  // cannot happen (MakeLabelSet wrote these bytes); copy the rest as it is
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
    while (j < external.size() && external[j].name <= name) {
      if (external[j].name < name) {
        labels_.append(own, run_begin, pos - run_begin);
        run_begin = pos;
        labels_.append(external[j].encoded);
      }
      ++j;
    }
    pos = end;
  }
  labels_.append(own, run_begin, own.size() - run_begin);
  for (; j < external.size(); ++j) {
    labels_.append(external[j].encoded);
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
                               const LabelPairs& external_labels,
                               const LabelPairs& aggregator_labels) {
  RequestEncoder encoder(external_labels, aggregator_labels);
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
