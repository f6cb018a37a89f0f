#pragma once

// The aggregator's own health: streams, samples and bytes ingested, replays, drops, rejected
// messages. Plain atomics updated on the ingest path; exported by the metrics exporter.

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace fabricmon::aggregator {

enum class RejectReason : uint8_t {
  kBeforeHello,
  kMalformed,
  kUnknownSeries,
  kUnknownLayout,
  kDuplicateNode,
  kSeriesLimit,
  kSeriesRateLimit,  // new series beyond the node's new-series rate (label churn)
  kInvalidDeclaration,
  kIdentityMismatch,  // hello's node name is not the client certificate's (mutual TLS)
  kRoleForbidden,     // an operator certificate tried to stream (authorization.h)
  kNodeLimit,         // a new node beyond max_nodes
  kIdentityConflict,  // another boot id holds the node's identity (a clone)
  kValueOutOfRange,   // a counter value beyond its declared width
  kTooLarge,          // a message above max_message_bytes
  kUndecodable,       // a message that does not parse (also invalid UTF-8 in a string)
  kForgotten,         // a stream of a node the store forgot (node_retention_s)
  kProtocol,
  kDeclarationConflict,  // a family declared against the metric catalogue or its first declaration
  kReservedFamily,       // a family the aggregator writes itself
  kCount,
};

absl::string_view RejectReasonName(RejectReason reason);

// HandshakeFailure::kCount; kept as a number so that this header needs no gRPC.
inline constexpr size_t kHandshakeFailureKinds = 4;

struct IngestStats {
  std::atomic<uint64_t> streams_opened{0};
  std::atomic<int64_t> streams_active{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> duplicate_batches{0};  // replayed batches already stored
  std::atomic<uint64_t> agent_dropped_batches{0};
  std::atomic<uint64_t> timestamps_backwards{0};  // batches re-based after a clock step back
  std::atomic<uint64_t> clock_steps{0};           // batches re-based after any clock step
  std::atomic<uint64_t> series_retired{0};        // by the nodes' retention sweeps
  std::atomic<uint64_t> retired_samples{0};       // values for retired series, dropped
  std::atomic<uint64_t> redeclare_requests{0};    // series ids asked for again
  // Series of connected streams that a cap (max_series_total, max_series_per_node) kept out of
  // the store, and their values dropped since: the stream and its other series go on.
  std::atomic<int64_t> series_unstored{0};
  std::atomic<uint64_t> unstored_samples{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(RejectReason::kCount)> rejected{};
  // Inventories whose fabric_nodes/fabric_links were dropped: the node is not a fabric sweeper.
  std::atomic<uint64_t> inventory_fabric_refused{0};
  // Diagnostics calls refused: the caller's certificate is not an operator's.
  std::atomic<uint64_t> diagnostics_not_operator{0};
  // TLS handshakes gRPC refused, by HandshakeFailure (daemon/common/handshake_failures.h): a
  // client without a certificate, of another CA, expired, or plaintext.
  std::array<std::atomic<uint64_t>, kHandshakeFailureKinds> handshakes_refused{};

  void Reject(RejectReason reason) { ++rejected[static_cast<size_t>(reason)]; }
};

}  // namespace fabricmon::aggregator
