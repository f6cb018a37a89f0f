#pragma once

// One agent stream's ingest, without its transport: the node it attached to, the stream's wire
// decoder (declared ids, layouts, delta state) and the map from the stream's series ids to the
// node's slots. AgentStream (gRPC) and `fabricmon replay` (a recording) feed it the same parsed
// messages, so a replay stores exactly what the live aggregator stored.
//
// What stays with the transport: reading and parsing bytes, the peer's identity and role checks,
// filtering switch topology out of a non-sweeper's inventory, sending acks, redeclaration
// requests and rejects. A series beyond a series cap (the node's, or the store-wide
// max_series_total) is not a refused message: it is left unstored, its values dropped and
// counted, and the stream with the node's other series goes on; when the caps have room again
// the agent is asked to declare it again (revision 2 agents). A refused message ends the stream
// (the caller's part: a live stream sends a Reject naming IngestError's reason, a replay marks the
// recorded stream broken). Messages the wire decoder refuses leave the session as it was; a batch
// the store refuses (a value beyond its width, a forgotten node) has moved the stream's delta
// state, so the session is not fed again after a refusal.
//
// Not thread-safe: one reader per stream, as gRPC's reactor and the replay loop are.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "daemon/aggregator/batch_observer.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/common/clock.h"
#include "daemon/store/series_store.h"
#include "daemon/wire/batch_codec.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::aggregator {

// Why a message was refused: the counted reason, the reason on the wire, the status the stream
// ends with (absl's codes are gRPC's, number for number) and a message naming the problem.
struct IngestError {
  RejectReason reason;
  v1::Reject::Reason wire_reason;
  absl::StatusCode code;
  std::string message;
};

class IngestSession {
 public:
  // References must outlive the session. `stats` counts what the session stored and refused
  // values of (not the rejects themselves: the caller counts those once, whatever refused).
  // `observer` (nullable) is told of every stored batch.
  IngestSession(store::SeriesStore& store, IngestStats& stats, Clock& clock,
                BatchObserver::Stream* observer = nullptr)
      : store_(store), stats_(stats), clock_(clock), observer_(observer) {}
  ~IngestSession();
  IngestSession(const IngestSession&) = delete;
  IngestSession& operator=(const IngestSession&) = delete;

  // A node name an agent may use: 1..253 letters, digits, '-', '_', '.', ':' (it becomes a label
  // value everywhere). MALFORMED otherwise.
  static std::optional<IngestError> CheckNodeName(absl::string_view name);

  // Attaches the stream to the hello's node (SeriesStore::Attach; `hello` as the caller keeps
  // it, switch topology already filtered). `cancel` ends the stream when another takes the node
  // over; `peer_key` names the peer's new-series bucket (empty: none). `acknowledge` (nullable)
  // is called with each cumulative ack as the node's batches settle (store::SettlementLedger),
  // from whichever thread settled them. Returns what the hello ack reports as stored: the last
  // sequence the store holds of this agent instance, or less while batches up to it are not
  // settled yet.
  struct Attached {
    uint64_t last_stored_sequence = 0;
  };
  std::variant<Attached, IngestError> Attach(
      const v1::Hello& hello, uint64_t stream_token, std::function<void()> cancel,
      const std::string& peer_key = "", store::SettlementLedger::AckSink acknowledge = nullptr);
  // Null until Attach succeeded.
  const std::shared_ptr<store::NodeState>& node() const { return node_; }
  // The hello announced PROTOCOL_REVISION_2 or later: the agent answers redeclaration requests.
  bool answers_redeclare() const { return answers_redeclare_; }

  std::optional<IngestError> Declare(const v1::SeriesDeclarations& declarations);
  std::optional<IngestError> AddLayouts(const v1::Layouts& layouts);

  // A batch the store took or held already (a duplicate: `stored` false). `redeclare` lists the
  // stream ids whose values came for series the node retired, or that a cap left unstored while
  // the caps now have room, and that were not asked for again yet: the caller asks the agent to
  // declare them again (or, for retired ones, ends an older agent's stream). The batch is
  // acknowledged (through Attach's `acknowledge`) once it settles, at the earliest when the
  // caller releases `settlement`, after answering the batch.
  struct BatchResult {
    bool stored = false;
    uint64_t samples = 0;
    bool retired_values = false;  // some values were for retired series (dropped)
    std::vector<uint32_t> redeclare;
    std::shared_ptr<store::Settlement> settlement;  // null: nothing new to settle
  };
  std::variant<BatchResult, IngestError> Batch(const v1::SampleBatch& batch);

  void SetInventory(v1::Inventory inventory);
  // The stream ended: the node is marked disconnected if this stream still owns it.
  void Detach(uint64_t stream_token);

 private:
  // A layout's node slots, resolved when mapping_version_ was `version`. A re-declaration that
  // moves an id to another slot bumps mapping_version_, and layouts are resolved again when
  // next used.
  struct LayoutSlots {
    std::vector<store::SlotRef> slots;
    uint64_t version = 0;
  };
  // Appends unstored ids not asked for yet, as many as the caps have room for now.
  void AskForUnstored(std::vector<uint32_t>& redeclare);
  template <typename Ids>
  void Resolve(const Ids& series_ids, LayoutSlots& resolved) const;

  store::SeriesStore& store_;
  IngestStats& stats_;
  Clock& clock_;
  BatchObserver::Stream* const observer_;
  std::shared_ptr<store::NodeState> node_;
  std::shared_ptr<store::PeerBudget> peer_budget_;  // the per-peer new-series bucket, if any
  uint64_t agent_instance_id_ = 0;                  // the hello's: the batches' sequence space
  wire::StreamDecoder decoder_;
  wire::DecodedBatch decoded_;
  std::vector<store::SlotRef> stream_to_node_;  // stream series id → node series slot
  absl::flat_hash_map<uint32_t, LayoutSlots> layout_slots_;
  uint64_t mapping_version_ = 0;
  absl::flat_hash_set<uint32_t> redeclare_pending_;  // ids asked for again, not yet declared
  absl::flat_hash_set<uint32_t> unstored_;           // ids a series cap kept out of the store
  bool answers_redeclare_ = false;
};

}  // namespace fabricmon::aggregator
