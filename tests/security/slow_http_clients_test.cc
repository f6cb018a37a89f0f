// /metrics under slow and many clients, with real processes and sockets on 127.0.0.1: the real
// fabricmon-aggregator (metrics_listen) and fabricmon-agent (--listen_metrics on a fixture sysfs
// tree, no aggregator) each get 200 connections that send a partial request and then one more
// header byte every 2 s (a slowloris), and a normal scrape must still complete in under 2 s with
// its whole body. Then: a connection that trickles past metrics_request_timeout_ms is closed by
// the server, and with fewer workers (metrics_max_connections) than slow clients a scrape waits
// its turn but is served.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/security/daemon_process.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kSlowClients = 200;
// The slow clients' request timeout in the scrape tests: longer than the scrape's 30 s bound, so
// that the server cannot free a worker by dropping a slow client while the scrape waits.
constexpr char kSlowRequestTimeout[] = "metrics_request_timeout_ms: 120000\n";

// Clients that open a request and never finish it.
class SlowClients {
 public:
  ~SlowClients() { CloseAll(); }

  // Connects `count` clients to 127.0.0.1:`port`, each sending the start of a GET without the
  // blank line that ends its headers. False if a connect fails.
  bool Open(int port, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        return false;
      }
      fds_.push_back(fd);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        return false;
      }
      const std::string start = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
      if (send(fd, start.data(), start.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
          static_cast<ssize_t>(start.size())) {
        return false;
      }
    }
    return true;
  }

  // One more header byte on every connection still open.
  void Trickle() {
    for (int fd : fds_) {
      (void)send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }

  // Connections the server has closed (EOF or reset on a non-blocking read).
  int ClosedByServer() {
    int closed = 0;
    for (int fd : fds_) {
      char byte;
      const ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || n > 0) {
        ++closed;  // n > 0: the server answered (an error page) and will close
      }
    }
    return closed;
  }

  void CloseAll() {
    for (int fd : fds_) {
      close(fd);
    }
    fds_.clear();
  }

 private:
  std::vector<int> fds_;
};

class SlowHttpClientsTest : public ::testing::Test {
 protected:
  // The aggregator in plaintext on loopback with `config_text` as its config; its /metrics port.
  int StartAggregator(const std::string& config_text) {
    const std::string config = tree_.root() + "/aggregator.textproto";
    std::ofstream(config) << config_text;
    const std::string port_file = tree_.root() + "/port";
    std::vector<std::string> argv = AggregatorArgv(config, port_file);
    argv.push_back("--insecure_plaintext");
    if (!process_.Start(argv, tree_.root() + "/aggregator.log")) {
      ADD_FAILURE() << "cannot start " << argv[0];
      return 0;
    }
    const int metrics_port = WaitForAggregatorPorts(port_file, process_, absl::Seconds(30)).metrics;
    if (metrics_port == 0 ||
        !WaitUntil([&] { return HttpGet(metrics_port, "/metrics").ok(); }, absl::Seconds(30))) {
      ADD_FAILURE() << "aggregator did not come up; log:\n" << process_.Log();
      return 0;
    }
    return metrics_port;
  }

  // The agent serving only its own /metrics from a fixture tree; its port once the first
  // collection shows.
  int StartAgent(const std::string& config_text) {
    const std::string config = tree_.root() + "/agent.textproto";
    std::ofstream(config) << config_text;
    const int metrics_port = FreePort();
    const std::vector<std::string> argv = {
        BuildPath("daemon/agent/fabricmon-agent"),
        "--config=" + config,
        "--sysfs_root=" + SharedFixture("sysfs/gpud-h100/sys"),
        "--node_name=slow-test",
        absl::StrCat("--listen_metrics=127.0.0.1:", metrics_port),
        "--log_level=info"};
    if (!process_.Start(argv, tree_.root() + "/agent.log")) {
      ADD_FAILURE() << "cannot start " << argv[0];
      return 0;
    }
    const bool up = WaitUntil(
        [&] {
          absl::StatusOr<std::string> body = HttpGet(metrics_port, "/metrics");
          return body.ok() && absl::StrContains(*body, "fabricmon_ib_port_");
        },
        absl::Seconds(30));
    if (!up) {
      ADD_FAILURE() << "agent did not serve its metrics; log:\n" << process_.Log();
      return 0;
    }
    return metrics_port;
  }

  // Opens kSlowClients slow clients and waits until the server has accepted them all.
  void OpenSlowClients(int port) {
    port_ = port;
    ASSERT_TRUE(slow_.Open(port, kSlowClients)) << strerror(errno);
    slow_.Trickle();
    EXPECT_TRUE(WaitUntil([&] { return SlowClientsHeld() >= kSlowClients; }, absl::Seconds(10)))
        << "the server accepted " << SlowClientsHeld() << " of " << kSlowClients << " connections";
  }

  // Connections on the /metrics port the server holds: the slow clients once accepted (and a
  // scrape's own, while it lasts).
  int SlowClientsHeld() const { return EstablishedConnectionsOnPort(process_.pid(), port_); }

