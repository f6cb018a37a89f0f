#pragma once

// Writes batches whose samples name their labels by a key into every endpoint's queue. Each key's
// labels are merged with each endpoint's labels (LabelMerger) once, when remembered, and kept
// back to back in one buffer per endpoint. A batch of a layout the writer has sent before (the
// same keys in the same order, timestamps of the same encoded sizes, no labels it holds changed
// since) is compressed by that layout's template (BatchTemplate: its labels were compressed once);
// any other is encoded and compressed by the shard. An agent's collectors each send their own
// layout on one stream (ib_sysfs every second, ethtool every second, NVML every five...), so a
// writer keeps a template per layout, built the second time a layout comes, up to kMaxLayouts of
// them holding at most about one sample per key remembered (least recently used first out): a
// stream cannot make the writer hold more templates than its own series justify. A batch larger
// than an endpoint's max_samples_per_send is written in pieces of that many, each a layout of its
// own. Every batch goes to shard `route` of each endpoint, so a writer whose keys always come with
// the same route keeps each series in order.
//
// Two writers: one per agent stream (keys: a node's slots), and the aggregator's forwarding of
// its own families (keys: the forwarded series).
//
// Thread-compatible: one thread at a time.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/remote_write/batch_template.h"
#include "daemon/remote_write/endpoint.h"
#include "daemon/remote_write/label_set.h"

namespace fabricmon::remote_write {

class KeyedBatchWriter {
 public:
  // Keeps references to the endpoints, which must outlive the writer.
  explicit KeyedBatchWriter(std::vector<Endpoint*> endpoints);

  // `set`, merged with each endpoint's labels, becomes the labels of `key` (replacing any).
  void Remember(uint32_t key, const LabelSet& set);
  // `key` names no labels any more.
  void Forget(uint32_t key);

  // Queues `batch` (each key remembered) on shard `route` of every endpoint, enqueued at
  // `now_monotonic_nanos`; `hold` is kept until every endpoint is done with it. What a full
  // queue cannot take is counted by the endpoint (Endpoint::AppendEncoded).
  void Write(absl::Span<const KeyedSample> batch, uint64_t route, int64_t now_monotonic_nanos,
             const Hold& hold);

  // The labels `key` names for endpoint `endpoint` (empty: none), as a request carries them.
  absl::string_view Labels(size_t endpoint, uint32_t key) const;

  // Heap bytes held (labels and templates).
  size_t MemoryBytes() const;
  // Templates built so far (a layout's first, and again after labels it holds changed).
  uint64_t templates_built() const { return templates_built_; }

 private:
  // Where a key's merged labels lie in an endpoint's buffer.
  struct LabelSpan {
    // 64 bits: the caps allow a node 200,000 series of up to 16 labels of 256 bytes each (and
    // their saturation flags' labels), past 4 GiB with the buffer's slack.
    uint64_t offset = 0;
    uint32_t size = 0;
  };
  static constexpr size_t kMaxLayouts = 64;
  static constexpr size_t kRecentLayouts = 64;  // layouts seen once, remembered to build later
  // A layout sent before, its labels compressed once.
  struct Layout {
    uint64_t hash = 0;       // LayoutHash
    uint64_t last_used = 0;  // `uses_` when last written
    BatchTemplate layout_template;
  };
  // One endpoint's merged labels of every key, back to back in `bytes`, and its layouts.
  struct EndpointLabels {
    Endpoint* endpoint = nullptr;
    std::string bytes;
    std::vector<LabelSpan> by_key;
    size_t live = 0;  // bytes still referred to (the rest: labels of replaced keys)
    std::vector<Layout> layouts;
    size_t layout_samples = 0;        // the layouts' samples together
    std::vector<uint64_t> seen_once;  // a ring of kRecentLayouts hashes
    size_t next_seen = 0;
  };

  // The batch's layout (keys in order and the timestamps' encoded sizes) as a hash, to find its
  // template: BatchTemplate::Matches confirms it, and Build reads the batch itself, so a
  // collision costs a template built again, never a wrong request.
  static uint64_t LayoutHash(absl::Span<const KeyedSample> batch);
  static void Compact(EndpointLabels& labels);
  // Queues one piece of a batch on endpoint `e`.
  void WritePiece(size_t e, absl::Span<const KeyedSample> samples, uint64_t route,
                  int64_t now_monotonic_nanos, const Hold& hold);
  // The layout used last of those with `samples`' length and first key (null: none), which a
  // steady stream's piece most likely has.
  static Layout* RecentLayoutLike(EndpointLabels& labels, absl::Span<const KeyedSample> samples);
  // The template that compresses `samples` for endpoint `e`, built if their layout came before;
  // null: encode them.
  const BatchTemplate* TemplateFor(size_t e, absl::Span<const KeyedSample> samples);
  // Builds `layout_template` for `samples` on endpoint `e`, noting its keys in templated_at_.
  bool Build(size_t e, absl::Span<const KeyedSample> samples, BatchTemplate& layout_template);

  std::vector<EndpointLabels> endpoints_;
  // Moves when the labels of a key that a template holds change (Forget): every template built
  // before is built again.
  uint64_t labels_version_ = 0;
  // By key: labels_version_ + 1 when a template last took the key (0: never). A key whose entry
  // is not the current version + 1 is in no template that can still match.
  std::vector<uint64_t> templated_at_;
  uint64_t uses_ = 0;  // pieces written (the layouts' clock)
  uint64_t templates_built_ = 0;
};

}  // namespace fabricmon::remote_write
