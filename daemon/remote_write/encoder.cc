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

// Both lists sorted by name; on a tie the series' own label wins. The series' names are read back
// from its encoded labels (each a tag, a length, then the Label message, whose name field comes
// first), the bytes the request copies anyway.
size_t RequestEncoder::PlanSplices(const LabelSet& set,
                                   const std::vector<ExternalLabel>& external) {
  const std::string_view own = set.encoded;
  size_t size = own.size();
  size_t j = 0;
  size_t pos = 0;
  while (pos < own.size() && j < external.size()) {
    size_t cursor = pos + 1;  // past the TimeSeries.labels tag
    uint64_t length = 0;
    if (!wire::ReadVarint(own, &cursor, &length) || length > own.size() - cursor) {
      break;  // cannot happen (MakeLabelSet wrote these bytes); the rest go after them
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
        splices_.push_back({pos, j});
        size += external[j].encoded.size();
      }
      ++j;
    }
    pos = end;
  }
  for (; j < external.size(); ++j) {
    splices_.push_back({own.size(), j});
    size += external[j].encoded.size();
  }
  return size;
}

char* RequestEncoder::WriteLabels(const Series& series, char* out) const {
  const std::string& own = series.set->encoded;
  size_t copied = 0;  // own bytes written so far
  for (size_t s = series.splices_begin; s < series.splices_end; ++s) {
    const Splice& splice = splices_[s];
    std::memcpy(out, own.data() + copied, splice.own_offset - copied);
    out += splice.own_offset - copied;
    copied = splice.own_offset;
    const std::string& label = (*series.external)[splice.external].encoded;
    std::memcpy(out, label.data(), label.size());
    out += label.size();
  }
  std::memcpy(out, own.data() + copied, own.size() - copied);
  return out + own.size() - copied;
}

void RequestEncoder::Encode(absl::Span<const PendingSample> samples, std::string& body) {
  series_.clear();
  splices_.clear();
  next_.assign(samples.size(), kNoSample);
  // At most half full, so a probe ends after a slot or two.
  size_t slots = 16;
  while (slots < 2 * samples.size()) {
    slots *= 2;
  }
  table_.assign(slots, {nullptr, 0});
  int shift = 64;
  for (size_t s = slots; s > 1; s >>= 1) {
    --shift;
  }
  // How far ahead the label bytes are fetched: enough samples to cover a miss's latency, few
  // enough that what is fetched is still cached when its turn comes.
  constexpr size_t kPrefetchAhead = 8;
  // Pass 1: group the samples by series and size every part, so that pass 2 writes each
  // length prefix before its message without moving bytes.
  for (size_t k = 0; k < samples.size(); ++k) {
    if (k + 2 * kPrefetchAhead < samples.size()) {
      // What pass 1 reads of a label set: `encoded` (its pointer and size) and `origin`, which
      // may lie on two cache lines.
      const LabelSet* ahead = samples[k + 2 * kPrefetchAhead].series.get();
      __builtin_prefetch(ahead);
      __builtin_prefetch(&ahead->origin);
    }
    if (k + kPrefetchAhead < samples.size()) {
      // A typical series' labels are two or three cache lines; a longer one is read in full
      // when copied (and the hardware prefetcher follows a sequential copy).
      const std::string& ahead = samples[k + kPrefetchAhead].series->encoded;
      for (size_t line = 0; line < std::min<size_t>(ahead.size(), 256); line += 64) {
        __builtin_prefetch(ahead.data() + line);
      }
    }
    const PendingSample& sample = samples[k];
    const LabelSet* set = sample.series.get();
    const size_t sample_size = wire::FieldSize(SampleMessageSize(sample));
    // Fibonacci hashing of the pointer: its low bits are alignment, its high bits the heap.
    size_t slot =
        static_cast<size_t>((reinterpret_cast<uintptr_t>(set) * 0x9e3779b97f4a7c15ULL) >> shift);
    while (table_[slot].first != nullptr && table_[slot].first != set) {
      slot = (slot + 1) & (slots - 1);
    }
    if (table_[slot].first == nullptr) {
      table_[slot] = {set, series_.size()};
      const std::vector<ExternalLabel>& external =
          set->origin == SeriesOrigin::kAgent ? agent_external_ : aggregator_external_;
      const size_t splices_begin = splices_.size();
      const size_t labels_size =
          external.empty() ? set->encoded.size() : PlanSplices(*set, external);
      series_.push_back(
          {set, &external, splices_begin, splices_.size(), labels_size, k, k, sample_size});
    } else {
      Series& series = series_[table_[slot].second];
      next_[series.last_sample] = k;
      series.last_sample = k;
      series.samples_size += sample_size;
    }
  }
  size_t total = 0;
  for (const Series& series : series_) {
    total += wire::FieldSize(series.labels_size + series.samples_size);
  }
  // The buffers only grow (resizing a cleared std::string zero-fills it, a pass over every byte
  // of the request for nothing).
  if (raw_.size() < total) {
    raw_.resize(total);
  }
  raw_size_ = total;
  char* out = raw_.data();
  for (const Series& series : series_) {
    *out++ = wire::kWriteRequestTimeseries;
    out = wire::WriteVarint(series.labels_size + series.samples_size, out);
    out = WriteLabels(series, out);
    for (size_t k = series.first_sample; k != kNoSample; k = next_[k]) {
      out = WriteSample(samples[k], SampleMessageSize(samples[k]), out);
    }
  }
  const size_t bound = snappy::MaxCompressedLength(total);
  if (compressed_.size() < bound) {
    compressed_.resize(bound);
  }
  size_t compressed_size = 0;
  snappy::RawCompress(raw_.data(), total, compressed_.data(), &compressed_size);
  body.assign(compressed_.data(), compressed_size);
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
