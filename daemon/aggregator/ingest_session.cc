#include "daemon/aggregator/ingest_session.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/wire/series_codec.h"

namespace fabricmon::aggregator {

IngestSession::~IngestSession() {
  stats_.series_unstored -= static_cast<int64_t>(unstored_.size());
}

std::optional<IngestError> IngestSession::CheckNodeName(absl::string_view name) {
  if (name.empty() || name.size() > 253) {
    return IngestError{RejectReason::kMalformed, v1::Reject::REASON_MALFORMED,
                       absl::StatusCode::kInvalidArgument, "hello without a valid node name"};
  }
  for (char c : name) {
    // Host names and similar identifiers only: the name becomes a label value everywhere.
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) {
      return IngestError{RejectReason::kMalformed, v1::Reject::REASON_MALFORMED,
                         absl::StatusCode::kInvalidArgument,
                         "node name may contain only letters, digits, '-', '_', '.', ':'"};
    }
  }
  return std::nullopt;
}

std::variant<IngestSession::Attached, IngestError> IngestSession::Attach(
    const v1::Hello& hello, uint64_t stream_token, std::function<void()> cancel,
    const std::string& peer_key, store::SettlementLedger::AckSink acknowledge) {
  if (node_ != nullptr) {
    return IngestError{RejectReason::kProtocol, v1::Reject::REASON_PROTOCOL,
                       absl::StatusCode::kFailedPrecondition, "second hello on one stream"};
  }
  if (std::optional<IngestError> invalid = CheckNodeName(hello.node_name())) {
    return *std::move(invalid);
  }
  const int64_t now = clock_.NowUnixNanos();  // read once per hello (tests gate the clock)
  absl::StatusOr<store::SeriesStore::Attachment> attached =
      store_.Attach(hello, stream_token, std::move(cancel), now, peer_key);
  if (!attached.ok()) {
    std::string message(attached.status().message());
    switch (attached.status().code()) {
      case absl::StatusCode::kResourceExhausted:
        return IngestError{RejectReason::kNodeLimit, v1::Reject::REASON_LIMIT,
                           absl::StatusCode::kResourceExhausted, std::move(message)};
      case absl::StatusCode::kFailedPrecondition:
        return IngestError{RejectReason::kIdentityConflict, v1::Reject::REASON_IDENTITY_CONFLICT,
                           absl::StatusCode::kFailedPrecondition, std::move(message)};
      default:
        return IngestError{RejectReason::kDuplicateNode, v1::Reject::REASON_DUPLICATE_NODE,
                           absl::StatusCode::kAlreadyExists, std::move(message)};
    }
  }
  node_ = attached->node;
  peer_budget_ = attached->peer;
  agent_instance_id_ = hello.agent_instance_id();
  answers_redeclare_ = hello.protocol_revision() >= v1::PROTOCOL_REVISION_2;
  const uint64_t reported =
      node_->ledger().Bind(agent_instance_id_, hello.last_acked_sequence(),
                           attached->last_stored_sequence, stream_token, std::move(acknowledge));
  store_.MaybeForget(now, clock_.MonotonicNanos());
  return Attached{reported};
}

namespace {

// The reject for a declaration FamilyRegistry::Admit refused (by its status code).
IngestError AdmissionError(const absl::Status& status) {
  std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kPermissionDenied:
      return IngestError{RejectReason::kReservedFamily, v1::Reject::REASON_RESERVED_FAMILY,
                         absl::StatusCode::kPermissionDenied, std::move(message)};
    case absl::StatusCode::kFailedPrecondition:
      return IngestError{RejectReason::kDeclarationConflict,
                         v1::Reject::REASON_DECLARATION_CONFLICT,
                         absl::StatusCode::kFailedPrecondition, std::move(message)};
    case absl::StatusCode::kResourceExhausted:
      return IngestError{RejectReason::kSeriesLimit, v1::Reject::REASON_LIMIT,
                         absl::StatusCode::kResourceExhausted, std::move(message)};
    default:
      return IngestError{RejectReason::kInvalidDeclaration, v1::Reject::REASON_MALFORMED,
                         absl::StatusCode::kInvalidArgument, std::move(message)};
  }
}

}  // namespace

