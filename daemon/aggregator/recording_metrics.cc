#include "daemon/aggregator/recording_metrics.h"

#include <string>

#include "daemon/exposition/text_exposition.h"
#include "daemon/wire/aggregator_families.h"

namespace fabricmon::aggregator {
namespace {

prometheus::ClientMetric Gauge(double value) {
  prometheus::ClientMetric m;
  m.gauge.value = value;
  return m;
}

prometheus::ClientMetric Counter(double value) {
  prometheus::ClientMetric m;
  m.counter.value = value;
  return m;
}

}  // namespace

std::vector<prometheus::MetricFamily> RecordingMetrics::Collect() const {
  using prometheus::MetricType;
  const recording::Recorder& r = *recorder_;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(exposition::EmptyFamily(wire::kRecordingActiveFamily));
  out.back().metric.push_back(Gauge(r.active() ? 1 : 0));
  out.push_back(exposition::EmptyFamily(wire::kRecordingBytesWrittenTotalFamily));
  out.back().metric.push_back(Counter(static_cast<double>(r.bytes_written())));
  out.push_back(exposition::EmptyFamily(wire::kRecordingSegmentsFamily));
  out.back().metric.push_back(Gauge(static_cast<double>(r.segments())));
  out.push_back(exposition::EmptyFamily(wire::kRecordingBytesFamily));
  out.back().metric.push_back(Gauge(static_cast<double>(r.bytes_on_disk())));
  out.push_back(exposition::EmptyFamily(wire::kRecordingOldestTimestampSecondsFamily));
  out.back().metric.push_back(Gauge(static_cast<double>(r.oldest_unix_nanos()) / 1e9));
  out.push_back(exposition::EmptyFamily(wire::kRecordingErrorsTotalFamily));
  for (size_t i = 0; i < static_cast<size_t>(recording::RecordingError::kCount); ++i) {
    const auto kind = static_cast<recording::RecordingError>(i);
    prometheus::ClientMetric m = Counter(static_cast<double>(r.errors(kind)));
    m.label.push_back({"kind", std::string(recording::RecordingErrorName(kind))});
    out.back().metric.push_back(std::move(m));
  }
  return out;
}

}  // namespace fabricmon::aggregator
