#pragma once

// Pure mapping from mlx5 ethtool statistic names to typed, labelled fabricmon series. Hardware
// semantics are cited at the line that encodes them (../shared/FIELD_NOTES.md §3.9–3.15, §4.3,
// and the kernel's Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst).
//
// Only the mlx5 driver family is mapped: the same spelling means different things (or units) in
// other drivers, so their keys are reachable only through `extra_keys`.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/core/sample.h"

namespace fabricmon::collectors::ethtool {

// How one key is exported: the family and the labels that follow `netdev`.
struct StatSpec {
  std::string metric;
  std::string help;
  MetricType type = MetricType::kCounter;
  Unit unit = Unit::kNone;
  uint8_t width_bits = 64;  // counters: all mlx5 ethtool stats are u64 except link_down_events_phy
  double scale = 1.0;
  Labels labels;
};

// True for drivers whose keys Mlx5StatSpec understands ("mlx5_core", and "mlx5e_rep" for switchdev
// representors).
bool IsMlx5Driver(absl::string_view driver);

// The typed series for a normalised (trimmed) mlx5 key, or nullopt when the key has no typed
// metric (per-queue chN_/rxN_/txN_ keys, software-path details, unknown names).
std::optional<StatSpec> Mlx5StatSpec(absl::string_view key);

// Every family Mlx5StatSpec can produce (documentation and naming tests).
std::vector<std::string> Mlx5MetricFamilies();
// One spec of every family Mlx5StatSpec can produce (each width and type it gives them): what
// the aggregator's metric catalogue is built from.
std::vector<StatSpec> Mlx5FamilySpecs();

}  // namespace fabricmon::collectors::ethtool
