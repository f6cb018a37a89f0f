// The streaming slice end to end: a real agent (agent::Agent with the ib_sysfs collector on a copy
// of a captured 8×H100 sysfs tree whose counters keep moving, and the StreamClient) streams over
// real gRPC to a real aggregator (TelemetryService, DiagnosticsService, MetricsExporter behind a
// prometheus Exposer that the tests scrape over HTTP). Every test runs twice, over an in-process
// channel and over loopback TCP (gRPC's own end-to-end test pattern).
//
// No test asserts a duration: they wait (bounded) for states, so a loaded machine makes them
// slower, not flaky.

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/common/clock.h"
#include "daemon/common/file_reader.h"
#include "daemon/common/logging.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/wire/series_codec.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/integration/metrics_text.h"
#include "tests/integration/stream_harness.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr char kNode[] = "gpu-node-1";
constexpr char kRawNode[] = "raw-node";
// Small enough for a raw stream to exceed, large enough for the real agent's ~500 series.
constexpr size_t kMaxSeriesPerNode = 1000;
constexpr uint32_t kMaxMessageBytes = 1 << 20;
// New series a node may gain at once in the rate-limit tests: more than the real agent's ~500,
// and a rate small enough to count by hand.
constexpr int kNewSeriesBurst = 700;
constexpr int kNewSeriesPerSecond = 10;

// Every fabricmon_ib_* sample of an exposition, keyed without the node label.
std::map<std::string, std::string> IbSamples(const std::string& text, const std::string& node) {
  absl::StatusOr<std::vector<TextSample>> samples = ParseText(text);
  if (!samples.ok()) {
    ADD_FAILURE() << samples.status();
    return {};
  }
  std::vector<std::pair<std::string, std::string>> having;
  if (!node.empty()) {
    having.emplace_back("node", node);
  }
  return SelectSamples(*samples, "fabricmon_ib_", having, {"node"});
}

std::vector<TextSample> Parse(const std::string& text) {
  absl::StatusOr<std::vector<TextSample>> samples = ParseText(text);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::vector<TextSample>();
}

// Runs `fabricmon-agent --once` on `sysfs_root`; its stdout, or "" (with a test failure).
std::string RunAgentOnce(const std::string& sysfs_root) {
  const std::string binary = BuildPath("daemon/agent/fabricmon-agent");
  if (access(binary.c_str(), X_OK) != 0) {
    ADD_FAILURE() << "not built: " << binary;
    return "";
  }
  const std::string command =
      absl::StrCat(binary, " --once --log_level=error --sysfs_root='", sysfs_root, "'");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed";
    return "";
  }
  std::string out;
  char buffer[65536];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    out.append(buffer, n);
  }
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << command;
  return out;
}

std::string Serialized(const v1::AgentMessage& message) {
  std::string bytes;
  EXPECT_TRUE(message.SerializeToString(&bytes));
  return bytes;
}

// A telemetry stream that writes whatever bytes it is given (what no generated stub sends:
// undecodable messages, invalid UTF-8) and reads the aggregator's answers as messages.
class BytesStream {
 public:
  explicit BytesStream(const std::shared_ptr<grpc::Channel>& channel)
      : method_("/fabricmon.v1.Telemetry/Stream", grpc::internal::RpcMethod::BIDI_STREAMING) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    stream_.reset(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            channel.get(), method_, &context_));
  }

  bool Write(const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    return stream_->Write(buffer);
  }

  RawStream::End Finish() {
    RawStream::End end;
    (void)stream_->WritesDone();
    grpc::ByteBuffer buffer;
    while (stream_->Read(&buffer)) {
      v1::AggregatorMessage message;
      EXPECT_TRUE(
          grpc::SerializationTraits<v1::AggregatorMessage>::Deserialize(&buffer, &message).ok());
      end.messages.push_back(std::move(message));
    }
    end.status = stream_->Finish();
    return end;
  }

 private:
  grpc::internal::RpcMethod method_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream_;
};

class StreamTest : public ::testing::TestWithParam<Transport> {
 protected:
  static void SetUpTestSuite() {
    SetMinLogLevel(LogLevel::kWarning);
    PreferMemoryForTempTrees();
    // One copy for the suite (when the binary runs all cases): the tests only ever make
    // counters grow, which every test tolerates.
    tree_ = new TempTree();
    tree_->CopyTree(SharedFixture("sysfs/gpud-h100/sys"), "sys");
  }
  static void TearDownTestSuite() {
    delete tree_;
    tree_ = nullptr;
  }

  void SetUp() override { sysfs_root_ = tree_->root() + "/sys"; }

  void TearDown() override {
    // Agent first: its stream must not outlive the server it talks to.
    if (mutator_ != nullptr) {
      mutator_->Stop();
    }
    agent_.reset();
    aggregator_.reset();
    metrics_server_.reset();
  }

  // With `http`, /metrics is served by the aggregator's MetricsServer (prometheus-cpp's Exposer)
  // on 127.0.0.1:0 and scraped over HTTP;
  // otherwise scrapes take the exporter's text directly (civetweb needs ~2 s to shut down).
  void StartAggregator(bool http = false, AggregatorOptions options = DefaultOptions()) {
    if (http) {
      metrics_server_ = MakeMetricsServer();
      ASSERT_NE(metrics_server_, nullptr);
    }
    aggregator_ = std::make_unique<AggregatorHarness>(GetParam(), options, metrics_server_.get());
    ASSERT_TRUE(aggregator_->Start());
  }

  static AggregatorOptions DefaultOptions() {
    AggregatorOptions options;
    options.store.max_series_per_node = kMaxSeriesPerNode;
    options.stream.max_message_bytes = kMaxMessageBytes;
    return options;
  }

  // The new-series limit on a clock that moves only when the test says: the bucket refills
  // exactly when fake_clock_ is advanced, never while a stream is being handled.
  AggregatorOptions RateLimitedOptions() {
    AggregatorOptions options = DefaultOptions();
    options.store.new_series.burst = kNewSeriesBurst;
    options.store.new_series.per_second = kNewSeriesPerSecond;
    options.clock = &fake_clock_;
    return options;
  }

  // Starts the agent and the counter mutator, and waits until `batches` batches are stored.
  void StartAgent(AgentHarnessOptions options = {}, uint64_t batches = 3) {
    mutator_ = std::make_unique<CounterMutator>(sysfs_root_);
    mutator_->Start();
    agent_ = std::make_unique<AgentHarness>(sysfs_root_, aggregator_->channel(), options);
    ASSERT_TRUE(agent_->Start());
    ASSERT_TRUE(WaitForStored(batches)) << "the agent's batches did not arrive";
  }

  // Waits until the aggregator has stored at least `batches` batches of kNode in total.
  bool WaitForStored(uint64_t batches) {
    return WaitFor([&] { return Batches() >= batches; });
  }
  uint64_t Batches() {
    std::optional<store::NodeState::Summary> node = aggregator_->Node(kNode);
    return node.has_value() ? node->counters.batches : 0;
  }

  // The well-behaved agent is untouched by whatever happened on another stream: still on its
  // first stream, never rejected, and its batches keep being stored.
  void ExpectAgentUnaffected() {
    const uint64_t before = Batches();
    EXPECT_TRUE(WaitForStored(before + 3)) << "the agent's batches stopped being stored";
    const agent::StreamClientStats stats = agent_->stream().stats();
    EXPECT_EQ(stats.connects, 1u);
    EXPECT_EQ(stats.rejects, 0u);
    EXPECT_TRUE(stats.connected);
  }

