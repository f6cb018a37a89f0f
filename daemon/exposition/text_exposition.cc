#include "daemon/exposition/text_exposition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>

#include "absl/strings/numbers.h"

namespace fabricmon::exposition {
namespace {

using collectors::MetricType;
using collectors::RecordedSample;

prometheus::ClientMetric MakeMetric(const collectors::Labels& extra,
                                    const collectors::Labels& own) {
  prometheus::ClientMetric metric;
  metric.label.reserve(extra.size() + own.size());
  for (const auto& [name, value] : extra) {
    metric.label.push_back({name, value});
  }
  for (const auto& [name, value] : own) {
    metric.label.push_back({name, value});
  }
  return metric;
}

}  // namespace

std::vector<prometheus::MetricFamily> BuildFamilies(const std::vector<RecordedSample>& samples,
                                                    const collectors::Labels& extra_labels) {
  std::vector<SampleRef> refs;
  refs.reserve(samples.size());
  for (const RecordedSample& sample : samples) {
    refs.push_back({&sample.series, sample.raw_value});
  }
  return BuildFamilies(refs, extra_labels);
}

void MergeFamilies(std::vector<prometheus::MetricFamily> source,
                   std::vector<prometheus::MetricFamily>* families) {
  auto by_name = [](const prometheus::MetricFamily& a, const prometheus::MetricFamily& b) {
    return a.name < b.name;
  };
  for (prometheus::MetricFamily& family : source) {
    auto it = std::lower_bound(families->begin(), families->end(), family, by_name);
    if (it != families->end() && it->name == family.name) {
      it->metric.insert(it->metric.end(), std::make_move_iterator(family.metric.begin()),
                        std::make_move_iterator(family.metric.end()));
    } else {
      families->insert(it, std::move(family));
    }
  }
}

prometheus::MetricFamily EmptyFamily(const collectors::FamilySpec& spec) {
  prometheus::MetricFamily family;
  family.name = spec.name;
  family.help = spec.help;
  family.type = spec.type == MetricType::kCounter ? prometheus::MetricType::Counter
                                                  : prometheus::MetricType::Gauge;
  return family;
}

std::vector<prometheus::MetricFamily> BuildFamilies(const std::vector<SampleRef>& samples,
                                                    const collectors::Labels& extra_labels) {
  std::map<std::string, prometheus::MetricFamily> by_name;
  prometheus::MetricFamily saturated = EmptyFamily(wire::kSeriesSaturatedFamily);

  for (const SampleRef& sample : samples) {
    const collectors::SeriesDesc& desc = *sample.series;
    prometheus::MetricFamily& family = by_name[desc.name];
    if (family.name.empty()) {
      family.name = desc.name;
      family.help = desc.help;
      family.type = desc.type == MetricType::kCounter ? prometheus::MetricType::Counter
                                                      : prometheus::MetricType::Gauge;
    }
    prometheus::ClientMetric metric = MakeMetric(extra_labels, desc.labels);
    const double value = collectors::ExportedValue(desc, sample.raw_value);
    if (desc.type == MetricType::kCounter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));

    if (desc.IsSaturated(sample.raw_value)) {
      prometheus::ClientMetric flag = MakeMetric(extra_labels, {{"metric", desc.name}});
      for (const auto& [name, label_value] : desc.labels) {
        flag.label.push_back({name, label_value});
      }
      flag.gauge.value = 1;
      saturated.metric.push_back(std::move(flag));
    }
  }

  std::vector<prometheus::MetricFamily> families;
  families.reserve(by_name.size() + 1);
  for (auto& [name, family] : by_name) {
    families.push_back(std::move(family));
  }
  if (!saturated.metric.empty()) {
    families.push_back(std::move(saturated));
    std::sort(families.begin(), families.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
  }
  return families;
}

// The text writer mirrors prometheus-cpp 1.0.1 core/src/text_serializer.cc, into a string.

// WriteValue(double): "Nan", "+Inf"/"-Inf", else printf("%.16g") (max_digits10 - 1 digits).
void AppendValue(double value, std::string* out) {
  if (std::isnan(value)) {
    out->append("Nan");
    return;
  }
  if (std::isinf(value)) {
    out->append(value < 0 ? "-Inf" : "+Inf");
    return;
  }
  // Integral values below 1e16 print as plain integers under "%.16g" (the exponent stays below
  // the precision), so they take the integer path; -0.0 prints "-0".
  if (value > -1e16 && value < 1e16 && value == std::trunc(value) &&
      !(value == 0 && std::signbit(value))) {
    char buffer[absl::numbers_internal::kFastToBufferSize];
    char* end = absl::numbers_internal::FastIntToBuffer(static_cast<int64_t>(value), buffer);
    out->append(buffer, static_cast<size_t>(end - buffer));
    return;
  }
  char buffer[64];
  const int n = std::snprintf(buffer, sizeof(buffer), "%.*g",
                              std::numeric_limits<double>::max_digits10 - 1, value);
  if (n > 0 && static_cast<size_t>(n) < sizeof(buffer)) {
    out->append(buffer, static_cast<size_t>(n));
  }
}

// WriteValue(std::string): \n, \\ and \" escaped.
void AppendLabelValue(absl::string_view value, std::string* out) {
  size_t start = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if (c == '\\' || c == '"' || c == '\n') {
      out->append(value.data() + start, i - start);
      out->push_back('\\');
      out->push_back(c == '\n' ? 'n' : c);
      start = i + 1;
    }
  }
  out->append(value.data() + start, value.size() - start);
}

