#include "collectors/ib_fabric/mad_pipeline.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/collectors/ib_fabric/fake_fabric.h"

namespace fabricmon::collectors::ib_fabric {
namespace {

using ::fabricmon::testing::FakeClock;
using ib_fabric_testing::FakeFabric;
using ib_fabric_testing::FakeNode;
using ib_fabric_testing::FakePort;

// `nodes` switches at LIDs 1..nodes with `ports` ports each.
void AddSwitches(FakeFabric& fabric, int nodes, int ports) {
  for (int n = 1; n <= nodes; ++n) {
    FakeNode node;
    node.caps = PmaCapabilities{kCapExtendedWidth | kCapXmitWait, 0};
    for (int p = 1; p <= ports; ++p) {
      FakePort port;
      port.counters[PmaCounter::kXmitWait] = static_cast<uint64_t>(n * 100 + p);
      node.ports[p] = port;
    }
    fabric.nodes[static_cast<uint16_t>(n)] = node;
  }
}

std::vector<MadRequest> CountersOf(int nodes, int ports) {
  std::vector<MadRequest> requests;
  for (int n = 1; n <= nodes; ++n) {
    for (int p = 1; p <= ports; ++p) {
      requests.push_back({static_cast<uint16_t>(n), static_cast<uint8_t>(p), MadKind::kPortCounters,
                          static_cast<uint32_t>(n)});
    }
  }
  return requests;
}

PipelineOptions Options(int window, int per_node, int retries = 2) {
  PipelineOptions options;
  options.window = window;
  options.per_node = per_node;
  options.timeout = absl::Milliseconds(100);
  options.retries = retries;
  return options;
}

TEST(MadPipelineTest, AnswersEveryRequestInOrderOfRequests) {
  FakeClock clock;
  FakeFabric fabric(clock);
  AddSwitches(fabric, 5, 8);
  MadPipeline pipeline(fabric, clock, Options(16, 4));
  const std::vector<MadRequest> requests = CountersOf(5, 8);
  std::vector<MadResult> results;
  PipelineStats stats;
  FABRICMON_ASSERT_OK(pipeline.Run(requests, results, stats));
  ASSERT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_EQ(results[i].outcome, MadOutcome::kOk) << i;
    PortCounterValues values;
    DecodePortCounters(results[i].data.data(), PmaCapabilities{kCapXmitWait | kCapExtendedWidth, 0},
                       values);
    EXPECT_EQ(values.Get(PmaCounter::kXmitWait), requests[i].lid * 100u + requests[i].port);
    EXPECT_EQ(results[i].attempts, 1);
  }
  EXPECT_EQ(stats.sent, 40u);
  EXPECT_EQ(stats.ok, 40u);
  EXPECT_EQ(stats.timeouts + stats.retries + stats.skipped + stats.errors, 0u);
}

TEST(MadPipelineTest, RespectsWindowAndPerNodeCap) {
  FakeClock clock;
  FakeFabric fabric(clock);
  AddSwitches(fabric, 20, 10);
  MadPipeline pipeline(fabric, clock, Options(8, 3));
  std::vector<MadResult> results;
  PipelineStats stats;
  FABRICMON_ASSERT_OK(pipeline.Run(CountersOf(20, 10), results, stats));
  EXPECT_EQ(stats.ok, 200u);
  EXPECT_LE(fabric.max_outstanding, 8u);
  EXPECT_GE(fabric.max_outstanding, 8u) << "the window should fill";
  for (const auto& [lid, max] : fabric.max_outstanding_per_lid) {
    EXPECT_LE(max, 3u) << "lid " << lid;
  }
  // Round-robin: the first requests go to different nodes.
  ASSERT_GE(fabric.log.size(), 3u);
  EXPECT_NE(fabric.log[0].lid, fabric.log[1].lid);
}

TEST(MadPipelineTest, DeadNodeCostsOneTimeoutChainAndOnlyItsRequests) {
  FakeClock clock;
  FakeFabric fabric(clock);
  AddSwitches(fabric, 4, 36);
  fabric.nodes[2].dead = true;
  MadPipeline pipeline(fabric, clock, Options(64, 4, /*retries=*/2));
  const std::vector<MadRequest> requests = CountersOf(4, 36);
  std::vector<MadResult> results;
  PipelineStats stats;
  const int64_t start = clock.MonotonicNanos();
  FABRICMON_ASSERT_OK(pipeline.Run(requests, results, stats));
  size_t timeouts = 0, skipped = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].lid == 2) {
      timeouts += results[i].outcome == MadOutcome::kTimeout;
      skipped += results[i].outcome == MadOutcome::kSkipped;
    } else {
      EXPECT_EQ(results[i].outcome, MadOutcome::kOk) << i;
    }
  }
  // Gated: the dead node had one request in flight, tried 3 times, then the rest was skipped.
  EXPECT_EQ(timeouts, 1u);
  EXPECT_EQ(skipped, 35u);
  EXPECT_EQ(stats.timeouts, 1u);
  EXPECT_EQ(stats.retries, 2u);
  EXPECT_EQ(stats.skipped, 35u);
  size_t sent_to_dead = 0;
  for (const MadRequest& request : fabric.log) {
    sent_to_dead += request.lid == 2;
  }
  EXPECT_EQ(sent_to_dead, 3u);
  // Three attempts of ~100 ms (plus the pipeline's margin), not 36 × 3.
  EXPECT_LT(clock.MonotonicNanos() - start, 400'000'000);
}