  // A scrape as Prometheus makes it, served while every slow client still holds its connection;
  // checks the whole body arrived (Content-Length). Not a timing check: with the slow clients'
  // request timeout (kSlowRequestTimeout) far beyond the fetch's bound, a server whose workers
  // the slow clients occupy could answer only after dropping some of them, and the scrape would
  // fail or find fewer of them held. However loaded the machine, a server that keeps a worker
  // free answers with all of them still connected.
  void ExpectFullScrapeBesideSlowClients(int port, absl::string_view must_contain) {
    absl::StatusOr<HttpResponse> response = HttpFetch(port, "/metrics", {}, absl::Seconds(30));
    ASSERT_TRUE(response.ok()) << response.status() << " (scrape beside " << kSlowClients
                               << " slow clients)";
    EXPECT_GE(SlowClientsHeld(), kSlowClients)
        << "the scrape was served only once the server had dropped slow clients";
    EXPECT_EQ(response->status, 200);
    EXPECT_THAT(response->body, HasSubstr(must_contain));
    ASSERT_FALSE(response->body.empty());
    EXPECT_EQ(response->body.back(), '\n');
    // Content-Length, when sent, matches what arrived: the body is whole.
    for (absl::string_view line : absl::StrSplit(response->headers, "\r\n")) {
      if (absl::StartsWithIgnoreCase(line, "Content-Length:")) {
        uint64_t length = 0;
        ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)), &length));
        EXPECT_EQ(length, response->body.size());
      }
    }
  }

  TempTree tree_;
  DaemonProcess process_;
  SlowClients slow_;
  int port_ = 0;  // the /metrics port the slow clients are on
};

TEST_F(SlowHttpClientsTest, AggregatorScrapeIsServedBeside200SlowClients) {
  const int port = StartAggregator(kSlowRequestTimeout);
  ASSERT_NE(port, 0);
  OpenSlowClients(port);
  slow_.Trickle();
  ExpectFullScrapeBesideSlowClients(port, "fabricmon_aggregator_");
  // A second scrape while they still trickle.
  slow_.Trickle();
  ExpectFullScrapeBesideSlowClients(port, "fabricmon_aggregator_");
  EXPECT_TRUE(process_.running());
  slow_.CloseAll();
}

TEST_F(SlowHttpClientsTest, AgentScrapeIsServedBeside200SlowClients) {
  const int port = StartAgent(kSlowRequestTimeout);
  ASSERT_NE(port, 0);
  OpenSlowClients(port);
  slow_.Trickle();
  ExpectFullScrapeBesideSlowClients(port, "fabricmon_ib_port_");
  slow_.Trickle();
  ExpectFullScrapeBesideSlowClients(port, "fabricmon_ib_port_");
  EXPECT_TRUE(process_.running());
  slow_.CloseAll();
}

TEST_F(SlowHttpClientsTest, RequestTimeoutClosesATricklingClient) {
  const int port = StartAggregator("metrics_request_timeout_ms: 1000\n");
  ASSERT_NE(port, 0);
  ASSERT_TRUE(slow_.Open(port, 3));
  // Each keeps sending a byte; the server still closes it once its request is overdue.
  EXPECT_TRUE(WaitUntil(
      [&] {
        slow_.Trickle();
        return slow_.ClosedByServer() == 3;
      },
      absl::Seconds(30)))
      << slow_.ClosedByServer() << " of 3 closed";
}

TEST_F(SlowHttpClientsTest, MoreSlowClientsThanWorkersDelayButDoNotStopAScrape) {
  // 4 workers, 12 slow clients: the scrape waits for the timeouts to free workers, then is served.
  const int port = StartAggregator("metrics_request_timeout_ms: 500\nmetrics_max_connections: 4\n");
  ASSERT_NE(port, 0);
  ASSERT_TRUE(slow_.Open(port, 12));
  absl::StatusOr<std::string> body = HttpGet(port, "/metrics", absl::Seconds(20));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("fabricmon_aggregator_"));
}

TEST_F(SlowHttpClientsTest, NonsenseLimitsStopTheStart) {
  for (const std::string& bad :
       {std::string("metrics_request_timeout_ms: 0\n"), std::string("metrics_max_connections: 1\n"),
        std::string("metrics_max_connections: 100000\n")}) {
    const std::string config = tree_.root() + "/bad.textproto";
    std::ofstream(config) << bad;
    CommandResult aggregator = RunCommand(
        {BuildPath("daemon/aggregator/fabricmon-aggregator"), "--config=" + config,
         "--insecure_plaintext", "--grpc_listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"},
        absl::Seconds(30));
    EXPECT_EQ(aggregator.exit_code, 2) << bad << aggregator.output;
    const std::string field = bad.substr(0, bad.find(':'));
    EXPECT_THAT(aggregator.output, HasSubstr(field + " must be between")) << bad;
    CommandResult agent = RunCommand(
        {BuildPath("daemon/agent/fabricmon-agent"), "--config=" + config,
         "--listen_metrics=127.0.0.1:0", "--sysfs_root=" + SharedFixture("sysfs/gpud-h100/sys")},
        absl::Seconds(30));
    EXPECT_EQ(agent.exit_code, 2) << bad << agent.output;
    EXPECT_THAT(agent.output, HasSubstr(field + " must be between")) << bad;
  }
}

}  // namespace
}  // namespace fabricmon::testing
