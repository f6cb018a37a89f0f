#pragma once

// Agent-lifetime numbering of series. Collectors hand over SeriesDesc values; the table gives
// each distinct series (by fingerprint) a dense id from 1, so buffered batches can be replayed on
// any later stream.
//
// Ids of series a collector stopped producing (a process, a container veth gone) are given to
// new series, or an agent on a node with churn would number series without end (memory, and the
// wire's id bound). Reuse must never let a buffered cycle's id mean another series, so it runs in
// three steps: Release(ids, sequence) when a collector dropped them (every cycle naming them
// precedes `sequence`); Reclaimable(acked) once the aggregator acknowledged that sequence (no
// cycle naming them can be sent again); the stream forgets them (StreamClient::ForgetSeries);
// MakeReusable(ids) lets Intern hand them out.

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "collectors/core/sample.h"
#include "daemon/wire/batch_codec.h"

namespace fabricmon::agent {

class SeriesTable final : public wire::SeriesLookup {
 public:
  // Returns the id of `desc`, adding it if new (on a reusable id when there is one). Thread-safe.
  uint32_t Intern(const collectors::SeriesDesc& desc) ABSL_LOCKS_EXCLUDED(mu_);
  // The description of `id` (1-based), or nullptr. The pointer stays valid until the id is
  // reused, which never happens while a cycle naming it can still be encoded.
  const collectors::SeriesDesc* Find(uint32_t id) const override ABSL_LOCKS_EXCLUDED(mu_);

  // A collector no longer produces the series of `ids`; every cycle that named them has a
  // sequence below `sequence`. Their descriptions stay readable until they are reused.
  void Release(absl::Span<const uint32_t> ids, uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);
  // Released ids whose cycles are all acknowledged (`acked_sequence`), taken out of quarantine.
  std::vector<uint32_t> Reclaimable(uint64_t acked_sequence) ABSL_LOCKS_EXCLUDED(mu_);
  // Lets Intern hand these (reclaimable) ids to new series.
  void MakeReusable(absl::Span<const uint32_t> ids) ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);      // series with a live id
  size_t id_count() const ABSL_LOCKS_EXCLUDED(mu_);  // highest id handed out

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, uint32_t> by_fingerprint_ ABSL_GUARDED_BY(mu_);
  // unique_ptr keeps descriptions at stable addresses while the vector grows.
  std::vector<std::unique_ptr<const collectors::SeriesDesc>> series_ ABSL_GUARDED_BY(mu_);
  struct Released {
    uint32_t id;
    uint64_t sequence;
  };
  std::deque<Released> quarantine_ ABSL_GUARDED_BY(mu_);  // in release order
  std::vector<uint32_t> reusable_ ABSL_GUARDED_BY(mu_);
  size_t released_ ABSL_GUARDED_BY(mu_) = 0;  // ids released and not yet reused
};

}  // namespace fabricmon::agent
