#include "tests/security/hostile_peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "google/protobuf/text_format.h"

namespace fabricmon::testing {
namespace {

enum Tag : intptr_t { kStart = 1, kWrite, kRead, kWritesDone, kFinish, kTagCount };

void* TagPointer(Tag tag) { return reinterpret_cast<void*>(static_cast<intptr_t>(tag)); }

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  return bytes;
}

}  // namespace

// --- Channel and report ------------------------------------------------------------------------

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakePeerChannel(const PeerConnection& connection) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (connection.ca_file.empty()) {
    if (!connection.cert_file.empty() || !connection.key_file.empty()) {
      return absl::InvalidArgumentError("a client certificate needs --ca too (TLS)");
    }
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions options;
    absl::StatusOr<std::string> ca = ReadWholeFile(connection.ca_file);
    if (!ca.ok()) {
      return ca.status();
    }
    options.pem_root_certs = *ca;
    if (connection.cert_file.empty() != connection.key_file.empty()) {
      return absl::InvalidArgumentError("a client certificate needs both cert and key");
    }
    if (!connection.cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadWholeFile(connection.cert_file);
      absl::StatusOr<std::string> key = ReadWholeFile(connection.key_file);
      if (!cert.ok()) {
        return cert.status();
      }
      if (!key.ok()) {
        return key.status();
      }
      options.pem_cert_chain = *cert;
      options.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(options);
    if (!connection.server_name.empty()) {
      args.SetSslTargetNameOverride(connection.server_name);
    }
  }
  return grpc::CreateCustomChannel(connection.target, credentials, args);
}

std::optional<v1::Reject> StreamReport::reject() const {
  for (const v1::AggregatorMessage& message : messages) {
    if (message.has_reject()) {
      return message.reject();
    }
  }
  return std::nullopt;
}

bool StreamReport::hello_acked() const {
  for (const v1::AggregatorMessage& message : messages) {
    if (message.has_hello_ack()) {
      return true;
    }
  }
  return false;
}

uint64_t StreamReport::highest_ack() const {
  uint64_t highest = 0;
  for (const v1::AggregatorMessage& message : messages) {
    if (message.has_ack()) {
      highest = std::max(highest, message.ack().sequence());
    }
  }
  return highest;
}

std::string RejectReasonLabel(int reason) {
  if (!v1::Reject::Reason_IsValid(reason)) {
    return absl::StrCat(reason);
  }
  std::string name = v1::Reject::Reason_Name(static_cast<v1::Reject::Reason>(reason));
  if (absl::StartsWith(name, "REASON_")) {
    name = name.substr(7);
  }
  return absl::AsciiStrToLower(name);
}

std::string StreamReport::Describe() const {
  std::string text;
  for (const v1::AggregatorMessage& message : messages) {
    if (message.has_reject()) {
      absl::StrAppend(&text, "reject: ", RejectReasonLabel(message.reject().reason()), ": ",
                      message.reject().message(), "\n");
    } else {
      std::string line;
      google::protobuf::TextFormat::Printer printer;
      printer.SetSingleLineMode(true);
      printer.PrintToString(message, &line);
      absl::StrAppend(&text, "received: ", absl::StripTrailingAsciiWhitespace(line), "\n");
    }
  }
  if (finished) {
    absl::StrAppend(&text, "status: ",
                    absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                    status.error_message().empty() ? "" : ": ", status.error_message(), "\n");
  } else {
    absl::StrAppend(&text, "status: (stream not finished)\n");
  }
  return text;
}

// --- WireStream --------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<WireStream>> WireStream::Open(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration deadline) {
  std::unique_ptr<WireStream> stream(new WireStream());
  stream->context_.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  stream->stub_ = std::make_unique<grpc::GenericStub>(channel);
  stream->call_ =
      stream->stub_->PrepareCall(&stream->context_, kTelemetryStreamMethod, &stream->cq_);
  if (stream->call_ == nullptr) {
    return absl::InternalError("cannot prepare the call");
  }
  stream->call_->StartCall(TagPointer(kStart));
  ++stream->pending_;
  if (stream->Await(TagPointer(kStart), absl::Seconds(20)) != true) {
    stream->broken_ = true;  // Finish() tells why (handshake refused, nothing listening, ...)
  }
  return stream;
}

