// IngestSession: one stream's ingest without gRPC (what AgentStream and `fabricmon replay` share):
// what it stores, what it refuses and that a refusal leaves the session as it was; and that the
// store shares one description between nodes that declare the same series.

#include "daemon/aggregator/ingest_session.h"

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "daemon/store/series_store.h"
#include "daemon/wire/series_codec.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace fabricmon::aggregator {
namespace {

using collectors::CounterSeries;
using collectors::Overflow;
using collectors::Unit;

collectors::SeriesDesc XmitData(std::string device) {
  return CounterSeries("ib_sysfs", "fabricmon_ib_port_xmit_data_bytes_total", "HELP", Unit::kBytes,
                       64, Overflow::kSaturates, 4.0,
                       {{"device", std::move(device)}, {"port", "1"}});
}

v1::Hello HelloFor(const std::string& node) {
  v1::Hello hello;
  hello.set_node_name(node);
  hello.set_boot_id("boot-" + node);
  hello.set_agent_instance_id(7);
  hello.set_protocol_revision(v1::PROTOCOL_REVISION_2);
  return hello;
}

// Declares ids 1 and 2 (two ports) and layout 1 = [1, 2].
void DeclareTwo(IngestSession& session) {
  v1::SeriesDeclarations declarations;
  *declarations.add_series() = wire::ToDeclaration(XmitData("mlx5_0"), 1);
  *declarations.add_series() = wire::ToDeclaration(XmitData("mlx5_1"), 2);
  ASSERT_FALSE(session.Declare(declarations).has_value());
  v1::Layouts layouts;
  v1::Layout* layout = layouts.add_layouts();
  layout->set_id(1);
  layout->add_series_ids(1);
  layout->add_series_ids(2);
  ASSERT_FALSE(session.AddLayouts(layouts).has_value());
}

v1::SampleBatch BatchOf(uint64_t sequence, int64_t first_delta, int64_t second_delta) {
  v1::SampleBatch batch;
  batch.set_sequence(sequence);
  batch.set_timestamp_unix_nanos(1'700'000'000'000'000'000 + int64_t(sequence) * 1'000'000'000);
  batch.set_layout_id(1);
  batch.add_value_deltas(first_delta);
  batch.add_value_deltas(second_delta);
  return batch;
}

std::vector<uint64_t> LatestValues(const store::NodeState& node) {
  std::vector<uint64_t> values;
  node.ForEachSeries([&](const store::Series& series) {
    values.push_back(series.Latest() == nullptr ? 0 : series.Latest()->raw);
  });
  return values;
}

class IngestSessionTest : public ::testing::Test {
 protected:
  store::SeriesStore store_{store::StoreOptions{}};
  IngestStats stats_;
  testing::FakeClock clock_;
};

TEST_F(IngestSessionTest, StoresDecodedBatchesAndCountsDuplicates) {
  IngestSession session(store_, stats_, clock_);
  ASSERT_TRUE(std::holds_alternative<IngestSession::Attached>(
      session.Attach(HelloFor("gpu-001"), 1, [] {})));
  DeclareTwo(session);
  auto first = session.Batch(BatchOf(1, 100, 200));
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(first));
  EXPECT_TRUE(std::get<IngestSession::BatchResult>(first).stored);
  EXPECT_EQ(std::get<IngestSession::BatchResult>(first).samples, 2u);
  // Deltas against the previous values of the same series on the stream.
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(session.Batch(BatchOf(2, 5, 7))));
  EXPECT_EQ(LatestValues(*session.node()), (std::vector<uint64_t>{105, 207}));
  EXPECT_EQ(stats_.batches.load(), 2u);
  EXPECT_EQ(stats_.samples.load(), 4u);

  // The same sequence again (a replay after a reconnect) is acknowledged, not stored again.
  auto again = session.Batch(BatchOf(2, 0, 0));
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(again));
  EXPECT_FALSE(std::get<IngestSession::BatchResult>(again).stored);
  EXPECT_EQ(stats_.duplicate_batches.load(), 1u);
}

