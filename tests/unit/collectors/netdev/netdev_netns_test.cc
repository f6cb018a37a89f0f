// Real kernel traffic through the netdev collector (ctest label "netns"; needs root and
// iproute2). Two network namespaces made for this test (fm-a-<pid>, fm-b-<pid>) are joined by a
// veth pair with TEST-NET-1 addresses (192.0.2.1/24, 192.0.2.2/24, RFC 5737) that exist only
// inside them, so nothing leaves the namespaces.
//
// How the collector sees a namespace: sysfs shows the network namespace of the process that
// mounted it, and /proc/net that of the reading process. `ip netns exec NS cmd` does both: it
// enters NS, unshares the mount namespace and remounts /sys there (iproute2 netns_switch), so
// the netdev_dump driver run under it, with the default roots /sys and /proc, reads exactly the
// namespace's netdevs and TCP tables. The test checks that it does (the veth must be listed) and
// skips with a message where `ip netns exec` cannot remount sysfs (some containers).
//
// Every wait is bounded in count and time; namespaces are deleted on every path (the fixture's
// TearDown runs after a failed ASSERT too); children are killed by process group.

#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/netdev/test_process.h"

namespace fabricmon::collectors {
namespace {

using netdev_testing::ChildProcess;
using netdev_testing::FindSample;
using netdev_testing::HaveProgram;
using netdev_testing::ProcessResult;
using netdev_testing::RunProcess;

constexpr char kDumpPath[] = FABRICMON_NETDEV_DUMP_PATH;
constexpr char kTransferPath[] = FABRICMON_TCP_TRANSFER_PATH;

// One run of netdev_dump inside a namespace.
struct Dump {
  int exit_code = -1;
  std::string text;  // exposition
  std::string log;   // stderr

  double Value(const std::string& series) const {
    std::optional<double> value = FindSample(text, series);
    return value.has_value() ? *value : std::nan("");
  }
  bool Has(const std::string& series) const { return FindSample(text, series).has_value(); }
};

std::string NetdevKey(const char* metric, const std::string& netdev) {
  return absl::StrCat(metric, "{netdev=\"", netdev, "\"}");
}

class NetdevNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (network namespaces, veth)";
    }
    if (!HaveProgram("ip")) {
      GTEST_SKIP() << "iproute2 `ip` is not installed";
    }
    const std::string pid = absl::StrCat(getpid());
    ns_a_ = "fm-a-" + pid;
    ns_b_ = "fm-b-" + pid;
    veth_a_ = "fmva" + pid;  // IFNAMSIZ: at most 15 characters
    veth_b_ = "fmvb" + pid;
    ProcessResult added = Ip({"netns", "add", ns_a_});
    if (added.exit_code != 0) {
      GTEST_SKIP() << "`ip netns add` failed (no CAP_SYS_ADMIN / netns support?): " << added.err;
    }
    created_a_ = true;
    ASSERT_EQ(Ip({"netns", "add", ns_b_}).exit_code, 0);
    created_b_ = true;
    const std::vector<std::vector<std::string>> setup = {
        {"link", "add", veth_a_, "netns", ns_a_, "type", "veth", "peer", "name", veth_b_, "netns",
         ns_b_},
        {"-n", ns_a_, "addr", "add", "192.0.2.1/24", "dev", veth_a_},
        {"-n", ns_b_, "addr", "add", "192.0.2.2/24", "dev", veth_b_},
        {"-n", ns_a_, "link", "set", veth_a_, "up"},
        {"-n", ns_b_, "link", "set", veth_b_, "up"},
        {"-n", ns_a_, "link", "set", "lo", "up"},
        {"-n", ns_b_, "link", "set", "lo", "up"},
    };
    for (const std::vector<std::string>& args : setup) {
      ProcessResult result = Ip(args);
      ASSERT_EQ(result.exit_code, 0) << absl::StrJoin(args, " ") << ": " << result.err;
    }
    // The collector must see the namespace's own sysfs (see the file comment).
    Dump probe = RunDump(ns_a_);
    ASSERT_EQ(probe.exit_code, 0) << probe.log;
    if (!probe.Has(NetdevKey("fabricmon_netdev_mtu_bytes", veth_a_))) {
      // Skip only when the environment is why: the namespace's /sys does not show the veth
      // (`ip netns exec` could not remount it). If it does, the collector missed it: a failure.
      ProcessResult listing =
          RunProcess(InNs(ns_a_, {"cat", "/sys/class/net/" + veth_a_ + "/mtu"}), absl::Seconds(20));
      ASSERT_NE(listing.exit_code, 0) << "the namespace's /sys shows " << veth_a_ << " (mtu "
                                      << listing.out << ") but netdev_dump did not report it:\n"
                                      << probe.text << probe.log;
      GTEST_SKIP() << "`ip netns exec` did not give the namespace its own /sys here; netdev_dump "
                      "saw:\n"
                   << probe.log;
    }
  }

  void TearDown() override {
    // Deleting a namespace deletes the veth pair with it.
    if (created_a_) {
      EXPECT_EQ(Ip({"netns", "del", ns_a_}).exit_code, 0);
    }
    if (created_b_) {
      EXPECT_EQ(Ip({"netns", "del", ns_b_}).exit_code, 0);
    }
  }

  static ProcessResult Ip(std::vector<std::string> args) {
    args.insert(args.begin(), "ip");
    return RunProcess(args, absl::Seconds(20));
  }

  static std::vector<std::string> InNs(const std::string& ns, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns});
    return argv;
  }

  static Dump RunDump(const std::string& ns, std::vector<std::string> flags = {}) {
    std::vector<std::string> argv = {kDumpPath, "--sysfs_root=/sys", "--procfs_root=/proc"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ProcessResult result = RunProcess(InNs(ns, argv), absl::Seconds(30));
    EXPECT_FALSE(result.timed_out) << "netdev_dump timed out in " << ns;
    return Dump{result.exit_code, result.out, result.err};
  }

  std::string ns_a_, ns_b_, veth_a_, veth_b_;
  bool created_a_ = false;
  bool created_b_ = false;
};

