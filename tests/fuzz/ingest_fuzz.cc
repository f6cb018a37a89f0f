// The aggregator's ingest path without gRPC: bytes → AgentMessage sequences → what
// AgentStream::Handle{Hello,Declarations,Layouts,Batch} does with them (daemon/aggregator/
// agent_stream.cc; keep the two in step) → SeriesStore/NodeState, then everything that reads the
// store: rates, node summaries, the /metrics exporter (both of its serialisers, which must agree
// byte for byte), the detection engine and its Diagnose answer.
//
// Input: records of <varint length><serialized AgentMessage>, as the messages of a gRPC stream. A
// zero-length record ends the current stream (as the agent disconnecting) and starts the next one
// (a reconnect: new decoder, new stream token, same store), so takeover, replay and re-declaration
// are reached. A record that does not parse ends the input (gRPC would fail the call).

#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "daemon/aggregator/findings_exporter.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/detectors/engine.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/store/series_store.h"
#include "daemon/wire/batch_codec.h"
#include "daemon/wire/metric_catalogue.h"
#include "daemon/wire/series_codec.h"
#include "fabricmon/v1/telemetry.pb.h"
#include "prometheus/text_serializer.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/text_format_check.h"

namespace {

using fabricmon::aggregator::RejectReason;
using fabricmon::store::NodeState;
using fabricmon::store::SeriesStore;

constexpr size_t kMaxStreams = 4;
constexpr size_t kMaxMessagesPerInput = 256;
constexpr int kMaxTicks = 32;

// Reads a protobuf varint; false at the end of the input or on a varint longer than 10 bytes.
bool ReadVarint(const uint8_t*& p, const uint8_t* end, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t byte = *p++;
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      return true;
    }
  }
  return false;
}

// One stream's read side: the members of AgentStream that Handle* touch.
class Stream {
 public:
  Stream(SeriesStore& store, fabricmon::aggregator::IngestStats& stats,
         fabricmon::testing::FakeClock& clock, uint64_t token)
      : store_(store), stats_(stats), clock_(clock), token_(token) {}

  ~Stream() {
    if (node_ != nullptr) {
      store_.Detach(*node_, token_, clock_.NowUnixNanos());  // OnDone
    }
  }

  // False once the stream was rejected (AgentStream::Fail ends it).
  bool alive() const { return !rejected_; }
  bool stored_batch() const { return stored_batch_; }

  void Handle(const fabricmon::v1::AgentMessage& message) {
    std::optional<RejectReason> error = Dispatch(message);
    if (error.has_value()) {
      stats_.Reject(*error);
      rejected_ = true;
    }
  }

 private:
  std::optional<RejectReason> Dispatch(const fabricmon::v1::AgentMessage& message) {
    using fabricmon::v1::AgentMessage;
    stored_batch_ = false;
    if (message.body_case() != AgentMessage::kHello && node_ == nullptr) {
      return RejectReason::kBeforeHello;
    }
    switch (message.body_case()) {
      case AgentMessage::kHello:
        return HandleHello(message.hello());
      case AgentMessage::kDeclarations:
        return HandleDeclarations(message.declarations());
      case AgentMessage::kLayouts:
        return HandleLayouts(message.layouts());
      case AgentMessage::kBatch:
        return HandleBatch(message.batch());
      case AgentMessage::kBatches: {
        // As AgentStream::HandleBatches: each in order, the first refusal ends the stream.
        const auto& batches = message.batches().batch();
        if (batches.empty() ||
            batches.size() > static_cast<int>(fabricmon::wire::kMaxBatchesPerMessage)) {
          return RejectReason::kMalformed;
        }
        for (const fabricmon::v1::SampleBatch& batch : batches) {
          if (std::optional<RejectReason> refused = HandleBatch(batch)) {
            return refused;
          }
        }
        return std::nullopt;
      }
      case AgentMessage::kInventory:
        node_->SetInventory(message.inventory().inventory());
        return std::nullopt;
      case AgentMessage::kAckRequest:
        return std::nullopt;  // the live stream's acks only: nothing to store
      case AgentMessage::BODY_NOT_SET:
        break;
    }
    return RejectReason::kMalformed;
  }

