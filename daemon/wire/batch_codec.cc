#include "daemon/wire/batch_codec.h"

#include "absl/strings/str_cat.h"
#include "daemon/wire/series_codec.h"

namespace fabricmon::wire {

void StreamEncoder::Forget(absl::Span<const uint32_t> ids) {
  for (uint32_t id : ids) {
    if (id < declared_.size()) {
      declared_[id] = false;
    }
  }
}

void StreamEncoder::Encode(uint64_t sequence, int64_t timestamp_unix_nanos,
                           uint32_t collect_duration_us, uint64_t dropped_before,
                           const std::shared_ptr<const std::vector<uint32_t>>& layout,
                           absl::Span<const uint64_t> values, std::vector<v1::AgentMessage>* out) {
  // Declarations of new series, in chunks so no single message grows unbounded.
  constexpr int kDeclarationsPerMessage = 1000;
  v1::AgentMessage declarations;
  for (uint32_t id : *layout) {
    if (id >= declared_.size()) {
      declared_.resize(id + 1, false);
      last_value_.resize(id + 1, 0);
    }
    if (declared_[id]) {
      continue;
    }
    const collectors::SeriesDesc* desc = series_.Find(id);
    if (desc == nullptr) {
      continue;  // cannot happen for ids from the agent's own table
    }
    declared_[id] = true;
    *declarations.mutable_declarations()->add_series() = ToDeclaration(*desc, id);
    if (declarations.declarations().series_size() == kDeclarationsPerMessage) {
      out->push_back(std::move(declarations));
      declarations.Clear();
    }
  }
  if (declarations.has_declarations()) {
    out->push_back(std::move(declarations));
  }

  auto [it, inserted] = layout_ids_.try_emplace(layout.get(), 0);
  if (inserted) {
    layouts_.push_back(layout);
    it->second = static_cast<uint32_t>(layouts_.size());
    v1::AgentMessage message;
    v1::Layout* wire_layout = message.mutable_layouts()->add_layouts();
    wire_layout->set_id(it->second);
    wire_layout->mutable_series_ids()->Assign(layout->begin(), layout->end());
    out->push_back(std::move(message));
  }

  v1::AgentMessage message;
  v1::SampleBatch* batch = message.mutable_batch();
  batch->set_sequence(sequence);
  batch->set_timestamp_unix_nanos(timestamp_unix_nanos);
  batch->set_layout_id(it->second);
  batch->set_dropped_before(dropped_before);
  batch->set_collect_duration_us(collect_duration_us);
  auto* deltas = batch->mutable_value_deltas();
  deltas->Reserve(static_cast<int>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t id = (*layout)[i];
    // Two's-complement difference: a counter that wrapped or reset encodes as a small negative.
    deltas->AddAlreadyReserved(static_cast<int64_t>(values[i] - last_value_[id]));
    last_value_[id] = values[i];
  }
  out->push_back(std::move(message));
}

absl::Status StreamDecoder::Declare(uint32_t id) {
  if (id == 0 || id >= kMaxSeriesId) {
    return absl::InvalidArgumentError(absl::StrCat("series id ", id, " out of range"));
  }
  if (id >= declared_.size()) {
    declared_.resize(id + 1, false);
    last_value_.resize(id + 1, 0);
  }
  if (!declared_[id]) {
    declared_[id] = true;
    ++declared_count_;
  }
  return absl::OkStatus();
}

absl::Status StreamDecoder::AddLayout(const v1::Layout& layout) {
  if (layout.id() == 0) {
    return absl::InvalidArgumentError("layout id 0 is reserved");
  }
  if (layouts_.size() >= kMaxLayouts && !layouts_.contains(layout.id())) {
    return absl::InvalidArgumentError("too many layouts on one stream");
  }
  for (uint32_t id : layout.series_ids()) {
    if (!IsDeclared(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("layout ", layout.id(), " uses undeclared series id ", id));
    }
  }
  auto existing = layouts_.find(layout.id());
  const size_t replaced = existing == layouts_.end() ? 0 : existing->second.size();
  const size_t entries = layout_entries_ - replaced + static_cast<size_t>(layout.series_ids_size());
  const size_t budget = kMinLayoutEntryBudget + kLayoutEntriesPerSeries * declared_count_;
  if (entries > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "layout ", layout.id(), ": the stream's layouts would name ", entries,
        " series ids in all, more than ", budget, " for ", declared_count_, " declared series"));
  }
  layouts_[layout.id()].assign(layout.series_ids().begin(), layout.series_ids().end());
  layout_entries_ = entries;
  return absl::OkStatus();
}

absl::Status StreamDecoder::Decode(const v1::SampleBatch& batch, DecodedBatch* out) {
  auto it = layouts_.find(batch.layout_id());
  if (it == layouts_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch.sequence(), " uses unknown layout ", batch.layout_id()));
  }
  const std::vector<uint32_t>& ids = it->second;
  const size_t n = ids.size();
  const std::string& present = batch.present();
  if (!present.empty() && present.size() != (n + 7) / 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch.sequence(), ": presence bitmap has wrong size"));
  }
  auto is_present = [&](size_t i) {
    return present.empty() || (static_cast<unsigned char>(present[i / 8]) >> (i % 8)) & 1;
  };
  size_t expected = 0;
  for (size_t i = 0; i < n; ++i) {
    expected += is_present(i) ? 1 : 0;
  }
  if (static_cast<size_t>(batch.value_deltas_size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch.sequence(), ": ",
                                                   batch.value_deltas_size(), " values for ",
                                                   expected, " present series"));
  }
  out->sequence = batch.sequence();
  out->timestamp_unix_nanos = batch.timestamp_unix_nanos();
  out->dropped_before = batch.dropped_before();
  out->collect_duration_us = batch.collect_duration_us();
  out->series_ids = &ids;
  out->values.assign(n, 0);
  out->present.assign(n, false);
  int k = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!is_present(i)) {
      continue;
    }
    const uint32_t id = ids[i];
    last_value_[id] += static_cast<uint64_t>(batch.value_deltas(k++));
    out->values[i] = last_value_[id];
    out->present[i] = true;
  }
  return absl::OkStatus();
}

}  // namespace fabricmon::wire
