// Single-value sysfs files: ParseCounter (every counter file), and the ib_sysfs port attribute
// parsers ParsePortState (state, phys_state), ParseRateBitsPerSecond (rate), ParseLid (lid,
// sm_lid), plus the counter-name mapping (SanitizeName, SpecForCounter) that turns kernel file
// names into metric names. The kernel writes these files, but a captured tree (--sysfs_root), a
// buggy driver or a test fixture can hold anything: none of it may crash or yield a metric name
// Prometheus refuses.

#include <string>

#include "absl/strings/str_cat.h"
#include "collectors/core/sysfs_value.h"
#include "collectors/ib_sysfs/ib_counters_parser.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/agent/series_table.h"
#include "daemon/wire/series_codec.h"
#include "tests/fuzz/fuzz_target.h"

FABRICMON_FUZZ_TARGET(sysfs_value) {
  using namespace ::fabricmon::collectors;
  const absl::string_view text = ::fabricmon::fuzz::AsText(data, size);

  const ParsedCounter counter = ParseCounter(text);
  if (counter.ok) {
    // Whatever was accepted reads back the same in both spellings the kernel uses.
    const ParsedCounter decimal = ParseCounter(absl::StrCat(counter.value, "\n"));
    FABRICMON_FUZZ_CHECK(decimal.ok && decimal.value == counter.value);
    const ParsedCounter hex = ParseCounter(absl::StrCat("0x", absl::Hex(counter.value)));
    FABRICMON_FUZZ_CHECK(hex.ok && hex.value == counter.value);
  } else {
    FABRICMON_FUZZ_CHECK(counter.error == ErrorKind::kEmpty || counter.error == ErrorKind::kNoPma ||
                         counter.error == ErrorKind::kNotNumeric);
  }

  const ib_sysfs::PortStateValue state = ib_sysfs::ParsePortState(text);
  if (state.ok) {
    const ib_sysfs::PortStateValue again =
        ib_sysfs::ParsePortState(absl::StrCat(state.code, ": ", state.name));
    FABRICMON_FUZZ_CHECK(again.ok && again.code == state.code && again.name == state.name);
  }

  (void)ib_sysfs::ParseRateBitsPerSecond(text);

  const uint32_t lid = ib_sysfs::ParseLid(text);
  if (lid != 0) {
    FABRICMON_FUZZ_CHECK(ib_sysfs::ParseLid(absl::StrCat("0x", absl::Hex(lid))) == lid);
  }

  // The input as a counter file name in each directory, for both PMA generations and a few
  // drivers: the metric must be a valid Prometheus name the aggregator accepts.
  const std::string name = SanitizeName(text);
  for (char c : name) {
    FABRICMON_FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
  for (ib_sysfs::CounterGroup group :
       {ib_sysfs::CounterGroup::kCounters, ib_sysfs::CounterGroup::kCountersExt,
        ib_sysfs::CounterGroup::kHwCounters}) {
    for (absl::string_view driver : {"mlx5_core", "mlx4_core", "hfi1", ""}) {
      const ib_sysfs::CounterSpec spec = ib_sysfs::SpecForCounter(group, text, true, driver);
      if (!spec.skip && !name.empty()) {
        FABRICMON_FUZZ_CHECK(::fabricmon::wire::IsValidMetricName(spec.metric));
        FABRICMON_FUZZ_CHECK(spec.width_bits > 0 && spec.width_bits <= 64);
        // What the agent declares for it, the aggregator accepts: one refused declaration ends
        // the node's whole stream (regressions/sysfs_value/long_counter_name_refused_declaration:
        // a 180-byte file name made a 200+-byte metric name). The agent's CycleBuilder leaves
        // such a series out.
        const SeriesDesc desc =
            CounterSeries("ib_sysfs", spec.metric, spec.help, spec.unit, spec.width_bits,
                          spec.overflow, spec.scale, {{"device", "mlx5_0"}, {"port", "1"}});
        ::fabricmon::agent::SeriesTable table;
        ::fabricmon::agent::CycleBuilder builder(table);
        builder.Add(desc, 1);
        const ::fabricmon::agent::Cycle cycle = builder.Finish(1, 1);
        for (uint32_t id : *cycle.layout) {
          const auto declared = ::fabricmon::wire::FromDeclaration(
              ::fabricmon::wire::ToDeclaration(*table.Find(id), id));
          FABRICMON_FUZZ_CHECK(declared.ok());
        }
        FABRICMON_FUZZ_CHECK(cycle.layout->size() + builder.invalid_series() == 1);
      }
    }
  }
  (void)ib_sysfs::DriverFamily(text, text, text);
}
