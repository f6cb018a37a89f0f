#include "daemon/remote_write/encoder.h"

#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "snappy.h"

namespace fabricmon::remote_write {
namespace {

// What DecodeWriteRequest inflates at most (a hostile length header must not allocate more).
constexpr size_t kMaxDecodedBytes = size_t{256} << 20;
constexpr uint64_t kStaleNaNBits = 0x7ff0000000000002ULL;  // Prometheus' value.StaleNaN

void AddLabel(v1::prompb::TimeSeries& series, const std::string& name, const std::string& value) {
  v1::prompb::Label* label = series.add_labels();
  label->set_name(name);
  label->set_value(value);
}

// Both lists sorted by name; on a tie the series' own label wins.
void AddMergedLabels(v1::prompb::TimeSeries& series, const LabelPairs& own,
                     const LabelPairs& external) {
  size_t i = 0;
  size_t j = 0;
  while (i < own.size() || j < external.size()) {
    if (j == external.size() || (i < own.size() && own[i].first <= external[j].first)) {
      if (j < external.size() && own[i].first == external[j].first) {
        ++j;  // never override the series' label
      }
      AddLabel(series, own[i].first, own[i].second);
      ++i;
    } else {
      AddLabel(series, external[j].first, external[j].second);
      ++j;
    }
  }
}

}  // namespace

double StaleNaN() {
  double value;
  std::memcpy(&value, &kStaleNaNBits, sizeof(value));
  return value;
}

bool IsStaleNaN(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits == kStaleNaNBits;
}

v1::prompb::WriteRequest BuildWriteRequest(absl::Span<const PendingSample> samples,
                                           const LabelPairs& external_labels) {
  v1::prompb::WriteRequest request;
  absl::flat_hash_map<const LabelSet*, int> index;
  for (const PendingSample& sample : samples) {
    auto [it, inserted] = index.try_emplace(sample.series.get(), request.timeseries_size());
    v1::prompb::TimeSeries* series;
    if (inserted) {
      series = request.add_timeseries();
      AddMergedLabels(*series, sample.series->labels, external_labels);
    } else {
      series = request.mutable_timeseries(it->second);
    }
    v1::prompb::Sample* out = series->add_samples();
    out->set_value(sample.value);
    out->set_timestamp(sample.timestamp_ms);
  }
  return request;
}

std::string EncodeWriteRequest(absl::Span<const PendingSample> samples,
                               const LabelPairs& external_labels) {
  const std::string raw = BuildWriteRequest(samples, external_labels).SerializeAsString();
  std::string compressed;
  snappy::Compress(raw.data(), raw.size(), &compressed);
  return compressed;
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