TEST_F(NetdevNetnsTest, TcpTrafficMovesNetdevBytesAndTcpSegments) {
  const Dump a0 = RunDump(ns_a_);
  const Dump b0 = RunDump(ns_b_);
  ASSERT_EQ(a0.exit_code, 0) << a0.log;
  ASSERT_EQ(b0.exit_code, 0) << b0.log;
  // What the namespace holds: a veth (no bus device) and loopback, each with kind on _info only.
  EXPECT_TRUE(a0.Has(absl::StrCat("fabricmon_netdev_info{netdev=\"", veth_a_,
                                  "\",kind=\"virtual\",driver=\"\",rdma_device=\"\"}")))
      << a0.text;
  EXPECT_TRUE(
      a0.Has("fabricmon_netdev_info{netdev=\"lo\",kind=\"loopback\",driver=\"\","
             "rdma_device=\"\"}"))
      << a0.text;
  EXPECT_EQ(a0.Value(NetdevKey("fabricmon_netdev_speed_bytes_per_second", veth_a_)),
            10000 * 125000.0);  // veth reports 10 Gb/s
  EXPECT_FALSE(a0.Has(NetdevKey("fabricmon_netdev_speed_bytes_per_second", "lo")));  // EINVAL

  // A bounded, exact transfer (tcp_transfer): the receiver reads until EOF, the sender waits for
  // the receiver to close, so every byte crossed the veth before the second dump.
  constexpr int kPayload = 8 * 1024 * 1024;
  absl::StatusOr<ChildProcess> receiver =
      ChildProcess::Start(InNs(ns_b_, {kTransferPath, "--listen=192.0.2.2:5201"}));
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  const ProcessResult sender = RunProcess(
      InNs(ns_a_, {kTransferPath, "--connect=192.0.2.2:5201", absl::StrCat("--bytes=", kPayload)}),
      absl::Seconds(30));
  ASSERT_EQ(sender.exit_code, 0) << sender.err;
  ASSERT_EQ(receiver->Wait(absl::Seconds(10)), 0) << receiver->ReadErr();
  ASSERT_EQ(receiver->ReadOut(), absl::StrCat(kPayload, "\n"));
  const double sent = kPayload;

  const Dump a1 = RunDump(ns_a_);
  const Dump b1 = RunDump(ns_b_);
  ASSERT_EQ(a1.exit_code, 0) << a1.log;
  ASSERT_EQ(b1.exit_code, 0) << b1.log;
  const std::string tx = NetdevKey("fabricmon_netdev_tx_bytes_total", veth_a_);
  const std::string rx = NetdevKey("fabricmon_netdev_rx_bytes_total", veth_b_);
  // Frames carry the payload plus headers: at least the bytes sent, on both ends.
  EXPECT_GE(a1.Value(tx) - a0.Value(tx), sent);
  EXPECT_GE(b1.Value(rx) - b0.Value(rx), sent);
  EXPECT_GE(a1.Value(NetdevKey("fabricmon_netdev_tx_packets_total", veth_a_)) -
                a0.Value(NetdevKey("fabricmon_netdev_tx_packets_total", veth_a_)),
            1);
  // OutSegs counts MSS-sized segments (tcp_skb_pcount, also with TSO): each carries at most
  // MSS < MTU (1500) bytes of payload. InSegs counts received skbs, and GRO merges many segments
  // into one, so the receiver's count only has to move.
  const std::string out_segs = "fabricmon_tcp_segments_total{direction=\"out\"}";
  const std::string in_segs = "fabricmon_tcp_segments_total{direction=\"in\"}";
  EXPECT_GE(a1.Value(out_segs) - a0.Value(out_segs), sent / 1500);
  EXPECT_GE(b1.Value(in_segs) - b0.Value(in_segs), 1);
  EXPECT_GE(a1.Value("fabricmon_tcp_opens_total{mode=\"active\"}") -
                a0.Value("fabricmon_tcp_opens_total{mode=\"active\"}"),
            1);
  EXPECT_EQ(a1.Value("fabricmon_collector_errors_total{collector=\"netdev\",kind=\"unsupported\"}"),
            0);
}