  std::optional<RejectReason> HandleHello(const fabricmon::v1::Hello& hello) {
    if (node_ != nullptr) {
      return RejectReason::kProtocol;
    }
    if (hello.node_name().empty() || hello.node_name().size() > 253) {
      return RejectReason::kMalformed;
    }
    for (char c : hello.node_name()) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.' || c == ':';
      if (!ok) {
        return RejectReason::kMalformed;
      }
    }
    // (Identity binding is not modelled: without TLS there is no certificate.)
    absl::StatusOr<SeriesStore::Attachment> attached = store_.Attach(
        hello, token_, [] {}, clock_.NowUnixNanos());
    if (!attached.ok()) {
      FABRICMON_FUZZ_CHECK(attached.status().code() == absl::StatusCode::kAlreadyExists);
      return RejectReason::kDuplicateNode;
    }
    node_ = attached->node;
    FABRICMON_FUZZ_CHECK(node_ != nullptr && node_->name() == hello.node_name());
    return std::nullopt;
  }

  std::optional<RejectReason> HandleDeclarations(
      const fabricmon::v1::SeriesDeclarations& declarations) {
    for (const fabricmon::v1::SeriesDeclaration& declaration : declarations.series()) {
      absl::StatusOr<fabricmon::collectors::SeriesDesc> desc =
          fabricmon::wire::FromDeclaration(declaration);
      if (!desc.ok()) {
        return RejectReason::kInvalidDeclaration;
      }
      const absl::Status admitted = store_.families().Admit(*desc);
      if (!admitted.ok()) {
        switch (admitted.code()) {
          case absl::StatusCode::kPermissionDenied:
            return RejectReason::kReservedFamily;
          case absl::StatusCode::kFailedPrecondition:
            return RejectReason::kDeclarationConflict;
          case absl::StatusCode::kResourceExhausted:
            return RejectReason::kSeriesLimit;
          default:
            return RejectReason::kInvalidDeclaration;
        }
      }
      FABRICMON_FUZZ_CHECK(!fabricmon::wire::IsReservedFamily(desc->name));
      // What was accepted is exportable: a valid name, UTF-8 label values, a sane width.
      FABRICMON_FUZZ_CHECK(fabricmon::wire::IsValidMetricName(desc->name));
      for (const auto& [name, value] : desc->labels) {
        FABRICMON_FUZZ_CHECK(fabricmon::wire::IsValidLabelName(name) && name != "node");
        FABRICMON_FUZZ_CHECK(fabricmon::wire::CheckLabelName(name).ok());
      }
      if (!decoder_.Declare(declaration.id()).ok()) {
        return RejectReason::kInvalidDeclaration;
      }
      absl::StatusOr<uint32_t> index = node_->Declare(*desc);
      if (!index.ok()) {
        return RejectReason::kSeriesLimit;
      }
      if (declaration.id() >= stream_to_node_.size()) {
        stream_to_node_.resize(declaration.id() + 1, 0);
      }
      stream_to_node_[declaration.id()] = *index;
    }
    return std::nullopt;
  }

  std::optional<RejectReason> HandleLayouts(const fabricmon::v1::Layouts& layouts) {
    for (const fabricmon::v1::Layout& layout : layouts.layouts()) {
      const absl::Status added = decoder_.AddLayout(layout);
      if (added.code() == absl::StatusCode::kResourceExhausted) {
        return RejectReason::kSeriesLimit;
      }
      if (!added.ok()) {
        return RejectReason::kUnknownSeries;
      }
      std::vector<uint32_t>& indices = layout_indices_[layout.id()];
      indices.clear();
      for (uint32_t id : layout.series_ids()) {
        // AgentStream indexes without a bound check: AddLayout accepted only declared ids, and
        // every declared id has a slot.
        FABRICMON_FUZZ_CHECK(id < stream_to_node_.size());
        indices.push_back(stream_to_node_[id]);
      }
    }
    return std::nullopt;
  }

  std::optional<RejectReason> HandleBatch(const fabricmon::v1::SampleBatch& batch) {
    if (!decoder_.Decode(batch, &decoded_).ok()) {
      return decoder_.HasLayout(batch.layout_id()) ? RejectReason::kMalformed
                                                   : RejectReason::kUnknownLayout;
    }
    if (batch.sequence() == 0) {
      return RejectReason::kProtocol;
    }
    const std::vector<uint32_t>& indices = layout_indices_[batch.layout_id()];
    FABRICMON_FUZZ_CHECK(decoded_.values.size() == indices.size());
    FABRICMON_FUZZ_CHECK(decoded_.present.size() == indices.size());
    const NodeState::AppendResult result =
        node_->AppendBatch(batch.sequence(), batch.dropped_before(), batch.timestamp_unix_nanos(),
                           indices, decoded_.values, decoded_.present, clock_.NowUnixNanos());
    if (result.stored) {
      ++stats_.batches;
      stats_.samples += result.samples;
      stored_batch_ = true;
    } else {
      ++stats_.duplicate_batches;
    }
    return std::nullopt;
  }

  SeriesStore& store_;
  fabricmon::aggregator::IngestStats& stats_;
  fabricmon::testing::FakeClock& clock_;
  const uint64_t token_;
  bool rejected_ = false;
  bool stored_batch_ = false;
  std::shared_ptr<NodeState> node_;
  fabricmon::wire::StreamDecoder decoder_;
  fabricmon::wire::DecodedBatch decoded_;
  std::vector<uint32_t> stream_to_node_;
  absl::flat_hash_map<uint32_t, std::vector<uint32_t>> layout_indices_;
};