std::optional<IngestError> IngestSession::Declare(const v1::SeriesDeclarations& declarations) {
  const int64_t now = clock_.MonotonicNanos();  // for the node's new-series bucket
  size_t newly_unstored = 0;
  std::string cap_reached;
  for (const v1::SeriesDeclaration& declaration : declarations.series()) {
    absl::StatusOr<collectors::SeriesDesc> desc = wire::FromDeclaration(declaration);
    if (!desc.ok()) {
      return IngestError{RejectReason::kInvalidDeclaration, v1::Reject::REASON_MALFORMED,
                         absl::StatusCode::kInvalidArgument, std::string(desc.status().message())};
    }
    // What reaches /metrics is the aggregator's: catalogue HELP, pinned families, valid names.
    absl::Status admitted = store_.families().Admit(*desc);
    if (!admitted.ok()) {
      return AdmissionError(admitted);
    }
    absl::Status declared = decoder_.Declare(declaration.id());
    if (!declared.ok()) {
      return IngestError{RejectReason::kInvalidDeclaration, v1::Reject::REASON_MALFORMED,
                         absl::StatusCode::kInvalidArgument, std::string(declared.message())};
    }
    absl::StatusOr<store::SlotRef> slot = node_->DeclareSlot(*desc, now, peer_budget_.get());
    if (!slot.ok() && absl::IsResourceExhausted(slot.status())) {
      // A cap is reached: this series is not stored, the node's others are. Ending the stream
      // instead would blind the whole node (and, at the store-wide cap, for another node's
      // flood).
      if (unstored_.insert(declaration.id()).second) {
        ++newly_unstored;
        cap_reached = std::string(slot.status().message());
      }
      slot = store::SlotRef{store::SlotRef::kUnstored, 0};
    } else if (!slot.ok()) {
      // Label churn (the node's or its peer's new-series rate): the agent misbehaves.
      return IngestError{RejectReason::kSeriesRateLimit, v1::Reject::REASON_LIMIT,
                         absl::StatusCode::kResourceExhausted,
                         std::string(slot.status().message())};
    } else if (unstored_.erase(declaration.id()) > 0) {
      --stats_.series_unstored;
    }
    if (declaration.id() >= stream_to_node_.size()) {
      stream_to_node_.resize(declaration.id() + 1);
    }
    store::SlotRef& mapped = stream_to_node_[declaration.id()];
    if (mapped.index != slot->index || mapped.generation != slot->generation) {
      ++mapping_version_;  // layouts holding the old slot resolve again
    }
    mapped = *slot;
    redeclare_pending_.erase(declaration.id());
  }
  if (newly_unstored > 0) {
    stats_.series_unstored += static_cast<int64_t>(newly_unstored);
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "node " << node_->name() << ": " << newly_unstored
        << " new series not stored, its other series go on (" << cap_reached
        << "); see fabricmon_aggregator_series_unstored";
  }
  return std::nullopt;
}

std::optional<IngestError> IngestSession::AddLayouts(const v1::Layouts& layouts) {
  for (const v1::Layout& layout : layouts.layouts()) {
    absl::Status added = decoder_.AddLayout(layout);
    if (added.code() == absl::StatusCode::kResourceExhausted) {
      return IngestError{RejectReason::kSeriesLimit, v1::Reject::REASON_LIMIT,
                         absl::StatusCode::kResourceExhausted, std::string(added.message())};
    }
    if (!added.ok()) {
      return IngestError{RejectReason::kUnknownSeries, v1::Reject::REASON_PROTOCOL,
                         absl::StatusCode::kInvalidArgument, std::string(added.message())};
    }
    Resolve(layout.series_ids(), layout_slots_[layout.id()]);
  }
  return std::nullopt;
}