// The text format escapes \\ and \n in HELP (and only those: a quote stays as it is).
// prometheus-cpp 1.0.1 writes HELP raw, so a newline in it would end the comment line and
// start a sample line of the writer's choosing.
void AppendHelp(absl::string_view help, std::string* out) {
  size_t start = 0;
  for (size_t i = 0; i < help.size(); ++i) {
    const char c = help[i];
    if (c == '\\' || c == '\n') {
      out->append(help.data() + start, i - start);
      out->push_back('\\');
      out->push_back(c == '\n' ? 'n' : c);
      start = i + 1;
    }
  }
  out->append(help.data() + start, help.size() - start);
}

void AppendFamilyHeader(absl::string_view name, absl::string_view help, prometheus::MetricType type,
                        std::string* out) {
  if (!help.empty()) {
    out->append("# HELP ");
    out->append(name.data(), name.size());
    out->push_back(' ');
    AppendHelp(help, out);
    out->push_back('\n');
  }
  const char* type_name = nullptr;
  switch (type) {
    case prometheus::MetricType::Counter:
      type_name = "counter";
      break;
    case prometheus::MetricType::Gauge:
      type_name = "gauge";
      break;
    case prometheus::MetricType::Summary:
      type_name = "summary";
      break;
    case prometheus::MetricType::Untyped:
      type_name = "untyped";
      break;
    case prometheus::MetricType::Histogram:
      type_name = "histogram";
      break;
  }
  if (type_name != nullptr) {
    out->append("# TYPE ");
    out->append(name.data(), name.size());
    out->push_back(' ');
    out->append(type_name);
    out->push_back('\n');
  }
}

void AppendSampleLine(absl::string_view name, const collectors::Labels& extra_labels,
                      const collectors::Labels& labels, double value, std::string* out) {
  out->append(name.data(), name.size());
  if (!extra_labels.empty() || !labels.empty()) {
    out->push_back('{');
    bool first = true;
    for (const collectors::Labels* list : {&extra_labels, &labels}) {
      for (const auto& [label_name, label_value] : *list) {
        if (!first) {
          out->push_back(',');
        }
        first = false;
        out->append(label_name);
        out->append("=\"");
        AppendLabelValue(label_value, out);
        out->push_back('"');
      }
    }
    out->push_back('}');
  }
  out->push_back(' ');
  AppendValue(value, out);
  out->push_back('\n');
}