  // Sends `messages` on a fresh raw stream and expects a Reject with `reason` whose text contains
  // `text`, then the end of the stream with `code`; and the rejection counted under
  // `metric_reason` (only there) in fabricmon_aggregator_rejected_messages_total.
  void ExpectRejected(const std::vector<v1::AgentMessage>& messages, v1::Reject::Reason reason,
                      grpc::StatusCode code, absl::string_view text,
                      absl::string_view metric_reason) {
    RawStream raw(aggregator_->channel());
    for (const v1::AgentMessage& message : messages) {
      if (!raw.Write(message)) {
        break;  // the server already finished the stream; the reads below say why
      }
    }
    const RawStream::End end = raw.Finish();
    ASSERT_FALSE(end.messages.empty())
        << "no Reject; status " << end.status.error_code() << " " << end.status.error_message();
    const v1::AggregatorMessage& last = end.messages.back();
    ASSERT_TRUE(last.has_reject()) << last.ShortDebugString();
    EXPECT_EQ(last.reject().reason(), reason) << last.reject().message();
    EXPECT_THAT(last.reject().message(), HasSubstr(std::string(text)));
    EXPECT_EQ(end.status.error_code(), code) << end.status.error_message();
    EXPECT_EQ(end.status.error_message(), last.reject().message());
    ExpectRejectCounted(metric_reason);
  }

  void ExpectRejectCounted(absl::string_view metric_reason) {
    const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
    double total = 0;
    for (const TextSample& sample : samples) {
      if (sample.name == "fabricmon_aggregator_rejected_messages_total") {
        double value = 0;
        ASSERT_TRUE(absl::SimpleAtod(sample.value, &value));
        total += value;
      }
    }
    EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_rejected_messages_total",
                          {{"reason", std::string(metric_reason)}}),
              1.0)
        << metric_reason;
    EXPECT_EQ(total, 1.0) << "counted under another reason too";
  }

  // Reads until the ack of `sequence`; fails on a Reject or the end of the stream.
  static void ReadUntilAck(RawStream& raw, uint64_t sequence) {
    for (;;) {
      std::optional<v1::AggregatorMessage> message = raw.Read();
      ASSERT_TRUE(message.has_value()) << "stream ended before the ack of " << sequence;
      ASSERT_FALSE(message->has_reject()) << message->reject().message();
      if (message->has_ack() && message->ack().sequence() >= sequence) {
        return;
      }
    }
  }

  // The Reject among what a stream received (acks of earlier batches may follow it), or null.
  static const v1::Reject* FindReject(const RawStream::End& end) {
    for (const v1::AggregatorMessage& message : end.messages) {
      if (message.has_reject()) {
        return &message.reject();
      }
    }
    return nullptr;
  }

  // Another node, streaming two counters with known values on its own raw stream for the whole
  // test: what a refusal on another stream must leave exactly as it was.
  class Witness {
   public:
    static constexpr char kName[] = "witness-node";
    explicit Witness(StreamTest& test) : test_(test), raw_(test.aggregator_->channel()) {
      EXPECT_TRUE(raw_.Write(HelloMessage(kName, "boot-w", 0x77)));
      EXPECT_TRUE(raw_.Write(CounterDeclarations(1, 2)));
      EXPECT_TRUE(raw_.Write(LayoutMessage(1, {1, 2})));
      EXPECT_TRUE(raw_.Write(BatchMessage(1, RealClock::Get().NowUnixNanos(), 1, {1234, 5678})));
      ReadUntilAck(raw_, 1);
      ExpectUntouched();
    }
    void ExpectUntouched() {
      const std::vector<TextSample> samples = Parse(test_.aggregator_->Scrape());
      EXPECT_EQ(SampleValue(samples, "fabricmon_raw_0_total", {{"node", kName}}), 1234.0);
      EXPECT_EQ(SampleValue(samples, "fabricmon_raw_1_total", {{"node", kName}}), 5678.0);
      EXPECT_EQ(SampleValue(samples, "fabricmon_node_up", {{"node", kName}}), 1.0);
      const store::NodeState::Summary node = *test_.aggregator_->Node(kName);
      EXPECT_EQ(node.counters.batches, 1u);
      EXPECT_EQ(node.series, 2u);
      EXPECT_TRUE(node.connected);
    }

   private:
    StreamTest& test_;
    RawStream raw_;
  };

  static TempTree* tree_;
  FakeClock fake_clock_;  // outlives the aggregator (declared before it)
  std::string sysfs_root_;
  std::unique_ptr<aggregator::MetricsServer> metrics_server_;
  std::unique_ptr<AggregatorHarness> aggregator_;
  std::unique_ptr<CounterMutator> mutator_;
  std::unique_ptr<AgentHarness> agent_;

  // A raw stream declares `declared` counters (ids 1..declared), sends one batch of ids 1 and
  // `declared` (values 5 and 9) and must have it acknowledged, not rejected.
  void ExpectCappedStreamGoesOn(int declared) {
    RawStream raw(aggregator_->channel());
    ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
    ASSERT_TRUE(raw.Write(CounterDeclarations(1, declared)));
    ASSERT_TRUE(raw.Write(LayoutMessage(1, {1, static_cast<uint32_t>(declared)})));
    ASSERT_TRUE(raw.Write(BatchMessage(1, RealClock::Get().NowUnixNanos(), 1, {5, 9})));
    for (;;) {
      std::optional<v1::AggregatorMessage> message = raw.Read();
      ASSERT_TRUE(message.has_value()) << "the stream ended before the batch was acknowledged";
      ASSERT_FALSE(message->has_reject()) << message->reject().message();
      if (message->has_ack() && message->ack().sequence() >= 1) {
        break;
      }
    }
    const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
    EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_series_unstored", {}), 1.0);
    EXPECT_EQ(
        SampleValue(samples, "fabricmon_aggregator_unstored_series_samples_dropped_total", {}),
        1.0);
    const RawStream::End end = raw.Finish();
    EXPECT_TRUE(end.status.ok()) << end.status.error_message();
  }
};

TempTree* StreamTest::tree_ = nullptr;

INSTANTIATE_TEST_SUITE_P(Transports, StreamTest,
                         ::testing::Values(Transport::kInProcess, Transport::kTcp),
                         [](const ::testing::TestParamInfo<Transport>& info) {
                           return info.param == Transport::kInProcess ? "InProcess" : "Tcp";
                         });

// (a) What the aggregator exports for the node is exactly what `fabricmon-agent --once` prints
// for the same tree, plus node="...": names, labels, scaled values, every fabricmon_ib_* sample.
TEST_P(StreamTest, ValuesMatchAgentOnceOutput) {
  StartAggregator(/*http=*/true);
  StartAgent();
  // Let the counters move for a while, then freeze them so both sides read the same tree.
  ASSERT_TRUE(WaitFor([&] { return mutator_->rounds() >= 5; }));
  mutator_->Stop();
  const std::map<std::string, std::string> expected = IbSamples(RunAgentOnce(sysfs_root_), "");
  ASSERT_GT(expected.size(), 400u) << "the tree has 9 devices of ~50 series each";
  // The fixture's value moved: the comparison is not of untouched files.
  absl::StatusOr<std::string> xmit =
      ReadTrimmed(sysfs_root_ + "/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data");
  ASSERT_TRUE(xmit.ok());
  EXPECT_NE(*xmit, "230442669431839");

  // The agent reads the frozen tree within a cycle; poll the scrape until it shows it.
  std::string difference;
  const bool equal = WaitFor([&] {
    difference = DescribeDifference(expected, IbSamples(aggregator_->Scrape(), kNode));
    return difference.empty();
  });
  EXPECT_TRUE(equal) << difference;
}

