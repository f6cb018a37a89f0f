#include "collectors/ib_sysfs/ib_sysfs_families.h"

#include "collectors/ib_sysfs/ib_counters_parser.h"

namespace fabricmon::collectors::ib_sysfs {

void AppendIbSysfsFamilies(std::vector<SeriesDesc>* out) {
  AppendFamilies("ib_sysfs", kIbSysfsFixedFamilies, out);
  for (absl::string_view file : KnownCounterFiles()) {
    for (bool extended : {false, true}) {
      const CounterSpec spec = SpecForCounter(CounterGroup::kCounters, file, extended, "");
      if (!spec.skip) {
        out->push_back(CounterSeries("ib_sysfs", spec.metric, spec.help, spec.unit, spec.width_bits,
                                     spec.overflow, spec.scale, {}));
      }
    }
  }
}

}  // namespace fabricmon::collectors::ib_sysfs
