#include "daemon/exposition/text_exposition.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "prometheus/text_serializer.h"

namespace fabricmon::exposition {
namespace {

using collectors::MetricType;
using collectors::RecordedSample;

constexpr char kSaturatedFamily[] = "fabricmon_series_saturated";

prometheus::ClientMetric MakeMetric(const collectors::Labels& extra, const collectors::Labels& own) {
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

std::vector<prometheus::MetricFamily> BuildFamilies(const std::vector<SampleRef>& samples,
                                                    const collectors::Labels& extra_labels) {
  std::map<std::string, prometheus::MetricFamily> by_name;
  prometheus::MetricFamily saturated;
  saturated.name = kSaturatedFamily;
  saturated.help =
      "1 for each saturating counter pinned at its maximum (its rate reads 0 but is unknown; "
      "clear the counter to resume): metric names the counter.";
  saturated.type = prometheus::MetricType::Gauge;

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

std::string SerializeText(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace fabricmon::exposition
