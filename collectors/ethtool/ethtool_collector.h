#pragma once

// RoCE NIC statistics through the ethtool ioctl (ETH_SS_STATS): per-priority PFC pause frames and
// pause time, pause-storm events, RDMA vs kernel vs wire bytes, per-priority and port discards,
// PHY error counters, PCIe stalls — typed and labelled (mlx5_stat_specs.h), plus any other key
// selected by the `extra_keys` regex as fabricmon_ethtool_stat_total{netdev,key}.
//
// Cost model: Discover() asks each netdev for its driver (GDRVINFO) and string set (GSSET_INFO +
// GSTRINGS) and builds every series once. Collect() issues exactly one ETHTOOL_GSTATS per netdev
// (on mlx5 it makes the firmware read PPCNT groups: collectors/ethtool/README.md, "GSTATS costs
// firmware work"); the string set is re-read only when the statistics count changes (DCB
// reconfiguration: README.md, "The key set depends on configuration"), at re-discovery, or every
// cycle with `verify_string_set`.
//
// A missing key is absent, never zero (same section). A netdev without ethtool statistics
// (EOPNOTSUPP, or an empty set) is skipped at discovery and not asked again until the next one;
// a netdev that vanishes (ENODEV) is counted, dropped and triggers an early re-discovery; neither
// hides the other netdevs (errors in fabricmon_collector_errors_total{collector="ethtool",kind}).
//
// Choices (see the metric table in the project README):
//   - typed fabricmon_roce_* series only for the mlx5 driver family: the same key spelling means
//     other things (or units) in other drivers, whose keys are reachable through extra_keys;
//   - IEEE 802.3x link pause shares the PFC families with priority="global": a link runs either
//     PFC or link pause (IEEE 802.1Qbb), so sum by (netdev, direction) is the port's pause;
//   - per-queue keys (chN_*, rxN_*, txN_*) are left out: mlx5 already reports their sums under
//     the un-numbered names (rx_packets = Σ rxN_packets); extra_keys can still select them;
//   - extra_keys: the first extra_keys_limit matches in driver order are exported; the rest are
//     reported by the gauge fabricmon_ethtool_extra_keys_dropped{netdev} (a state, not an event:
//     a counter bumped every cycle would only measure the scrape rate) and a rate-limited log.
//
// Not thread-safe: the agent runs Discover() and Collect() from one thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/core/collector.h"
#include "collectors/core/collector_errors.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/device_filter.h"
#include "collectors/ethtool/ethtool_api.h"
#include "fabricmon/v1/config.pb.h"

namespace re2 {
class RE2;
}

namespace fabricmon::collectors {

inline constexpr char kEthtoolCollectorName[] = "ethtool";

class EthtoolCollector final : public Collector {
 public:
  // Takes ownership of `api` (the SIOCETHTOOL one in production, a FixtureEthtoolApi in tests).
  // InvalidArgument for a bad netdev filter or extra_keys pattern, or an interval under 100 ms.
  static absl::StatusOr<std::unique_ptr<EthtoolCollector>> Create(
      const v1::EthtoolCollectorConfig& config, std::unique_ptr<EthtoolApi> api);
  ~EthtoolCollector() override;

  absl::string_view name() const override { return kEthtoolCollectorName; }
  // NotFound when no netdev matches (none behind an RDMA device, none allowed by the filter) or
  // none of the matching ones has ethtool statistics. Adds/merges v1.Netdev entries.
  absl::Status Discover(v1::Inventory& inventory) override;
  // NotFound when discovery found nothing; otherwise OK, with per-netdev failures counted.
  absl::Status Collect(SampleSink& sink) override;
  bool WantsRediscovery() const override { return wants_rediscovery_; }
  // No netdev to read, or the ioctl refused on some (EPERM, EOPNOTSUPP), naming them.
  Diagnosis Diagnose(const DiagnosisInput& input) const override;
  int64_t interval_ms() const override { return interval_ms_; }
  int64_t rediscover_interval_ms() const override { return rediscover_interval_ms_; }

  // Netdevs currently collected (for tests and self-metrics).
  std::vector<std::string> collected_netdevs() const;

 private:
  // One exported key: its index in the string set and its series.
  struct Binding {
    uint32_t index = 0;
    SeriesDesc series;
  };
  struct Netdev {
    std::string name;
    std::string driver;
    std::string rdma_devices;       // comma-joined
    bool active = true;             // false after ENODEV/EOPNOTSUPP until the next discovery
    std::vector<std::string> keys;  // normalised string set, in driver order
    std::vector<Binding> bindings;
    std::vector<uint64_t> values;  // reused GSTATS buffer
    uint64_t extra_dropped = 0;
    SeriesDesc info;
    SeriesDesc key_count;
    SeriesDesc reloads;
    SeriesDesc extra_dropped_series;
  };

  EthtoolCollector(std::unique_ptr<EthtoolApi> api, std::string root, DeviceFilter filter,
                   std::unique_ptr<re2::RE2> extra_keys, uint32_t extra_keys_limit,
                   bool all_physical, bool verify_string_set, int64_t interval_ms,
                   int64_t rediscover_interval_ms);

  // Builds keys and bindings of `netdev` from a string set as the api returned it.
  void Bind(Netdev& netdev, const std::vector<std::string>& raw_names);
  // GetStringSet + Bind, counted as a reload; with `only_if_changed`, only when the names
  // differ from the bound ones. Unimplemented when the set became empty.
  absl::Status Reload(Netdev& netdev, bool only_if_changed);
  // Records a per-netdev failure; deactivates the netdev when it is permanent.
  void Fail(Netdev& netdev, const absl::Status& status);
  void CollectNetdev(Netdev& netdev, SampleSink& sink);

  const std::unique_ptr<EthtoolApi> api_;
  const std::string root_;
  const DeviceFilter filter_;
  const std::unique_ptr<re2::RE2> extra_keys_;  // null when not configured
  const uint32_t extra_keys_limit_;
  const bool all_physical_;
  const bool verify_string_set_;
  const int64_t interval_ms_;
  const int64_t rediscover_interval_ms_;
  std::vector<Netdev> netdevs_;
  // String-set reloads per netdev name; survives re-discovery so the counter never goes back.
  std::map<std::string, uint64_t> reload_counts_;
  // Netdevs the last discovery skipped because the ioctl refused them, with the refusal.
  std::vector<std::pair<std::string, absl::Status>> refused_;
  CollectorErrors errors_;
  bool wants_rediscovery_ = false;
};

// Registers "ethtool" (enabled by default; NotFound when the node has no RoCE netdev) with the
// SIOCETHTOOL api, or with the capture-directory api (capture_dir_ethtool_api.h) when
// `stats_dir` is set.
void RegisterEthtoolCollector(CollectorRegistry& registry);

}  // namespace fabricmon::collectors