std::optional<bool> WireStream::Await(void* tag, absl::Duration timeout) {
  const intptr_t want = reinterpret_cast<intptr_t>(tag);
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (done_[want]) {
      done_[want] = false;
      return ok_[want];
    }
    void* got = nullptr;
    bool ok = false;
    const grpc::CompletionQueue::NextStatus next =
        cq_.AsyncNext(&got, &ok, absl::ToChronoTime(deadline));
    if (next != grpc::CompletionQueue::GOT_EVENT) {
      return std::nullopt;  // timed out: the operation stays pending
    }
    --pending_;
    const intptr_t index = reinterpret_cast<intptr_t>(got);
    done_[index] = true;
    ok_[index] = ok;
  }
}

WireStream::~WireStream() {
  if (call_ != nullptr) {
    if (!report_.finished) {
      context_.TryCancel();
      grpc::Status status;
      call_->Finish(&status, TagPointer(kFinish));
      ++pending_;
    }
    cq_.Shutdown();
    void* got = nullptr;
    bool ok = false;
    while (cq_.Next(&got, &ok)) {
    }
  } else {
    cq_.Shutdown();
  }
}

bool WireStream::WriteRaw(const std::string& bytes) {
  if (broken_ || writes_done_ || report_.finished) {
    return false;
  }
  grpc::ByteBuffer buffer = ToByteBuffer(bytes);
  call_->Write(buffer, TagPointer(kWrite));
  ++pending_;
  // A write completes once gRPC took it (flow control permitting). An aggregator that stopped
  // reading leaves it pending: after the timeout the stream counts as broken.
  if (Await(TagPointer(kWrite), absl::Seconds(20)) != true) {
    broken_ = true;
    return false;
  }
  return true;
}

bool WireStream::Write(const v1::AgentMessage& message) {
  return WriteRaw(message.SerializeAsString());
}

std::optional<v1::AggregatorMessage> WireStream::Read(absl::Duration timeout) {
  if (read_ended_ || report_.finished) {
    return std::nullopt;
  }
  if (!read_pending_) {
    read_buffer_.Clear();
    call_->Read(&read_buffer_, TagPointer(kRead));
    ++pending_;
    read_pending_ = true;
  }
  const std::optional<bool> ok = Await(TagPointer(kRead), timeout);
  if (!ok.has_value()) {
    return std::nullopt;  // nothing yet; the read stays pending for the next call
  }
  read_pending_ = false;
  if (!*ok) {
    read_ended_ = true;
    return std::nullopt;
  }
  v1::AggregatorMessage message;
  if (!message.ParseFromString(FromByteBuffer(read_buffer_))) {
    // The aggregator sent something that is not an AggregatorMessage: keep an empty one.
    message.Clear();
  }
  report_.messages.push_back(message);
  return message;
}

std::optional<v1::AggregatorMessage> WireStream::ReadUntil(
    const std::function<bool(const v1::AggregatorMessage&)>& want, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::optional<v1::AggregatorMessage> message = Read(deadline - absl::Now());
    if (!message.has_value()) {
      return std::nullopt;
    }
    if (want(*message)) {
      return message;
    }
  }
  return std::nullopt;
}

bool WireStream::AwaitAck(uint64_t sequence, absl::Duration timeout) {
  for (const v1::AggregatorMessage& message : report_.messages) {
    if (message.has_ack() && message.ack().sequence() >= sequence) {
      return true;
    }
  }
  return ReadUntil(
             [&](const v1::AggregatorMessage& message) {
               return message.has_ack() && message.ack().sequence() >= sequence;
             },
             timeout)
      .has_value();
}

