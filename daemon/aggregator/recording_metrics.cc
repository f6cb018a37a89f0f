#include "daemon/aggregator/recording_metrics.h"

#include <string>

namespace fabricmon::aggregator {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

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
  out.push_back(Family("fabricmon_recording_active",
                       "1 while accepted agent messages are recorded; 0 once recording stopped on "
                       "an error (see fabricmon_recording_errors_total).",
                       MetricType::Gauge));
  out.back().metric.push_back(Gauge(r.active() ? 1 : 0));
  out.push_back(Family("fabricmon_recording_bytes_written_total",
                       "Bytes written to recording segments since start.", MetricType::Counter));
  out.back().metric.push_back(Counter(static_cast<double>(r.bytes_written())));
  out.push_back(Family("fabricmon_recording_segments",
                       "Recording segment files in the directory (kept within max_bytes and "
                       "max_age_s).",
                       MetricType::Gauge));
  out.back().metric.push_back(Gauge(static_cast<double>(r.segments())));
  out.push_back(Family("fabricmon_recording_bytes",
                       "Bytes of the recording segment files in the directory.",
                       MetricType::Gauge));
  out.back().metric.push_back(Gauge(static_cast<double>(r.bytes_on_disk())));
  out.push_back(Family("fabricmon_recording_oldest_timestamp_seconds",
                       "Receive time of the oldest record kept (Unix seconds); 0 with none: how "
                       "far back a replay can go.",
                       MetricType::Gauge));
  out.back().metric.push_back(Gauge(static_cast<double>(r.oldest_unix_nanos()) / 1e9));
  out.push_back(Family("fabricmon_recording_errors_total",
                       "Recording errors by kind: write (recording stopped), open (a segment "
                       "could not be created; stopped), queue_full (the writer fell behind; "
                       "records dropped), delete (an old segment could not be removed).",
                       MetricType::Counter));
  for (size_t i = 0; i < static_cast<size_t>(recording::RecordingError::kCount); ++i) {
    const auto kind = static_cast<recording::RecordingError>(i);
    prometheus::ClientMetric m = Counter(static_cast<double>(r.errors(kind)));
    m.label.push_back({"kind", std::string(recording::RecordingErrorName(kind))});
    out.back().metric.push_back(std::move(m));
  }
  return out;
}

}  // namespace fabricmon::aggregator
