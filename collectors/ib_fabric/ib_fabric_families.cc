#include "collectors/ib_fabric/ib_fabric_families.h"

#include <string>

#include "collectors/ib_fabric/pma.h"
#include "collectors/ib_sysfs/ib_sysfs_families.h"

namespace fabricmon::collectors::ib_fabric {

void AppendIbFabricFamilies(std::vector<SeriesDesc>* out) {
  AppendFamilies("ib_fabric", kIbFabricOwnFamilies, out);
  for (const FamilySpec& spec : {ib_sysfs::kIbPortStateFamily, ib_sysfs::kIbPortPhysStateFamily,
                                 ib_sysfs::kIbPortRateFamily}) {
    out->push_back(SeriesFromSpec(spec, "ib_fabric", {}));
  }
  // As IbFabricCollector::BuildPortSeries builds them: PortCounters' width, or 64 bits with the
  // extended counters (CounterWidth); always saturating.
  for (size_t i = 0; i < kPmaCounterCount; ++i) {
    const PmaCounterSpec& spec = SpecOf(static_cast<PmaCounter>(i));
    for (uint8_t width : {spec.legacy_width, uint8_t{64}}) {
      out->push_back(CounterSeries("ib_fabric", std::string(spec.metric), std::string(spec.help),
                                   spec.unit, width, Overflow::kSaturates, spec.scale, {}));
    }
  }
}

}  // namespace fabricmon::collectors::ib_fabric