// (b) The aggregator loses all its state mid-stream; the agent buffers, reconnects to the new
// one and replays exactly what was not acknowledged: no gap, no duplicate, nothing dropped.
TEST_P(StreamTest, ReplaysAfterAggregatorRestart) {
  StartAggregator(/*http=*/true);
  StartAgent({}, /*batches=*/5);
  agent::ReplayBuffer& buffer = agent_->agent().buffer();

  aggregator_->StopServing();
  ASSERT_TRUE(WaitFor([&] { return !agent_->stream().stats().connected; }));
  // No ack can arrive any more: this is what the dead aggregator confirmed.
  const uint64_t acked_at_stop = buffer.acked_sequence();
  const uint64_t pushed_at_stop = buffer.last_sequence();
  const store::NodeState::Summary old = *aggregator_->Node(kNode);
  EXPECT_EQ(old.counters.sequence_gaps, 0u);
  EXPECT_EQ(old.counters.duplicate_batches, 0u);
  EXPECT_EQ(old.counters.batches, old.last_stored_sequence) << "stored 1..n contiguously";
  EXPECT_GE(old.last_stored_sequence, acked_at_stop);

  // The agent keeps collecting into its buffer while nobody listens.
  ASSERT_TRUE(WaitFor([&] { return buffer.last_sequence() >= pushed_at_stop + 5; }));
  ASSERT_TRUE(aggregator_->Start());
  ASSERT_TRUE(WaitFor([&] {
    return agent_->stream().stats().connects >= 2 && buffer.acked_sequence() >= pushed_at_stop + 5;
  })) << "no replay to the new aggregator";
  // Quiesce: stop producing, wait until everything is acknowledged.
  agent_->StopCollecting();
  const uint64_t pushed = buffer.last_sequence();
  ASSERT_TRUE(WaitFor([&] { return buffer.acked_sequence() == pushed; }));

  const store::NodeState::Summary now = *aggregator_->Node(kNode);
  EXPECT_EQ(now.counters.sequence_gaps, 0u);
  EXPECT_EQ(now.counters.agent_dropped_batches, 0u);
  EXPECT_EQ(now.counters.duplicate_batches, 0u);
  // The new aggregator stored every sequence after the last acknowledged one, exactly once.
  EXPECT_EQ(now.last_stored_sequence, pushed);
  EXPECT_EQ(now.counters.batches, pushed - acked_at_stop);
  EXPECT_EQ(buffer.dropped_cycles(), 0u);
  // What was sent but never acknowledged went again.
  EXPECT_GE(agent_->stream().stats().replayed_batches, old.last_stored_sequence - acked_at_stop);

  const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
  const std::vector<std::pair<std::string, std::string>> node = {{"node", kNode}};
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_sequence_gaps_total", node), 0.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_agent_dropped_batches_total", node), 0.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_duplicate_batches_total", node), 0.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_up", node), 1.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_batches_total"),
            static_cast<double>(pushed - acked_at_stop));
}

// (b) With a replay buffer of a few cycles, an outage loses the oldest cycles, and the loss is
// counted exactly on both sides: what the agent dropped is what the aggregator was told, and
// stored + dropped accounts for every sequence the agent produced.
TEST_P(StreamTest, CountsLossExactlyWhenReplayBufferOverflows) {
  StartAggregator();
  AgentHarnessOptions options;
  // Five ib_sysfs cycles (the agent's own 1 s health cycle is much smaller).
  options.replay_buffer_bytes = 5 * IbSysfsCycleBytes(sysfs_root_);
  StartAgent(options);
  agent::ReplayBuffer& buffer = agent_->agent().buffer();

  aggregator_->StopServing();
  ASSERT_TRUE(WaitFor([&] { return !agent_->stream().stats().connected; }));
  const uint64_t acked_at_stop = buffer.acked_sequence();
  const store::NodeState::Summary old = *aggregator_->Node(kNode);
  // The outage outlasts the buffer. Evictions stay unconfirmed until the reconnect tells the
  // agent which of them the aggregator stored (those in flight when it stopped).
  ASSERT_TRUE(WaitFor([&] { return buffer.unconfirmed_evictions() >= 5; }));

  ASSERT_TRUE(aggregator_->Start());
  ASSERT_TRUE(WaitFor([&] { return agent_->stream().stats().connects >= 2 && Batches() >= 3; }))
      << "no replay to the new aggregator";
  agent_->StopCollecting();
  const uint64_t pushed = buffer.last_sequence();
  ASSERT_TRUE(WaitFor([&] { return buffer.acked_sequence() == pushed; }));

  const store::NodeState::Summary now = *aggregator_->Node(kNode);
  const uint64_t dropped = buffer.dropped_cycles();
  EXPECT_GE(dropped, 5u);
  // Every cycle the agent dropped was announced to an aggregator, once.
  EXPECT_EQ(dropped, old.counters.agent_dropped_batches + now.counters.agent_dropped_batches);
  // Before the outage: 1..n stored or announced as dropped.
  EXPECT_EQ(old.counters.batches + old.counters.agent_dropped_batches, old.last_stored_sequence);
  // After it: every sequence after the last acknowledged one is stored or announced as dropped.
  EXPECT_EQ(acked_at_stop + now.counters.batches + now.counters.agent_dropped_batches, pushed);
  EXPECT_EQ(now.last_stored_sequence, pushed);
  EXPECT_EQ(now.counters.duplicate_batches, 0u);

  const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_agent_dropped_batches_total", {{"node", kNode}}),
            static_cast<double>(now.counters.agent_dropped_batches));
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_agent_dropped_batches_total"),
            static_cast<double>(now.counters.agent_dropped_batches));
}

// (c) Bad input, each on its own raw stream while the real agent streams alongside.

TEST_P(StreamTest, RejectsBatchBeforeHello) {
  StartAggregator();
  StartAgent();
  ExpectRejected({BatchMessage(1, 1, 1, {1})}, v1::Reject::REASON_PROTOCOL,
                 grpc::StatusCode::FAILED_PRECONDITION, "first message must be a hello",
                 "before_hello");
  ExpectAgentUnaffected();
}

TEST_P(StreamTest, RejectsHelloWithInvalidNodeName) {
  StartAggregator();
  StartAgent();
  // The name becomes the node="..." label value of every series of the node.
  ExpectRejected({HelloMessage("gpu node 1\"}", "boot-r", 7)}, v1::Reject::REASON_MALFORMED,
                 grpc::StatusCode::INVALID_ARGUMENT, "node name may contain only", "malformed");
  ExpectAgentUnaffected();
}

TEST_P(StreamTest, RejectsLayoutWithUndeclaredSeries) {
  StartAggregator();
  StartAgent();
  ExpectRejected(
      {HelloMessage(kRawNode, "boot-r", 7), CounterDeclarations(1, 2), LayoutMessage(1, {1, 2, 5})},
      v1::Reject::REASON_PROTOCOL, grpc::StatusCode::INVALID_ARGUMENT,
      "layout 1 uses undeclared series id 5", "unknown_series");
  ExpectAgentUnaffected();
}

TEST_P(StreamTest, RejectsBatchWithUnknownLayout) {
  StartAggregator();
  StartAgent();
  ExpectRejected({HelloMessage(kRawNode, "boot-r", 7), CounterDeclarations(1, 2),
                  LayoutMessage(1, {1, 2}), BatchMessage(1, 1, 9, {1, 1})},
                 v1::Reject::REASON_PROTOCOL, grpc::StatusCode::INVALID_ARGUMENT,
                 "uses unknown layout 9", "unknown_layout");
  ExpectAgentUnaffected();
}