std::variant<IngestSession::BatchResult, IngestError> IngestSession::Batch(
    const v1::SampleBatch& batch) {
  if (batch.sequence() == 0 && decoder_.HasLayout(batch.layout_id())) {
    // Before decoding: a refused batch must not move the stream's delta state.
    return IngestError{RejectReason::kProtocol, v1::Reject::REASON_PROTOCOL,
                       absl::StatusCode::kInvalidArgument, "batch sequence 0 is reserved"};
  }
  absl::Status decoded = decoder_.Decode(batch, &decoded_);
  if (!decoded.ok()) {
    // A batch naming a layout never sent breaks the protocol; one that does not fit its layout
    // (value count, presence bitmap) is malformed. Counted apart, so /metrics tells them apart.
    if (!decoder_.HasLayout(batch.layout_id())) {
      return IngestError{RejectReason::kUnknownLayout, v1::Reject::REASON_PROTOCOL,
                         absl::StatusCode::kInvalidArgument, std::string(decoded.message())};
    }
    return IngestError{RejectReason::kMalformed, v1::Reject::REASON_MALFORMED,
                       absl::StatusCode::kInvalidArgument, std::string(decoded.message())};
  }
  LayoutSlots& resolved = layout_slots_[batch.layout_id()];
  if (resolved.version != mapping_version_) {
    Resolve(*decoded_.series_ids, resolved);
  }
  const int64_t now = clock_.NowUnixNanos();  // read once per batch (tests gate the clock)
  const store::NodeState::AppendResult appended = node_->AppendBatchToSlots(
      batch.sequence(), batch.dropped_before(), batch.timestamp_unix_nanos(), resolved.slots,
      decoded_.values, decoded_.present, now);
  // Whatever is refused here is not acknowledged: the agent keeps the batch.
  if (appended.forgotten) {
    return IngestError{RejectReason::kForgotten, v1::Reject::REASON_PROTOCOL,
                       absl::StatusCode::kUnavailable,
                       "the aggregator forgot this node (silent longer than node_retention_s): "
                       "reconnect"};
  }
  if (appended.out_of_range_position.has_value()) {
    const uint32_t position = *appended.out_of_range_position;
    return IngestError{
        RejectReason::kValueOutOfRange, v1::Reject::REASON_VALUE_OUT_OF_RANGE,
        absl::StatusCode::kInvalidArgument,
        absl::StrCat(
            "batch ", batch.sequence(), ": value ", decoded_.values[position], " of series id ",
            (*decoded_.series_ids)[position], " is beyond its declared width of ",
            static_cast<int>(appended.out_of_range_width), " bits; the batch is not stored")};
  }
  if (appended.clock_step) {
    ++stats_.clock_steps;
  }
  store_.MaybeForget(now, clock_.MonotonicNanos());
  stats_.series_retired += appended.retired_now;
  stats_.unstored_samples += appended.unstored_samples;
  BatchResult result;
  if (!appended.retired_positions.empty()) {
    stats_.retired_samples += appended.retired_positions.size();
    result.retired_values = true;
    if (answers_redeclare_) {
      for (uint32_t position : appended.retired_positions) {
        const uint32_t id = (*decoded_.series_ids)[position];
        if (redeclare_pending_.insert(id).second) {
          result.redeclare.push_back(id);
        }
      }
      stats_.redeclare_requests += result.redeclare.size();
    }
  }
  if (!unstored_.empty() && answers_redeclare_) {
    AskForUnstored(result.redeclare);
  }
  // Stored or a duplicate, the batch is the agent's to forget once it settles.
  result.settlement = node_->ledger().Track(agent_instance_id_, batch.sequence());
  if (appended.stored) {
    if (observer_ != nullptr) {
      observer_->OnStored(*node_, resolved.slots, decoded_.present, result.settlement);
    }
    ++stats_.batches;
    stats_.samples += appended.samples;
    stats_.agent_dropped_batches += batch.dropped_before();
    stats_.timestamps_backwards += appended.timestamps_backwards;
    result.stored = true;
    result.samples = appended.samples;
  } else {
    ++stats_.duplicate_batches;
  }
  return result;
}

void IngestSession::SetInventory(v1::Inventory inventory) {
  node_->SetInventory(std::move(inventory));
}

void IngestSession::Detach(uint64_t stream_token) {
  if (node_ != nullptr) {
    node_->ledger().Unbind(stream_token);
    store_.Detach(*node_, stream_token, clock_.NowUnixNanos());
  }
}

void IngestSession::AskForUnstored(std::vector<uint32_t>& redeclare) {
  // As many as the caps have room for now, so that a flood of redeclarations does not spend the
  // node's and its peer's new-series tokens on series the caps would refuse again.
  uint64_t room = node_->SeriesRoom();
  uint64_t asked = 0;
  for (auto it = unstored_.begin(); it != unstored_.end() && asked < room; ++it) {
    if (redeclare_pending_.insert(*it).second) {
      redeclare.push_back(*it);
      ++asked;
    }
  }
  stats_.redeclare_requests += asked;
}

template <typename Ids>
void IngestSession::Resolve(const Ids& series_ids, LayoutSlots& resolved) const {
  resolved.slots.clear();
  resolved.slots.reserve(series_ids.size());
  for (uint32_t id : series_ids) {
    resolved.slots.push_back(stream_to_node_[id]);
  }
  resolved.version = mapping_version_;
}

}  // namespace fabricmon::aggregator
