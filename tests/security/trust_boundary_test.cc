// The aggregator's trust boundary, row by row (issue 13's table), against the real
// fabricmon-aggregator process. A hostile peer (hostile_peer.h) speaks the wire protocol as no
// correct agent would; a real fabricmon-agent streams a captured sysfs tree beside it as the
// honest bystander. Every test checks, after the attack:
//   - the refusal and its reason (the Reject's reason code) where the row is refused,
//   - the counter on /metrics (fabricmon_aggregator_rejected_..._total{reason=...}),
//   - that the aggregator stays up (the process runs and a later scrape answers),
//   - that the honest agent's stream and stored values are untouched (the exact fixture values,
//     and every ib sample as it was before the attack),
//   - that `promtool check metrics` accepts /metrics.
// Rows whose identity matters run over mutual TLS with certificates made by openssl at test
// time; the others run in plaintext and, where cheap, over both.

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/wire/metric_catalogue.h"
#include "daemon/wire/series_codec.h"
#include "fabricmon/v1/config.pb.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/metrics_text.h"
#include "tests/security/cert_factory.h"
#include "tests/security/daemon_process.h"
#include "tests/security/hostile_peer.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The honest agent's tree, and one of its counters as the file holds it (PortXmitData counts
// 4-byte words: exported bytes = value × 4).
// The honest node's name sorts after the attackers' (node-a, node-b): the exporter walks nodes
// in name order, so an attacker's declaration is the first one /metrics meets.
constexpr char kHonestNode[] = "victim";
constexpr char kHonestTree[] = "sysfs/gpud-h100/sys";
constexpr char kHonestXmitFile[] =
    "sysfs/gpud-h100/sys/class/infiniband/mlx5_0/ports/1/counters/"
    "port_xmit_data";
constexpr char kXmitFamily[] = "fabricmon_ib_port_xmit_data_bytes_total";

// The names the fix for each row introduces (Reject reasons, config fields) are looked up at run
// time, and a row whose names are gone fails with the row named (never a skip: a missing fix is a
// failure of the product).
std::optional<v1::Reject::Reason> ReasonNamed(const std::string& name) {
  v1::Reject::Reason reason;
  if (!v1::Reject::Reason_Parse(name, &reason)) {
    return std::nullopt;
  }
  return reason;
}
bool HasConfigField(const std::string& name) {
  return v1::AggregatorConfig::descriptor()->FindFieldByName(name) != nullptr;
}
#define REQUIRE_FIX_FOR(condition, row) \
  ASSERT_TRUE(condition) << "the fix for this row is missing: " << (row)

