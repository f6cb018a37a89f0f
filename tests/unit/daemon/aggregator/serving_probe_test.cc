// ServingProbe, the aggregator watchdog's question "does the gRPC server still answer?": a
// serving server answers (UNIMPLEMENTED, from its callback threads) without any service seeing
// the call; a call nobody answers leaves the last answer's time where it was. (A server that
// was shut down cannot be probed through its in-process channel: gRPC 1.51 crashes creating the
// call. The aggregator stops probing before it shuts its server down.)

#include "daemon/aggregator/serving_probe.h"

#include <memory>

#include "absl/time/clock.h"
#include "daemon/aggregator/diagnostics_service.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/store/series_store.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace fabricmon::aggregator {
namespace {

class ServingProbeTest : public ::testing::Test {
 protected:
  ServingProbeTest()
      : store_(store::StoreOptions{}),
        // Not plaintext: any call reaching the service would be refused and counted.
        service_(store_, clock_, 30'000'000'000, Authorization::Empty(/*plaintext=*/false),
                 &stats_) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~ServingProbeTest() override {
    if (server_ != nullptr) {
      server_->Shutdown();
    }
  }

  // Waits (bounded) until the probe in flight got its answer or its deadline.
  void AwaitProbe(const ServingProbe& probe) {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (probe.in_flight() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_FALSE(probe.in_flight());
  }

  testing::FakeClock clock_;
  store::SeriesStore store_;
  IngestStats stats_;
  DiagnosticsService service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ServingProbeTest, AServingServerAnswersWithoutTouchingAService) {
  ASSERT_NE(server_, nullptr);
  ServingProbe probe(server_->InProcessChannel(grpc::ChannelArguments()), clock_);
  EXPECT_EQ(probe.last_answer_nanos(), 0);
  for (int i = 0; i < 3; ++i) {
    clock_.AdvanceMillis(1000);
    probe.Probe(absl::Seconds(10));
    AwaitProbe(probe);
    EXPECT_EQ(probe.last_answer_nanos(), clock_.MonotonicNanos()) << i;
  }
  EXPECT_EQ(stats_.diagnostics_not_operator.load(), 0u);
}

TEST_F(ServingProbeTest, NoServerNoAnswer) {
  // Nothing listens on port 1: the call fails (UNAVAILABLE or its deadline), which is no answer.
  ServingProbe probe(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
                     clock_);
  probe.Probe(absl::Milliseconds(500));
  AwaitProbe(probe);
  EXPECT_EQ(probe.last_answer_nanos(), 0);
}

}  // namespace
}  // namespace fabricmon::aggregator
