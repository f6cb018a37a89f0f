// Mutual TLS end to end: the real fabricmon-aggregator on 127.0.0.1 with certificates made by
// openssl at test time, and as clients gRPC stubs with SslCredentials, the real fabricmon-agent and
// the fabricmon CLI. Checked: a valid certificate is accepted; a certificate of another CA, an
// expired one, none at all and plaintext are refused in the handshake (the stream never reaches
// the aggregator's code: no stream is opened, and the refusal is counted by reason in
// fabricmon_aggregator_rejected_handshakes_total); a hello naming another node than the certificate
// is refused with REASON_IDENTITY_MISMATCH / PERMISSION_DENIED and counted under
// reason="identity_mismatch", and cannot take over that node's stream; and the daemons refuse to
// start without TLS unless plaintext is asked for. Roles: only operators call Diagnostics, an
// operator cannot stream, only a fabric sweeper's switch topology is used, and the CLI explains a
// missing or refused certificate. After every refusal the aggregator still serves a valid client.

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"
#include "fabricmon/v1/telemetry.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/security/cert_factory.h"
#include "tests/security/daemon_process.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kMismatch[] =
    "fabricmon_aggregator_rejected_messages_total{reason=\"identity_mismatch\"}";

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The outcome of one telemetry stream: the first answer and the final status.
struct StreamOutcome {
  std::optional<v1::AggregatorMessage> first;
  grpc::Status status;
};

class MtlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tree_.root();
    CertFactory factory(dir_);
    auto ca = factory.MakeCa("ca", "fabricmon test CA");
    auto other_ca = factory.MakeCa("other-ca", "someone else's CA");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ASSERT_TRUE(other_ca.ok()) << other_ca.status();
    ca_ = *ca;
    other_ca_ = *other_ca;
    auto issue = [&](const CertFiles& by, const std::string& name, const std::string& cn,
                     std::vector<std::string> sans, int days = 30) {
      absl::StatusOr<CertFiles> files = factory.Issue(by, name, cn, sans, days);
      EXPECT_TRUE(files.ok()) << files.status();
      return files.ok() ? *files : CertFiles();
    };
    server_ = issue(ca_, "aggregator", "fabricmon-aggregator", {"DNS:localhost", "IP:127.0.0.1"});
    node_a_ = issue(ca_, "node-a", "node-a", {"DNS:node-a", "DNS:node-a.cluster.test"});
    node_b_ = issue(ca_, "node-b", "node-b", {"DNS:node-b"});
    cn_only_ = issue(ca_, "cn-only", "node-cn", {});
    ip_only_ = issue(ca_, "ip-only", "", {"IP:10.1.2.3"});
    expired_ = issue(ca_, "expired", "node-a", {"DNS:node-a"}, -1);
    rogue_ = issue(other_ca_, "rogue", "node-a", {"DNS:node-a"});
    other_server_ = issue(other_ca_, "other-aggregator", "x", {"IP:127.0.0.1"});
    cli_ = issue(ca_, "operator", "fabricmon-cli", {"DNS:fabricmon-cli"});
    ASSERT_FALSE(HasFailure());
  }

  // Starts the aggregator with `tls_text` (a config holding a tls { } block, or "") plus `extra`
  // flags. Returns false if it did not come up (a test failure with its log if `expect_up`).
  bool StartAggregator(const std::string& tls_text, std::vector<std::string> extra = {},
                       bool expect_up = true) {
    const std::string config = dir_ + "/aggregator.textproto";
    std::ofstream(config) << tls_text;
    std::vector<std::string> argv = AggregatorArgv(config, dir_ + "/port");
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (!aggregator_.Start(argv, dir_ + "/aggregator.log")) {
      ADD_FAILURE() << "cannot start " << argv[0];
      return false;
    }
    const AggregatorPorts ports =
        WaitForAggregatorPorts(dir_ + "/port", aggregator_, absl::Seconds(20));
    grpc_port_ = ports.grpc;
    metrics_port_ = ports.metrics;
    if (!ports.up()) {
      if (expect_up) {
        ADD_FAILURE() << "aggregator did not listen; log:\n" << aggregator_.Log();
      }
      return false;
    }
    // /metrics is up once it answers.
    return WaitUntil([&] { return HttpGet(metrics_port_, "/metrics").ok(); }, absl::Seconds(20));
  }

  // Mutual TLS; the CLI's certificate (CN and DNS fabricmon-cli) is the operator, plus `roles`
  // (more fields of the authorization block).
  bool StartMtlsAggregator(const std::string& roles = "") {
    return StartAggregator(absl::StrCat(
        "tls { ca_file: \"", ca_.cert, "\" cert_file: \"", server_.cert, "\" key_file: \"",
        server_.key, "\" }\n", "authorization { operators: \"fabricmon-cli\" ", roles, " }\n"));
  }

  // ListNodes through a Diagnostics stub with `client`'s certificate.
  grpc::Status ListNodes(const CertFiles& client, v1::ListNodesResponse* response) {
    auto stub = v1::Diagnostics::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_), Ssl(client)));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub->ListNodes(&context, v1::ListNodesRequest(), response);
  }

  std::string Metrics() {
    absl::StatusOr<std::string> text = HttpGet(metrics_port_, "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }
  double Metric(const std::string& series) { return SampleValue(Metrics(), series).value_or(-1); }
  double RejectedTotal() {
    double total = 0;
    for (const char* reason :
         {"before_hello", "malformed", "unknown_series", "unknown_layout", "duplicate_node",
          "series_limit", "invalid_declaration", "identity_mismatch", "protocol"}) {
      total += SampleValue(Metrics(), absl::StrCat("fabricmon_aggregator_rejected_messages_total"
                                                   "{reason=\"",
                                                   reason, "\"}"))
                   .value_or(0);
    }
    return total;
  }

  std::shared_ptr<grpc::ChannelCredentials> Ssl(const CertFiles& client, const CertFiles& trust) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ReadFileOrEmpty(trust.cert);
    if (!client.cert.empty()) {
      options.pem_cert_chain = ReadFileOrEmpty(client.cert);
      options.pem_private_key = ReadFileOrEmpty(client.key);
    }
    return grpc::SslCredentials(options);
  }
  std::shared_ptr<grpc::ChannelCredentials> Ssl(const CertFiles& client) {
    return Ssl(client, ca_);
  }

  // Opens a telemetry stream, says hello as `node`, and returns the first answer and the status.
  // With `keep`, the stream is left open (in `open_`) when the hello was acknowledged.
  StreamOutcome Hello(std::shared_ptr<grpc::ChannelCredentials> credentials,
                      const std::string& node, bool keep = false, uint64_t instance = 1,
                      const v1::Inventory& inventory = {}) {
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_), std::move(credentials));
    auto open = std::make_unique<OpenStream>();
    open->stub = v1::Telemetry::NewStub(channel);
    open->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    open->stream = open->stub->Stream(&open->context);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node_name(node);
    hello.mutable_hello()->set_boot_id("boot-1");
    hello.mutable_hello()->set_agent_instance_id(instance);
    hello.mutable_hello()->set_protocol_revision(v1::PROTOCOL_REVISION_1);
    *hello.mutable_hello()->mutable_inventory() = inventory;
    StreamOutcome outcome;
    if (open->stream->Write(hello)) {
      v1::AggregatorMessage reply;
      if (open->stream->Read(&reply)) {
        outcome.first = reply;
      }
    }
    if (keep && outcome.first.has_value() && outcome.first->has_hello_ack()) {
      open_.push_back(std::move(open));
      return outcome;
    }
    open->stream->WritesDone();
    v1::AggregatorMessage rest;
    while (open->stream->Read(&rest)) {
    }
    outcome.status = open->stream->Finish();
    return outcome;
  }

  // The valid client still gets through (the aggregator survived whatever came before).
  void ExpectValidClientAccepted() {
    const StreamOutcome outcome = Hello(Ssl(node_a_), "node-a");
    ASSERT_TRUE(outcome.first.has_value()) << outcome.status.error_message();
    EXPECT_TRUE(outcome.first->has_hello_ack()) << outcome.first->ShortDebugString();
    EXPECT_TRUE(aggregator_.running());
  }

  // The refused handshake is counted under `reason` (gRPC may retry the connection in the
  // background, each retry a refused handshake too: at least one), and under no other reason.
  void ExpectHandshakeCounted(const std::string& reason) {
    auto count = [&](const std::string& r) {
      return SampleValue(Metrics(), absl::StrCat("fabricmon_aggregator_rejected_handshakes_total"
                                                 "{reason=\"",
                                                 r, "\"}"))
          .value_or(-1);
    };
    EXPECT_TRUE(WaitUntil([&] { return count(reason) >= 1; }, absl::Seconds(20)))
        << reason << "; aggregator log:\n"
        << aggregator_.Log();
    for (const char* other :
         {"no_client_certificate", "certificate_not_verified", "not_tls", "other"}) {
      if (other != reason) {
        EXPECT_EQ(count(other), 0) << other;
      }
    }
  }

  void ExpectRefusedInHandshake(const StreamOutcome& outcome) {
    EXPECT_FALSE(outcome.first.has_value()) << outcome.first->ShortDebugString();
    EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << outcome.status.error_message();
    EXPECT_EQ(RejectedTotal(), 0) << "a refused handshake never reaches the stream";
    EXPECT_EQ(Metric("fabricmon_aggregator_streams_opened_total"), 0);
  }

  std::vector<std::string> AgentArgs(const std::string& node, const CertFiles& cert) {
    const std::string config = dir_ + "/agent-" + node + ".textproto";
    std::ofstream(config) << "tls { ca_file: \"" << ca_.cert << "\" cert_file: \"" << cert.cert
                          << "\" key_file: \"" << cert.key << "\" }\n"
                          << "reconnect_initial_backoff_ms: 100\nreconnect_max_backoff_ms: 500\n"
                          << "collectors {\n  ib_sysfs { interval_ms: 500 }\n"
                          << "  ethtool { enabled: false }\n  netdev { enabled: false }\n"
                          << "  nvml { enabled: false }\n  ib_fabric { enabled: false }\n}\n";
    return {BuildPath("daemon/agent/fabricmon-agent"),
            "--config=" + config,
            "--sysfs_root=" + SharedFixture("sysfs/gpud-h100/sys"),
            absl::StrCat("--aggregator=127.0.0.1:", grpc_port_),
            "--node_name=" + node,
            "--log_level=info"};
  }

  std::vector<std::string> Cli(std::vector<std::string> flags) {
    std::vector<std::string> argv = {BuildPath("daemon/cli/fabricmon"),
                                     absl::StrCat("--aggregator=127.0.0.1:", grpc_port_),
                                     "--timeout_s=5"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }

  struct OpenStream {
    std::unique_ptr<v1::Telemetry::Stub> stub;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::AggregatorMessage>> stream;
  };

  TempTree tree_;
  std::string dir_;
  CertFiles ca_, other_ca_, server_, node_a_, node_b_, cn_only_, ip_only_, expired_, rogue_,
      other_server_, cli_;
  DaemonProcess aggregator_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::vector<std::unique_ptr<OpenStream>> open_;
};