TEST_F(NetdevNetnsTest, CarrierFlapsAreCountedExactly) {
  constexpr int kFlaps = 5;
  const Dump before = RunDump(ns_a_);
  ASSERT_EQ(before.exit_code, 0) << before.log;
  for (int i = 0; i < kFlaps; ++i) {
    ASSERT_EQ(Ip({"-n", ns_a_, "link", "set", veth_a_, "down"}).exit_code, 0);
    ASSERT_EQ(Ip({"-n", ns_a_, "link", "set", veth_a_, "up"}).exit_code, 0);
  }
  const Dump after = RunDump(ns_a_);
  ASSERT_EQ(after.exit_code, 0) << after.log;
  auto delta = [&](const char* metric) {
    const std::string key = NetdevKey(metric, veth_a_);
    return after.Value(key) - before.Value(key);
  };
  // veth_close/veth_open switch the carrier synchronously: one down and one up per flap.
  EXPECT_EQ(delta("fabricmon_netdev_carrier_down_total"), kFlaps);
  EXPECT_EQ(delta("fabricmon_netdev_carrier_up_total"), kFlaps);
  EXPECT_EQ(delta("fabricmon_netdev_carrier_changes_total"), 2 * kFlaps);

  // Administratively down: operstate goes to down (via linkwatch, asynchronously: poll, bounded),
  // carrier and speed answer EINVAL → absent, and that is not an error.
  ASSERT_EQ(Ip({"-n", ns_a_, "link", "set", veth_a_, "down"}).exit_code, 0);
  Dump down;
  for (int i = 0; i < 50; ++i) {
    down = RunDump(ns_a_);
    if (down.Value(NetdevKey("fabricmon_netdev_oper_state", veth_a_)) == 2) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(down.Value(NetdevKey("fabricmon_netdev_oper_state", veth_a_)), 2) << down.text;
  EXPECT_FALSE(down.Has(NetdevKey("fabricmon_netdev_carrier", veth_a_))) << down.text;
  EXPECT_FALSE(down.Has(NetdevKey("fabricmon_netdev_speed_bytes_per_second", veth_a_)));
  EXPECT_TRUE(down.Has(NetdevKey("fabricmon_netdev_rx_bytes_total", veth_a_)));
  for (const char* kind : {"unsupported", "missing", "empty", "not_numeric", "io"}) {
    EXPECT_EQ(down.Value(absl::StrCat(
                  "fabricmon_collector_errors_total{collector=\"netdev\",kind=\"", kind, "\"}")),
              0)
        << kind << "\n"
        << down.text;
  }
  EXPECT_EQ(down.Value(NetdevKey("fabricmon_netdev_carrier_down_total", veth_a_)) -
                before.Value(NetdevKey("fabricmon_netdev_carrier_down_total", veth_a_)),
            kFlaps + 1);
}

TEST_F(NetdevNetnsTest, NetdevDeletedBetweenDiscoverAndCollect) {
  testing::TempTree sync;
  absl::StatusOr<ChildProcess> dump = ChildProcess::Start(InNs(
      ns_a_, {kDumpPath, "--sysfs_root=/sys", "--procfs_root=/proc", "--sync_dir=" + sync.root()}));
  ASSERT_TRUE(dump.ok()) << dump.status();
  bool discovered = false;
  for (int i = 0; i < 1000 && !discovered; ++i) {  // ≤ 10 s
    discovered = access((sync.root() + "/discovered").c_str(), F_OK) == 0;
    if (!discovered) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  ASSERT_TRUE(discovered) << dump->ReadErr();
  // Deleting one end of a veth pair deletes both.
  ASSERT_EQ(Ip({"-n", ns_a_, "link", "del", veth_a_}).exit_code, 0);
  sync.WriteFile("go", "1\n");
  std::optional<int> code = dump->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.has_value()) << "netdev_dump did not finish";
  const std::string text = dump->ReadOut();
  const std::string log = dump->ReadErr();
  EXPECT_EQ(*code, 0) << log;
  EXPECT_TRUE(absl::StrContains(log, "wants_rediscovery: 1")) << log;
  EXPECT_FALSE(absl::StrContains(text, "netdev=\"" + veth_a_ + "\"")) << text;
  EXPECT_TRUE(FindSample(text, NetdevKey("fabricmon_netdev_rx_bytes_total", "lo")).has_value());
  EXPECT_GE(*FindSample(text,
                        "fabricmon_collector_errors_total{collector=\"netdev\",kind="
                        "\"missing\"}"),
            1);
}

}  // namespace
}  // namespace fabricmon::collectors
