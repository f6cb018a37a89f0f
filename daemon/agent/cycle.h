#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace fabricmon::agent {

// The ordered series ids of one collector cycle. Consecutive cycles of a collector almost always
// share one layout, so cycles share it by pointer and the replay buffer stores the ids once; the
// stream encoder also declares a layout once per stream by pointer identity.
using Layout = std::vector<uint32_t>;

// One collection cycle, as kept in the replay buffer: absolute raw values (never deltas, so any
// later stream can re-encode it from scratch).
struct Cycle {
  uint64_t sequence = 0;
  int64_t timestamp_unix_nanos = 0;
  uint32_t collect_duration_us = 0;
  std::shared_ptr<const Layout> layout;
  std::vector<uint64_t> values;  // values[i] belongs to (*layout)[i]

  // Bytes this cycle holds in memory, for the replay buffer's bound.
  size_t ByteSize() const { return sizeof(Cycle) + values.size() * sizeof(uint64_t); }
};

}  // namespace fabricmon::agent
