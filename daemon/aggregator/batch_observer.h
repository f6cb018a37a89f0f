#pragma once

// A seam for whatever wants each batch an agent stream stored, as it was stored (remote write:
// remote_write_feed.h). The stream calls its observer after the store took a batch; replayed
// batches the store already held are not stored again and not observed again.

#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "daemon/store/series_store.h"

namespace fabricmon::aggregator {

class BatchObserver {
 public:
  // One per agent stream: it may keep per-stream state (what it derived from the stream's
  // slots) and is destroyed with the stream.
  class Stream {
   public:
    virtual ~Stream() = default;
    // `node` has just stored a batch: `slots` (the batch's positions) run parallel to `present`,
    // and each present slot still held has the batch's sample as its latest. Called from the
    // stream's read reaction, one call at a time; must not block on the network. `settlement`
    // (nullable) is the batch's (settlement_ledger.h): the observer keeps a reference for as long
    // as it still owes the batch's samples to someone, and the agent is acknowledged only after.
    virtual void OnStored(const store::NodeState& node, absl::Span<const store::SlotRef> slots,
                          const std::vector<bool>& present,
                          const std::shared_ptr<store::Settlement>& settlement) = 0;
  };

  virtual ~BatchObserver() = default;
  // Thread-safe.
  virtual std::unique_ptr<Stream> OpenStream() = 0;
};

}  // namespace fabricmon::aggregator
