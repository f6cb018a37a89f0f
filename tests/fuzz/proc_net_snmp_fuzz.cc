// /proc/net/snmp and /proc/net/netstat tables (ParseSnmpTable, ParseKernelInteger) and the netdev
// file-name mappings (SpecForStatistic, ParseOperState). procfs_root can point at a capture.

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "collectors/netdev/netdev_semantics.h"
#include "collectors/netdev/proc_net_snmp_parser.h"
#include "daemon/wire/series_codec.h"
#include "tests/fuzz/fuzz_target.h"

FABRICMON_FUZZ_TARGET(proc_net_snmp) {
  using namespace ::fabricmon::collectors::netdev;
  const absl::string_view text = ::fabricmon::fuzz::AsText(data, size);

  const SnmpTable table = ParseSnmpTable(text);
  FABRICMON_FUZZ_CHECK(table.malformed_sections >= 0 && table.malformed_values >= 0);
  absl::flat_hash_set<std::string> names;
  for (const SnmpSection& section : table.sections) {
    FABRICMON_FUZZ_CHECK(section.keys.size() == section.values.size());
    FABRICMON_FUZZ_CHECK(names.insert(section.name).second);  // the first of a name is kept
    FABRICMON_FUZZ_CHECK(table.Find(section.name) == &section);
    for (size_t i = 0; i < section.keys.size(); ++i) {
      const int first = section.IndexOf(section.keys[i]);
      FABRICMON_FUZZ_CHECK(first >= 0 && static_cast<size_t>(first) <= i);
      // A stale hint must not change the answer.
      FABRICMON_FUZZ_CHECK(section.IndexOf(section.keys[i], static_cast<int>(i)) >= 0);
      FABRICMON_FUZZ_CHECK(section.IndexOf(section.keys[i], 1 << 30) == first);
      FABRICMON_FUZZ_CHECK(section.IndexOf(section.keys[i], -5) == first);
      const std::optional<uint64_t> value = table.Value(section.name, section.keys[i]);
      FABRICMON_FUZZ_CHECK(value.has_value() && *value == section.values[first]);
    }
  }

  const std::optional<uint64_t> integer = ParseKernelInteger(text);
  if (integer.has_value()) {
    // Either spelling the kernel could have printed reads back the same.
    FABRICMON_FUZZ_CHECK(ParseKernelInteger(absl::StrCat(*integer)) == integer);
    if (static_cast<int64_t>(*integer) < 0) {
      const std::optional<uint64_t> negative =
          ParseKernelInteger(absl::StrCat(static_cast<int64_t>(*integer)));
      FABRICMON_FUZZ_CHECK(negative == integer);
    }
  }

  const StatisticSpec spec = SpecForStatistic(text);
  if (!::fabricmon::collectors::SanitizeName(text).empty()) {
    FABRICMON_FUZZ_CHECK(::fabricmon::wire::IsValidMetricName(spec.metric));
  }
  (void)ParseOperState(text);
}