TEST_F(MtlsTest, ValidCertificateIsAcceptedAndStreams) {
  ASSERT_TRUE(StartMtlsAggregator());
  EXPECT_THAT(aggregator_.Log(), HasSubstr("mutual TLS"));
  const StreamOutcome outcome = Hello(Ssl(node_a_), "node-a", /*keep=*/true);
  ASSERT_TRUE(outcome.first.has_value()) << outcome.status.error_message();
  ASSERT_TRUE(outcome.first->has_hello_ack()) << outcome.first->ShortDebugString();
  // Every DNS SAN is an identity of the certificate.
  const StreamOutcome alias = Hello(Ssl(node_a_), "node-a.cluster.test");
  ASSERT_TRUE(alias.first.has_value());
  EXPECT_TRUE(alias.first->has_hello_ack());
  EXPECT_EQ(Metric("fabricmon_node_up{node=\"node-a\"}"), 1);
  EXPECT_EQ(Metric(kMismatch), 0);
}

TEST_F(MtlsTest, CommonNameOnlyCertificateIsAccepted) {
  ASSERT_TRUE(StartMtlsAggregator());
  const StreamOutcome outcome = Hello(Ssl(cn_only_), "node-cn");
  ASSERT_TRUE(outcome.first.has_value()) << outcome.status.error_message();
  EXPECT_TRUE(outcome.first->has_hello_ack());
}

