#pragma once

// A hostile peer for the aggregator's trust boundary: it speaks the wire protocol
// (fabricmon/v1/telemetry.proto) to a real aggregator, in plaintext or mutual TLS, and sends what
// a correct agent never would — any node name, boot id or inventory (fabric topology, other
// nodes' GUIDs), declarations with arbitrary HELP, labels, type and width, batches with chosen
// timestamps, sequences and values, bytes that do not decode, oversized messages, invalid UTF-8 —
// and reports what came back (Reject reason and message, acks, the final status). It also holds
// slow HTTP clients open against /metrics.
//
// The stream goes through grpc::GenericStub: messages are bytes on
// /fabricmon.v1.Telemetry/Stream, so a test can send bytes no protobuf encoder would write.
// Every wait is bounded: a peer that hangs the aggregator fails a test instead of hanging it.
//
// Used by tests/security/trust_boundary_test.cc and by the fabricmon_hostile_peer program
// (hostile_peer_main.cc), which runs a script of the steps below from the shell.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fabricmon/v1/telemetry.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace fabricmon::testing {

inline constexpr char kTelemetryStreamMethod[] = "/fabricmon.v1.Telemetry/Stream";

// How to reach the aggregator. No ca_file: plaintext. ca_file alone: TLS without a client
// certificate. ca_file + cert_file + key_file: mutual TLS.
struct PeerConnection {
  std::string target;  // HOST:PORT
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;  // TLS name override (the aggregator's certificate name)
};

// A channel as the connection asks; InvalidArgument/NotFound when a named file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakePeerChannel(const PeerConnection& connection);

// Everything one stream brought back.
struct StreamReport {
  std::vector<v1::AggregatorMessage> messages;  // in arrival order
  bool finished = false;                        // the final status below is real
  grpc::Status status;

  // The first Reject, if any.
  std::optional<v1::Reject> reject() const;
  bool hello_acked() const;
  // The highest Ack sequence (0: none).
  uint64_t highest_ack() const;
  // One line per message and one for the status, for logs and the program's output.
  std::string Describe() const;
};

// Reject reason as the proto names it, without the REASON_ prefix, lower case
// (REASON_TOO_LARGE → "too_large"); the number for a value this build does not know.
std::string RejectReasonLabel(int reason);

// One telemetry stream through the generic stub. Not thread-safe: one caller drives it.
class WireStream {
 public:
  // Starts the call; `deadline` bounds its whole life.
  static absl::StatusOr<std::unique_ptr<WireStream>> Open(
      const std::shared_ptr<grpc::Channel>& channel, absl::Duration deadline = absl::Seconds(60));
  ~WireStream();  // cancels the call if it was not finished
  WireStream(const WireStream&) = delete;
  WireStream& operator=(const WireStream&) = delete;

  // Sends the message's bytes / arbitrary bytes as one gRPC message. False when the stream is
  // broken (the aggregator ended it); what it said is read by Read/Finish.
  bool Write(const v1::AgentMessage& message);
  bool WriteRaw(const std::string& bytes);

  // The next message from the aggregator: nullopt when the stream ended (its messages are over)
  // or nothing came within `timeout`. Every message read is also kept for the report.
  std::optional<v1::AggregatorMessage> Read(absl::Duration timeout = absl::Seconds(10));
  // Reads until a message for which `want` holds (returned) or the stream ends / times out.
  std::optional<v1::AggregatorMessage> ReadUntil(
      const std::function<bool(const v1::AggregatorMessage&)>& want,
      absl::Duration timeout = absl::Seconds(10));
  // Reads until an Ack of at least `sequence`; false if the stream ended or timed out first.
  bool AwaitAck(uint64_t sequence, absl::Duration timeout = absl::Seconds(10));

  // Half-closes, reads what is left and returns everything read on this stream plus the final
  // status. With `cancel`, cancels instead of half-closing (for a peer that just goes away).
  StreamReport Finish(absl::Duration timeout = absl::Seconds(10), bool cancel = false);

  // Messages read so far.
  const std::vector<v1::AggregatorMessage>& received() const { return report_.messages; }
  bool ended() const { return read_ended_; }

 private:
  WireStream() = default;
  // Waits for operation `tag` to complete: whether it succeeded, or nullopt when `timeout` passed
  // first (the operation stays pending; its completion is kept for the next wait on it).
  std::optional<bool> Await(void* tag, absl::Duration timeout);

  grpc::CompletionQueue cq_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::GenericStub> stub_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  StreamReport report_;
  bool read_ended_ = false;
  bool writes_done_ = false;
  bool broken_ = false;
  bool cancelled_ = false;
  int pending_ = 0;  // operations started whose tags were not yet seen
  bool read_pending_ = false;
  grpc::ByteBuffer read_buffer_;
  // Operations (by tag) that completed while another was awaited, and their outcome.
  bool done_[8] = {};
  bool ok_[8] = {};
};

// --- Messages a hostile peer builds -----------------------------------------------------------

struct HelloSpec {
  std::string node = "hostile";
  std::string boot_id = "boot-1";
  uint64_t instance_id = 1;
  v1::ProtocolRevision revision = v1::PROTOCOL_REVISION_2;
  uint64_t last_acked_sequence = 0;
  v1::Inventory inventory;
};
v1::AgentMessage Hello(const HelloSpec& spec);