// Whether the /metrics text holds `needle`; a failure prints the needle, not the long text.
::testing::AssertionResult Holds(const std::string& text, const std::string& needle) {
  if (absl::StrContains(text, needle)) {
    return ::testing::AssertionSuccess() << "/metrics holds \"" << needle << "\"";
  }
  return ::testing::AssertionFailure() << "/metrics does not hold \"" << needle << "\"";
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TrustBoundaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tree_.root();
    CertFactory factory(dir_);
    auto ca = factory.MakeCa("ca", "fabricmon test CA");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    auto issue = [&](const std::string& name, const std::string& cn,
                     std::vector<std::string> sans) {
      absl::StatusOr<CertFiles> files = factory.Issue(ca_, name, cn, sans);
      EXPECT_TRUE(files.ok()) << files.status();
      return files.ok() ? *files : CertFiles();
    };
    server_ = issue("aggregator", "fabricmon-aggregator", {"DNS:localhost", "IP:127.0.0.1"});
    honest_cert_ = issue("honest", kHonestNode, {absl::StrCat("DNS:", kHonestNode)});
    node_a_ = issue("node-a", "node-a", {"DNS:node-a"});
    node_b_ = issue("node-b", "node-b", {"DNS:node-b"});
    sweeper_ = issue("sweeper-1", "sweeper-1", {"DNS:sweeper-1"});
    operator_ = issue("operator", "fabricmon-cli", {"DNS:fabricmon-cli"});
    ASSERT_FALSE(HasFailure());
  }

  // --- The aggregator -------------------------------------------------------------------------

  // Starts the aggregator, over mutual TLS or in plaintext, with `extra_config` (AggregatorConfig
  // text) appended to its config. False (a test failure with its log) if it did not come up.
  bool StartAggregator(bool mtls, const std::string& extra_config = "") {
    mtls_ = mtls;
    const std::string config = dir_ + "/aggregator.textproto";
    std::ofstream out(config);
    if (mtls) {
      out << "tls { ca_file: \"" << ca_.cert << "\" cert_file: \"" << server_.cert
          << "\" key_file: \"" << server_.key << "\" }\n";
    }
    out << extra_config << "\n";
    out.close();
    std::vector<std::string> argv = AggregatorArgv(config, dir_ + "/port");
    if (!mtls) {
      argv.push_back("--insecure_plaintext");
    }
    if (!aggregator_.Start(argv, dir_ + "/aggregator.log")) {
      ADD_FAILURE() << "cannot start " << argv[0];
      return false;
    }
    const AggregatorPorts ports =
        WaitForAggregatorPorts(dir_ + "/port", aggregator_, absl::Seconds(20));
    grpc_port_ = ports.grpc;
    metrics_port_ = ports.metrics;
    if (!ports.up()) {
      ADD_FAILURE() << "aggregator did not listen; log:\n" << aggregator_.Log();
      return false;
    }
    const bool up =
        WaitUntil([&] { return HttpGet(metrics_port_, "/metrics").ok(); }, absl::Seconds(20));
    EXPECT_TRUE(up) << "/metrics did not answer; log:\n" << aggregator_.Log();
    return up;
  }

  std::string Metrics() {
    absl::StatusOr<std::string> text = HttpGet(metrics_port_, "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }
  std::vector<TextSample> Samples() {
    absl::StatusOr<std::vector<TextSample>> samples = ParseText(Metrics());
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.ok() ? *samples : std::vector<TextSample>();
  }
  std::optional<double> Value(const std::string& name,
                              const std::vector<std::pair<std::string, std::string>>& having = {}) {
    return SampleValue(Samples(), name, having);
  }
  // Refusals counted under `reason`, whatever the counter family is called
  // (fabricmon_aggregator_rejected_..._total{reason=...}); summed over such families.
  double Rejected(const std::string& reason) {
    double total = 0;
    for (const TextSample& sample : Samples()) {
      if (absl::StartsWith(sample.name, "fabricmon_aggregator_") &&
          absl::StrContains(sample.name, "rejected") && absl::EndsWith(sample.name, "_total") &&
          sample.Label("reason") == reason) {
        total += std::stod(sample.value);
      }
    }
    return total;
  }
  // Every reason label any rejected counter carries (for messages when a label is missing).
  std::string RejectedLabels() {
    std::vector<std::string> labels;
    for (const TextSample& sample : Samples()) {
      if (absl::StrContains(sample.name, "rejected") && sample.Label("reason").has_value()) {
        labels.push_back(
            absl::StrCat(sample.name, "{reason=", *sample.Label("reason"), "} ", sample.value));
      }
    }
    return absl::StrJoin(labels, "\n");
  }

  // The aggregator still runs and answers a scrape, and promtool accepts what it serves.
  void ExpectAggregatorUpAndLintClean() {
    EXPECT_TRUE(aggregator_.running()) << "the aggregator died; log:\n" << aggregator_.Log();
    absl::StatusOr<std::string> text = HttpGet(metrics_port_, "/metrics");
    ASSERT_TRUE(text.ok()) << "a later scrape failed: " << text.status();
    ExpectPromtoolAccepts(*text);
  }

  void ExpectPromtoolAccepts(const std::string& text) {
    if (RunCommand({"/bin/sh", "-c", "command -v promtool"}, absl::Seconds(10)).exit_code != 0) {
      ADD_FAILURE() << "promtool is not installed (Debian: apt-get install prometheus)";
      return;
    }
    const std::string path = dir_ + "/metrics.prom";
    std::ofstream(path) << text;
    // promtool's lint also reports naming advice (exit 3 in some versions); a parse error is
    // what fails a Prometheus scrape, so that is what counts here, plus any exit code but 0.
    const CommandResult checked =
        RunCommand({"/bin/sh", "-c", "promtool check metrics < '" + path + "'"}, absl::Seconds(60));
    EXPECT_EQ(checked.exit_code, 0) << "promtool check metrics:\n"
                                    << checked.output.substr(0, 4000);
  }

  // --- Peers ----------------------------------------------------------------------------------

  PeerConnection Connection(const CertFiles* cert) {
    PeerConnection connection;
    connection.target = absl::StrCat("127.0.0.1:", grpc_port_);
    if (mtls_) {
      connection.ca_file = ca_.cert;
      if (cert != nullptr) {
        connection.cert_file = cert->cert;
        connection.key_file = cert->key;
      }
    }
    return connection;
  }

  // A session on a fresh stream as `cert` (ignored in plaintext).
  std::unique_ptr<PeerSession> Peer(const CertFiles* cert) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakePeerChannel(Connection(cert));
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (!channel.ok()) {
      return nullptr;
    }
    absl::StatusOr<std::unique_ptr<WireStream>> stream = WireStream::Open(*channel);
    EXPECT_TRUE(stream.ok()) << stream.status();
    return stream.ok() ? std::make_unique<PeerSession>(std::move(*stream)) : nullptr;
  }

  // The Diagnostics service as `cert` (the CLI's view).
  std::unique_ptr<v1::Diagnostics::Stub> Diagnostics(const CertFiles* cert) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakePeerChannel(Connection(cert));
    EXPECT_TRUE(channel.ok()) << channel.status();
    return channel.ok() ? v1::Diagnostics::NewStub(*channel) : nullptr;
  }

  // The fabricmon CLI as `cert`.
  CommandResult Cli(const CertFiles* cert, std::vector<std::string> command) {
    std::vector<std::string> argv = {BuildPath("daemon/cli/fabricmon"),
                                     absl::StrCat("--aggregator=127.0.0.1:", grpc_port_),
                                     "--timeout_s=5"};
    if (mtls_) {
      argv.push_back("--tls_ca=" + ca_.cert);
      if (cert != nullptr) {
        argv.push_back("--tls_cert=" + cert->cert);
        argv.push_back("--tls_key=" + cert->key);
      }
    }
    argv.insert(argv.end(), command.begin(), command.end());
    return RunCommand(argv, absl::Seconds(30));
  }

  // --- The honest agent -----------------------------------------------------------------------

  std::vector<std::string> AgentArgs(const std::string& node, const CertFiles& cert,
                                     const std::vector<std::string>& extra = {}) {
    const std::string config = dir_ + "/agent-" + node + ".textproto";
    std::ofstream out(config);
    if (mtls_) {
      out << "tls { ca_file: \"" << ca_.cert << "\" cert_file: \"" << cert.cert << "\" key_file: \""
          << cert.key << "\" }\n";
    }
    out << "reconnect_initial_backoff_ms: 100\nreconnect_max_backoff_ms: 500\n"
        << "collectors {\n  ib_sysfs { interval_ms: 500 }\n"
        << "  ethtool { enabled: false }\n  netdev { enabled: false }\n"
        << "  nvml { enabled: false }\n  ib_fabric { enabled: false }\n}\n";
    out.close();
    std::vector<std::string> argv = {BuildPath("daemon/agent/fabricmon-agent"),
                                     "--config=" + config,
                                     "--sysfs_root=" + SharedFixture(kHonestTree),
                                     absl::StrCat("--aggregator=127.0.0.1:", grpc_port_),
                                     "--node_name=" + node,
                                     "--log_level=info"};
    if (!mtls_) {
      argv.push_back("--insecure_plaintext");
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  // The honest agent's xmit counter for mlx5_0 port 1 as the fixture holds it, in bytes.
  double HonestXmitBytes() {
    return std::stod(ReadFileOrEmpty(SharedFixture(kHonestXmitFile))) * 4;
  }
  std::optional<double> HonestXmit() {
    return Value(kXmitFamily, {{"node", kHonestNode}, {"device", "mlx5_0"}, {"port", "1"}});
  }

  // The honest node's ib samples (name and labels → value as written).
  std::map<std::string, std::string> HonestSamples() {
    return SelectSamples(Samples(), "fabricmon_ib_", {{"node", kHonestNode}});
  }

  // Starts the honest agent, waits until its values are on /metrics and keeps them.
  void StartHonestAgent() {
    ASSERT_TRUE(honest_.Start(AgentArgs(kHonestNode, honest_cert_), dir_ + "/honest.log"));
    const bool up = WaitUntil(
        [&] {
          return Value("fabricmon_node_up", {{"node", kHonestNode}}) == 1 &&
                 HonestXmit().has_value();
        },
        absl::Seconds(30));
    ASSERT_TRUE(up) << "honest agent log:\n"
                    << honest_.Log() << "\naggregator log:\n"
                    << aggregator_.Log();
    ASSERT_EQ(HonestXmit(), HonestXmitBytes());
    // Every series the honest agent declares is declared before an attack starts: its own
    // families follow its first connection (the aggregator in use), a self-collector cycle (1 s)
    // after the counters. Settled: the count unchanged for 2.5 s, two self-collector cycles.
    double series = -1;
    absl::Time changed = absl::Now();
    const bool settled = WaitUntil(
        [&] {
          const double now = Value("fabricmon_node_series", {{"node", kHonestNode}}).value_or(0);
          if (now != series) {
            series = now;
            changed = absl::Now();
          }
          return absl::Now() - changed >= absl::Milliseconds(2500);
        },
        absl::Seconds(30));
    ASSERT_TRUE(settled) << "the honest agent's series count never settled";
    honest_baseline_ = HonestSamples();
    ASSERT_GT(honest_baseline_.size(), 10u);
  }

  // The honest agent still streams (new batches are stored after the attack) and its values
  // are exactly what they were.
  void ExpectHonestUntouched() {
    ASSERT_FALSE(honest_baseline_.empty()) << "the honest agent was not started";
    EXPECT_TRUE(honest_.running()) << honest_.Log();
    const double batches = Value("fabricmon_aggregator_batches_total").value_or(0);
    EXPECT_TRUE(WaitUntil(
        [&] { return Value("fabricmon_aggregator_batches_total").value_or(0) >= batches + 2; },
        absl::Seconds(20)))
        << "no batch stored since the attack; honest log:\n"
        << honest_.Log();
    EXPECT_EQ(Value("fabricmon_node_up", {{"node", kHonestNode}}), 1);
    EXPECT_EQ(HonestXmit(), HonestXmitBytes());
    EXPECT_EQ(DescribeDifference(honest_baseline_, HonestSamples()), "");
  }

  // --- Hostile series -------------------------------------------------------------------------

  static DeclarationSpec Counter(uint32_t id, std::string name, uint32_t width = 64) {
    DeclarationSpec spec;
    spec.id = id;
    spec.name = std::move(name);
    spec.type = v1::METRIC_TYPE_COUNTER;
    spec.width_bits = width;
    spec.help = "A hostile peer's counter.";
    return spec;
  }

  // Says hello as `node` and expects the HelloAck.
  std::unique_ptr<PeerSession> HelloAs(const std::string& node, const CertFiles* cert,
                                       const std::string& boot_id = "boot-1",
                                       uint64_t instance = 1) {
    std::unique_ptr<PeerSession> peer = Peer(cert);
    if (peer == nullptr) {
      return nullptr;
    }
    HelloSpec spec;
    spec.node = node;
    spec.boot_id = boot_id;
    spec.instance_id = instance;
    if (!peer->Hello(spec)) {
      ADD_FAILURE() << "hello as " << node << " was not acknowledged:\n"
                    << peer->Finish().Describe();
      return nullptr;
    }
    return peer;
  }

  // The stream's end: a Reject with `reason`, a non-OK status, and a counter under `label`.
  void ExpectRejected(PeerSession& peer, const std::string& reason, const std::string& label,
                      double count = 1) {
    const StreamReport report = peer.Finish();
    ASSERT_TRUE(report.reject().has_value()) << "not rejected:\n" << report.Describe();
    EXPECT_EQ(v1::Reject::Reason_Name(report.reject()->reason()), reason) << report.Describe();
    EXPECT_FALSE(report.reject()->message().empty());
    EXPECT_TRUE(report.finished);
    EXPECT_NE(report.status.error_code(), grpc::StatusCode::OK) << report.Describe();
    EXPECT_EQ(Rejected(label), count) << "counters:\n" << RejectedLabels();
  }

  TempTree tree_;
  std::string dir_;
  CertFiles ca_, server_, honest_cert_, node_a_, node_b_, sweeper_, operator_;
  bool mtls_ = false;
  DaemonProcess aggregator_;
  DaemonProcess honest_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::map<std::string, std::string> honest_baseline_;
};

// Rows that do not depend on identity run over both transports.
class TrustBoundaryTransportTest : public TrustBoundaryTest,
                                   public ::testing::WithParamInterface<bool> {
 protected:
  bool Mtls() const { return GetParam(); }
  // The hostile peer's certificate (node-a) over mutual TLS; nothing in plaintext.
  const CertFiles* HostileCert() const { return Mtls() ? &node_a_ : nullptr; }
};

INSTANTIATE_TEST_SUITE_P(Transport, TrustBoundaryTransportTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Mtls" : "Plaintext";
                         });