TEST_F(MtlsTest, NameMismatchIsRejectedAndCounted) {
  ASSERT_TRUE(StartMtlsAggregator());
  const StreamOutcome outcome = Hello(Ssl(node_b_), "node-a");
  ASSERT_TRUE(outcome.first.has_value()) << outcome.status.error_message();
  ASSERT_TRUE(outcome.first->has_reject()) << outcome.first->ShortDebugString();
  EXPECT_EQ(outcome.first->reject().reason(), v1::Reject::REASON_IDENTITY_MISMATCH);
  EXPECT_THAT(outcome.first->reject().message(), HasSubstr("DNS:node-b"));
  EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Metric(kMismatch), 1);
  EXPECT_FALSE(SampleValue(Metrics(), "fabricmon_node_up{node=\"node-a\"}").has_value())
      << "a refused hello must not create the node";
  // A certificate whose only SAN is an IP address names no node.
  const StreamOutcome ip = Hello(Ssl(ip_only_), "10.1.2.3");
  ASSERT_TRUE(ip.first.has_value());
  EXPECT_EQ(ip.first->reject().reason(), v1::Reject::REASON_IDENTITY_MISMATCH);
  EXPECT_EQ(Metric(kMismatch), 2);
  ExpectValidClientAccepted();
}

TEST_F(MtlsTest, MismatchCannotTakeOverAnotherNodesStream) {
  ASSERT_TRUE(StartMtlsAggregator());
  ASSERT_TRUE(Hello(Ssl(node_a_), "node-a", /*keep=*/true).first.has_value());
  ASSERT_EQ(open_.size(), 1u);
  // node-b's certificate, node-a's name and instance id (a takeover would cancel node-a).
  const StreamOutcome outcome = Hello(Ssl(node_b_), "node-a", false, /*instance=*/1);
  ASSERT_TRUE(outcome.first.has_value());
  EXPECT_EQ(outcome.first->reject().reason(), v1::Reject::REASON_IDENTITY_MISMATCH);
  // node-a's stream is untouched: it still takes a batch and acknowledges it.
  v1::AgentMessage declarations;
  v1::SeriesDeclaration* series = declarations.mutable_declarations()->add_series();
  series->set_id(1);
  series->set_name("fabricmon_test_total");
  series->set_type(v1::METRIC_TYPE_COUNTER);
  series->set_width_bits(64);
  series->set_help("A test counter.");
  v1::AgentMessage layouts;
  v1::Layout* layout = layouts.mutable_layouts()->add_layouts();
  layout->set_id(1);
  layout->add_series_ids(1);
  v1::AgentMessage batch;
  batch.mutable_batch()->set_sequence(1);
  batch.mutable_batch()->set_layout_id(1);
  batch.mutable_batch()->set_timestamp_unix_nanos(absl::ToUnixNanos(absl::Now()));
  batch.mutable_batch()->add_value_deltas(42);
  auto& stream = *open_[0]->stream;
  ASSERT_TRUE(stream.Write(declarations));
  ASSERT_TRUE(stream.Write(layouts));
  ASSERT_TRUE(stream.Write(batch));
  v1::AggregatorMessage reply;
  ASSERT_TRUE(stream.Read(&reply)) << "node-a's stream was ended";
  EXPECT_EQ(reply.ack().sequence(), 1u) << reply.ShortDebugString();
  EXPECT_EQ(Metric("fabricmon_node_up{node=\"node-a\"}"), 1);
}

TEST_F(MtlsTest, CertificateFromAnotherCaIsRefusedInTheHandshake) {
  ASSERT_TRUE(StartMtlsAggregator());
  ExpectRefusedInHandshake(Hello(Ssl(rogue_), "node-a"));
  ExpectHandshakeCounted("certificate_not_verified");
  ExpectValidClientAccepted();
}

TEST_F(MtlsTest, ExpiredCertificateIsRefusedInTheHandshake) {
  ASSERT_TRUE(StartMtlsAggregator());
  ExpectRefusedInHandshake(Hello(Ssl(expired_), "node-a"));
  ExpectHandshakeCounted("certificate_not_verified");
  ExpectValidClientAccepted();
}