TEST_P(StreamTest, RejectsBatchWithWrongValueCount) {
  StartAggregator();
  StartAgent();
  ExpectRejected({HelloMessage(kRawNode, "boot-r", 7), CounterDeclarations(1, 2),
                  LayoutMessage(1, {1, 2}), BatchMessage(1, 1, 1, {1})},
                 v1::Reject::REASON_MALFORMED, grpc::StatusCode::INVALID_ARGUMENT,
                 "1 values for 2 present series", "malformed");
  ExpectAgentUnaffected();
}

TEST_P(StreamTest, RejectsDeclarationWithReservedNodeLabel) {
  StartAggregator();
  StartAgent();
  v1::AgentMessage declarations = CounterDeclarations(1, 1);
  v1::Label* label = declarations.mutable_declarations()->mutable_series(0)->add_labels();
  label->set_name("node");
  label->set_value("someone-else");
  ExpectRejected({HelloMessage(kRawNode, "boot-r", 7), declarations}, v1::Reject::REASON_MALFORMED,
                 grpc::StatusCode::INVALID_ARGUMENT, "label 'node' is reserved",
                 "invalid_declaration");
  ExpectAgentUnaffected();
}

// A series beyond the node's cap is kept out; the node's other series and its stream go on.
TEST_P(StreamTest, ASeriesBeyondTheNodeCapIsLeftOutNotTheStream) {
  StartAggregator();
  StartAgent();
  ASSERT_LT(aggregator_->Node(kNode)->series, kMaxSeriesPerNode);
  ExpectCappedStreamGoesOn(static_cast<int>(kMaxSeriesPerNode) + 1);
  EXPECT_EQ(aggregator_->Node(kRawNode)->series, kMaxSeriesPerNode);
  ExpectAgentUnaffected();
}

// A node gaining series faster than its new-series rate (label churn) is refused with its own
// reason. The real agent declared its whole node at once, within the burst.
TEST_P(StreamTest, RejectsNewSeriesBeyondRate) {
  StartAggregator(/*http=*/false, RateLimitedOptions());
  StartAgent();
  ASSERT_LT(aggregator_->Node(kNode)->series, static_cast<size_t>(kNewSeriesBurst));
  ExpectRejected({HelloMessage(kRawNode, "boot-r", 7), CounterDeclarations(1, kNewSeriesBurst),
                  CounterDeclarations(kNewSeriesBurst + 1, 1, kNewSeriesBurst)},
                 v1::Reject::REASON_LIMIT, grpc::StatusCode::RESOURCE_EXHAUSTED,
                 absl::StrCat("declares new series faster than ", kNewSeriesPerSecond,
                              " per second after a burst of ", kNewSeriesBurst),
                 "series_rate_limit");
  // The refused series was not created.
  EXPECT_EQ(aggregator_->Node(kRawNode)->series, static_cast<size_t>(kNewSeriesBurst));
  ExpectAgentUnaffected();
}

// The budget is the node's: a reconnect does not refill it, time does, and series the node
// already holds cost nothing (an agent re-declares its whole set on every stream).
TEST_P(StreamTest, NewSeriesBudgetRefillsWithTimeNotWithReconnects) {
  StartAggregator(/*http=*/false, RateLimitedOptions());
  // Reads until the ack of `sequence`; fails on a Reject or the end of the stream.
  auto expect_acked = [](RawStream& raw, uint64_t sequence) {
    for (;;) {
      std::optional<v1::AggregatorMessage> message = raw.Read();
      ASSERT_TRUE(message.has_value()) << "stream ended before the ack of " << sequence;
      ASSERT_FALSE(message->has_reject()) << message->reject().message();
      if (message->has_ack() && message->ack().sequence() >= sequence) {
        return;
      }
    }
  };
  const auto t = [&] { return fake_clock_.NowUnixNanos(); };

  // Stream 1 spends the whole burst; its batch is stored.
  {
    RawStream raw(aggregator_->channel());
    ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
    ASSERT_TRUE(raw.Write(CounterDeclarations(1, kNewSeriesBurst)));
    ASSERT_TRUE(raw.Write(LayoutMessage(1, {1})));
    ASSERT_TRUE(raw.Write(BatchMessage(1, t(), 1, {5})));
    expect_acked(raw, 1);
    const RawStream::End end = raw.Finish();
    EXPECT_TRUE(end.status.ok()) << end.status.error_message();
  }
  // Stream 2, the same agent reconnecting: its known series again are free, one new one is not.
  ExpectRejected({HelloMessage(kRawNode, "boot-r", 7), CounterDeclarations(1, kNewSeriesBurst),
                  CounterDeclarations(kNewSeriesBurst + 1, 1, kNewSeriesBurst)},
                 v1::Reject::REASON_LIMIT, grpc::StatusCode::RESOURCE_EXHAUSTED,
                 "declares new series faster than", "series_rate_limit");

  // A second later the node may gain kNewSeriesPerSecond series, and not one more.
  fake_clock_.AdvanceMillis(1000);
  RawStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
  ASSERT_TRUE(raw.Write(CounterDeclarations(1, kNewSeriesBurst)));
  ASSERT_TRUE(
      raw.Write(CounterDeclarations(kNewSeriesBurst + 1, kNewSeriesPerSecond, kNewSeriesBurst)));
  const uint32_t last_new = kNewSeriesBurst + kNewSeriesPerSecond;
  ASSERT_TRUE(raw.Write(LayoutMessage(1, {1, last_new})));
  ASSERT_TRUE(raw.Write(BatchMessage(2, t(), 1, {6, 1})));
  expect_acked(raw, 2);
  EXPECT_EQ(aggregator_->Node(kRawNode)->series,
            static_cast<size_t>(kNewSeriesBurst + kNewSeriesPerSecond));
  (void)raw.Write(CounterDeclarations(last_new + 1, 1, last_new));
  const RawStream::End end = raw.Finish();
  ASSERT_FALSE(end.messages.empty());
  ASSERT_TRUE(end.messages.back().has_reject());
  EXPECT_EQ(end.messages.back().reject().reason(), v1::Reject::REASON_LIMIT);
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_rejected_messages_total",
                        {{"reason", "series_rate_limit"}}),
            2.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_series", {{"node", kRawNode}}),
            static_cast<double>(kNewSeriesBurst + kNewSeriesPerSecond));
}