void ReadEverything(const SeriesStore& store, const fabricmon::aggregator::IngestStats& stats,
                    fabricmon::testing::FakeClock& clock,
                    fabricmon::detectors::DetectionEngine& engine) {
  std::vector<std::string> names;
  for (const std::shared_ptr<NodeState>& node : store.Nodes()) {
    names.push_back(node->name());
    node->ForEachSeries([](const fabricmon::store::Series& series) {
      FABRICMON_FUZZ_CHECK(series.count <= series.ring.size());
      const fabricmon::store::Rate rate = series.CurrentRate();
      if (rate.kind == fabricmon::store::Rate::Kind::kOk &&
          series.desc->type == fabricmon::collectors::MetricType::kCounter) {
        // Counters never go backwards: a decrease is a wrap or a reset, never a negative rate.
        FABRICMON_FUZZ_CHECK(!(rate.per_second < 0));
      }
    });
    (void)node->GetSummary(/*with_inventory=*/true);
  }
  fabricmon::aggregator::MetricsExporter exporter(store, stats, clock,
                                                  fabricmon::aggregator::ExporterOptions{});
  // The streaming serializer must write exactly what prometheus-cpp writes for Collect(), except
  // that HELP is escaped (prometheus-cpp writes it raw): then it must equal our own writer's.
  std::string direct;
  exporter.AppendText(&direct);
  const std::vector<prometheus::MetricFamily> collected = exporter.Collect();
  bool help_escaped = false;
  for (const prometheus::MetricFamily& family : collected) {
    help_escaped = help_escaped || family.help.find_first_of("\\\n") != std::string::npos;
  }
  FABRICMON_FUZZ_CHECK(direct == fabricmon::exposition::SerializeText(collected));
  if (!help_escaped) {
    FABRICMON_FUZZ_CHECK(direct == prometheus::TextSerializer().Serialize(collected));
  }
  FABRICMON_FUZZ_CHECK(fabricmon::testing::CheckTextFormat(direct).empty());
  (void)engine.Diagnose(names);
  (void)engine.Findings(/*include_cleared=*/true, "");
  (void)fabricmon::aggregator::FindingsExporter(engine).Collect();
}

}  // namespace

FABRICMON_FUZZ_TARGET(ingest) {
  fabricmon::testing::FakeClock clock;
  fabricmon::store::StoreOptions store_options;
  store_options.samples_per_series = 4;
  store_options.max_series_per_node = 2000;  // keeps one input's memory small
  SeriesStore store(store_options);
  fabricmon::aggregator::IngestStats stats;
  fabricmon::detectors::DetectionEngine engine(store, clock, fabricmon::v1::DetectorThresholds(),
                                               int64_t{1000000000});

  const uint8_t* p = data;
  const uint8_t* const end = data + size;
  uint64_t token = 1;
  auto stream = std::make_unique<Stream>(store, stats, clock, token);
  size_t streams = 1;
  size_t messages = 0;
  int ticks = 0;
  while (p < end && messages < kMaxMessagesPerInput) {
    uint64_t length = 0;
    if (!ReadVarint(p, end, &length) || length > static_cast<uint64_t>(end - p)) {
      break;
    }
    if (length == 0) {
      if (++streams > kMaxStreams) {
        break;
      }
      stream.reset();  // the old stream ends before the new one says hello
      stream = std::make_unique<Stream>(store, stats, clock, ++token);
      continue;
    }
    fabricmon::v1::AgentMessage message;
    if (!message.ParseFromArray(p, static_cast<int>(length))) {
      break;
    }
    p += length;
    ++messages;
    if (!stream->alive()) {
      continue;  // a rejected stream reads nothing more
    }
    stream->Handle(message);
    clock.AdvanceMillis(1000);
    if (stream->stored_batch() && ticks < kMaxTicks) {
      engine.Tick();
      ++ticks;
    }
  }
  stream.reset();
  ReadEverything(store, stats, clock, engine);
}
