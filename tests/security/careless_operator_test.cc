// Careless operators: the real fabricmon-aggregator and fabricmon-agent given a directory,
// /dev/zero, a FIFO, a file over its limit, a key of another certificate or an unwritable port
// file must exit 2 with a message naming the file and the problem, before anything listens. The
// process timeout only keeps a regression (a hang on the FIFO, reading /dev/zero until memory
// runs out) from hanging the suite. And diagnostics_listen: the Diagnostics service on its own
// port, reachable by the CLI there and no longer on the telemetry port.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"
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

// Generous: a correct binary answers in well under a second.
constexpr absl::Duration kProcessTimeout = absl::Seconds(60);

class CarelessOperatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tree_.root();
    CertFactory factory(dir_);
    absl::StatusOr<CertFiles> ca = factory.MakeCa("ca", "fabricmon test CA");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    absl::StatusOr<CertFiles> server =
        factory.Issue(ca_, "aggregator", "fabricmon-aggregator", {"IP:127.0.0.1"});
    absl::StatusOr<CertFiles> node = factory.Issue(ca_, "node-a", "node-a", {"DNS:node-a"});
    absl::StatusOr<CertFiles> cli = factory.Issue(ca_, "operator", "fabricmon-cli", {});
    ASSERT_TRUE(server.ok() && node.ok() && cli.ok());
    server_ = *server;
    node_ = *node;
    cli_ = *cli;
    fifo_ = dir_ + "/cert.fifo";
    ASSERT_EQ(mkfifo(fifo_.c_str(), 0600), 0);
  }

  static std::string Tls(const std::string& ca, const std::string& cert, const std::string& key) {
    return absl::StrCat("tls { ca_file: \"", ca, "\" cert_file: \"", cert, "\" key_file: \"", key,
                        "\" }\n");
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // A sparse file of `bytes`: its size is what the daemons look at first.
  std::string Sparse(const std::string& name, off_t bytes) {
    const std::string path = dir_ + "/" + name;
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, bytes), 0);
    close(fd);
    return path;
  }

  CommandResult Aggregator(std::vector<std::string> flags) {
    std::vector<std::string> argv = {BuildPath("daemon/aggregator/fabricmon-aggregator"),
                                     "--grpc_listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunCommand(argv, kProcessTimeout);
  }
  CommandResult Agent(std::vector<std::string> flags) {
    std::vector<std::string> argv = {BuildPath("daemon/agent/fabricmon-agent"),
                                     "--aggregator=127.0.0.1:1", "--listen_metrics=127.0.0.1:0",
                                     "--sysfs_root=" + SharedFixture("sysfs/gpud-h100/sys")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunCommand(argv, kProcessTimeout);
  }

  // Exit 2, every fragment in the message, and no sign of a listener.
  static void ExpectRefused(const CommandResult& result, const std::vector<std::string>& says) {
    EXPECT_EQ(result.exit_code, 2) << result.output;
    for (const std::string& fragment : says) {
      EXPECT_THAT(result.output, HasSubstr(fragment));
    }
    EXPECT_THAT(result.output, Not(HasSubstr(" on port ")));
    EXPECT_THAT(result.output, Not(HasSubstr("serving /metrics")));
  }

  TempTree tree_;
  std::string dir_;
  CertFiles ca_, server_, node_, cli_;
  std::string fifo_;
};

TEST_F(CarelessOperatorTest, ConfigThatIsADirectory) {
  ExpectRefused(Aggregator({"--config=" + dir_}),
                {"config file \"" + dir_ + "\" is a directory, not a regular file"});
  ExpectRefused(Agent({"--config=" + dir_}),
                {"config file \"" + dir_ + "\" is a directory, not a regular file"});
}

TEST_F(CarelessOperatorTest, ConfigThatIsEndless) {
  ExpectRefused(Aggregator({"--config=/dev/zero"}),
                {"config file \"/dev/zero\" is a character device, not a regular file"});
  ExpectRefused(Agent({"--config=/dev/zero"}),
                {"config file \"/dev/zero\" is a character device, not a regular file"});
}

TEST_F(CarelessOperatorTest, ConfigOverItsLimit) {
  const std::string big = Sparse("big.textproto", (off_t{4} << 20) + 1);
  ExpectRefused(Aggregator({"--config=" + big}),
                {"config file \"" + big + "\" is 4194305 bytes, the limit is 4194304"});
  ExpectRefused(Agent({"--config=" + big}),
                {"config file \"" + big + "\" is 4194305 bytes, the limit is 4194304"});
}

TEST_F(CarelessOperatorTest, CertificateThatIsAFifo) {
  const std::string aggregator = Write("aggregator.textproto", Tls(ca_.cert, fifo_, server_.key));
  ExpectRefused(Aggregator({"--config=" + aggregator}),
                {"tls cert_file \"" + fifo_ + "\" is a FIFO (named pipe), not a regular file"});
  const std::string agent = Write("agent.textproto", Tls(fifo_, node_.cert, node_.key));
  ExpectRefused(Agent({"--config=" + agent}),
                {"tls ca_file \"" + fifo_ + "\" is a FIFO (named pipe), not a regular file"});
}

TEST_F(CarelessOperatorTest, KeyOfAnotherCertificate) {
  const std::string aggregator =
      Write("aggregator.textproto", Tls(ca_.cert, server_.cert, node_.key));
  ExpectRefused(Aggregator({"--config=" + aggregator}),
                {"key_file " + node_.key + " does not match cert_file " + server_.cert});
  const std::string agent = Write("agent.textproto", Tls(ca_.cert, node_.cert, server_.key));
  ExpectRefused(Agent({"--config=" + agent}),
                {"key_file " + server_.key + " does not match cert_file " + node_.cert});
  CommandResult cli = RunCommand(
      {BuildPath("daemon/cli/fabricmon"), "--aggregator=127.0.0.1:1", "--tls_ca=" + ca_.cert,
       "--tls_cert=" + cli_.cert, "--tls_key=" + node_.key, "nodes"},
      kProcessTimeout);
  EXPECT_EQ(cli.exit_code, 2) << cli.output;
  EXPECT_THAT(cli.output, HasSubstr("does not match cert_file " + cli_.cert));
}

TEST_F(CarelessOperatorTest, UnwritablePortFile) {
  // Under a regular file: no one can create it, root included.
  Write("plain", "x");
  const std::string port_file = dir_ + "/plain/port";
  // Each daemon's port files (the aggregator's gRPC and /metrics ports, the agent's /metrics
  // port), each refusal naming its own flag.
  struct PortFileFlag {
    bool agent;
    std::string name;
  };
  for (const PortFileFlag& flag : std::vector<PortFileFlag>{
           {false, "port_file"}, {false, "metrics_port_file"}, {true, "metrics_port_file"}}) {
    auto run = [&](const std::string& path) {
      std::vector<std::string> argv = {"--insecure_plaintext", "--" + flag.name + "=" + path};
      return flag.agent ? Agent(argv) : Aggregator(argv);
    };
    ExpectRefused(run(port_file), {flag.name + " \"" + port_file + "\""});
    ExpectRefused(run(dir_), {flag.name + " \"" + dir_ + "\" is a directory"});
  }
}

// The agent's /metrics port file without a /metrics listener to report is refused (its unwritable
// paths: UnwritablePortFile); with one, the file holds the port that serves.
TEST_F(CarelessOperatorTest, AgentMetricsPortFile) {
  const std::string port_file = dir_ + "/agent-metrics.port";
  ExpectRefused(
      Agent({"--insecure_plaintext", "--listen_metrics=", "--metrics_port_file=" + port_file}),
      {"--metrics_port_file needs a /metrics listener"});
  EXPECT_NE(access(port_file.c_str(), F_OK), 0) << "a refused start wrote its port file";
  // A run that serves nothing refuses the flag rather than ignore it; --check_config finds what
  // the start would refuse.
  ExpectRefused(Agent({"--once", "--metrics_port_file=" + port_file}),
                {"--metrics_port_file names the port the daemon serves /metrics on; --once "
                 "serves nothing"});
  ExpectRefused(Agent({"--doctor", "--metrics_port_file=" + port_file}),
                {"--doctor serves nothing"});
  const CommandResult check = Agent({"--check_config", "--insecure_plaintext",
                                     "--listen_metrics=", "--metrics_port_file=" + port_file});
  EXPECT_EQ(check.exit_code, 1) << check.output;
  EXPECT_THAT(check.output, HasSubstr("--metrics_port_file needs a /metrics listener"));
  EXPECT_THAT(check.output, Not(HasSubstr("config OK")));
  EXPECT_NE(access(port_file.c_str(), F_OK), 0) << "a refused run wrote its port file";

  DaemonProcess agent;
  ASSERT_TRUE(agent.Start(
      {BuildPath("daemon/agent/fabricmon-agent"), "--aggregator=127.0.0.1:1",
       "--insecure_plaintext", "--listen_metrics=127.0.0.1:0", "--metrics_port_file=" + port_file,
       "--sysfs_root=" + SharedFixture("sysfs/gpud-h100/sys")},
      dir_ + "/agent.log"));
  const int port = WaitForPortFile(port_file, agent, absl::Seconds(20));
  ASSERT_GT(port, 0) << agent.Log();
  // The port file names a port that serves /metrics as soon as it exists; the agent's own
  // families are there once its first collection cycle ran (on a loaded machine, a moment later).
  absl::StatusOr<std::string> metrics = HttpGet(port, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (metrics.ok() && !absl::StrContains(*metrics, "fabricmon_agent_") &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    metrics = HttpGet(port, "/metrics");
  }
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, HasSubstr("fabricmon_agent_"));
  kill(agent.pid(), SIGTERM);
  EXPECT_EQ(agent.Wait(absl::Seconds(20)), 0) << agent.Log();
}

TEST_F(CarelessOperatorTest, TopologyAndLinkListOverTheirLimit) {
  // 100 MB: refused whole, where 64 MiB of it used to be read and the line across the cut stored
  // as a wrong cable.
  const std::string topology = Sparse("fabric.topo", 100000000);
  ExpectRefused(Aggregator({"--insecure_plaintext", "--topology_file=" + topology}),
                {"topology_file \"" + topology + "\" is 100000000 bytes, the limit is 67108864"});
  const std::string links = Sparse("links.txt", 100000000);
  ExpectRefused(Aggregator({"--insecure_plaintext", "--link_list=" + links}),
                {"link_list_file \"" + links + "\" is 100000000 bytes, the limit is 67108864"});
  ExpectRefused(Aggregator({"--insecure_plaintext", "--link_list=" + fifo_}),
                {"link_list_file \"" + fifo_ + "\" is a FIFO"});
}

TEST_F(CarelessOperatorTest, DiagnosticsListenServesTheCliOnItsOwnPort) {
  const int diagnostics_port = FreePort();
  ASSERT_NE(diagnostics_port, 0);
  const std::string config =
      Write("aggregator.textproto",
            absl::StrCat(Tls(ca_.cert, server_.cert, server_.key),
                         "diagnostics_listen: \"127.0.0.1:", diagnostics_port, "\"\n",
                         "authorization { operators: \"fabricmon-cli\" }\n"));
  DaemonProcess aggregator;
  ASSERT_TRUE(
      aggregator.Start({BuildPath("daemon/aggregator/fabricmon-aggregator"), "--config=" + config,
                        "--grpc_listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                        "--port_file=" + dir_ + "/port", "--log_level=info"},
                       dir_ + "/aggregator.log"));
  const int grpc_port = WaitForPortFile(dir_ + "/port", aggregator, absl::Seconds(30));
  ASSERT_NE(grpc_port, 0) << aggregator.Log();
  auto cli = [&](int port) {
    return RunCommand(
        {BuildPath("daemon/cli/fabricmon"), absl::StrCat("--aggregator=127.0.0.1:", port),
         "--timeout_s=5", "--tls_ca=" + ca_.cert, "--tls_cert=" + cli_.cert,
         "--tls_key=" + cli_.key, "nodes"},
        kProcessTimeout);
  };
  CommandResult there = cli(diagnostics_port);
  EXPECT_EQ(there.exit_code, 0) << there.output << aggregator.Log();

  // The telemetry port answers Diagnostics with UNIMPLEMENTED: the service is not there.
  grpc::SslCredentialsOptions options;
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  options.pem_root_certs = slurp(ca_.cert);
  options.pem_cert_chain = slurp(cli_.cert);
  options.pem_private_key = slurp(cli_.key);
  for (int port : {grpc_port, diagnostics_port}) {
    auto stub = v1::Diagnostics::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(options)));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListNodesResponse response;
    const grpc::Status status = stub->ListNodes(&context, v1::ListNodesRequest(), &response);
    if (port == grpc_port) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
    } else {
      EXPECT_TRUE(status.ok()) << status.error_message();
    }
  }
  CommandResult telemetry_port = cli(grpc_port);
  EXPECT_EQ(telemetry_port.exit_code, 1) << telemetry_port.output;
  aggregator.Kill();
}

}  // namespace
}  // namespace fabricmon::testing