// --- Row: a HELP text holding newlines and sample lines -----------------------------------------

TEST_P(TrustBoundaryTransportTest, ForgedHelpCannotAddSamplesOrBreakTheScrape) {
  ASSERT_TRUE(StartAggregator(Mtls()));
  // The attacker connects first, so its family is the first /metrics meets.
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  const std::string forged =
      "x\nfabricmon_node_up{node=\"victim-forged\"} 1\n"
      "fabricmon_finding_active{kind=\"link_flapping\",node=\"victim-forged\"} 1\n"
      "# TYPE broken line \\ \"";
  DeclarationSpec extra = Counter(1, "fabricmon_hostile_extra_total");
  extra.help = forged;
  extra.labels = {{"tricky", "a\"b\\c\nd"}};
  ASSERT_TRUE(peer->Declare({extra}));
  ASSERT_TRUE(peer->DefineLayout(1, {1}));
  ASSERT_TRUE(peer->Send(1, {7})) << peer->Finish().Describe();
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());

  const std::string text = Metrics();
  EXPECT_FALSE(Holds(text, "victim-forged\"} 1\n"));
  EXPECT_FALSE(Holds(text, "\nfabricmon_node_up{node=\"victim-forged\"}"));
  EXPECT_FALSE(Holds(text, "\nfabricmon_finding_active{kind=\"link_flapping\",node=\"victim"));
  absl::StatusOr<std::vector<TextSample>> samples = ParseText(text);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_FALSE(SampleValue(*samples, "fabricmon_node_up", {{"node", "victim-forged"}}).has_value());
  // The extra family is exported under our prefix, its HELP escaped on one line.
  EXPECT_EQ(SampleValue(*samples, "fabricmon_hostile_extra_total", {{"node", "node-a"}}), 7);
  EXPECT_TRUE(Holds(text, "# HELP fabricmon_hostile_extra_total x\\nfabricmon_node_up"));
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

