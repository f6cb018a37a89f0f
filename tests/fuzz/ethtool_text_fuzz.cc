// `ethtool -S` / `ethtool -i` text (the capture-directory seam: stats_dir, fixtures, offline
// replay of captures taken on other machines) and the mlx5 key mapping every key goes through.

#include <algorithm>
#include <optional>
#include <string>

#include "collectors/ethtool/ethtool_text.h"
#include "collectors/ethtool/mlx5_stat_specs.h"
#include "daemon/wire/series_codec.h"
#include "tests/fuzz/fuzz_target.h"

FABRICMON_FUZZ_TARGET(ethtool_text) {
  using namespace ::fabricmon::collectors::ethtool;
  const absl::string_view text = ::fabricmon::fuzz::AsText(data, size);

  const absl::StatusOr<ParsedEthtoolText> parsed = ParseEthtoolStatsText(text);
  if (parsed.ok()) {
    // Every line is a statistic, a header, blank or rejected: never more of them than lines.
    const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    FABRICMON_FUZZ_CHECK(parsed->stats.size() + parsed->header_lines + parsed->rejected_lines <=
                         lines);
    for (const EthtoolStat& stat : parsed->stats) {
      const std::string key = NormalizeStatKey(stat.key);
      FABRICMON_FUZZ_CHECK(NormalizeStatKey(key) == key);  // idempotent
      if (std::optional<StatSpec> spec = Mlx5StatSpec(key)) {
        FABRICMON_FUZZ_CHECK(::fabricmon::wire::IsValidMetricName(spec->metric));
        for (const auto& [name, value] : spec->labels) {
          FABRICMON_FUZZ_CHECK(::fabricmon::wire::IsValidLabelName(name));
        }
      }
    }
  }
  // The raw bytes as one ioctl string (ETH_GSTRING_LEN is 32, but nothing here may rely on it).
  const std::string key = NormalizeStatKey(text);
  FABRICMON_FUZZ_CHECK(key.find('\0') == std::string::npos);
  if (std::optional<StatSpec> spec = Mlx5StatSpec(key)) {
    FABRICMON_FUZZ_CHECK(::fabricmon::wire::IsValidMetricName(spec->metric));
  }
  (void)ParseEthtoolDriverText(text);
}