// Series retirement over a stream: a series without samples for the retention is retired while
// the node keeps sending; when it comes back the aggregator drops that one value, asks for its
// declaration again, and the series carries on with its exact value (the delta state of both
// ends survives). An agent older than PROTOCOL_REVISION_2 is made to reconnect instead.
class RetirementTest : public StreamTest {
 protected:
  static constexpr int64_t kSecond = 1'000'000'000;
  AggregatorOptions RetiringOptions() {
    AggregatorOptions options = DefaultOptions();
    options.store.series_retention_nanos = 60 * kSecond;
    options.clock = &fake_clock_;
    return options;
  }
  // Reads until the ack of `sequence`, collecting any Redeclare; fails on a Reject or an end.
  void ReadUntilAck(RawStream& raw, uint64_t sequence, std::vector<uint32_t>* redeclared) {
    for (;;) {
      std::optional<v1::AggregatorMessage> message = raw.Read();
      ASSERT_TRUE(message.has_value()) << "stream ended before the ack of " << sequence;
      ASSERT_FALSE(message->has_reject()) << message->reject().message();
      if (message->has_redeclare()) {
        redeclared->insert(redeclared->end(), message->redeclare().series_ids().begin(),
                           message->redeclare().series_ids().end());
      }
      if (message->has_ack() && message->ack().sequence() >= sequence) {
        return;
      }
    }
  }
  // Hello, series 1 and 2 (fabricmon_raw_0/1_total), layouts {1, 2} and {1}; batch 1 stores
  // 10 and 20; batches 2..9 carry only series 1, 10 s apart on the aggregator's clock, so
  // series 2 is retired (80 s > 60 s without a sample).
  void RetireSeriesTwo(RawStream& raw, v1::ProtocolRevision revision) {
    v1::AgentMessage hello = HelloMessage(kRawNode, "boot-r", 9);
    hello.mutable_hello()->set_protocol_revision(revision);
    ASSERT_TRUE(raw.Write(hello));
    ASSERT_TRUE(raw.Write(CounterDeclarations(1, 2)));
    ASSERT_TRUE(raw.Write(LayoutMessage(1, {1, 2})));
    ASSERT_TRUE(raw.Write(LayoutMessage(2, {1})));
    std::vector<uint32_t> redeclared;
    ASSERT_TRUE(raw.Write(BatchMessage(1, fake_clock_.NowUnixNanos(), 1, {10, 20})));
    ReadUntilAck(raw, 1, &redeclared);
    for (uint64_t sequence = 2; sequence <= 9; ++sequence) {
      fake_clock_.AdvanceMillis(10000);
      ASSERT_TRUE(raw.Write(BatchMessage(sequence, fake_clock_.NowUnixNanos(), 2, {1})));
      ReadUntilAck(raw, sequence, &redeclared);
    }
    EXPECT_TRUE(redeclared.empty());
    EXPECT_EQ(aggregator_->Node(kRawNode)->series, 1u);
    EXPECT_EQ(aggregator_->Node(kRawNode)->counters.retired_series, 1u);
    const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
    EXPECT_FALSE(SampleValue(samples, "fabricmon_raw_1_total").has_value());
    EXPECT_EQ(SampleValue(samples, "fabricmon_raw_0_total"), 18.0);
    EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_series_retired_total"), 1.0);
    // Series 2 comes back with +5 (25): dropped, since the aggregator no longer knows it.
    fake_clock_.AdvanceMillis(10000);
    ASSERT_TRUE(raw.Write(BatchMessage(10, fake_clock_.NowUnixNanos(), 1, {1, 5})));
  }
};

TEST_P(RetirementTest, ARetiredSeriesThatComesBackIsDeclaredAgainOnTheSameStream) {
  StartAggregator(/*http=*/false, RetiringOptions());
  RawStream raw(aggregator_->channel());
  ASSERT_NO_FATAL_FAILURE(RetireSeriesTwo(raw, v1::PROTOCOL_REVISION_2));
  std::vector<uint32_t> redeclared;
  ReadUntilAck(raw, 10, &redeclared);
  EXPECT_THAT(redeclared, ::testing::ElementsAre(2u));

  // The agent declares id 2 again before its next batch; the value is exact (20 + 5 + 5).
  ASSERT_TRUE(raw.Write(CounterDeclarations(2, 1, 1)));
  ASSERT_TRUE(raw.Write(BatchMessage(11, fake_clock_.NowUnixNanos(), 1, {1, 5})));
  ReadUntilAck(raw, 11, &redeclared);
  EXPECT_EQ(redeclared.size(), 1u);
  const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
  EXPECT_EQ(SampleValue(samples, "fabricmon_raw_1_total"), 30.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_raw_0_total"), 20.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_retired_series_samples_dropped_total"), 1.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_redeclare_requests_total"), 1.0);
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_series", {{"node", kRawNode}}), 2.0);
  const RawStream::End end = raw.Finish();
  EXPECT_TRUE(end.status.ok()) << end.status.error_message();
}

TEST_P(RetirementTest, AnAgentBeforeRevisionTwoIsMadeToReconnectInstead) {
  StartAggregator(/*http=*/false, RetiringOptions());
  RawStream raw(aggregator_->channel());
  ASSERT_NO_FATAL_FAILURE(RetireSeriesTwo(raw, v1::PROTOCOL_REVISION_1));
  const RawStream::End end = raw.Finish();
  bool acked = false;
  for (const v1::AggregatorMessage& message : end.messages) {
    EXPECT_FALSE(message.has_reject()) << message.reject().message();
    EXPECT_FALSE(message.has_redeclare());
    acked = acked || (message.has_ack() && message.ack().sequence() == 10);
  }
  EXPECT_TRUE(acked) << "batch 10 (series 1's value) was not stored";
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(end.status.error_message(), HasSubstr("reconnect to declare them"));
  // Not a protocol error: nothing counted as rejected.
  for (const TextSample& sample : Parse(aggregator_->Scrape())) {
    if (sample.name == "fabricmon_aggregator_rejected_messages_total") {
      EXPECT_EQ(sample.value, "0") << sample.labels[0].second;
    }
  }
}

// The real agent: a counter file turns unreadable (non-numeric), its series is absent and, once
// the retention has passed on the aggregator's clock, retired; when the file is readable again
// the agent declares the series anew on the same stream and its value is back in /metrics.
TEST_P(RetirementTest, TheAgentDeclaresARetiredSeriesAgainWithoutReconnecting) {
  StartAggregator(/*http=*/false, RetiringOptions());
  StartAgent();
  const std::string path = sysfs_root_ + "/class/infiniband/mlx5_0/ports/1/counters/symbol_error";
  const std::vector<std::pair<std::string, std::string>> port = {{"device", "mlx5_0"},
                                                                 {"port", "1"}};
  auto symbol_errors = [&] {
    return SampleValue(Parse(aggregator_->Scrape()), "fabricmon_ib_symbol_error_total", port);
  };
  ASSERT_TRUE(WaitFor([&] { return symbol_errors().has_value(); }));
  auto rewrite = [&](const std::string& text) {
    const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
  };
  rewrite("not a number\n");
  ASSERT_TRUE(WaitFor([&] { return !symbol_errors().has_value(); }));
  // 90 s on the aggregator's clock, in steps short enough for every live series to report.
  for (int step = 0; step < 9; ++step) {
    fake_clock_.AdvanceMillis(10000);
    ASSERT_TRUE(WaitForStored(Batches() + 3));
  }
  const std::vector<TextSample> retired = Parse(aggregator_->Scrape());
  EXPECT_GE(SampleValue(retired, "fabricmon_aggregator_series_retired_total").value_or(0), 1.0);

  rewrite("7\n");
  EXPECT_TRUE(WaitFor([&] { return symbol_errors() == 7.0; }))
      << "the series did not come back after its file was readable again";
  const std::vector<TextSample> back = Parse(aggregator_->Scrape());
  EXPECT_GE(SampleValue(back, "fabricmon_aggregator_redeclare_requests_total").value_or(0), 1.0);
  const agent::StreamClientStats stats = agent_->stream().stats();
  EXPECT_EQ(stats.connects, 1u) << "the agent had to reconnect";
  EXPECT_EQ(stats.rejects, 0u);
}

INSTANTIATE_TEST_SUITE_P(Transports, RetirementTest,
                         ::testing::Values(Transport::kInProcess, Transport::kTcp),
                         [](const auto& info) {
                           return info.param == Transport::kInProcess ? "InProcess" : "Tcp";
                         });

