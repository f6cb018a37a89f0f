#include "daemon/remote_write/keyed_batch_writer.h"

#include <algorithm>
#include <utility>

#include "daemon/remote_write/protobuf_wire.h"

namespace fabricmon::remote_write {

void StoredLabels::Set(uint32_t key, std::shared_ptr<const LabelSet> set) {
  if (key >= by_key_.size()) {
    if (set == nullptr) {
      return;
    }
    by_key_.resize(size_t{key} + 1);
  }
  by_key_[key] = std::move(set);
}

std::optional<SeriesOrigin> StoredLabels::EncodeLabels(uint32_t key, std::string& out) const {
  if (key >= by_key_.size() || by_key_[key] == nullptr) {
    return std::nullopt;
  }
  out.assign(by_key_[key]->encoded);
  return by_key_[key]->origin;
}

KeyedBatchWriter::KeyedBatchWriter(std::vector<Endpoint*> endpoints, const LabelSource& labels)
    : labels_(labels) {
  endpoints_.resize(endpoints.size());
  for (size_t e = 0; e < endpoints.size(); ++e) {
    endpoints_[e].endpoint = endpoints[e];
  }
}

void KeyedBatchWriter::Changed(uint32_t key) {
  // A template built at this labels version may name other labels by this key: all are built
  // again. A key none of them holds (a new series; a saturation flag, forgotten as its series
  // is remembered) leaves them be, so a stream's new series do not cost every layout a build.
  if (key < templated_at_.size() && templated_at_[key] == TemplatedMark(labels_version_)) {
    ++labels_version_;
  }
}

absl::string_view KeyedBatchWriter::MergedLabels(size_t e, uint32_t key) {
  merged_labels_.clear();
  if (const std::optional<SeriesOrigin> origin = labels_.EncodeLabels(key, own_labels_);
      origin.has_value()) {
    endpoints_[e].endpoint->labels().Append(own_labels_, *origin, merged_labels_);
  }
  return merged_labels_;
}

void KeyedBatchWriter::Write(absl::Span<const KeyedSample> batch, uint64_t route,
                             int64_t now_monotonic_nanos, const Hold& hold) {
  for (size_t e = 0; e < endpoints_.size(); ++e) {
    const size_t per_send = std::max<size_t>(1, endpoints_[e].endpoint->max_samples_per_send());
    for (size_t begin = 0; begin < batch.size(); begin += per_send) {
      WritePiece(e, batch.subspan(begin, per_send), route, now_monotonic_nanos, hold);
    }
  }
}

void KeyedBatchWriter::WritePiece(size_t e, absl::Span<const KeyedSample> samples, uint64_t route,
                                  int64_t now_monotonic_nanos, const Hold& hold) {
  Endpoint& endpoint = *endpoints_[e].endpoint;
  thread_local CompressedSamples run;
  // A steady stream's piece is of the layout it last sent with this length and first key:
  // checked while compressed, without hashing the piece to find its template.
  bool compressed = false;
  if (Layout* recent = RecentLayoutLike(endpoints_[e], samples); recent != nullptr) {
    compressed = recent->layout_template.CompressIfMatches(labels_version_, samples, run);
    if (compressed) {
      recent->last_used = ++uses_;
    }
  }
  if (!compressed) {
    if (const BatchTemplate* layout_template = TemplateFor(e, samples);
        layout_template != nullptr) {
      layout_template->Compress(samples, run);
      compressed = true;
    }
  }
  if (compressed) {
    run.enqueued_monotonic_nanos = now_monotonic_nanos;
    if (endpoint.AppendCompressed(route, run, hold)) {
      return;
    }
  }
  // Encoded as it comes; the shard compresses what fits and counts the rest.
  thread_local EncodedSamples encoded;
  encoded.Clear();
  encoded.enqueued_monotonic_nanos = now_monotonic_nanos;
  for (const KeyedSample& sample : samples) {
    encoded.Add(MergedLabels(e, sample.labels_key), sample.timestamp_ms, sample.value);
  }
  endpoint.AppendEncoded(route, encoded, hold);
}

KeyedBatchWriter::Layout* KeyedBatchWriter::RecentLayoutLike(
    EndpointLayouts& endpoint, absl::Span<const KeyedSample> samples) {
  Layout* recent = nullptr;
  if (samples.empty()) {
    return nullptr;
  }
  for (Layout& layout : endpoint.layouts) {
    if (layout.layout_template.size() == samples.size() &&
        layout.layout_template.first_key() == samples.front().labels_key &&
        (recent == nullptr || layout.last_used > recent->last_used)) {
      recent = &layout;
    }
  }
  return recent;
}

const BatchTemplate* KeyedBatchWriter::TemplateFor(size_t e,
                                                   absl::Span<const KeyedSample> samples) {
  EndpointLayouts& endpoint = endpoints_[e];
  const uint64_t hash = LayoutHash(samples);
  ++uses_;
  for (Layout& layout : endpoint.layouts) {
    if (layout.hash == hash) {
      layout.last_used = uses_;
      BatchTemplate& found = layout.layout_template;
      if (found.Matches(labels_version_, samples)) {
        return &found;
      }
      // Labels changed since it was built (or another layout with its hash): built again.
      endpoint.layout_samples -= found.size();
      const bool built = Build(e, samples, found);
      endpoint.layout_samples += found.size();
      return built ? &found : nullptr;
    }
  }
  // A layout is worth a template the second time it comes.
  if (endpoint.seen_once.size() < kRecentLayouts) {
    endpoint.seen_once.resize(kRecentLayouts, 0);
  }
  const auto seen = std::find(endpoint.seen_once.begin(), endpoint.seen_once.end(), hash);
  if (seen == endpoint.seen_once.end()) {
    endpoint.seen_once[endpoint.next_seen++ % kRecentLayouts] = hash;
    return nullptr;
  }
  // At most kMaxLayouts, together of about one sample per key written (a node's collectors'
  // layouts hold each series once; the slack lets a changed layout be built before the one it
  // replaces ages out): the least recently used go first.
  for (const KeyedSample& sample : samples) {
    key_bound_ = std::max<size_t>(key_bound_, size_t{sample.labels_key} + 1);
  }
  const size_t bound = key_bound_ + 4096;
  if (samples.size() > bound) {
    return nullptr;
  }
  while (!endpoint.layouts.empty() && (endpoint.layouts.size() >= kMaxLayouts ||
                                       endpoint.layout_samples + samples.size() > bound)) {
    auto oldest = std::min_element(
        endpoint.layouts.begin(), endpoint.layouts.end(),
        [](const Layout& a, const Layout& b) { return a.last_used < b.last_used; });
    endpoint.layout_samples -= oldest->layout_template.size();
    if (oldest + 1 != endpoint.layouts.end()) {
      *oldest = std::move(endpoint.layouts.back());
    }
    endpoint.layouts.pop_back();
  }
  Layout& layout = endpoint.layouts.emplace_back();
  layout.hash = hash;
  layout.last_used = uses_;
  if (!Build(e, samples, layout.layout_template)) {
    endpoint.layouts.pop_back();
    return nullptr;
  }
  endpoint.layout_samples += layout.layout_template.size();
  return &layout.layout_template;
}

bool KeyedBatchWriter::Build(size_t e, absl::Span<const KeyedSample> samples,
                             BatchTemplate& layout_template) {
  for (const KeyedSample& sample : samples) {
    if (sample.labels_key >= templated_at_.size()) {
      templated_at_.resize(size_t{sample.labels_key} + 1, 0);
    }
    templated_at_[sample.labels_key] = TemplatedMark(labels_version_);
  }
  ++templates_built_;
  return layout_template.Build(labels_version_, samples,
                               [&](uint32_t key) { return MergedLabels(e, key); });
}

uint64_t KeyedBatchWriter::LayoutHash(absl::Span<const KeyedSample> batch) {
  uint64_t layout = 0;
  for (const KeyedSample& sample : batch) {
    const uint64_t timestamp_size = wire::VarintSize(static_cast<uint64_t>(sample.timestamp_ms));
    layout = (layout ^ (sample.labels_key | (timestamp_size << 32))) * 0x9e3779b97f4a7c15ULL;
  }
  return layout;
}

size_t KeyedBatchWriter::MemoryBytes() const {
  size_t bytes = templated_at_.capacity() * sizeof(uint32_t) + own_labels_.capacity() +
                 merged_labels_.capacity();
  for (const EndpointLayouts& endpoint : endpoints_) {
    bytes += endpoint.layouts.capacity() * sizeof(Layout) +
             endpoint.seen_once.capacity() * sizeof(uint64_t);
    for (const Layout& layout : endpoint.layouts) {
      bytes += layout.layout_template.MemoryBytes();
    }
  }
  return bytes;
}

}  // namespace fabricmon::remote_write