struct DeclarationSpec {
  uint32_t id = 1;
  std::string name;
  v1::MetricType type = v1::METRIC_TYPE_COUNTER;
  uint32_t width_bits = 64;
  v1::Overflow overflow = v1::OVERFLOW_WRAPS;
  v1::Unit unit = v1::UNIT_NONE;
  double scale = 1;
  std::string help;
  std::vector<std::pair<std::string, std::string>> labels;
  std::string collector = "hostile";
};
v1::SeriesDeclaration Declaration(const DeclarationSpec& spec);
v1::AgentMessage Declarations(const std::vector<v1::SeriesDeclaration>& series);
v1::AgentMessage Layout(uint32_t id, const std::vector<uint32_t>& series_ids);
// A batch whose values (not deltas) are `values`, given the values the stream last sent for the
// layout's series (`previous`, same order; empty: all 0, the start of a stream).
v1::AgentMessage Batch(uint64_t sequence, absl::Time timestamp, uint32_t layout,
                       const std::vector<uint64_t>& values,
                       const std::vector<uint64_t>& previous = {});

// Serializes `message` and replaces the first occurrence of `placeholder` in the bytes with
// `replacement` (same length; e.g. invalid UTF-8 where protobuf's encoder would refuse it).
// InvalidArgument when the placeholder is absent or the lengths differ.
absl::StatusOr<std::string> SerializeWithPatch(const v1::AgentMessage& message,
                                               absl::string_view placeholder,
                                               absl::string_view replacement);
// A declaration message of at least `bytes` serialized bytes (its HELP is padding).
v1::AgentMessage OversizedDeclaration(size_t bytes, uint32_t id = 1);
// Bytes that are not an AgentMessage: a field tag with wire type 7 (does not exist).
std::string UndecodableBytes();

// --- A small series-sending session over a WireStream -----------------------------------------

// Says hello, declares, lays out and sends batches by value, tracking the previous values that
// deltas are taken from. Each step returns false when the stream broke; the report says why.
class PeerSession {
 public:
  explicit PeerSession(std::unique_ptr<WireStream> stream) : stream_(std::move(stream)) {}

  // Hello and wait for the HelloAck; false (stream report in Finish) if something else came.
  bool Hello(const HelloSpec& spec);
  bool Declare(const std::vector<DeclarationSpec>& series);
  // Layout `id` of `series_ids` (previous values start at 0).
  bool DefineLayout(uint32_t id, const std::vector<uint32_t>& series_ids);
  // Sends the next batch (sequence = last + 1) on `layout` with these values at `timestamp`
  // (default now) and waits for its Ack; false if no Ack came (the stream's answer is kept).
  bool Send(uint32_t layout, const std::vector<uint64_t>& values,
            std::optional<absl::Time> timestamp = std::nullopt);
  // The same without waiting for the Ack.
  bool SendNoWait(uint32_t layout, const std::vector<uint64_t>& values,
                  std::optional<absl::Time> timestamp = std::nullopt);

  WireStream& stream() { return *stream_; }
  uint64_t last_sequence() const { return sequence_; }
  void set_sequence(uint64_t sequence) { sequence_ = sequence; }
  StreamReport Finish(absl::Duration timeout = absl::Seconds(10)) {
    return stream_->Finish(timeout);
  }

 private:
  std::unique_ptr<WireStream> stream_;
  uint64_t sequence_ = 0;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> layouts_;
  std::vector<uint64_t> values_by_id_;  // last value sent, by series id
};

// --- Slow HTTP clients -------------------------------------------------------------------------

// `connections` TCP connections to 127.0.0.1:`port`, each sending an HTTP request one byte at a
// time every `interval` from one background thread and never finishing it (the request is long
// enough to outlast the test). A slowloris: what a server without request timeouts waits on.
class SlowHttpClients {
 public:
  SlowHttpClients(int port, int connections, absl::Duration interval);
  ~SlowHttpClients();  // Stop()s

  // Opens the connections and sends each its first byte. Fails if fewer than all could connect
  // within a few seconds (a server refusing connections past its cap still accepts the TCP
  // handshake in the kernel's backlog, so connect() failing is rare).
  absl::Status Start();
  void Stop();
  // Connections the server has closed so far (read EOF or reset).
  int closed_by_server() const { return closed_.load(); }
  int opened() const { return static_cast<int>(fds_.size()); }

 private:
  void Loop();

  const int port_;
  const int connections_;
  const absl::Duration interval_;
  std::vector<int> fds_;
  std::vector<bool> open_;
  std::atomic<int> closed_{0};
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// --- Scripts (the program's input) -------------------------------------------------------------

// Runs a script of steps, one per line ('#' starts a comment), on `stream` and appends a line
// per step and per answer to `log`:
//   hello NODE [BOOT_ID [INSTANCE_ID]]      hello with the `inventory` given (may be empty)
//   send TEXTPROTO                          any AgentMessage in protobuf text format
//   batch SEQ OFFSET_S LAYOUT V1,V2,...     values (not deltas) stamped now + OFFSET_S seconds
//   raw HEX                                 these bytes as one message
//   undecodable                             bytes that do not decode as an AgentMessage
//   oversize BYTES                          a declaration of at least BYTES bytes
//   badutf8 NODE                            a hello whose node name ends in invalid UTF-8
//   read [TIMEOUT_S]                        waits for one answer
// Ends with Finish (half-close, drain). Returns the report; InvalidArgument for a bad line.
absl::StatusOr<StreamReport> RunScript(WireStream& stream, absl::string_view script,
                                       const v1::Inventory& inventory, std::string* log);

}  // namespace fabricmon::testing