TEST_P(TrustBoundaryTransportTest, ProjectFamiliesKeepTheCataloguesHelp) {
  ASSERT_TRUE(StartAggregator(Mtls()));
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  // The project's own family, declared exactly as the catalogue has it (as a collector declares
  // it) except for its HELP: the HELP an agent sends is not what /metrics says.
  const wire::CatalogueFamily* family = wire::MetricCatalogue::Project().Find(kXmitFamily);
  ASSERT_NE(family, nullptr);
  uint8_t width = 64;
  while (width > 1 && !family->AllowsWidth(width)) {
    --width;
  }
  const collectors::SeriesDesc desc = collectors::CounterSeries(
      "ib_sysfs", kXmitFamily, "forged help\nfabricmon_node_up{node=\"victim-forged\"} 1",
      family->unit, width, family->overflow, family->scale, {{"device", "mlx5_9"}, {"port", "1"}});
  v1::AgentMessage declaration;
  *declaration.mutable_declarations()->add_series() = wire::ToDeclaration(desc, 1);
  ASSERT_TRUE(peer->stream().Write(declaration));
  ASSERT_TRUE(peer->DefineLayout(1, {1}));
  ASSERT_TRUE(peer->Send(1, {100})) << peer->Finish().Describe();
  ASSERT_EQ(Value(kXmitFamily, {{"node", "node-a"}, {"device", "mlx5_9"}, {"port", "1"}}),
            100 * family->scale);
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  const std::string text = Metrics();
  EXPECT_FALSE(Holds(text, "forged help"));
  EXPECT_TRUE(Holds(text, absl::StrCat("# TYPE ", kXmitFamily, " counter")));
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: a family another node uses, declared as another type with another HELP
// ------------------

TEST_P(TrustBoundaryTransportTest, FamilyRedeclaredAsAnotherTypeIsRefused) {
  REQUIRE_FIX_FOR(ReasonNamed("REASON_DECLARATION_CONFLICT"), "family redeclared as another type");
  ASSERT_TRUE(StartAggregator(Mtls()));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  DeclarationSpec gauge;
  gauge.id = 1;
  gauge.name = kXmitFamily;
  gauge.type = v1::METRIC_TYPE_GAUGE;
  gauge.width_bits = 0;
  gauge.unit = v1::UNIT_BYTES;
  gauge.help = "Now a gauge, says the attacker.";
  gauge.labels = {{"device", "mlx5_0"}, {"port", "1"}};
  ASSERT_TRUE(peer->Declare({gauge}));
  ExpectRejected(*peer, "REASON_DECLARATION_CONFLICT", "declaration_conflict");
  const std::string text = Metrics();
  EXPECT_TRUE(Holds(text, absl::StrCat("# TYPE ", kXmitFamily, " counter")));
  EXPECT_FALSE(Holds(text, "says the attacker"));
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

TEST_P(TrustBoundaryTransportTest, ExtraFamilyIsPinnedByItsFirstDeclaration) {
  REQUIRE_FIX_FOR(ReasonNamed("REASON_DECLARATION_CONFLICT"), "first declaration pinned");
  ASSERT_TRUE(StartAggregator(Mtls()));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  // node-b declares an extra family first; node-a then declares it with another HELP.
  std::unique_ptr<PeerSession> first = HelloAs("node-b", Mtls() ? &node_b_ : nullptr);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Declare({Counter(1, "fabricmon_hostile_shared_total")}));
  ASSERT_TRUE(first->DefineLayout(1, {1}));
  ASSERT_TRUE(first->Send(1, {5})) << first->Finish().Describe();
  std::unique_ptr<PeerSession> second = HelloAs("node-a", HostileCert());
  ASSERT_NE(second, nullptr);
  // The same family with another HELP: the first declaration is pinned.
  DeclarationSpec other = Counter(1, "fabricmon_hostile_shared_total");
  other.help = "Another HELP.";
  ASSERT_TRUE(second->Declare({other}));
  ExpectRejected(*second, "REASON_DECLARATION_CONFLICT", "declaration_conflict");
  // The first declarer is unaffected: its stream still stores values.
  ASSERT_TRUE(first->Send(1, {9})) << first->Finish().Describe();
  EXPECT_EQ(Value("fabricmon_hostile_shared_total", {{"node", "node-b"}}), 9);
  const std::string text = Metrics();
  EXPECT_TRUE(Holds(text, "# TYPE fabricmon_hostile_shared_total counter"));
  EXPECT_FALSE(Holds(text, "Another HELP."));
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: slow /metrics clients (and on the agent's --listen_metrics)
// -----------------------------

// The slow clients' request timeout in the slow-client rows: longer than a scrape's bound, so that
// a server cannot free a worker by dropping a slow client while a scrape waits. (That the server
// cuts a slow client off at its timeout is tested in slow_http_clients_test.cc.)
constexpr int kSlowRequestTimeoutMs = 120000;

// Opens `connections` slow clients on `port` of `server` and waits until the server holds them
// all.
void OpenSlowClients(SlowHttpClients& slow, int port, int connections,
                     const DaemonProcess& server) {
  EXPECT_TRUE(slow.Start().ok());
  EXPECT_TRUE(
      WaitUntil([&] { return EstablishedConnectionsOnPort(server.pid(), port) >= connections; },
                absl::Seconds(10)))
      << "the server accepted " << EstablishedConnectionsOnPort(server.pid(), port) << " of "
      << connections << " slow clients";
}

// One GET of /metrics on `port`, answered while every slow client still holds its connection
// (the server holds `connections` on the port besides the scrape's own): had they taken every
// worker, the server could answer only after dropping some (at kSlowRequestTimeoutMs, beyond the
// fetch's bound). Not a timing check: however loaded the machine, a server with a free worker
// passes.
void ExpectScrapeBesideSlowClients(int port, const DaemonProcess& server, int connections,
                                   const std::string& what) {
  absl::StatusOr<std::string> text = HttpGet(port, "/metrics", absl::Seconds(30));
  ASSERT_TRUE(text.ok()) << what << ": " << text.status();
  EXPECT_GE(EstablishedConnectionsOnPort(server.pid(), port), connections)
      << what << ": answered only once the server had dropped slow clients";
  EXPECT_THAT(*text, HasSubstr("fabricmon_"));
}

TEST_F(TrustBoundaryTest, SlowMetricsClientsDoNotBlockScrapes) {
  ASSERT_TRUE(StartAggregator(
      false, absl::StrCat("metrics_request_timeout_ms: ", kSlowRequestTimeoutMs, "\n")));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  // The table's two idle connections, then 200.
  for (int connections : {2, 200}) {
    SlowHttpClients slow(metrics_port_, connections, absl::Seconds(5));
    OpenSlowClients(slow, metrics_port_, connections, aggregator_);
    ExpectScrapeBesideSlowClients(metrics_port_, aggregator_, connections,
                                  absl::StrCat(connections, " slow clients on /metrics"));
    ExpectScrapeBesideSlowClients(metrics_port_, aggregator_, connections,
                                  absl::StrCat(connections, " slow clients, second scrape"));
  }
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

TEST_F(TrustBoundaryTest, SlowClientsDoNotBlockTheAgentsListenMetrics) {
  ASSERT_TRUE(StartAggregator(false));
  const int agent_port = FreePort();
  DaemonProcess agent;
  std::vector<std::string> argv = AgentArgs(
      "listener", honest_cert_, {absl::StrCat("--listen_metrics=127.0.0.1:", agent_port)});
  std::ofstream(dir_ + "/agent-listener.textproto", std::ios::app)
      << "metrics_request_timeout_ms: " << kSlowRequestTimeoutMs << "\n";
  ASSERT_TRUE(agent.Start(argv, dir_ + "/listener.log"));
  ASSERT_TRUE(WaitUntil([&] { return HttpGet(agent_port, "/metrics").ok(); }, absl::Seconds(30)))
      << agent.Log();
  SlowHttpClients slow(agent_port, 200, absl::Seconds(5));
  OpenSlowClients(slow, agent_port, 200, agent);
  ExpectScrapeBesideSlowClients(agent_port, agent, 200,
                                "200 slow clients on the agent's --listen_metrics");
  EXPECT_TRUE(agent.running()) << agent.Log();
}

// --- Row: a hello carrying fabric topology and another node's GUID
// --------------------------------

constexpr char kAuthorization[] =
    "authorization { operators: \"fabricmon-cli\" fabric_sweepers: \"sweeper-.*\" }";

v1::Inventory ForgedFabric(const std::string& guid) {
  v1::Inventory inventory;
  v1::RdmaDevice* device = inventory.add_rdma_devices();
  device->set_name("mlx5_0");
  device->set_node_guid(guid);
  v1::FabricNode* host = inventory.add_fabric_nodes();
  host->set_guid("0x0c42a10300aaaa01");
  host->set_type(v1::FabricNode::TYPE_CA);
  host->set_description("victim mlx5_0");
  v1::FabricNode* sw = inventory.add_fabric_nodes();
  sw->set_guid("0x0c42a10300bbbb02");
  sw->set_type(v1::FabricNode::TYPE_SWITCH);
  sw->set_description("forged-switch");
  v1::FabricLink* link = inventory.add_fabric_links();
  link->set_a_guid("0x0c42a10300aaaa01");
  link->set_a_port(1);
  link->set_b_guid("0x0c42a10300bbbb02");
  link->set_b_port(7);
  return inventory;
}

TEST_F(TrustBoundaryTest, FabricTopologyFromANonSweeperIsDropped) {
  REQUIRE_FIX_FOR(HasConfigField("authorization"), "fabric topology from a non-sweeper");
  ASSERT_TRUE(StartAggregator(true, kAuthorization));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  // node-a is no fabric sweeper: the switch topology in its hello is dropped and counted, the
  // rest of its inventory kept (the stream itself is legitimate).
  std::unique_ptr<PeerSession> peer = Peer(&node_a_);
  ASSERT_NE(peer, nullptr);
  HelloSpec spec;
  spec.node = "node-a";
  spec.inventory = ForgedFabric("0c42:a103:0065:aaaa");
  ASSERT_TRUE(peer->Hello(spec)) << peer->Finish().Describe();
  EXPECT_EQ(
      Value("fabricmon_aggregator_inventory_refused_total", {{"reason", "not_a_fabric_sweeper"}}),
      1);
  // ... also when it comes later, in an inventory update.
  v1::AgentMessage update;
  *update.mutable_inventory()->mutable_inventory() = ForgedFabric("0c42:a103:0065:aaaa");
  ASSERT_TRUE(peer->stream().Write(update));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Value("fabricmon_aggregator_inventory_refused_total",
                     {{"reason", "not_a_fabric_sweeper"}}) == 2;
      },
      absl::Seconds(10)));
  std::unique_ptr<v1::Diagnostics::Stub> diagnostics = Diagnostics(&operator_);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetNodeRequest request;
    request.set_name("node-a");
    v1::NodeView view;
    const grpc::Status status = diagnostics->GetNode(&context, request, &view);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(view.inventory().fabric_links_size(), 0);
    EXPECT_EQ(view.inventory().fabric_nodes_size(), 0);
    EXPECT_EQ(view.inventory().rdma_devices_size(), 1) << "the rest of the inventory is kept";
  }
  // No forged cable reached the detectors' topology.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetTopologyResponse topology;
    const grpc::Status status = diagnostics->GetTopology(&context, {}, &topology);
    ASSERT_TRUE(status.ok()) << status.error_message();
    for (const v1::TopologyLink& link : topology.links()) {
      EXPECT_NE(link.b().guid(), "0x0c42a10300bbbb02") << link.ShortDebugString();
      EXPECT_NE(link.a().guid(), "0x0c42a10300bbbb02") << link.ShortDebugString();
    }
  }
  // A sweeper's fabric is kept.
  std::unique_ptr<PeerSession> sweeper = Peer(&sweeper_);
  ASSERT_NE(sweeper, nullptr);
  spec.node = "sweeper-1";
  spec.inventory = ForgedFabric("0c42:a103:0065:0001");
  ASSERT_TRUE(sweeper->Hello(spec)) << sweeper->Finish().Describe();
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetNodeRequest request;
    request.set_name("sweeper-1");
    v1::NodeView view;
    ASSERT_TRUE(diagnostics->GetNode(&context, request, &view).ok());
    EXPECT_EQ(view.inventory().fabric_links_size(), 1);
  }
  EXPECT_EQ(
      Value("fabricmon_aggregator_inventory_refused_total", {{"reason", "not_a_fabric_sweeper"}}),
      2);
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