TEST_F(MtlsTest, ClientWithoutCertificateIsRefused) {
  ASSERT_TRUE(StartMtlsAggregator());
  ExpectRefusedInHandshake(Hello(Ssl(CertFiles()), "node-a"));
  ExpectHandshakeCounted("no_client_certificate");
  ExpectValidClientAccepted();
}

TEST_F(MtlsTest, PlaintextClientIsRefused) {
  ASSERT_TRUE(StartMtlsAggregator());
  ExpectRefusedInHandshake(Hello(grpc::InsecureChannelCredentials(), "node-a"));
  ExpectHandshakeCounted("not_tls");
  ExpectValidClientAccepted();
}

TEST_F(MtlsTest, ClientRefusesAnAggregatorItCannotVerify) {
  ASSERT_TRUE(StartMtlsAggregator());
  // The agent trusts only another CA: the aggregator's certificate fails the agent's check.
  const StreamOutcome outcome = Hello(Ssl(node_a_, other_ca_), "node-a");
  EXPECT_FALSE(outcome.first.has_value());
  EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  ExpectValidClientAccepted();
}

TEST_F(MtlsTest, RealAgentStreamsAndTheCliReadsOverTls) {
  ASSERT_TRUE(StartMtlsAggregator());
  DaemonProcess agent;
  ASSERT_TRUE(agent.Start(AgentArgs("node-a", node_a_), dir_ + "/agent.log"));
  const bool up = WaitUntil(
      [&] {
        return Metric("fabricmon_node_up{node=\"node-a\"}") == 1 &&
               Metric("fabricmon_aggregator_batches_total") >= 2;
      },
      absl::Seconds(30));
  ASSERT_TRUE(up) << "agent log:\n" << agent.Log() << "\naggregator log:\n" << aggregator_.Log();
  EXPECT_THAT(agent.Log(), HasSubstr("mutual TLS"));
  EXPECT_EQ(RejectedTotal(), 0);

  // The CLI with a client certificate sees the node ...
  CommandResult listed = RunCommand(
      Cli({"--tls_ca=" + ca_.cert, "--tls_cert=" + cli_.cert, "--tls_key=" + cli_.key, "nodes"}),
      absl::Seconds(20));
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("node-a"));
  // ... through a name override when dialling an address the certificate does not name ...
  CommandResult renamed =
      RunCommand(Cli({"--tls_ca=" + ca_.cert, "--tls_cert=" + cli_.cert, "--tls_key=" + cli_.key,
                      "--tls_server_name=localhost", "nodes"}),
                 absl::Seconds(20));
  EXPECT_EQ(renamed.exit_code, 0) << renamed.output;
  // ... and without one, or in plaintext, gets nothing (exit 1: the RPC failed).
  CommandResult anonymous = RunCommand(Cli({"--tls_ca=" + ca_.cert, "nodes"}), absl::Seconds(20));
  EXPECT_EQ(anonymous.exit_code, 1) << anonymous.output;
  EXPECT_THAT(anonymous.output, Not(HasSubstr("node-a ")));
  CommandResult plaintext = RunCommand(Cli({"nodes"}), absl::Seconds(20));
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.output;
  CommandResult half = RunCommand(Cli({"--tls_ca=" + ca_.cert, "--tls_cert=" + cli_.cert, "nodes"}),
                                  absl::Seconds(20));
  EXPECT_EQ(half.exit_code, 2) << half.output;
  EXPECT_THAT(half.output, HasSubstr("key_file"));
}

TEST_F(MtlsTest, RealAgentClaimingAnotherNameIsRejected) {
  ASSERT_TRUE(StartMtlsAggregator());
  DaemonProcess agent;
  ASSERT_TRUE(agent.Start(AgentArgs("node-b", node_a_), dir_ + "/agent.log"));
  ASSERT_TRUE(WaitUntil([&] { return Metric(kMismatch) >= 1; }, absl::Seconds(30)))
      << "agent log:\n"
      << agent.Log() << "\naggregator log:\n"
      << aggregator_.Log();
  EXPECT_FALSE(SampleValue(Metrics(), "fabricmon_node_up{node=\"node-b\"}").has_value());
  EXPECT_TRUE(agent.running()) << "the agent keeps retrying (with backoff), it does not exit";
  EXPECT_THAT(aggregator_.Log(), HasSubstr("does not match the client certificate"));
}

