#include "collectors/netdev/netdev_families.h"

#include <string>

#include "collectors/netdev/netdev_semantics.h"

namespace fabricmon::collectors::netdev {

void AppendNetdevFamilies(std::vector<SeriesDesc>* out) {
  AppendFamilies("netdev", kNetdevFixedFamilies, out);
  // As NetdevCollector builds them (netdev_collector.cc).
  for (absl::string_view file : KnownStatisticFiles()) {
    const StatisticSpec spec = SpecForStatistic(file);
    out->push_back(CounterSeries("netdev", spec.metric, spec.help, spec.unit, kKernelLongBits,
                                 Overflow::kWraps, 1.0, {}));
  }
  for (const TcpMetricSpec& spec : CuratedTcpMetrics()) {
    out->push_back(spec.type == MetricType::kGauge
                       ? GaugeSeries("netdev", std::string(spec.metric), std::string(spec.help),
                                     spec.unit, 1.0, {})
                       : CounterSeries("netdev", std::string(spec.metric), std::string(spec.help),
                                       spec.unit, kKernelLongBits, Overflow::kWraps, 1.0, {}));
  }
}

}  // namespace fabricmon::collectors::netdev