TEST(MadPipelineTest, RetriesLostRequests) {
  FakeClock clock;
  FakeFabric fabric(clock);
  AddSwitches(fabric, 2, 4);
  fabric.drop_first[1] = 1;  // every request to LID 1 is lost once
  MadPipeline pipeline(fabric, clock, Options(8, 4, /*retries=*/2));
  std::vector<MadResult> results;
  PipelineStats stats;
  FABRICMON_ASSERT_OK(pipeline.Run(CountersOf(2, 4), results, stats));
  for (const MadResult& result : results) {
    EXPECT_EQ(result.outcome, MadOutcome::kOk);
  }
  EXPECT_EQ(stats.retries, 4u);
  EXPECT_EQ(stats.ok, 8u);
  EXPECT_EQ(stats.timeouts, 0u);
}

TEST(MadPipelineTest, NoRetriesMeansOneAttempt) {
  FakeClock clock;
  FakeFabric fabric(clock);
  AddSwitches(fabric, 1, 2);
  fabric.nodes[1].dead = true;
  PipelineOptions options = Options(8, 4, 0);
  MadPipeline pipeline(fabric, clock, options);
  std::vector<MadResult> results;
  PipelineStats stats;
  FABRICMON_ASSERT_OK(pipeline.Run(CountersOf(1, 2), results, stats));
  EXPECT_EQ(results[0].outcome, MadOutcome::kTimeout);
  EXPECT_EQ(results[0].attempts, 1);
  EXPECT_EQ(results[1].outcome, MadOutcome::kSkipped);
  EXPECT_EQ(stats.retries, 0u);
}

TEST(MadPipelineTest, StatusErrorsAreNotRetried) {
  FakeClock clock;
  FakeFabric fabric(clock);
  AddSwitches(fabric, 1, 2);
  std::vector<MadRequest> requests = CountersOf(1, 2);
  requests.push_back({1, 9, MadKind::kPortCounters, 1});  // no port 9: bad attribute modifier
  MadPipeline pipeline(fabric, clock, Options(8, 4));
  std::vector<MadResult> results;
  PipelineStats stats;
  FABRICMON_ASSERT_OK(pipeline.Run(requests, results, stats));
  EXPECT_EQ(results[2].outcome, MadOutcome::kStatusError);
  EXPECT_EQ(results[2].mad_status, 7 << 2);
  EXPECT_EQ(results[2].attempts, 1);
  EXPECT_EQ(stats.errors, 1u);
  EXPECT_EQ(stats.ok, 2u);
}

TEST(MadPipelineTest, FatalSendErrorStopsTheRun) {
  FakeClock clock;
  FakeFabric fabric(clock);
  AddSwitches(fabric, 1, 2);
  fabric.fail_sends = absl::NotFoundError("umad_send: No such device");
  MadPipeline pipeline(fabric, clock, Options(8, 4));
  std::vector<MadResult> results;
  PipelineStats stats;
  EXPECT_THAT(pipeline.Run(CountersOf(1, 2), results, stats),
              fabricmon::testing::StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(results[0].outcome, MadOutcome::kSendError);
}

TEST(MadPipelineTest, EmptyRunIsOk) {
  FakeClock clock;
  FakeFabric fabric(clock);
  MadPipeline pipeline(fabric, clock, Options(8, 4));
  std::vector<MadResult> results;
  PipelineStats stats;
  FABRICMON_EXPECT_OK(pipeline.Run({}, results, stats));
  EXPECT_TRUE(results.empty());
}

}  // namespace
}  // namespace fabricmon::collectors::ib_fabric