// Roles (authorization { operators fabric_sweepers }).

TEST_F(MtlsTest, AnAgentCertificateCannotCallDiagnostics) {
  ASSERT_TRUE(StartMtlsAggregator());
  v1::ListNodesResponse response;
  grpc::Status status = ListNodes(node_a_, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("DNS:node-a"));
  EXPECT_THAT(status.error_message(), HasSubstr("authorization.operators"));
  // The aggregator's own certificate is no operator either.
  status = ListNodes(server_, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_EQ(response.nodes_size(), 0);
  EXPECT_EQ(Metric("fabricmon_aggregator_rejected_calls_total{reason=\"not_an_operator\"}"), 2);
  // The operator reads.
  status = ListNodes(cli_, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Metric("fabricmon_aggregator_rejected_calls_total{reason=\"not_an_operator\"}"), 2);
}

TEST_F(MtlsTest, WithoutOperatorsNobodyCallsDiagnostics) {
  ASSERT_TRUE(
      StartAggregator(absl::StrCat("tls { ca_file: \"", ca_.cert, "\" cert_file: \"", server_.cert,
                                   "\" key_file: \"", server_.key, "\" }\n")));
  v1::ListNodesResponse response;
  grpc::Status status = ListNodes(cli_, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("none configured"));
  EXPECT_THAT(aggregator_.Log(), HasSubstr("authorization.operators is empty"));
}

TEST_F(MtlsTest, AnOperatorCertificateCannotStream) {
  ASSERT_TRUE(StartMtlsAggregator());
  const StreamOutcome outcome = Hello(Ssl(cli_), "fabricmon-cli");
  ASSERT_TRUE(outcome.first.has_value()) << outcome.status.error_message();
  ASSERT_TRUE(outcome.first->has_reject()) << outcome.first->ShortDebugString();
  EXPECT_EQ(outcome.first->reject().reason(), v1::Reject::REASON_FORBIDDEN);
  EXPECT_THAT(outcome.first->reject().message(), HasSubstr("operator"));
  EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Metric("fabricmon_aggregator_rejected_messages_total{reason=\"role_forbidden\"}"), 1);
  EXPECT_FALSE(SampleValue(Metrics(), "fabricmon_node_up{node=\"fabricmon-cli\"}").has_value());
  ExpectValidClientAccepted();
}

// Switch topology only from a fabric sweeper: node-a's is dropped (its hello still accepted, the
// rest of its inventory kept), node-b's is used.
TEST_F(MtlsTest, OnlyAFabricSweepersSwitchTopologyIsUsed) {
  ASSERT_TRUE(StartMtlsAggregator("fabric_sweepers: \"node-b\""));
  auto sweep = [](uint32_t leaf_port) {
    v1::Inventory inventory;
    inventory.add_rdma_devices()->set_name("mlx5_0");
    v1::FabricNode* sw = inventory.add_fabric_nodes();
    sw->set_guid("0x0000000000000100");
    sw->set_type(v1::FabricNode::TYPE_SWITCH);
    sw->set_description("leaf01");
    v1::FabricNode* sw2 = inventory.add_fabric_nodes();
    sw2->set_guid("0x0000000000000200");
    sw2->set_type(v1::FabricNode::TYPE_SWITCH);
    sw2->set_description("spine01");
    v1::FabricLink* link = inventory.add_fabric_links();
    link->set_a_guid("0x0000000000000100");
    link->set_a_port(leaf_port);
    link->set_b_guid("0x0000000000000200");
    link->set_b_port(1);
    return inventory;
  };
  const StreamOutcome forged = Hello(Ssl(node_a_), "node-a", /*keep=*/true, 1, sweep(40));
  ASSERT_TRUE(forged.first.has_value() && forged.first->has_hello_ack());
  const StreamOutcome swept = Hello(Ssl(node_b_), "node-b", /*keep=*/true, 1, sweep(49));
  ASSERT_TRUE(swept.first.has_value() && swept.first->has_hello_ack());
  EXPECT_EQ(Metric("fabricmon_aggregator_inventory_refused_total{reason=\"not_a_fabric_sweeper\"}"),
            1);
  EXPECT_THAT(aggregator_.Log(), HasSubstr("not a fabric sweeper"));

  auto stub = v1::Diagnostics::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port_), Ssl(cli_)));
  v1::GetTopologyResponse topology;
  bool only_the_sweepers = WaitUntil(
      [&] {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        topology.Clear();
        return stub->GetTopology(&context, v1::GetTopologyRequest(), &topology).ok() &&
               topology.links_size() == 1;
      },
      absl::Seconds(20));
  ASSERT_TRUE(only_the_sweepers) << topology.DebugString();
  EXPECT_EQ(topology.links(0).a().node(), "leaf01");
  EXPECT_EQ(topology.links(0).a().port(), 49u);
  // node-a's inventory (without its switch topology) is still there.
  grpc::ClientContext context;
  v1::GetNodeRequest request;
  request.set_name("node-a");
  v1::NodeView view;
  ASSERT_TRUE(stub->GetNode(&context, request, &view).ok());
  EXPECT_EQ(view.inventory().rdma_devices_size(), 1);
  EXPECT_EQ(view.inventory().fabric_links_size(), 0);
}