// A second agent claiming the node (another process on the same boot, e.g. a duplicated
// --node_name) is refused; the agent that holds the name keeps it.
TEST_P(StreamTest, RejectsDuplicateNodeFromAnotherInstance) {
  StartAggregator();
  StartAgent();
  const AgentHarnessOptions& real = agent_->options();
  ExpectRejected({HelloMessage(real.node_name, real.boot_id, real.instance_id + 1)},
                 v1::Reject::REASON_DUPLICATE_NODE, grpc::StatusCode::ALREADY_EXISTS,
                 "already streaming from another agent", "duplicate_node");
  ExpectAgentUnaffected();
  EXPECT_EQ(aggregator_->Node(kNode)->agent_instance_id, real.instance_id);
}

// Switch topology (fabric_nodes, fabric_links) is taken only from a fabric sweeper, in the hello
// and in later inventory updates; from anyone else those two fields are dropped and counted, the
// rest of the inventory kept.
TEST_P(StreamTest, SwitchTopologyOnlyFromAFabricSweeper) {
  AggregatorOptions options = DefaultOptions();
  v1::AuthorizationConfig roles;
  roles.add_fabric_sweepers("sweeper-[0-9]+");
  auto authorization = aggregator::Authorization::Create(roles, /*plaintext=*/true);
  ASSERT_TRUE(authorization.ok()) << authorization.status();
  options.stream.authorization = *authorization;
  StartAggregator(/*http=*/false, options);
  auto update = [](const std::string& board) {
    v1::AgentMessage message;
    v1::Inventory* inventory = message.mutable_inventory()->mutable_inventory();
    inventory->add_rdma_devices()->set_board_id(board);
    inventory->add_fabric_nodes()->set_guid("0x0000000000000100");
    v1::FabricLink* link = inventory->add_fabric_links();
    link->set_a_guid("0x0000000000000100");
    link->set_a_port(1);
    link->set_b_guid("0x0000000000000200");
    link->set_b_port(2);
    return message;
  };
  for (const char* node : {kRawNode, "sweeper-1"}) {
    RawStream raw(aggregator_->channel());
    ASSERT_TRUE(raw.Write(HelloMessage(node, "boot-r", 7)));
    std::optional<v1::AggregatorMessage> hello_ack = raw.Read();
    ASSERT_TRUE(hello_ack.has_value() && hello_ack->has_hello_ack());
    ASSERT_TRUE(raw.Write(update("board-1")));
    ASSERT_TRUE(raw.Write(update("board-2")));
    ASSERT_TRUE(WaitFor([&] {
      return aggregator_->Node(node)->inventory.rdma_devices_size() == 1 &&
             aggregator_->Node(node)->inventory.rdma_devices(0).board_id() == "board-2";
    })) << node;
    const v1::Inventory inventory = aggregator_->Node(node)->inventory;
    const bool sweeper = std::string(node) != kRawNode;
    EXPECT_EQ(inventory.fabric_links_size(), sweeper ? 1 : 0) << node;
    EXPECT_EQ(inventory.fabric_nodes_size(), sweeper ? 1 : 0) << node;
    EXPECT_TRUE(raw.Finish().status.ok()) << node;
  }
  // Both updates of the non-sweeper, none of the sweeper's.
  EXPECT_EQ(aggregator_->state().stats().inventory_fabric_refused.load(), 2u);
  EXPECT_THAT(aggregator_->Scrape(),
              HasSubstr("fabricmon_aggregator_inventory_refused_total{reason=\"not_a_fabric_"
                        "sweeper\"} 2"));
}

// (e) Every refusal says why (README "Security"). Each case: the Reject and its reason, the
// rejection counted under its own label, the real agent unaffected, and a witness node's stored
// values exactly as they were.

// A message somewhat over max_message_bytes reaches the aggregator (gRPC accepts up to twice the
// limit) and is refused with REASON_TOO_LARGE; nothing of it is taken.
TEST_P(StreamTest, RefusesAMessageOverTheLimitWithTooLarge) {
  StartAggregator();
  StartAgent();
  Witness witness(*this);
  RawStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
  std::optional<v1::AggregatorMessage> hello_ack = raw.Read();
  ASSERT_TRUE(hello_ack.has_value() && hello_ack->has_hello_ack());
  EXPECT_EQ(hello_ack->hello_ack().max_message_bytes(), kMaxMessageBytes);
  v1::AgentMessage big;
  big.mutable_inventory()->mutable_inventory()->add_rdma_devices()->set_board_id(
      std::string(kMaxMessageBytes + kMaxMessageBytes / 2, 'x'));
  (void)raw.Write(big);
  const RawStream::End end = raw.Finish();
  const v1::Reject* reject = FindReject(end);
  ASSERT_NE(reject, nullptr) << end.status.error_message();
  EXPECT_EQ(reject->reason(), v1::Reject::REASON_TOO_LARGE);
  EXPECT_THAT(reject->message(), HasSubstr("above max_message_bytes"));
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ExpectRejectCounted("too_large");
  EXPECT_EQ(aggregator_->Node(kRawNode)->inventory.rdma_devices_size(), 0);
  witness.ExpectUntouched();
  ExpectAgentUnaffected();
}

// Beyond twice the limit gRPC itself refuses the message before it is read (RESOURCE_EXHAUSTED),
// so the stream ends without a Reject; nothing of it is taken either.
TEST_P(StreamTest, AMessageFarOverTheLimitIsRefusedByGrpc) {
  StartAggregator();
  StartAgent();
  RawStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
  v1::AgentMessage huge;
  huge.mutable_inventory()->mutable_inventory()->add_rdma_devices()->set_board_id(
      std::string(3 * kMaxMessageBytes, 'x'));
  (void)raw.Write(huge);  // may or may not report the failure; the status does
  const RawStream::End end = raw.Finish();
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << end.status.error_message();
  for (const v1::AggregatorMessage& message : end.messages) {
    EXPECT_FALSE(message.has_ack()) << "nothing of the huge message may be taken";
  }
  EXPECT_TRUE(WaitFor([&] { return !aggregator_->Node(kRawNode)->connected; }));
  EXPECT_EQ(aggregator_->Node(kRawNode)->inventory.rdma_devices_size(), 0);
  ExpectAgentUnaffected();
}

TEST_P(StreamTest, RefusesAnUndecodableMessageWithANonOkStatus) {
  StartAggregator();
  StartAgent();
  Witness witness(*this);
  BytesStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(Serialized(HelloMessage(kRawNode, "boot-r", 7))));
  // Field 4 (batch) as a length-delimited record whose length runs past the message.
  ASSERT_TRUE(raw.Write(std::string("\x22\x7f\x08\x01", 4)));
  const RawStream::End end = raw.Finish();
  const v1::Reject* reject = FindReject(end);
  ASSERT_NE(reject, nullptr) << end.status.error_message();
  EXPECT_EQ(reject->reason(), v1::Reject::REASON_UNDECODABLE);
  EXPECT_THAT(reject->message(), HasSubstr("does not decode"));
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectRejectCounted("undecodable");
  witness.ExpectUntouched();
  ExpectAgentUnaffected();
}

// proto3 strings are UTF-8: protobuf refuses to parse a message with an invalid one, so it is
// refused as undecodable (here a label value, which no other check would catch).
TEST_P(StreamTest, RefusesInvalidUtf8AsUndecodable) {
  StartAggregator();
  StartAgent();
  Witness witness(*this);
  BytesStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(Serialized(HelloMessage(kRawNode, "boot-r", 7))));
  v1::AgentMessage declarations = CounterDeclarations(1, 1);
  declarations.mutable_declarations()->mutable_series(0)->mutable_labels(0)->set_value("utf8@X");
  std::string bytes = Serialized(declarations);
  const size_t at = bytes.find("utf8@X");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] = '\xff';  // never valid in UTF-8
  ASSERT_TRUE(raw.Write(bytes));
  const RawStream::End end = raw.Finish();
  const v1::Reject* reject = FindReject(end);
  ASSERT_NE(reject, nullptr) << end.status.error_message();
  EXPECT_EQ(reject->reason(), v1::Reject::REASON_UNDECODABLE);
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectRejectCounted("undecodable");
  EXPECT_EQ(aggregator_->Node(kRawNode)->series, 0u);
  witness.ExpectUntouched();
  ExpectAgentUnaffected();
}

