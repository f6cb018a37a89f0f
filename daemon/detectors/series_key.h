#pragma once

#include <cstdint>
#include <string>

#include "absl/hash/hash.h"

namespace fabricmon::detectors {

// Identifies one series of one node in detector state (node name + series fingerprint).
struct SeriesKey {
  std::string node;
  uint64_t fingerprint = 0;
  bool operator==(const SeriesKey& other) const {
    return fingerprint == other.fingerprint && node == other.node;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SeriesKey& key) {
    return H::combine(std::move(h), key.node, key.fingerprint);
  }
};

}  // namespace fabricmon::detectors
