// A quiet stream outlives the client's keepalive pings. Agents ping every 20 s (to notice a dead
// aggregator behind a silent network); with a long collection interval their stream carries no
// data between those pings, and gRPC's default server policy (a data-less ping every 5 min at
// most, 2 strikes) answered the third with GOAWAY too_many_pings, cutting the stream about once a
// minute. The aggregator's gRPC server (AggregatorServer::Start, as fabricmon-aggregator starts
// it, over loopback TCP) permits a ping every 10 s. Here a client pings every 10 s, stores a
// batch, stays quiet for 45 s, and its next batch must be acknowledged on the same stream: no
// GOAWAY, no reconnect. Under gRPC's default policy the pings at 20, 30 and 40 s after the ack
// are three strikes and the last is answered with GOAWAY too_many_pings (checked: with the two
// channel arguments taken out this test fails so, at about 40 s).
//
// The 45 s are the point of the test (the quiet time the server policy reacts to), so it sleeps
// for a duration rather than waiting for a state.

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/aggregator/aggregator_server.h"
#include "daemon/common/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/stream_harness.h"

namespace fabricmon::testing {
namespace {

// Reads until the ack of `sequence`; fails on a Reject or the end of the stream.
void ReadUntilAck(RawStream& raw, uint64_t sequence) {
  for (;;) {
    std::optional<v1::AggregatorMessage> message = raw.Read();
    ASSERT_TRUE(message.has_value()) << "stream ended before the ack of " << sequence;
    ASSERT_FALSE(message->has_reject()) << message->reject().message();
    if (message->has_ack() && message->ack().sequence() >= sequence) {
      return;
    }
  }
}

TEST(KeepaliveTest, AQuietStreamOutlivesKeepalivePingsEveryTenSeconds) {
  AggregatorOptions options;
  // The node must not be judged stale while it is quiet: that is not what this test is about.
  options.stale_after_nanos = int64_t{300} * 1000000000;
  aggregator::AggregatorSettings settings = SettingsFor(options);
  settings.grpc_listen = "127.0.0.1:0";
  settings.metrics_listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<aggregator::AggregatorServer>> server =
      aggregator::AggregatorServer::Create(std::move(settings), RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Status started = (*server)->Start();
  ASSERT_TRUE(started.ok()) << started;

  // The agent's keepalive (agent_daemon.cc), at the 10 s the server permits. And it goes on
  // pinging while the stream is quiet: this gRPC's client stops after two data-less pings by
  // default, but that is the client's choice (other clients and versions do not), and the
  // server must stand a ping every 10 s however long the quiet lasts.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  const std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", (*server)->grpc_port()), grpc::InsecureChannelCredentials(), args);

  RawStream raw(channel, absl::Seconds(90));  // outlives the quiet time
  ASSERT_TRUE(raw.Write(HelloMessage("quiet-node", "boot-q", 0x51)));
  ASSERT_TRUE(raw.Write(CounterDeclarations(1, 2)));
  ASSERT_TRUE(raw.Write(LayoutMessage(1, {1, 2})));
  ASSERT_TRUE(raw.Write(BatchMessage(1, RealClock::Get().NowUnixNanos(), 1, {100, 200})));
  ReadUntilAck(raw, 1);

  absl::SleepFor(absl::Seconds(45));

  ASSERT_TRUE(raw.Write(BatchMessage(2, RealClock::Get().NowUnixNanos(), 1, {5, 7})))
      << "the stream ended while it was quiet";
  ReadUntilAck(raw, 2);
  EXPECT_EQ((*server)->stats().streams_opened.load(), 1u) << "the client reconnected";
  EXPECT_EQ((*server)->stats().batches.load(), 2u);
  const RawStream::End end = raw.Finish();
  EXPECT_TRUE(end.status.ok()) << end.status.error_code() << " " << end.status.error_message();
  (*server)->Shutdown();
}

}  // namespace
}  // namespace fabricmon::testing