// A counter value beyond its declared width is refused with its batch, which is not
// acknowledged (the agent keeps it) and not stored.
TEST_P(StreamTest, RefusesACounterValueBeyondItsWidth) {
  StartAggregator();
  StartAgent();
  Witness witness(*this);
  RawStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
  v1::AgentMessage declarations;
  *declarations.mutable_declarations()->add_series() = wire::ToDeclaration(
      collectors::CounterSeries("raw", "fabricmon_raw_narrow_total", "raw", collectors::Unit::kNone,
                                32, collectors::Overflow::kWraps, 1.0, {}),
      1);
  ASSERT_TRUE(raw.Write(declarations));
  ASSERT_TRUE(raw.Write(LayoutMessage(1, {1})));
  const int64_t now = RealClock::Get().NowUnixNanos();
  ASSERT_TRUE(raw.Write(BatchMessage(1, now, 1, {5})));
  ReadUntilAck(raw, 1);
  ASSERT_TRUE(raw.Write(BatchMessage(2, now + 1, 1, {int64_t{1} << 32})));  // 2^32 + 5
  const RawStream::End end = raw.Finish();
  const v1::Reject* reject = FindReject(end);
  ASSERT_NE(reject, nullptr) << end.status.error_message();
  EXPECT_EQ(reject->reason(), v1::Reject::REASON_VALUE_OUT_OF_RANGE);
  EXPECT_THAT(reject->message(), HasSubstr("value 4294967301 of series id 1 is beyond its "
                                           "declared width of 32 bits"));
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (const v1::AggregatorMessage& message : end.messages) {
    EXPECT_FALSE(message.has_ack() && message.ack().sequence() >= 2) << "batch 2 was acked";
  }
  ExpectRejectCounted("value_out_of_range");
  const store::NodeState::Summary raw_node = *aggregator_->Node(kRawNode);
  EXPECT_EQ(raw_node.last_stored_sequence, 1u);
  EXPECT_EQ(raw_node.counters.batches, 1u);
  EXPECT_EQ(raw_node.counters.values_out_of_range, 1u);
  witness.ExpectUntouched();
  ExpectAgentUnaffected();
}

// Two machines with one identity: while one streams, the other (another boot id) is refused,
// counted on the node and shown by the Diagnostics service (`fabricmon nodes`).
TEST_P(StreamTest, RefusesASecondBootOfALiveNodeAsAnIdentityConflict) {
  StartAggregator();
  StartAgent();
  Witness witness(*this);
  const AgentHarnessOptions& real = agent_->options();
  ExpectRejected({HelloMessage(real.node_name, "boot-of-a-clone", 99)},
                 v1::Reject::REASON_IDENTITY_CONFLICT, grpc::StatusCode::FAILED_PRECONDITION,
                 "identity conflict", "identity_conflict");
  const store::NodeState::Summary node = *aggregator_->Node(kNode);
  EXPECT_EQ(node.boot_id, real.boot_id);
  EXPECT_EQ(node.agent_instance_id, real.instance_id);
  EXPECT_EQ(node.counters.identity_conflicts, 1u);

  std::unique_ptr<v1::Diagnostics::Stub> stub = v1::Diagnostics::NewStub(aggregator_->channel());
  grpc::ClientContext context;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(stub->ListNodes(&context, v1::ListNodesRequest(), &nodes).ok());
  bool shown = false;
  for (const v1::NodeSummary& summary : nodes.nodes()) {
    if (summary.name() == kNode) {
      shown = true;
      EXPECT_EQ(summary.identity_conflicts(), 1u);
      EXPECT_EQ(
          summary.last_identity_conflict(),
          absl::StrCat("boot ", real.boot_id, " holds the node; boot boot-of-a-clone refused"));
    }
  }
  EXPECT_TRUE(shown);
  const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_identity_conflicts_total", {{"node", kNode}}),
            1.0);
  witness.ExpectUntouched();
  ExpectAgentUnaffected();
}

TEST_P(StreamTest, RefusesANewNodeBeyondMaxNodes) {
  AggregatorOptions options = DefaultOptions();
  options.store.max_nodes = 2;  // the real agent's node and the witness
  StartAggregator(/*http=*/false, options);
  StartAgent();
  Witness witness(*this);
  ExpectRejected({HelloMessage(kRawNode, "boot-r", 7)}, v1::Reject::REASON_LIMIT,
                 grpc::StatusCode::RESOURCE_EXHAUSTED, "cap of 2 nodes (max_nodes)", "node_limit");
  EXPECT_FALSE(aggregator_->Node(kRawNode).has_value());
  witness.ExpectUntouched();
  ExpectAgentUnaffected();
}

// At the store-wide cap a new series is kept out, not the node: one node's flood must not blind
// another node whose series merely came later.
TEST_P(StreamTest, ASeriesBeyondMaxSeriesTotalIsLeftOutNotTheStream) {
  AggregatorOptions options = DefaultOptions();
  options.store.max_series_per_node = 100000;
  options.store.max_series_total = 3000;
  StartAggregator(/*http=*/false, options);
  StartAgent();
  Witness witness(*this);
  const uint64_t held = aggregator_->state().store().series_held();
  ASSERT_LT(held, 3000u);
  const int room = static_cast<int>(3000 - held);
  ExpectCappedStreamGoesOn(room + 1);
  EXPECT_EQ(aggregator_->Node(kRawNode)->series, static_cast<size_t>(room));
  EXPECT_EQ(aggregator_->state().store().series_held(), 3000u);
  witness.ExpectUntouched();
  ExpectAgentUnaffected();
}

// One peer cycling node names gets no fresh budget with each name.
TEST_P(StreamTest, ThePeersNewSeriesBudgetSpansItsNodeNames) {
  AggregatorOptions options = DefaultOptions();
  options.store.new_series_per_peer = store::NewSeriesLimit{kNewSeriesPerSecond, kNewSeriesBurst};
  options.clock = &fake_clock_;
  StartAggregator(/*http=*/false, options);
  {
    RawStream raw(aggregator_->channel());
    ASSERT_TRUE(raw.Write(HelloMessage("name-1", "boot-r", 7)));
    ASSERT_TRUE(raw.Write(CounterDeclarations(1, kNewSeriesBurst)));
    ASSERT_TRUE(raw.Write(LayoutMessage(1, {1})));
    ASSERT_TRUE(raw.Write(BatchMessage(1, fake_clock_.NowUnixNanos(), 1, {5})));
    ReadUntilAck(raw, 1);
    EXPECT_TRUE(raw.Finish().status.ok());
  }
  ExpectRejected({HelloMessage("name-2", "boot-r", 8), CounterDeclarations(1, 1)},
                 v1::Reject::REASON_LIMIT, grpc::StatusCode::RESOURCE_EXHAUSTED,
                 "over all the node names it streams as", "series_rate_limit");
  EXPECT_EQ(aggregator_->Node("name-2")->series, 0u);
}