StreamReport WireStream::Finish(absl::Duration timeout, bool cancel) {
  if (report_.finished) {
    return report_;
  }
  const absl::Time deadline = absl::Now() + timeout;
  if (cancel) {
    context_.TryCancel();
  } else if (!writes_done_ && !broken_) {
    call_->WritesDone(TagPointer(kWritesDone));
    ++pending_;
    writes_done_ = true;
    Await(TagPointer(kWritesDone), timeout);
  }
  while (!read_ended_ && absl::Now() < deadline) {
    Read(deadline - absl::Now());
  }
  if (!read_ended_) {
    context_.TryCancel();  // the aggregator did not end the stream in time: say so in the status
  }
  call_->Finish(&report_.status, TagPointer(kFinish));
  ++pending_;
  report_.finished = Await(TagPointer(kFinish), absl::Seconds(20)).has_value();
  if (!read_ended_ && report_.finished) {
    report_.status = grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("the aggregator did not end the stream within ", absl::FormatDuration(timeout),
                     " (cancelled); ", report_.status.error_message()));
  }
  return report_;
}

// --- Messages ----------------------------------------------------------------------------------

v1::AgentMessage Hello(const HelloSpec& spec) {
  v1::AgentMessage message;
  v1::Hello* hello = message.mutable_hello();
  hello->set_node_name(spec.node);
  hello->set_boot_id(spec.boot_id);
  hello->set_agent_version("fabricmon_hostile_peer");
  hello->set_protocol_revision(spec.revision);
  hello->set_agent_instance_id(spec.instance_id);
  hello->set_last_acked_sequence(spec.last_acked_sequence);
  hello->set_min_interval_ms(1000);
  *hello->mutable_inventory() = spec.inventory;
  return message;
}

v1::SeriesDeclaration Declaration(const DeclarationSpec& spec) {
  v1::SeriesDeclaration declaration;
  declaration.set_id(spec.id);
  declaration.set_collector(spec.collector);
  declaration.set_name(spec.name);
  for (const auto& [name, value] : spec.labels) {
    v1::Label* label = declaration.add_labels();
    label->set_name(name);
    label->set_value(value);
  }
  declaration.set_type(spec.type);
  declaration.set_width_bits(spec.width_bits);
  declaration.set_overflow(spec.overflow);
  declaration.set_unit(spec.unit);
  declaration.set_scale(spec.scale);
  declaration.set_help(spec.help);
  return declaration;
}

v1::AgentMessage Declarations(const std::vector<v1::SeriesDeclaration>& series) {
  v1::AgentMessage message;
  for (const v1::SeriesDeclaration& declaration : series) {
    *message.mutable_declarations()->add_series() = declaration;
  }
  return message;
}

v1::AgentMessage Layout(uint32_t id, const std::vector<uint32_t>& series_ids) {
  v1::AgentMessage message;
  v1::Layout* layout = message.mutable_layouts()->add_layouts();
  layout->set_id(id);
  for (uint32_t series : series_ids) {
    layout->add_series_ids(series);
  }
  return message;
}

v1::AgentMessage Batch(uint64_t sequence, absl::Time timestamp, uint32_t layout,
                       const std::vector<uint64_t>& values, const std::vector<uint64_t>& previous) {
  v1::AgentMessage message;
  v1::SampleBatch* batch = message.mutable_batch();
  batch->set_sequence(sequence);
  batch->set_timestamp_unix_nanos(absl::ToUnixNanos(timestamp));
  batch->set_layout_id(layout);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint64_t before = i < previous.size() ? previous[i] : 0;
    batch->add_value_deltas(static_cast<int64_t>(values[i] - before));
  }
  return message;
}

absl::StatusOr<std::string> SerializeWithPatch(const v1::AgentMessage& message,
                                               absl::string_view placeholder,
                                               absl::string_view replacement) {
  if (placeholder.size() != replacement.size()) {
    return absl::InvalidArgumentError("placeholder and replacement differ in length");
  }
  std::string bytes = message.SerializeAsString();
  const size_t at = bytes.find(placeholder.data(), 0, placeholder.size());
  if (at == std::string::npos) {
    return absl::InvalidArgumentError("placeholder not in the serialized message");
  }
  bytes.replace(at, placeholder.size(), replacement.data(), replacement.size());
  return bytes;
}

v1::AgentMessage OversizedDeclaration(size_t bytes, uint32_t id) {
  DeclarationSpec spec;
  spec.id = id;
  spec.name = "fabricmon_hostile_oversized_total";
  spec.help = std::string(bytes, 'x');
  return Declarations({Declaration(spec)});
}

