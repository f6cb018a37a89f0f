// DiagnosticsService.GetTopology over a real (in-process) gRPC server: the provider's answer
// reaches the client unchanged, and without a provider the RPC says UNIMPLEMENTED instead of
// answering with an empty fabric.

#include "daemon/aggregator/diagnostics_service.h"

#include <future>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace fabricmon::aggregator {
namespace {

class FixedTopology final : public detectors::TopologyProvider {
 public:
  explicit FixedTopology(v1::GetTopologyResponse answer) : answer_(std::move(answer)) {}
  v1::GetTopologyResponse GetTopology() const override { return answer_; }

 private:
  v1::GetTopologyResponse answer_;
};

v1::GetTopologyResponse OneCable() {
  v1::GetTopologyResponse response;
  v1::TopologyLink* link = response.add_links();
  link->mutable_a()->set_node("node017");
  link->mutable_a()->set_device("mlx5_0");
  link->mutable_a()->set_port(1);
  link->mutable_a()->set_guid("0x0002c90300a1b2c3");
  link->mutable_b()->set_node("leaf01");
  link->mutable_b()->set_port(17);
  link->mutable_b()->set_is_switch(true);
  link->set_source(v1::LINK_SOURCE_FABRIC_COLLECTOR);
  response.set_switches(1);
  response.set_hosts(1);
  response.set_resolved_unix_nanos(1'700'000'000'000'000'000);
  return response;
}

class DiagnosticsServiceTest : public ::testing::Test {
 protected:
  DiagnosticsServiceTest()
      : store_(store::StoreOptions{}),
        service_(store_, clock_, 30'000'000'000, Authorization::Empty(/*plaintext=*/true)) {}

  void StartServer() {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Diagnostics::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  ~DiagnosticsServiceTest() override {
    if (server_ != nullptr) {
      server_->Shutdown();
    }
  }

  grpc::Status GetTopology(v1::GetTopologyResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->GetTopology(&context, v1::GetTopologyRequest(), response);
  }

  fabricmon::testing::FakeClock clock_;
  store::SeriesStore store_;
  DiagnosticsService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Diagnostics::Stub> stub_;
};

TEST_F(DiagnosticsServiceTest, GetTopologyAnswersWithTheProvidersLinks) {
  const FixedTopology topology(OneCable());
  service_.SetTopologyProvider(&topology);
  StartServer();
  v1::GetTopologyResponse response;
  grpc::Status status = GetTopology(&response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(response, OneCable()))
      << response.DebugString();
}

TEST_F(DiagnosticsServiceTest, GetTopologyWithoutDetectorsIsUnimplemented) {
  StartServer();
  v1::GetTopologyResponse response;
  grpc::Status status = GetTopology(&response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(status.error_message().find("without detectors"), std::string::npos)
      << status.error_message();
}

// Calls every method the Diagnostics service declares (read from its descriptor, so an RPC added
// later is covered without touching this test) with an empty request over a channel without a
// certificate, and returns each one's status code by method name.
std::map<std::string, grpc::StatusCode> CallEveryMethod(DiagnosticsService& service) {
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr);
  std::map<std::string, grpc::StatusCode> codes;
  if (server == nullptr) {
    return codes;
  }
  grpc::GenericStub stub(server->InProcessChannel(grpc::ChannelArguments()));
  const google::protobuf::ServiceDescriptor* descriptor =
      v1::ListNodesRequest::descriptor()->file()->pool()->FindServiceByName(
          "fabricmon.v1.Diagnostics");
  EXPECT_NE(descriptor, nullptr);
  for (int i = 0; descriptor != nullptr && i < descriptor->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* method = descriptor->method(i);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1);
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, absl::StrCat("/fabricmon.v1.Diagnostics/", method->name()),
                   grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status status) { done.set_value(std::move(status)); });
    codes[method->name()] = done.get_future().get().error_code();
  }
  server->Shutdown();
  return codes;
}

// Mutual TLS mode (not plaintext): a caller that is no operator — here one without any
// certificate — is refused by every method, before the method looks at its request.
TEST(DiagnosticsAuthorizationTest, EveryMethodRefusesANonOperator) {
  fabricmon::testing::FakeClock clock;
  store::SeriesStore store{store::StoreOptions{}};
  v1::AuthorizationConfig config;
  config.add_operators("fabricmon-operator");
  auto authorization = Authorization::Create(config, /*plaintext=*/false);
  ASSERT_TRUE(authorization.ok()) << authorization.status();
  IngestStats stats;
  DiagnosticsService service(store, clock, 30'000'000'000, *authorization, &stats);
  const FixedTopology topology(OneCable());
  service.SetTopologyProvider(&topology);
  const std::map<std::string, grpc::StatusCode> codes = CallEveryMethod(service);
  EXPECT_GE(codes.size(), 5u);
  for (const auto& [method, code] : codes) {
    EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED) << method;
  }
  EXPECT_EQ(stats.diagnostics_not_operator.load(), codes.size());
}

// The same calls in plaintext reach the methods (whatever they answer, it is not a refusal):
// the refusals above come from the role check.
TEST(DiagnosticsAuthorizationTest, PlaintextLetsEveryMethodThrough) {
  fabricmon::testing::FakeClock clock;
  store::SeriesStore store{store::StoreOptions{}};
  DiagnosticsService service(store, clock, 30'000'000'000,
                             Authorization::Empty(/*plaintext=*/true));
  const std::map<std::string, grpc::StatusCode> codes = CallEveryMethod(service);
  EXPECT_GE(codes.size(), 5u);
  for (const auto& [method, code] : codes) {
    EXPECT_NE(code, grpc::StatusCode::PERMISSION_DENIED) << method;
  }
}

}  // namespace
}  // namespace fabricmon::aggregator
