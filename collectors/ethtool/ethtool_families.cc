#include "collectors/ethtool/ethtool_families.h"

#include "collectors/ethtool/mlx5_stat_specs.h"

namespace fabricmon::collectors::ethtool {

void AppendEthtoolFamilies(std::vector<SeriesDesc>* out) {
  AppendFamilies("ethtool", kEthtoolOwnFamilies, out);
  // As EthtoolCollector binds them (ethtool_collector.cc): mlx5 counters wrap.
  for (const StatSpec& spec : Mlx5FamilySpecs()) {
    out->push_back(spec.type == MetricType::kGauge
                       ? GaugeSeries("ethtool", spec.metric, spec.help, spec.unit, spec.scale, {})
                       : CounterSeries("ethtool", spec.metric, spec.help, spec.unit,
                                       spec.width_bits, Overflow::kWraps, spec.scale, {}));
  }
}

}  // namespace fabricmon::collectors::ethtool
