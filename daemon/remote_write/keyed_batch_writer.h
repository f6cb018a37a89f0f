#pragma once

// Writes batches whose samples name their labels by a key into every endpoint's queue. A batch of
// a layout the writer has sent before (the same keys in the same order, timestamps of the same
// encoded sizes, no key's labels changed since) is compressed by that layout's template
// (BatchTemplate: its labels were compressed once); any other is encoded and compressed by the
// shard. An agent's collectors each send their own layout on one stream (ib_sysfs every second,
// ethtool every second, NVML every five...), so a writer keeps a template per layout, built the
// second time a layout comes, up to kMaxLayouts of them holding at most about one sample per key
// written (least recently used first out): a stream cannot make the writer hold more templates
// than its own series justify. A batch larger than an endpoint's max_samples_per_send is written
// in pieces of that many, each a layout of its own. Every batch goes to shard `route` of each
// endpoint, so a writer whose keys always come with the same route keeps each series in order.
//
// The writer keeps no labels: it asks its LabelSource for a key's when it needs them (a template
// built, a batch no template matches encoded) and merges them with each endpoint's then. A
// stream's series have their labels in the store's descriptions already; a copy per endpoint,
// merged, was about half of what remote_write held per series (120 of ~250 bytes at a DGX node's
// series: fabricmon_template_bench's labels_bytes_per_series). The price is labels built again
// for a batch no template matches, which a steady stream sends once per layout.
//
// Two writers: one per agent stream (keys: a node's slots), and the aggregator's forwarding of
// its own families (keys: the forwarded series).
//
// Thread-compatible: one thread at a time, and its LabelSource read on that thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/remote_write/batch_template.h"
#include "daemon/remote_write/endpoint.h"
#include "daemon/remote_write/label_set.h"

namespace fabricmon::remote_write {

// Where a writer reads the labels a key names.
class LabelSource {
 public:
  virtual ~LabelSource() = default;
  // `key`'s own labels as LabelSet::encoded holds them (MakeLabelSet, EncodeLabelsInto) into
  // `out`, replacing what it held, and their origin; nullopt: the key names none (its samples
  // would go without labels, which a receiver refuses: a caller writes only keys it knows).
  virtual std::optional<SeriesOrigin> EncodeLabels(uint32_t key, std::string& out) const = 0;
};

// A LabelSource that keeps each key's LabelSet, for a writer whose caller has its series'
// labels in no other form (the aggregator's forwarded families, tests).
class StoredLabels final : public LabelSource {
 public:
  // `key` names `set` (null: nothing). The writer learns of it through Changed().
  void Set(uint32_t key, std::shared_ptr<const LabelSet> set);
  std::optional<SeriesOrigin> EncodeLabels(uint32_t key, std::string& out) const override;

 private:
  std::vector<std::shared_ptr<const LabelSet>> by_key_;
};

class KeyedBatchWriter {
 public:
  // Keeps references to the endpoints and `labels`, which must outlive the writer.
  KeyedBatchWriter(std::vector<Endpoint*> endpoints, const LabelSource& labels);

  // The labels `key` names changed, or it names none now: from the next batch on its samples go
  // with what `labels` then gives (a template holding the key is built again). A key written for
  // the first time needs no call.
  void Changed(uint32_t key);

  // Queues `batch` (keys that `labels` knows) on shard `route` of every endpoint, enqueued at
  // `now_monotonic_nanos`; `hold` is kept until every endpoint is done with it. What a full
  // queue cannot take is counted by the endpoint (Endpoint::AppendEncoded).
  void Write(absl::Span<const KeyedSample> batch, uint64_t route, int64_t now_monotonic_nanos,
             const Hold& hold);

  // Heap bytes held (templates and the writer's own tables).
  size_t MemoryBytes() const;
  // Templates built so far (a layout's first, and again after labels it holds changed).
  uint64_t templates_built() const { return templates_built_; }

 private:
  static constexpr size_t kMaxLayouts = 64;
  static constexpr size_t kRecentLayouts = 64;  // layouts seen once, remembered to build later
  // A layout sent before, its labels compressed once.
  struct Layout {
    uint64_t hash = 0;       // LayoutHash
    uint64_t last_used = 0;  // `uses_` when last written
    BatchTemplate layout_template;
  };
  // One endpoint's layouts.
  struct EndpointLayouts {
    Endpoint* endpoint = nullptr;
    std::vector<Layout> layouts;
    size_t layout_samples = 0;        // the layouts' samples together
    std::vector<uint64_t> seen_once;  // a ring of kRecentLayouts hashes
    size_t next_seen = 0;
  };

  // The batch's layout (keys in order and the timestamps' encoded sizes) as a hash, to find its
  // template: BatchTemplate::Matches confirms it, and Build reads the batch itself, so a
  // collision costs a template built again, never a wrong request.
  static uint64_t LayoutHash(absl::Span<const KeyedSample> batch);
  // Queues one piece of a batch on endpoint `e`.
  void WritePiece(size_t e, absl::Span<const KeyedSample> samples, uint64_t route,
                  int64_t now_monotonic_nanos, const Hold& hold);
  // The layout used last of those with `samples`' length and first key (null: none), which a
  // steady stream's piece most likely has.
  static Layout* RecentLayoutLike(EndpointLayouts& endpoint, absl::Span<const KeyedSample> samples);
  // The template that compresses `samples` for endpoint `e`, built if their layout came before;
  // null: encode them.
  const BatchTemplate* TemplateFor(size_t e, absl::Span<const KeyedSample> samples);
  // Builds `layout_template` for `samples` on endpoint `e`, noting its keys in templated_at_.
  bool Build(size_t e, absl::Span<const KeyedSample> samples, BatchTemplate& layout_template);
  // `key`'s labels merged for endpoint `e`, as a request carries them (empty: none), valid
  // until the next call.
  absl::string_view MergedLabels(size_t e, uint32_t key);

  const LabelSource& labels_;
  std::vector<EndpointLayouts> endpoints_;
  // One past the largest key of a layout met: the templates together hold about this many
  // samples.
  size_t key_bound_ = 0;
  // MergedLabels' buffers (kept: no allocation per key once grown).
  std::string own_labels_;
  std::string merged_labels_;
  // Moves when the labels of a key that a template holds change (Changed): every template built
  // before is built again.
  uint64_t labels_version_ = 0;
  // By key: TemplatedMark(labels_version_) when a template last took the key (0: never). A key
  // whose entry is not the current version's mark is in no template that can still match; 32
  // bits (two keys per series of a stream) wrap after 4 G versions, which makes a key look
  // templated when it is not, costing a build, never a wrong request.
  std::vector<uint32_t> templated_at_;
  static uint32_t TemplatedMark(uint64_t version) {
    const auto mark = static_cast<uint32_t>(version + 1);
    return mark == 0 ? 1 : mark;
  }
  uint64_t uses_ = 0;  // pieces written (the layouts' clock)
  uint64_t templates_built_ = 0;
};

}  // namespace fabricmon::remote_write