// node-b claims node-a's HCA GUID: a conflict, never a silent override, reported by the metric,
// the log and `fabricmon topology`.
TEST_F(MtlsTest, AGuidClaimedByTwoNodesIsReported) {
  ASSERT_TRUE(StartMtlsAggregator());
  v1::Inventory hca;
  v1::RdmaDevice* device = hca.add_rdma_devices();
  device->set_name("mlx5_0");
  device->set_node_guid("0002:c903:00a1:b2c3");
  ASSERT_TRUE(Hello(Ssl(node_a_), "node-a", /*keep=*/true, 1, hca)
                  .first.value_or(v1::AggregatorMessage())
                  .has_hello_ack());
  ASSERT_TRUE(Hello(Ssl(node_b_), "node-b", /*keep=*/true, 1, hca)
                  .first.value_or(v1::AggregatorMessage())
                  .has_hello_ack());
  ASSERT_TRUE(WaitUntil([&] { return Metric("fabricmon_topology_guid_conflicts") == 1; },
                        absl::Seconds(20)))
      << aggregator_.Log();
  EXPECT_THAT(aggregator_.Log(), HasSubstr("HCA GUID 0x0002c90300a1b2c3 is claimed by 2 nodes"));
  CommandResult topology = RunCommand(
      Cli({"--tls_ca=" + ca_.cert, "--tls_cert=" + cli_.cert, "--tls_key=" + cli_.key, "topology"}),
      absl::Seconds(20));
  EXPECT_EQ(topology.exit_code, 0) << topology.output;
  EXPECT_THAT(topology.output,
              HasSubstr("GUID CONFLICT: 0x0002c90300a1b2c3 is claimed by node-a, node-b"));
}

TEST_F(MtlsTest, TheCliExplainsAMissingOrRefusedCertificate) {
  ASSERT_TRUE(StartMtlsAggregator());
  CommandResult anonymous = RunCommand(Cli({"--tls_ca=" + ca_.cert, "nodes"}), absl::Seconds(20));
  EXPECT_EQ(anonymous.exit_code, 1) << anonymous.output;
  EXPECT_THAT(anonymous.output, HasSubstr("requires a client certificate (mutual TLS)"));
  CommandResult plaintext = RunCommand(Cli({"nodes"}), absl::Seconds(20));
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.output;
  EXPECT_THAT(plaintext.output, HasSubstr("pass --tls_ca"));
  CommandResult agent = RunCommand(Cli({"--tls_ca=" + ca_.cert, "--tls_cert=" + node_a_.cert,
                                        "--tls_key=" + node_a_.key, "nodes"}),
                                   absl::Seconds(20));
  EXPECT_EQ(agent.exit_code, 1) << agent.output;
  EXPECT_THAT(agent.output, HasSubstr("DNS:node-a"));
  EXPECT_THAT(agent.output, HasSubstr("is not an operator"));
  EXPECT_THAT(agent.output, HasSubstr("authorization.operators"));
}

