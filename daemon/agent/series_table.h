#pragma once

// Agent-lifetime numbering of series. Collectors hand over SeriesDesc values; the table gives
// each distinct series (by fingerprint) a dense id from 1 that stays the same for the life of the
// agent process, so buffered batches can be replayed on any later stream.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "collectors/core/sample.h"
#include "daemon/wire/batch_codec.h"

namespace fabricmon::agent {

class SeriesTable final : public wire::SeriesLookup {
 public:
  // Returns the id of `desc`, adding it if new. Thread-safe.
  uint32_t Intern(const collectors::SeriesDesc& desc) ABSL_LOCKS_EXCLUDED(mu_);
  // The description of `id` (1-based). The pointer stays valid for the table's lifetime.
  const collectors::SeriesDesc* Find(uint32_t id) const override ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, uint32_t> by_fingerprint_ ABSL_GUARDED_BY(mu_);
  // unique_ptr keeps descriptions at stable addresses while the vector grows.
  std::vector<std::unique_ptr<const collectors::SeriesDesc>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricmon::agent