// The hostile clock over a real stream: a batch stamped an hour ahead, then batches at the right
// time. Every batch is acknowledged and stored, the node's values keep moving, the steps are
// counted for the node, and nothing is rejected.
TEST_P(StreamTest, ANodeWhoseClockStepsKeepsFlowing) {
  StartAggregator();
  StartAgent();
  Witness witness(*this);
  const int64_t hour = int64_t{3600} * 1000000000;
  const int64_t t0 = RealClock::Get().NowUnixNanos();
  RawStream raw(aggregator_->channel());
  ASSERT_TRUE(raw.Write(HelloMessage(kRawNode, "boot-r", 7)));
  ASSERT_TRUE(raw.Write(CounterDeclarations(1, 2)));
  ASSERT_TRUE(raw.Write(LayoutMessage(1, {1, 2})));
  ASSERT_TRUE(raw.Write(BatchMessage(1, t0 + hour, 1, {100, 200})));
  ReadUntilAck(raw, 1);
  for (uint64_t sequence = 2; sequence <= 4; ++sequence) {
    ASSERT_TRUE(raw.Write(BatchMessage(sequence, RealClock::Get().NowUnixNanos(), 1, {1, 2})));
    ReadUntilAck(raw, sequence);
    const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
    EXPECT_EQ(SampleValue(samples, "fabricmon_raw_0_total", {{"node", kRawNode}}),
              static_cast<double>(100 + sequence - 1));
    EXPECT_EQ(SampleValue(samples, "fabricmon_raw_1_total", {{"node", kRawNode}}),
              static_cast<double>(200 + 2 * (sequence - 1)));
    EXPECT_EQ(SampleValue(samples, "fabricmon_node_up", {{"node", kRawNode}}), 1.0);
  }
  const store::NodeState::Summary raw_node = *aggregator_->Node(kRawNode);
  EXPECT_EQ(raw_node.counters.batches, 4u);
  EXPECT_EQ(raw_node.counters.samples, 8u);
  EXPECT_EQ(raw_node.counters.clock_steps, 2u);  // ahead onto our clock, then back
  EXPECT_EQ(raw_node.counters.timestamps_backwards, 1u);
  const std::vector<TextSample> samples = Parse(aggregator_->Scrape());
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_clock_steps_total", {{"node", kRawNode}}), 2.0);
  for (const TextSample& sample : samples) {
    if (sample.name == "fabricmon_aggregator_rejected_messages_total") {
      EXPECT_EQ(sample.value, "0") << SampleKey(sample);
    }
  }
  const RawStream::End end = raw.Finish();
  EXPECT_TRUE(end.status.ok()) << end.status.error_message();
  witness.ExpectUntouched();
  ExpectAgentUnaffected();
}

// (d) The Diagnostics service shows the node with what its agent discovered.
TEST_P(StreamTest, DiagnosticsListsNodeWithInventory) {
  StartAggregator();
  StartAgent();
  std::unique_ptr<v1::Diagnostics::Stub> stub = v1::Diagnostics::NewStub(aggregator_->channel());

  grpc::ClientContext list_context;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(stub->ListNodes(&list_context, v1::ListNodesRequest(), &nodes).ok());
  ASSERT_THAT(nodes.nodes(), SizeIs(1));
  const v1::NodeSummary& summary = nodes.nodes(0);
  EXPECT_EQ(summary.name(), kNode);
  EXPECT_TRUE(summary.up());
  EXPECT_EQ(summary.boot_id(), agent_->options().boot_id);
  EXPECT_EQ(summary.agent_version(), "test");
  EXPECT_GT(summary.series(), 400u);

  grpc::ClientContext get_context;
  v1::GetNodeRequest request;
  request.set_name(kNode);
  v1::NodeView view;
  ASSERT_TRUE(stub->GetNode(&get_context, request, &view).ok());
  EXPECT_EQ(view.summary().name(), kNode);
  // Exactly the agent's discovered inventory...
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(view.inventory(),
                                                                 agent_->agent().inventory()))
      << view.inventory().ShortDebugString();
  // ...which is the fixture's devices.
  std::vector<std::string> names;
  for (const v1::RdmaDevice& device : view.inventory().rdma_devices()) {
    names.push_back(device.name());
    ASSERT_THAT(device.ports(), SizeIs(1)) << device.name();
    EXPECT_EQ(device.ports(0).state_name(), "ACTIVE") << device.name();
    if (device.name() == "mlx5_bond_0") {
      EXPECT_EQ(device.ports(0).link_layer(), "Ethernet");
    } else {
      EXPECT_EQ(device.ports(0).link_layer(), "InfiniBand") << device.name();
      EXPECT_EQ(device.ports(0).rate(), "400 Gb/sec (4X NDR)") << device.name();
      EXPECT_EQ(device.fw_ver(), "28.41.1000") << device.name();
    }
  }
  EXPECT_THAT(names,
              ::testing::UnorderedElementsAre("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6",
                                              "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0"));

  grpc::ClientContext missing_context;
  request.set_name("no-such-node");
  const grpc::Status missing = stub->GetNode(&missing_context, request, &view);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("no-such-node"));
}

// (e) A node whose agent stops sending goes down after the stale interval and its series leave
// the export; a node whose stream ends goes down at once.
TEST_P(StreamTest, NodeGoesDownWhenAgentStops) {
  StartAggregator(/*http=*/true);
  StartAgent();
  // A second exporter over the same store, with a short stale interval: an agent sending every
  // 100 ms stays well inside it.
  AggregatorState& state = aggregator_->state();
  aggregator::MetricsExporter quick(state.store(), state.stats(), RealClock::Get(),
                                    aggregator::ExporterOptions{300 * 1000000});
  auto quick_samples = [&] { return Parse(exposition::SerializeText(quick.Collect())); };
  const std::vector<std::pair<std::string, std::string>> node = {{"node", kNode}};
  ASSERT_TRUE(
      WaitFor([&] { return SampleValue(quick_samples(), "fabricmon_node_up", node) == 1.0; }));
  EXPECT_GT(IbSamples(exposition::SerializeText(quick.Collect()), kNode).size(), 400u);

  // Collection stops; the stream stays connected but carries nothing more.
  agent_->StopCollecting();
  EXPECT_TRUE(
      WaitFor([&] { return SampleValue(quick_samples(), "fabricmon_node_up", node) == 0.0; },
              absl::Seconds(2)))
      << "still up 2 s after the last batch with a 300 ms stale interval";
  std::vector<TextSample> samples = quick_samples();
  EXPECT_THAT(IbSamples(exposition::SerializeText(quick.Collect()), kNode), SizeIs(0));
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_nodes", {{"state", "down"}}), 1.0);
  EXPECT_GT(SampleValue(samples, "fabricmon_node_last_seen_age_seconds", node).value_or(0), 0.3);
  // The default exporter (30 s) still counts it up: the stream is there, the data recent.
  samples = Parse(aggregator_->Scrape());
  EXPECT_EQ(SampleValue(samples, "fabricmon_node_up", node), 1.0);
  EXPECT_TRUE(agent_->stream().stats().connected);

  // The stream ends: down at once, whatever the stale interval.
  agent_->Stop();
  EXPECT_TRUE(WaitFor(
      [&] { return SampleValue(Parse(aggregator_->Scrape()), "fabricmon_node_up", node) == 0.0; }));
  const std::string text = aggregator_->Scrape();
  EXPECT_THAT(IbSamples(text, kNode), SizeIs(0));
  samples = Parse(text);
  EXPECT_EQ(SampleValue(samples, "fabricmon_aggregator_streams"), 0.0);
  // The node stays known (its counters too), only its raw series are gone.
  EXPECT_TRUE(SampleValue(samples, "fabricmon_node_sequence_gaps_total", node).has_value());
}

}  // namespace
}  // namespace fabricmon::testing