std::string UndecodableBytes() {
  // Field 5 with wire type 7 (no such type), then garbage: no protobuf parser accepts it.
  return std::string("\x2f\xff\xff\xff\xff\x01\x02\x03", 8);
}

// --- PeerSession -------------------------------------------------------------------------------

bool PeerSession::Hello(const HelloSpec& spec) {
  if (!stream_->Write(testing::Hello(spec))) {
    return false;
  }
  std::optional<v1::AggregatorMessage> reply = stream_->Read(absl::Seconds(10));
  if (reply.has_value() && reply->has_hello_ack()) {
    sequence_ = reply->hello_ack().last_stored_sequence();
    return true;
  }
  return false;
}

bool PeerSession::Declare(const std::vector<DeclarationSpec>& series) {
  std::vector<v1::SeriesDeclaration> declarations;
  for (const DeclarationSpec& spec : series) {
    declarations.push_back(Declaration(spec));
  }
  return stream_->Write(Declarations(declarations));
}

bool PeerSession::DefineLayout(uint32_t id, const std::vector<uint32_t>& series_ids) {
  layouts_.emplace_back(id, series_ids);
  return stream_->Write(Layout(id, series_ids));
}

bool PeerSession::SendNoWait(uint32_t layout, const std::vector<uint64_t>& values,
                             std::optional<absl::Time> timestamp) {
  const std::vector<uint32_t>* ids = nullptr;
  for (const auto& [id, series] : layouts_) {
    if (id == layout) {
      ids = &series;
    }
  }
  std::vector<uint64_t> previous;
  if (ids != nullptr) {
    for (uint32_t id : *ids) {
      previous.push_back(id < values_by_id_.size() ? values_by_id_[id] : 0);
    }
    for (size_t i = 0; i < ids->size() && i < values.size(); ++i) {
      if ((*ids)[i] >= values_by_id_.size()) {
        values_by_id_.resize((*ids)[i] + 1);
      }
      values_by_id_[(*ids)[i]] = values[i];
    }
  }
  ++sequence_;
  return stream_->Write(
      Batch(sequence_, timestamp.value_or(absl::Now()), layout, values, previous));
}

bool PeerSession::Send(uint32_t layout, const std::vector<uint64_t>& values,
                       std::optional<absl::Time> timestamp) {
  return SendNoWait(layout, values, timestamp) && stream_->AwaitAck(sequence_);
}

// --- SlowHttpClients ---------------------------------------------------------------------------

namespace {
// Long enough that one byte every few seconds never completes it within a test.
const std::string& SlowRequest() {
  static const std::string* request = new std::string(absl::StrCat(
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", std::string(4096, 'a'), "\r\n\r\n"));
  return *request;
}
}  // namespace

SlowHttpClients::SlowHttpClients(int port, int connections, absl::Duration interval)
    : port_(port), connections_(connections), interval_(interval) {}

SlowHttpClients::~SlowHttpClients() { Stop(); }

absl::Status SlowHttpClients::Start() {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port_));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < connections_; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
    }
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 &&
        errno != EINPROGRESS) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("connect ", i, ": ", strerror(errno)));
    }
    pollfd waiting{fd, POLLOUT, 0};
    if (poll(&waiting, 1, 5000) != 1) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("connection ", i, " did not open in 5 s"));
    }
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("connect ", i, ": ", strerror(error)));
    }
    fds_.push_back(fd);
    open_.push_back(true);
    (void)send(fd, SlowRequest().data(), 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void SlowHttpClients::Loop() {
  size_t sent = 1;  // bytes of the request each connection has sent
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) {
        return;
      }
    }
    const char byte = SlowRequest()[std::min(sent, SlowRequest().size() - 5)];
    ++sent;
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (!open_[i]) {
        continue;
      }
      char buffer[256];
      const ssize_t got = recv(fds_[i], buffer, sizeof(buffer), MSG_DONTWAIT);
      const bool closed = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                          send(fds_[i], &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
      if (closed) {
        open_[i] = false;
        ++closed_;
      }
    }
  }
}