namespace {

void AppendUint(uint64_t value, std::string* out) {
  char buffer[absl::numbers_internal::kFastToBufferSize];
  char* end = absl::numbers_internal::FastIntToBuffer(value, buffer);
  out->append(buffer, static_cast<size_t>(end - buffer));
}

// WriteHead: name, suffix, {labels[,extra]}, then a space. The extra label's value is a double
// (summary quantile, histogram le) or a literal ("+Inf").
void AppendHead(const prometheus::MetricFamily& family, const prometheus::ClientMetric& metric,
                absl::string_view suffix, absl::string_view extra_name, const double* extra_double,
                absl::string_view extra_literal, std::string* out) {
  out->append(family.name);
  out->append(suffix.data(), suffix.size());
  if (!metric.label.empty() || !extra_name.empty()) {
    out->push_back('{');
    bool first = true;
    for (const prometheus::ClientMetric::Label& label : metric.label) {
      if (!first) {
        out->push_back(',');
      }
      first = false;
      out->append(label.name);
      out->append("=\"");
      AppendLabelValue(label.value, out);
      out->push_back('"');
    }
    if (!extra_name.empty()) {
      if (!first) {
        out->push_back(',');
      }
      out->append(extra_name.data(), extra_name.size());
      out->append("=\"");
      if (extra_double != nullptr) {
        AppendValue(*extra_double, out);
      } else {
        out->append(extra_literal.data(), extra_literal.size());
      }
      out->push_back('"');
    }
    out->push_back('}');
  }
  out->push_back(' ');
}

void AppendHead(const prometheus::MetricFamily& family, const prometheus::ClientMetric& metric,
                std::string* out) {
  AppendHead(family, metric, "", "", nullptr, "", out);
}

// WriteTail: " <timestamp_ms>" when set, then a newline.
void AppendTail(const prometheus::ClientMetric& metric, std::string* out) {
  if (metric.timestamp_ms != 0) {
    out->push_back(' ');
    char buffer[absl::numbers_internal::kFastToBufferSize];
    char* end = absl::numbers_internal::FastIntToBuffer(metric.timestamp_ms, buffer);
    out->append(buffer, static_cast<size_t>(end - buffer));
  }
  out->push_back('\n');
}

// A counter's, gauge's or untyped metric's one line.
void AppendScalarLine(const prometheus::MetricFamily& family,
                      const prometheus::ClientMetric& metric, double value, std::string* out) {
  AppendHead(family, metric, out);
  AppendValue(value, out);
  AppendTail(metric, out);
}

// The _count and _sum lines of a summary or histogram.
void AppendCountAndSum(const prometheus::MetricFamily& family,
                       const prometheus::ClientMetric& metric, uint64_t count, double sum,
                       std::string* out) {
  AppendHead(family, metric, "_count", "", nullptr, "", out);
  AppendUint(count, out);
  AppendTail(metric, out);
  AppendHead(family, metric, "_sum", "", nullptr, "", out);
  AppendValue(sum, out);
  AppendTail(metric, out);
}

// An upper estimate of the text size, so a scrape's (tens of MB) output is allocated once
// instead of being copied through every doubling of the string.
size_t EstimateTextSize(const std::vector<prometheus::MetricFamily>& families) {
  constexpr size_t kValueAndPunctuation = 32;  // " <value>\n", "{}", timestamp
  size_t size = 0;
  for (const prometheus::MetricFamily& family : families) {
    size += 2 * family.name.size() + family.help.size() + 32;
    for (const prometheus::ClientMetric& metric : family.metric) {
      size_t line = family.name.size() + kValueAndPunctuation;
      for (const prometheus::ClientMetric::Label& label : metric.label) {
        line += label.name.size() + label.value.size() + 4;
      }
      // Summaries and histograms repeat the head per quantile or bucket, plus _count and _sum.
      size += line * (1 + (metric.summary.quantile.size() + metric.histogram.bucket.size() +
                           (family.type == prometheus::MetricType::Summary ||
                                    family.type == prometheus::MetricType::Histogram
                                ? 3
                                : 0)));
    }
  }
  return size;
}

}  // namespace

void AppendText(const std::vector<prometheus::MetricFamily>& families, std::string* out) {
  out->reserve(out->size() + EstimateTextSize(families));
  for (const prometheus::MetricFamily& family : families) {
    AppendFamilyHeader(family.name, family.help, family.type, out);
    AppendMetricLines(family, out);
  }
}

void AppendMetricLines(const prometheus::MetricFamily& family, std::string* out) {
  using prometheus::MetricType;
  for (const prometheus::ClientMetric& metric : family.metric) {
    switch (family.type) {
      case MetricType::Counter:
        AppendScalarLine(family, metric, metric.counter.value, out);
        break;
      case MetricType::Gauge:
        AppendScalarLine(family, metric, metric.gauge.value, out);
        break;
      case MetricType::Untyped:
        AppendScalarLine(family, metric, metric.untyped.value, out);
        break;
      case MetricType::Summary: {
        const auto& summary = metric.summary;
        AppendCountAndSum(family, metric, summary.sample_count, summary.sample_sum, out);
        for (const auto& quantile : summary.quantile) {
          AppendHead(family, metric, "", "quantile", &quantile.quantile, "", out);
          AppendValue(quantile.value, out);
          AppendTail(metric, out);
        }
        break;
      }
      case MetricType::Histogram: {
        const auto& histogram = metric.histogram;
        AppendCountAndSum(family, metric, histogram.sample_count, histogram.sample_sum, out);
        double last = -std::numeric_limits<double>::infinity();
        for (const auto& bucket : histogram.bucket) {
          AppendHead(family, metric, "_bucket", "le", &bucket.upper_bound, "", out);
          last = bucket.upper_bound;
          AppendUint(bucket.cumulative_count, out);
          AppendTail(metric, out);
        }
        if (last != std::numeric_limits<double>::infinity()) {
          AppendHead(family, metric, "_bucket", "le", nullptr, "+Inf", out);
          AppendUint(histogram.sample_count, out);
          AppendTail(metric, out);
        }
        break;
      }
    }
  }
}

std::string SerializeText(const std::vector<prometheus::MetricFamily>& families) {
  std::string out;
  AppendText(families, &out);
  return out;
}

}  // namespace fabricmon::exposition
