#include "daemon/remote_write/keyed_batch_writer.h"

#include <algorithm>
#include <utility>

#include "daemon/remote_write/protobuf_wire.h"

namespace fabricmon::remote_write {

KeyedBatchWriter::KeyedBatchWriter(std::vector<Endpoint*> endpoints) {
  endpoints_.resize(endpoints.size());
  for (size_t e = 0; e < endpoints.size(); ++e) {
    endpoints_[e].endpoint = endpoints[e];
  }
}

void KeyedBatchWriter::Remember(uint32_t key, const LabelSet& set) {
  Forget(key);
  for (EndpointLabels& labels : endpoints_) {
    if (key >= labels.by_key.size()) {
      labels.by_key.resize(size_t{key} + 1);
    }
    // Churn leaves replaced labels behind: past twice what is live, the buffer is rebuilt from
    // the live spans.
    if (labels.bytes.size() > 2 * labels.live + 65536) {
      Compact(labels);
    }
    const size_t offset = labels.bytes.size();
    labels.endpoint->labels().Append(set, labels.bytes);
    const size_t size = labels.bytes.size() - offset;
    labels.by_key[key] = {offset, static_cast<uint32_t>(size)};
    labels.live += size;
  }
}

void KeyedBatchWriter::Forget(uint32_t key) {
  ++labels_version_;  // a template built before may name other labels by this key
  for (EndpointLabels& labels : endpoints_) {
    if (key < labels.by_key.size()) {
      labels.live -= labels.by_key[key].size;
      labels.by_key[key] = {};
    }
  }
}

absl::string_view KeyedBatchWriter::Labels(size_t endpoint, uint32_t key) const {
  const EndpointLabels& labels = endpoints_[endpoint];
  if (key >= labels.by_key.size()) {
    return {};
  }
  const LabelSpan span = labels.by_key[key];
  return absl::string_view(labels.bytes.data() + span.offset, span.size);
}

void KeyedBatchWriter::Write(absl::Span<const KeyedSample> batch, uint64_t route,
                             int64_t now_monotonic_nanos, const Hold& hold) {
  for (size_t e = 0; e < endpoints_.size(); ++e) {
    EndpointLabels& labels = endpoints_[e];
    const size_t per_send = std::max<size_t>(1, labels.endpoint->max_samples_per_send());
    const size_t pieces = (batch.size() + per_send - 1) / per_send;
    // A batch that shrank lets go of the templates of pieces it no longer has.
    labels.pieces.resize(pieces);
    for (size_t p = 0; p < pieces; ++p) {
      WritePiece(e, labels.pieces[p], batch.subspan(p * per_send, per_send), route,
                 now_monotonic_nanos, hold);
    }
  }
}

void KeyedBatchWriter::WritePiece(size_t e, Piece& piece, absl::Span<const KeyedSample> samples,
                                  uint64_t route, int64_t now_monotonic_nanos, const Hold& hold) {
  Endpoint& endpoint = *endpoints_[e].endpoint;
  BatchTemplate& layout_template = piece.layout_template;
  // Hashed only when the template does not match: a matching piece has the layout of the last
  // repeated one, whose hash last_layout still is (every piece that does not match updates it).
  // A layout seen twice running is worth a template: a writer whose batches alternate between
  // layouts (collectors on different intervals) is compressed as it comes.
  auto repeats = [&] {
    const uint64_t layout = LayoutHash(samples);
    const bool repeated = layout == piece.last_layout;
    piece.last_layout = layout;
    return repeated;
  };
  if (layout_template.Matches(labels_version_, samples) ||
      (repeats() && layout_template.Build(labels_version_, samples,
                                          [&](uint32_t key) { return Labels(e, key); }))) {
    thread_local CompressedSamples run;
    layout_template.Compress(samples, run);
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
    encoded.Add(Labels(e, sample.labels_key), sample.timestamp_ms, sample.value);
  }
  endpoint.AppendEncoded(route, encoded, hold);
}

uint64_t KeyedBatchWriter::LayoutHash(absl::Span<const KeyedSample> batch) {
  uint64_t layout = 0;
  for (const KeyedSample& sample : batch) {
    const uint64_t timestamp_size = wire::VarintSize(static_cast<uint64_t>(sample.timestamp_ms));
    layout = (layout ^ (sample.labels_key | (timestamp_size << 32))) * 0x9e3779b97f4a7c15ULL;
  }
  return layout;
}

void KeyedBatchWriter::Compact(EndpointLabels& labels) {
  std::string bytes;
  bytes.reserve(labels.live);
  for (LabelSpan& span : labels.by_key) {
    const size_t offset = bytes.size();
    bytes.append(labels.bytes, span.offset, span.size);
    span.offset = offset;
  }
  labels.bytes = std::move(bytes);
}

size_t KeyedBatchWriter::MemoryBytes() const {
  size_t bytes = 0;
  for (const EndpointLabels& labels : endpoints_) {
    bytes += labels.bytes.capacity() + labels.by_key.capacity() * sizeof(LabelSpan) +
             labels.pieces.capacity() * sizeof(Piece);
    for (const Piece& piece : labels.pieces) {
      bytes += piece.layout_template.MemoryBytes();
    }
  }
  return bytes;
}

}  // namespace fabricmon::remote_write