TEST_F(IngestSessionTest, RefusalsNameTheirReasonAndLeaveTheSessionUsable) {
  IngestSession session(store_, stats_, clock_);
  ASSERT_TRUE(std::holds_alternative<IngestSession::Attached>(
      session.Attach(HelloFor("gpu-002"), 1, [] {})));
  auto second_hello = session.Attach(HelloFor("gpu-002"), 1, [] {});
  ASSERT_TRUE(std::holds_alternative<IngestError>(second_hello));
  EXPECT_EQ(std::get<IngestError>(second_hello).reason, RejectReason::kProtocol);

  auto unknown_layout = session.Batch(BatchOf(1, 1, 1));
  ASSERT_TRUE(std::holds_alternative<IngestError>(unknown_layout));
  EXPECT_EQ(std::get<IngestError>(unknown_layout).reason, RejectReason::kUnknownLayout);

  DeclareTwo(session);
  v1::SampleBatch short_batch = BatchOf(1, 1, 1);
  short_batch.mutable_value_deltas()->RemoveLast();
  auto malformed = session.Batch(short_batch);
  ASSERT_TRUE(std::holds_alternative<IngestError>(malformed));
  EXPECT_EQ(std::get<IngestError>(malformed).reason, RejectReason::kMalformed);
  auto sequence_zero = session.Batch(BatchOf(0, 1, 1));
  ASSERT_TRUE(std::holds_alternative<IngestError>(sequence_zero));
  EXPECT_EQ(std::get<IngestError>(sequence_zero).reason, RejectReason::kProtocol);
  EXPECT_EQ(stats_.batches.load(), 0u);

  // Nothing refused so far moved the decoder: the next good batch decodes from zero.
  ASSERT_TRUE(
      std::holds_alternative<IngestSession::BatchResult>(session.Batch(BatchOf(1, 10, 20))));
  EXPECT_EQ(LatestValues(*session.node()), (std::vector<uint64_t>{10, 20}));
}

TEST_F(IngestSessionTest, RefusesAnInvalidNodeNameBeforeTheStoreSeesIt) {
  IngestSession session(store_, stats_, clock_);
  auto refused = session.Attach(HelloFor("gpu 003"), 1, [] {});
  ASSERT_TRUE(std::holds_alternative<IngestError>(refused));
  EXPECT_EQ(std::get<IngestError>(refused).reason, RejectReason::kMalformed);
  EXPECT_EQ(session.node(), nullptr);
  EXPECT_TRUE(store_.Nodes().empty());
}

TEST_F(IngestSessionTest, NodesDeclaringTheSameSeriesShareOneDescription) {
  IngestSession a(store_, stats_, clock_);
  IngestSession b(store_, stats_, clock_);
  ASSERT_TRUE(std::holds_alternative<IngestSession::Attached>(a.Attach(HelloFor("a"), 1, [] {})));
  ASSERT_TRUE(std::holds_alternative<IngestSession::Attached>(b.Attach(HelloFor("b"), 2, [] {})));
  DeclareTwo(a);
  DeclareTwo(b);
  std::vector<const collectors::SeriesDesc*> of_a, of_b;
  a.node()->ForEachSeries([&](const store::Series& s) { of_a.push_back(&s.desc.get()); });
  b.node()->ForEachSeries([&](const store::Series& s) { of_b.push_back(&s.desc.get()); });
  ASSERT_EQ(of_a.size(), 2u);
  EXPECT_EQ(of_a, of_b);  // the same objects, not equal copies
  EXPECT_NE(of_a[0], of_a[1]);
  EXPECT_EQ(of_a[1]->labels[0].second, "mlx5_1");
}

