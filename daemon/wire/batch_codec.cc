#include "daemon/wire/batch_codec.h"

#include "absl/strings/str_cat.h"
#include "daemon/wire/series_codec.h"

namespace fabricmon::wire {

void StreamEncoder::Forget(absl::Span<const uint32_t> ids) {
  for (uint32_t id : ids) {
    if (id < declared_.size() && declared_[id]) {
      declared_[id] = false;
      --declared_count_;
    }
  }
}

void StreamEncoder::Encode(uint64_t sequence, int64_t timestamp_unix_nanos,
                           uint32_t collect_duration_us, uint64_t dropped_before,
                           const std::shared_ptr<const std::vector<uint32_t>>& layout,
                           absl::Span<const uint64_t> values, std::vector<v1::AgentMessage>* out) {
  // Declarations of new series, in chunks so no single message grows unbounded: a node's first
  // cycle declares thousands of series (a DGX node's ib_sysfs alone is ~77 KB of declarations),
  // and one message must stay far below the smallest max_message_bytes an aggregator may set
  // (64 KiB), whatever the HELP texts and labels weigh.
  constexpr int kDeclarationsPerMessage = 1000;
  constexpr size_t kDeclarationBytesPerMessage = 16 << 10;
  v1::AgentMessage declarations;
  size_t declaration_bytes = 0;
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
    ++declared_count_;
    v1::SeriesDeclaration* declaration = declarations.mutable_declarations()->add_series();
    *declaration = ToDeclaration(*desc, id);
    declaration_bytes += declaration->ByteSizeLong() + 4;  // + tag and length prefix
    if (declarations.declarations().series_size() == kDeclarationsPerMessage ||
        declaration_bytes >= kDeclarationBytesPerMessage) {
      out->push_back(std::move(declarations));
      declarations.Clear();
      declaration_bytes = 0;
    }
  }
  if (declarations.has_declarations()) {
    out->push_back(std::move(declarations));
  }

  const uint32_t layout_id = LayoutId(layout, out);

  v1::AgentMessage message;
  v1::SampleBatch* batch = message.mutable_batch();
  batch->set_sequence(sequence);
  batch->set_timestamp_unix_nanos(timestamp_unix_nanos);
  batch->set_layout_id(layout_id);
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

uint32_t StreamEncoder::LayoutId(const std::shared_ptr<const std::vector<uint32_t>>& layout,
                                 std::vector<v1::AgentMessage>* out) {
  auto found = layout_ids_.find(layout.get());
  if (found != layout_ids_.end()) {
    held_[found->second - 1].last_used = ++use_clock_;
    return found->second;
  }
  // Make room: least recently used first (a linear scan, only when a layout is new).
  const size_t budget =
      StreamDecoder::kMinLayoutEntryBudget + kLayoutEntriesPerSeries * declared_count_;
  std::vector<uint32_t> evicted;
  while (!layout_ids_.empty() &&
         (layout_ids_.size() >= kMaxLayouts || layout_entries_ + layout->size() > budget)) {
    size_t oldest = held_.size();
    for (size_t i = 0; i < held_.size(); ++i) {
      if (held_[i].layout != nullptr &&
          (oldest == held_.size() || held_[i].last_used < held_[oldest].last_used)) {
        oldest = i;
      }
    }
    HeldLayout& victim = held_[oldest];
    layout_ids_.erase(victim.layout.get());
    layout_entries_ -= victim.layout->size();
    victim.layout.reset();
    evicted.push_back(static_cast<uint32_t>(oldest + 1));
  }
  uint32_t id;
  if (!evicted.empty()) {
    id = evicted.front();
    evicted.erase(evicted.begin());
  } else if (!free_layout_ids_.empty()) {
    id = free_layout_ids_.back();
    free_layout_ids_.pop_back();
  } else {
    held_.emplace_back();
    id = static_cast<uint32_t>(held_.size());
  }
  held_[id - 1] = {layout, ++use_clock_};
  layout_ids_.emplace(layout.get(), id);
  layout_entries_ += layout->size();

  v1::AgentMessage message;
  for (uint32_t emptied : evicted) {
    message.mutable_layouts()->add_layouts()->set_id(emptied);  // the decoder frees its entries
    free_layout_ids_.push_back(emptied);
  }
  v1::Layout* wire_layout = message.mutable_layouts()->add_layouts();
  wire_layout->set_id(id);
  wire_layout->mutable_series_ids()->Assign(layout->begin(), layout->end());
  out->push_back(std::move(message));
  return id;
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