TEST_F(MtlsTest, AggregatorRefusesAnInvalidRolePattern) {
  ASSERT_FALSE(StartAggregator(
      absl::StrCat("tls { ca_file: \"", ca_.cert, "\" cert_file: \"", server_.cert,
                   "\" key_file: \"", server_.key, "\" }\nauthorization { operators: \"ops[\" }\n"),
      {}, /*expect_up=*/false));
  EXPECT_EQ(aggregator_.Wait(absl::Seconds(20)), 2);
  EXPECT_THAT(aggregator_.Log(), HasSubstr("authorization.operators pattern \"ops[\""));
}

TEST_F(MtlsTest, AggregatorRefusesToStartWithoutTls) {
  const std::string config = dir_ + "/empty.textproto";
  std::ofstream(config) << "";
  DaemonProcess aggregator;
  ASSERT_TRUE(
      aggregator.Start({BuildPath("daemon/aggregator/fabricmon-aggregator"), "--config=" + config,
                        "--grpc_listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"},
                       dir_ + "/refused.log"));
  EXPECT_EQ(aggregator.Wait(absl::Seconds(20)), 2);
  EXPECT_THAT(aggregator.Log(), HasSubstr("insecure_plaintext"));
}

TEST_F(MtlsTest, AggregatorRefusesUnreadableTlsFiles) {
  ASSERT_FALSE(
      StartAggregator(absl::StrCat("tls { ca_file: \"", ca_.cert, "\" cert_file: \"", server_.cert,
                                   "\" key_file: \"", dir_, "/missing-key.pem\" }\n"),
                      {}, /*expect_up=*/false));
  EXPECT_EQ(aggregator_.Wait(absl::Seconds(20)), 2);
  EXPECT_THAT(aggregator_.Log(), HasSubstr("missing-key.pem"));
  EXPECT_THAT(aggregator_.Log(), HasSubstr("NOT_FOUND"));
}

TEST_F(MtlsTest, InsecurePlaintextFlagServesPlaintextAndSaysSo) {
  ASSERT_TRUE(StartAggregator("", {"--insecure_plaintext"}));
  EXPECT_THAT(aggregator_.Log(), HasSubstr("INSECURE"));
  const StreamOutcome outcome = Hello(grpc::InsecureChannelCredentials(), "any-name");
  ASSERT_TRUE(outcome.first.has_value()) << outcome.status.error_message();
  EXPECT_TRUE(outcome.first->has_hello_ack());
}

TEST_F(MtlsTest, AgentRefusesToStreamWithoutTls) {
  const std::string config = dir_ + "/agent-plain.textproto";
  std::ofstream(config) << "collectors { ethtool { enabled: false } netdev { enabled: false } "
                           "nvml { enabled: false } ib_fabric { enabled: false } }\n";
  const std::vector<std::string> base = {BuildPath("daemon/agent/fabricmon-agent"),
                                         "--config=" + config,
                                         "--sysfs_root=" + SharedFixture("sysfs/gpud-h100/sys"),
                                         "--aggregator=127.0.0.1:1", "--node_name=node-a"};
  CommandResult refused = RunCommand(base, absl::Seconds(20));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("insecure_plaintext"));

  // A missing key file is an error at start, not an empty certificate.
  std::vector<std::string> missing = base;
  const std::string tls_config = dir_ + "/agent-missing.textproto";
  std::ofstream(tls_config) << "tls { ca_file: \"" << ca_.cert << "\" cert_file: \"" << node_a_.cert
                            << "\" key_file: \"/nonexistent/key.pem\" }\n";
  missing[1] = "--config=" + tls_config;
  CommandResult unreadable = RunCommand(missing, absl::Seconds(20));
  EXPECT_EQ(unreadable.exit_code, 2) << unreadable.output;
  EXPECT_THAT(unreadable.output, HasSubstr("/nonexistent/key.pem"));

  // --once and a local /metrics-only agent stream nowhere and need no TLS.
  CommandResult once =
      RunCommand({BuildPath("daemon/agent/fabricmon-agent"), "--once", "--config=" + config,
                  "--sysfs_root=" + SharedFixture("sysfs/gpud-h100/sys")},
                 absl::Seconds(60));
  EXPECT_EQ(once.exit_code, 0) << once.output.substr(0, 2000);
}

}  // namespace
}  // namespace fabricmon::testing