// A series beyond a cap leaves the node's other series and its stream alone: it is kept out, its
// values dropped and counted, and the agent is asked to declare it again once there is room.
TEST_F(IngestSessionTest, ASeriesBeyondACapIsLeftOutAndAskedForAgainWhenThereIsRoom) {
  store::StoreOptions options;
  options.max_series_total = 3;
  options.node_retention_nanos = int64_t{60} * 1'000'000'000;
  store::SeriesStore store(options);
  auto first = std::make_unique<IngestSession>(store, stats_, clock_);
  ASSERT_TRUE(
      std::holds_alternative<IngestSession::Attached>(first->Attach(HelloFor("gpu-a"), 1, [] {})));
  DeclareTwo(*first);
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(first->Batch(BatchOf(1, 1, 1))));

  IngestSession second(store, stats_, clock_);
  ASSERT_TRUE(
      std::holds_alternative<IngestSession::Attached>(second.Attach(HelloFor("gpu-b"), 2, [] {})));
  DeclareTwo(second);  // no refusal: mlx5_1 passes the cap of 3
  EXPECT_EQ(stats_.series_unstored.load(), 1);
  auto capped = second.Batch(BatchOf(1, 10, 20));
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(capped));
  EXPECT_TRUE(std::get<IngestSession::BatchResult>(capped).stored);
  EXPECT_EQ(std::get<IngestSession::BatchResult>(capped).samples, 1u);
  EXPECT_TRUE(std::get<IngestSession::BatchResult>(capped).redeclare.empty());  // no room yet
  EXPECT_EQ(stats_.unstored_samples.load(), 1u);
  EXPECT_EQ(LatestValues(*second.node()), (std::vector<uint64_t>{10}));

  // gpu-a leaves and is forgotten: its series free, and the next batch asks for mlx5_1 again,
  // once.
  first->Detach(1);
  first.reset();
  clock_.AdvanceMillis(31'000);
  auto still_capped = second.Batch(BatchOf(2, 1, 1));
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(still_capped));
  EXPECT_TRUE(std::get<IngestSession::BatchResult>(still_capped).redeclare.empty());
  clock_.AdvanceMillis(31'000);  // gpu-a silent past node_retention, gpu-b not
  EXPECT_EQ(store.ForgetSilent(clock_.NowUnixNanos(), clock_.MonotonicNanos()), 1u);
  auto room = second.Batch(BatchOf(3, 1, 1));
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(room));
  EXPECT_EQ(std::get<IngestSession::BatchResult>(room).redeclare, (std::vector<uint32_t>{2}));
  auto asked = second.Batch(BatchOf(4, 1, 1));
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(asked));
  EXPECT_TRUE(std::get<IngestSession::BatchResult>(asked).redeclare.empty());
  EXPECT_EQ(stats_.unstored_samples.load(), 4u);

  v1::SeriesDeclarations again;
  *again.add_series() = wire::ToDeclaration(XmitData("mlx5_1"), 2);
  ASSERT_FALSE(second.Declare(again).has_value());
  EXPECT_EQ(stats_.series_unstored.load(), 0);
  auto stored = second.Batch(BatchOf(5, 1, 1));
  ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(stored));
  EXPECT_EQ(std::get<IngestSession::BatchResult>(stored).samples, 2u);
  EXPECT_EQ(second.node()->GetSummary(false).series, 2u);
}

// The gauge counts connected streams only: a stream that ends takes its unstored series along.
TEST_F(IngestSessionTest, UnstoredSeriesLeaveTheGaugeWithTheirStream) {
  store::StoreOptions options;
  options.max_series_per_node = 1;
  store::SeriesStore store(options);
  {
    IngestSession session(store, stats_, clock_);
    ASSERT_TRUE(std::holds_alternative<IngestSession::Attached>(
        session.Attach(HelloFor("gpu-c"), 1, [] {})));
    DeclareTwo(session);
    EXPECT_EQ(stats_.series_unstored.load(), 1);
    auto batch = session.Batch(BatchOf(1, 3, 4));
    ASSERT_TRUE(std::holds_alternative<IngestSession::BatchResult>(batch));
    // The node's own cap has no room: nothing is asked for again.
    EXPECT_TRUE(std::get<IngestSession::BatchResult>(batch).redeclare.empty());
    EXPECT_EQ(LatestValues(*session.node()), (std::vector<uint64_t>{3}));
  }
  EXPECT_EQ(stats_.series_unstored.load(), 0);
}

}  // namespace
}  // namespace fabricmon::aggregator