TEST_F(TrustBoundaryTest, GuidClaimedByTwoNodesIsReportedAsAConflict) {
  REQUIRE_FIX_FOR(HasConfigField("authorization"), "a GUID claimed by two nodes");
  ASSERT_TRUE(StartAggregator(true, kAuthorization));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  // node-a streams with an HCA GUID; node-b then claims the same GUID for its own HCA.
  std::vector<std::unique_ptr<PeerSession>> peers;
  for (const auto& [node, cert] :
       {std::pair<std::string, const CertFiles*>{"node-a", &node_a_}, {"node-b", &node_b_}}) {
    std::unique_ptr<PeerSession> peer = Peer(cert);
    ASSERT_NE(peer, nullptr);
    HelloSpec spec;
    spec.node = node;
    v1::RdmaDevice* device = spec.inventory.add_rdma_devices();
    device->set_name("mlx5_0");
    device->set_node_guid("0c42:a103:0065:beef");
    ASSERT_TRUE(peer->Hello(spec)) << peer->Finish().Describe();
    peers.push_back(std::move(peer));
  }
  EXPECT_TRUE(
      WaitUntil([&] { return Value("fabricmon_topology_guid_conflicts") == 1; }, absl::Seconds(20)))
      << "fabricmon_topology_guid_conflicts never became 1";
  std::unique_ptr<v1::Diagnostics::Stub> diagnostics = Diagnostics(&operator_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetTopologyResponse topology;
  const grpc::Status status = diagnostics->GetTopology(&context, {}, &topology);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(topology.guid_conflicts_size(), 1) << topology.ShortDebugString();
  EXPECT_EQ(topology.guid_conflicts(0).guid(), "0x0c42a1030065beef");
  EXPECT_THAT(topology.guid_conflicts(0).nodes(), ::testing::ElementsAre("node-a", "node-b"));
  const CommandResult cli = Cli(&operator_, {"topology"});
  EXPECT_EQ(cli.exit_code, 0) << cli.output;
  EXPECT_THAT(cli.output, HasSubstr("GUID CONFLICT")) << cli.output;
  EXPECT_THAT(aggregator_.Log(), HasSubstr("is claimed by 2 nodes"));
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: the CLI with an agent's certificate; an operator certificate streaming
// ------------------

TEST_F(TrustBoundaryTest, OnlyOperatorsMayCallDiagnostics) {
  REQUIRE_FIX_FOR(HasConfigField("authorization"), "the CLI with an agent's certificate");
  ASSERT_TRUE(StartAggregator(true, kAuthorization));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  for (const CertFiles* cert : {&node_a_, &honest_cert_, &server_}) {
    std::unique_ptr<v1::Diagnostics::Stub> diagnostics = Diagnostics(cert);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListNodesResponse nodes;
    const grpc::Status status = diagnostics->ListNodes(&context, {}, &nodes);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << cert->cert << ": " << status.error_message();
    EXPECT_EQ(nodes.nodes_size(), 0);
    const CommandResult cli = Cli(cert, {"nodes"});
    EXPECT_NE(cli.exit_code, 0) << cli.output;
    // It says why, in words (and lists nothing: the stub above got no node).
    EXPECT_THAT(cli.output, HasSubstr("not an operator"));
  }
  // Three certificates, each refused twice (the stub, the CLI's first call): counted.
  EXPECT_GE(Value("fabricmon_aggregator_rejected_calls_total", {{"reason", "not_an_operator"}})
                .value_or(0),
            6);
  // The operator reads every node.
  const CommandResult cli = Cli(&operator_, {"nodes"});
  EXPECT_EQ(cli.exit_code, 0) << cli.output;
  EXPECT_THAT(cli.output, HasSubstr(kHonestNode));
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// Jobs steer the straggler detector and the gate: registering or ending one is an operator's
// call. A node's certificate (an agent's key, stolen from any GPU node) cannot register a job
// nor end the operator's; the operator can, through the CLI.
TEST_F(TrustBoundaryTest, OnlyOperatorsMayStartOrEndJobs) {
  REQUIRE_FIX_FOR(HasConfigField("authorization"), "jobs registered with an agent's certificate");
  ASSERT_TRUE(StartAggregator(true, kAuthorization));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  const CommandResult started =
      Cli(&operator_, {"job", "start", "--name=ops-job", std::string("--nodes=") + kHonestNode});
  ASSERT_EQ(started.exit_code, 0) << started.output;
  for (const CertFiles* cert : {&node_a_, &honest_cert_}) {
    std::unique_ptr<v1::Diagnostics::Stub> diagnostics = Diagnostics(cert);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StartJobRequest request;
    request.set_name("evil");
    request.add_nodes(kHonestNode);
    v1::Job job;
    grpc::Status status = diagnostics->StartJob(&context, request, &job);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << cert->cert << ": " << status.error_message();
    grpc::ClientContext end_context;
    end_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::EndJobRequest end;
    end.set_name("ops-job");
    status = diagnostics->EndJob(&end_context, end, &job);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << cert->cert << ": " << status.error_message();
    const CommandResult cli = Cli(cert, {"job", "start", "--name=evil2", "--nodes=x"});
    EXPECT_NE(cli.exit_code, 0) << cli.output;
    EXPECT_THAT(cli.output, HasSubstr("not an operator"));
    // gate with a refused certificate: no answer, exit 2 (not "healthy").
    const CommandResult gate = Cli(cert, {"gate", std::string("--nodes=") + kHonestNode});
    EXPECT_EQ(gate.exit_code, 2) << gate.output;
  }
  // The operator's job is intact and alone.
  const CommandResult jobs = Cli(&operator_, {"jobs"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.output;
  EXPECT_THAT(jobs.output, HasSubstr("ops-job"));
  EXPECT_THAT(jobs.output, ::testing::Not(HasSubstr("evil")));
  EXPECT_EQ(Value("fabricmon_jobs", {}).value_or(-1), 1);
  const CommandResult gate = Cli(&operator_, {"gate", "--job=ops-job"});
  EXPECT_EQ(gate.exit_code, 0) << gate.output;
  const CommandResult ended = Cli(&operator_, {"job", "end", "--name=ops-job"});
  EXPECT_EQ(ended.exit_code, 0) << ended.output;
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

TEST_F(TrustBoundaryTest, OperatorCertificateCannotStream) {
  REQUIRE_FIX_FOR(HasConfigField("authorization"), "an operator certificate streaming");
  ASSERT_TRUE(StartAggregator(true, kAuthorization));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  std::unique_ptr<PeerSession> peer = Peer(&operator_);
  ASSERT_NE(peer, nullptr);
  HelloSpec spec;
  spec.node = "fabricmon-cli";
  ASSERT_TRUE(peer->stream().Write(Hello(spec)));
  const StreamReport report = peer->Finish();
  ASSERT_TRUE(report.reject().has_value()) << report.Describe();
  EXPECT_EQ(v1::Reject::Reason_Name(report.reject()->reason()), "REASON_FORBIDDEN")
      << report.Describe();
  EXPECT_EQ(report.status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << report.Describe();
  EXPECT_FALSE(Value("fabricmon_node_up", {{"node", "fabricmon-cli"}}).has_value());
  EXPECT_EQ(Rejected("role_forbidden"), 1) << RejectedLabels();
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: refused TLS handshakes
// -------------------------------------------------------------------

TEST_F(TrustBoundaryTest, RefusedHandshakesAreCountedAndExplained) {
  ASSERT_TRUE(StartAggregator(true, kAuthorization));
  // Refused handshakes, summed over whatever fabricmon_aggregator_*handshake* counters exist.
  auto refused = [&] {
    double total = 0;
    bool found = false;
    for (const TextSample& sample : Samples()) {
      if (absl::StartsWith(sample.name, "fabricmon_aggregator_") &&
          absl::StrContains(sample.name, "handshake")) {
        total += std::stod(sample.value);
        found = true;
      }
    }
    return found ? std::optional<double>(total) : std::nullopt;
  };
  REQUIRE_FIX_FOR(refused().has_value(), "refused TLS handshakes (counted nowhere)");
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  const double before = *refused();
  // A certificate of another CA, and none at all.
  CertFactory factory(dir_);
  absl::StatusOr<CertFiles> other_ca = factory.MakeCa("other-ca", "someone else's CA");
  ASSERT_TRUE(other_ca.ok()) << other_ca.status();
  absl::StatusOr<CertFiles> rogue = factory.Issue(*other_ca, "rogue", "node-a", {"DNS:node-a"});
  ASSERT_TRUE(rogue.ok()) << rogue.status();
  for (const CertFiles* cert : std::vector<const CertFiles*>{&*rogue, nullptr}) {
    std::unique_ptr<PeerSession> peer = Peer(cert);
    ASSERT_NE(peer, nullptr);
    HelloSpec spec;
    spec.node = "node-a";
    EXPECT_FALSE(peer->Hello(spec));
    const StreamReport report = peer->Finish();
    EXPECT_EQ(report.status.error_code(), grpc::StatusCode::UNAVAILABLE) << report.Describe();
  }
  EXPECT_TRUE(WaitUntil([&] { return refused().value_or(0) >= before + 2; }, absl::Seconds(10)))
      << "refused handshakes counted: " << refused().value_or(-1) << ", before " << before;
  constexpr char kHandshakes[] = "fabricmon_aggregator_rejected_handshakes_total";
  EXPECT_GE(Value(kHandshakes, {{"reason", "certificate_not_verified"}}).value_or(0), 1);
  EXPECT_GE(Value(kHandshakes, {{"reason", "no_client_certificate"}}).value_or(0), 1);
  // The CLI without a certificate says what is missing, in words.
  const CommandResult cli = Cli(nullptr, {"nodes"});
  EXPECT_NE(cli.exit_code, 0);
  EXPECT_THAT(cli.output, HasSubstr("certificate")) << cli.output;
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: one peer, many node names × many series
// -------------------------------------------------

TEST_F(TrustBoundaryTest, ManyNamesAndSeriesStayWithinTheCaps) {
  REQUIRE_FIX_FOR(HasConfigField("max_nodes") && HasConfigField("max_series_total"),
                  "8 names x many series");
  // Scaled down from 8 × 50,000: caps small enough that the attack crosses each of them.
  ASSERT_TRUE(StartAggregator(false,
                              "max_nodes: 4\nmax_series_total: 1500\nmax_series_per_node: 1000\n"
                              "new_series_burst: 100000\nmax_new_series_per_second: 100000\n"));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  const double honest_series = Value("fabricmon_node_series", {{"node", kHonestNode}}).value_or(0);
  ASSERT_GT(honest_series, 0);
  int refused = 0;
  std::vector<std::unique_ptr<PeerSession>> peers;  // kept open: their nodes stay connected
  for (int name = 0; name < 8; ++name) {
    std::unique_ptr<PeerSession> peer = Peer(nullptr);
    ASSERT_NE(peer, nullptr);
    HelloSpec spec;
    spec.node = absl::StrCat("flood-", name);
    spec.instance_id = 100 + name;
    if (!peer->Hello(spec)) {
      ++refused;
      continue;
    }
    std::vector<DeclarationSpec> series;
    for (uint32_t id = 1; id <= 500; ++id) {
      DeclarationSpec spec = Counter(id, "fabricmon_hostile_flood_total");
      spec.labels = {{"i", absl::StrCat(id)}};
      series.push_back(spec);
    }
    peer->Declare(series);
    std::vector<uint32_t> ids;
    for (uint32_t id = 1; id <= 500; ++id) ids.push_back(id);
    peer->DefineLayout(1, ids);
    if (!peer->Send(1, std::vector<uint64_t>(500, 1))) {
      ++refused;
    }
    peers.push_back(std::move(peer));
  }
  EXPECT_GT(refused, 0) << "8 names × 500 series fit under max_nodes 4 / max_series_total 1500";
  const double nodes = Value("fabricmon_aggregator_nodes", {{"state", "up"}}).value_or(0) +
                       Value("fabricmon_aggregator_nodes", {{"state", "down"}}).value_or(0);
  EXPECT_LE(nodes, 4);
  EXPECT_LE(Value("fabricmon_aggregator_series").value_or(1e9), 1500);
  EXPECT_GE(Rejected("node_limit"), 1) << RejectedLabels();
  // Series past max_series_total are kept out of the store (counted), the streams go on.
  EXPECT_GT(Value("fabricmon_aggregator_series_unstored").value_or(0), 0);
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

TEST_F(TrustBoundaryTest, NewSeriesBudgetAppliesPerPeerIdentity) {
  // A burst of 600 new series (and 1 a second after it), per node and per peer identity (the
  // honest agent declares about 500). One certificate names 8 nodes (8 DNS SANs): each name stays
  // far under its own budget, so only the identity's shared budget can stop the flood.
  CertFactory factory(dir_);
  std::vector<std::string> sans;
  for (int name = 0; name < 8; ++name) {
    sans.push_back(absl::StrCat("DNS:flood-", name));
  }
  absl::StatusOr<CertFiles> flood = factory.Issue(ca_, "flood", "flood-0", sans);
  ASSERT_TRUE(flood.ok()) << flood.status();
  ASSERT_TRUE(StartAggregator(true, "new_series_burst: 600\nmax_new_series_per_second: 1\n"));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  const absl::Time start = absl::Now();
  int accepted = 0;
  int refused = 0;
  std::vector<std::unique_ptr<PeerSession>> peers;
  for (int name = 0; name < 8; ++name) {
    std::unique_ptr<PeerSession> peer =
        HelloAs(absl::StrCat("flood-", name), &*flood, "boot-1", 100 + name);
    ASSERT_NE(peer, nullptr);
    std::vector<DeclarationSpec> series;
    std::vector<uint32_t> ids;
    for (uint32_t id = 1; id <= 100; ++id) {
      DeclarationSpec spec = Counter(id, "fabricmon_hostile_budget_total");
      spec.labels = {{"i", absl::StrCat(id)}};
      series.push_back(spec);
      ids.push_back(id);
    }
    peer->Declare(series);
    peer->DefineLayout(1, ids);
    if (peer->Send(1, std::vector<uint64_t>(100, 1))) {
      accepted += 100;
    } else {
      const StreamReport report = peer->Finish();
      ASSERT_TRUE(report.reject().has_value()) << report.Describe();
      EXPECT_EQ(v1::Reject::Reason_Name(report.reject()->reason()), "REASON_LIMIT");
      ++refused;
    }
    peers.push_back(std::move(peer));
  }
  // The bucket refills at 1 a second: the bound grows with the time the flood took.
  const double refill = absl::ToDoubleSeconds(absl::Now() - start) + 1;
  EXPECT_LE(accepted, 600 + refill);
  EXPECT_GE(refused, 2);
  EXPECT_EQ(Rejected("series_rate_limit"), refused) << RejectedLabels();
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: a clock stepped ahead, then back
// ---------------------------------------------------------

TEST_P(TrustBoundaryTransportTest, ClockSteppedAheadThenBackKeepsFlowing) {
  ASSERT_TRUE(StartAggregator(Mtls()));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  ASSERT_TRUE(peer->Declare({Counter(1, "fabricmon_hostile_clock_total")}));
  ASSERT_TRUE(peer->DefineLayout(1, {1}));
  // One hour ahead, then the right time again: every acknowledged batch must be stored.
  ASSERT_TRUE(peer->Send(1, {10}, absl::Now() + absl::Hours(1))) << peer->Finish().Describe();
  EXPECT_EQ(Value("fabricmon_hostile_clock_total", {{"node", "node-a"}}), 10);
  for (uint64_t value : {20, 30, 40}) {
    ASSERT_TRUE(peer->Send(1, {value})) << peer->Finish().Describe();
    EXPECT_EQ(Value("fabricmon_hostile_clock_total", {{"node", "node-a"}}), value)
        << "batch " << peer->last_sequence() << " was acknowledged but not stored";
  }
  EXPECT_EQ(Value("fabricmon_node_up", {{"node", "node-a"}}), 1);
  EXPECT_GE(Value("fabricmon_node_clock_steps_total", {{"node", "node-a"}}).value_or(0), 1);
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: two machines with one certificate and different boot ids -------------------------------

TEST_F(TrustBoundaryTest, TwoBootIdsWithOneIdentityAreRefused) {
  REQUIRE_FIX_FOR(ReasonNamed("REASON_IDENTITY_CONFLICT"), "two boot ids with one identity");
  ASSERT_TRUE(StartAggregator(true, kAuthorization));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  // Machine 1 streams; machine 2 (same certificate, another boot id) connects while machine 1
  // still sends: a clone, not a reboot.
  std::unique_ptr<PeerSession> one = HelloAs("node-a", &node_a_, "boot-one", 1);
  ASSERT_NE(one, nullptr);
  ASSERT_TRUE(one->Declare({Counter(1, "fabricmon_hostile_clone_total")}));
  ASSERT_TRUE(one->DefineLayout(1, {1}));
  ASSERT_TRUE(one->Send(1, {111})) << one->Finish().Describe();
  // Machine 2 tries twice while machine 1 streams: a clone, refused each time.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<PeerSession> peer = Peer(&node_a_);
    ASSERT_NE(peer, nullptr);
    HelloSpec spec;
    spec.node = "node-a";
    spec.boot_id = "boot-two";
    spec.instance_id = 2 + attempt;
    peer->stream().Write(Hello(spec));
    const StreamReport report = peer->Finish();
    ASSERT_TRUE(report.reject().has_value()) << report.Describe();
    EXPECT_EQ(v1::Reject::Reason_Name(report.reject()->reason()), "REASON_IDENTITY_CONFLICT")
        << report.Describe();
    EXPECT_FALSE(report.hello_acked());
  }
  // Machine 1 keeps its stream: nothing was taken over or interleaved.
  ASSERT_TRUE(one->Send(1, {222})) << one->Finish().Describe();
  EXPECT_EQ(Value("fabricmon_hostile_clone_total", {{"node", "node-a"}}), 222);
  EXPECT_EQ(Rejected("identity_conflict"), 2) << RejectedLabels();
  EXPECT_EQ(Value("fabricmon_node_identity_conflicts_total", {{"node", "node-a"}}), 2);
  // `fabricmon nodes` shows it: the count and the last conflict, naming the refused boot.
  const CommandResult nodes = Cli(&operator_, {"nodes"});
  EXPECT_EQ(nodes.exit_code, 0) << nodes.output;
  EXPECT_THAT(nodes.output, HasSubstr("CONFLICTS"));
  EXPECT_THAT(nodes.output, HasSubstr("refused")) << nodes.output;
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: oversize, undecodable, invalid UTF-8
// ----------------------------------------------------

// The honest agent's first declarations are ~77 KB: the limit must leave room for them.
constexpr char kMessageLimit[] = "max_message_bytes: 262144\n";

TEST_P(TrustBoundaryTransportTest, OversizeMessageIsRejectedAsTooLarge) {
  ASSERT_TRUE(StartAggregator(Mtls(), kMessageLimit));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  peer->stream().Write(OversizedDeclaration(400000));
  ExpectRejected(*peer, "REASON_TOO_LARGE", "too_large");
  EXPECT_FALSE(Value("fabricmon_hostile_oversized_total", {{"node", "node-a"}}).has_value());
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

TEST_P(TrustBoundaryTransportTest, FarOversizeMessageEndsOnlyItsStream) {
  ASSERT_TRUE(StartAggregator(Mtls(), kMessageLimit));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  // 16 times the limit: gRPC may refuse it before the aggregator's code sees the bytes.
  peer->stream().Write(OversizedDeclaration(4 << 20));
  const StreamReport report = peer->Finish();
  EXPECT_EQ(report.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << report.Describe();
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
  // gRPC's own receive limit (twice max_message_bytes) ends such a stream before the aggregator's
  // code sees a byte: no Reject can be sent, and gRPC 1.51 tells the service nothing that sets it
  // apart from a peer that went away, so it is not counted (README "Security", a known limit).
  // What is checked is what matters: the stream ends with RESOURCE_EXHAUSTED, nothing of the
  // message is taken, and everything else flows on.
  EXPECT_FALSE(Value("fabricmon_hostile_oversized_total", {{"node", "node-a"}}).has_value());
}

TEST_P(TrustBoundaryTransportTest, UndecodableMessageIsRejected) {
  REQUIRE_FIX_FOR(ReasonNamed("REASON_UNDECODABLE"), "a message that does not decode");
  ASSERT_TRUE(StartAggregator(Mtls()));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  peer->stream().WriteRaw(UndecodableBytes());
  ExpectRejected(*peer, "REASON_UNDECODABLE", "undecodable");
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

TEST_P(TrustBoundaryTransportTest, InvalidUtf8IsRejected) {
  REQUIRE_FIX_FOR(ReasonNamed("REASON_UNDECODABLE"), "invalid UTF-8");
  ASSERT_TRUE(StartAggregator(Mtls()));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  DeclarationSpec spec = Counter(1, "fabricmon_hostile_utf8_total");
  spec.labels = {{"where", "ok@@ok"}};
  absl::StatusOr<std::string> bytes =
      SerializeWithPatch(Declarations({Declaration(spec)}), "@@", "\xc3\x28");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  peer->stream().WriteRaw(*bytes);
  ExpectRejected(*peer, "REASON_UNDECODABLE", "undecodable");
  EXPECT_FALSE(Value("fabricmon_hostile_utf8_total", {{"node", "node-a"}}).has_value());
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- Row: a value beyond its declared counter width
// -----------------------------------------------

TEST_P(TrustBoundaryTransportTest, ValueBeyondDeclaredWidthIsRejected) {
  REQUIRE_FIX_FOR(ReasonNamed("REASON_VALUE_OUT_OF_RANGE"), "a value beyond its declared width");
  ASSERT_TRUE(StartAggregator(Mtls()));
  ASSERT_NO_FATAL_FAILURE(StartHonestAgent());
  std::unique_ptr<PeerSession> peer = HelloAs("node-a", HostileCert());
  ASSERT_NE(peer, nullptr);
  ASSERT_TRUE(peer->Declare({Counter(1, "fabricmon_hostile_narrow_total", 16)}));
  ASSERT_TRUE(peer->DefineLayout(1, {1}));
  ASSERT_TRUE(peer->Send(1, {65535})) << peer->Finish().Describe();
  EXPECT_EQ(Value("fabricmon_hostile_narrow_total", {{"node", "node-a"}}), 65535);
  peer->SendNoWait(1, {70000});
  ExpectRejected(*peer, "REASON_VALUE_OUT_OF_RANGE", "value_out_of_range");
  EXPECT_EQ(peer->Finish().highest_ack(), 1u) << "the refused batch was acknowledged";
  // The stored value is the last one in range; no wrap, no absurd rate.
  EXPECT_EQ(Value("fabricmon_hostile_narrow_total", {{"node", "node-a"}}).value_or(65535), 65535);
  ExpectHonestUntouched();
  ExpectAggregatorUpAndLintClean();
}

// --- The program
// -----------------------------------------------------------------------------------

TEST_F(TrustBoundaryTest, HostilePeerProgramRunsAScript) {
  ASSERT_TRUE(StartAggregator(false));
  const std::string script = dir_ + "/script.txt";
  std::ofstream(script) << "# a hello, a counter, a batch, then bytes that do not decode\n"
                        << "hello scripted boot-1 7\n"
                        << "send declarations { series { id: 1 name: \"fabricmon_scripted_total\" "
                           "type: METRIC_TYPE_COUNTER width_bits: 64 help: \"two\\nlines\" } }\n"
                        << "send layouts { layouts { id: 1 series_ids: 1 } }\n"
                        << "batch 1 0 1 42\n"
                        << "read\n"
                        << "read\n"
                        << "undecodable\n";
  const CommandResult run =
      RunCommand({BuildPath("tests/security/fabricmon_hostile_peer"),
                  absl::StrCat("--aggregator=127.0.0.1:", grpc_port_), "--script=" + script},
                 absl::Seconds(60));
  EXPECT_THAT(run.output, HasSubstr("hello_ack"));
  EXPECT_THAT(run.output, HasSubstr("ack { sequence: 1 }"));
  EXPECT_THAT(run.output, HasSubstr("status: "));
  // The stream is over (the node is down, its values no longer exported); its one series and one
  // sample were stored.
  EXPECT_EQ(Value("fabricmon_node_series", {{"node", "scripted"}}), 1) << run.output;
  EXPECT_EQ(Value("fabricmon_aggregator_samples_total"), 1) << run.output;
  // A bad script line is exit 2, naming the line.
  std::ofstream(script) << "hello x\nfly away\n";
  const CommandResult bad =
      RunCommand({BuildPath("tests/security/fabricmon_hostile_peer"),
                  absl::StrCat("--aggregator=127.0.0.1:", grpc_port_), "--script=" + script},
                 absl::Seconds(60));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("line 2"));
  ExpectAggregatorUpAndLintClean();
}

}  // namespace
}  // namespace fabricmon::testing