void SlowHttpClients::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
  for (int fd : fds_) {
    close(fd);
  }
  fds_.clear();
  open_.clear();
}

// --- Scripts -----------------------------------------------------------------------------------

absl::StatusOr<StreamReport> RunScript(WireStream& stream, absl::string_view script,
                                       const v1::Inventory& inventory, std::string* log) {
  std::map<uint32_t, std::vector<uint64_t>> previous;  // per layout: the values last sent
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(script, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') {
      continue;
    }
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("script line ", line_number, ": ", why));
    };
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    const std::string& step = words[0];
    bool written = true;
    if (step == "hello") {
      if (words.size() < 2) {
        return bad("hello NODE [BOOT_ID [INSTANCE_ID]]");
      }
      HelloSpec spec;
      spec.node = words[1];
      if (words.size() > 2) spec.boot_id = words[2];
      if (words.size() > 3 && !absl::SimpleAtoi(words[3], &spec.instance_id)) {
        return bad("INSTANCE_ID is not a number");
      }
      spec.inventory = inventory;
      written = stream.Write(Hello(spec));
    } else if (step == "send") {
      v1::AgentMessage message;
      const std::string text(absl::StripAsciiWhitespace(line.substr(4)));
      if (!google::protobuf::TextFormat::ParseFromString(text, &message)) {
        return bad("not an AgentMessage in text format");
      }
      written = stream.Write(message);
    } else if (step == "batch") {
      uint64_t sequence = 0;
      double offset = 0;
      uint32_t layout = 0;
      std::vector<uint64_t> values;
      if (words.size() != 5 || !absl::SimpleAtoi(words[1], &sequence) ||
          !absl::SimpleAtod(words[2], &offset) || !absl::SimpleAtoi(words[3], &layout)) {
        return bad("batch SEQ OFFSET_S LAYOUT V1,V2,...");
      }
      for (absl::string_view value : absl::StrSplit(words[4], ',')) {
        uint64_t parsed = 0;
        if (!absl::SimpleAtoi(value, &parsed)) {
          return bad("values are unsigned integers");
        }
        values.push_back(parsed);
      }
      written = stream.Write(
          Batch(sequence, absl::Now() + absl::Seconds(offset), layout, values, previous[layout]));
      previous[layout] = values;
    } else if (step == "raw") {
      std::string bytes;
      if (words.size() != 2 || words[1].size() % 2 != 0 ||
          words[1].find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        return bad("raw HEX (an even number of hex digits)");
      }
      bytes = absl::HexStringToBytes(words[1]);
      written = stream.WriteRaw(bytes);
    } else if (step == "undecodable") {
      written = stream.WriteRaw(UndecodableBytes());
    } else if (step == "oversize") {
      size_t bytes = 0;
      if (words.size() != 2 || !absl::SimpleAtoi(words[1], &bytes)) {
        return bad("oversize BYTES");
      }
      written = stream.Write(OversizedDeclaration(bytes));
    } else if (step == "badutf8") {
      if (words.size() != 2) {
        return bad("badutf8 NODE");
      }
      HelloSpec spec;
      spec.node = words[1] + "@@";
      absl::StatusOr<std::string> bytes = SerializeWithPatch(Hello(spec), "@@", "\xc3\x28");
      if (!bytes.ok()) {
        return bytes.status();
      }
      written = stream.WriteRaw(*bytes);
    } else if (step == "read") {
      double seconds = 10;
      if (words.size() > 1 && !absl::SimpleAtod(words[1], &seconds)) {
        return bad("read [TIMEOUT_S]");
      }
      const size_t before = stream.received().size();
      std::optional<v1::AggregatorMessage> message = stream.Read(absl::Seconds(seconds));
      if (!message.has_value()) {
        absl::StrAppend(log, "read: ", stream.ended() ? "the stream ended" : "nothing yet", "\n");
      }
      (void)before;
      continue;
    } else {
      return bad(absl::StrCat("unknown step '", step, "'"));
    }
    absl::StrAppend(log, "sent: ", line, written ? "" : " (stream already ended)", "\n");
  }
  return stream.Finish();
}

}  // namespace fabricmon::testing
