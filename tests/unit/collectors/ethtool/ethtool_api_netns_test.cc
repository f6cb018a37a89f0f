// The real SIOCETHTOOL api against veth pairs inside a throw-away network namespace
// (`ip netns add fmtest-<pid>-<n>`), plus the collector end to end on that api. veth has an
// ETH_SS_STATS set (peer_ifindex, rx_queue_<q>_xdp_packets, ...); lo has none.
// Needs root and iproute2; skipped otherwise. The namespace is deleted in TearDown on every path.

#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectors/core/recording_sink.h"
#include "collectors/ethtool/ethtool_api.h"
#include "collectors/ethtool/ethtool_collector.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/ethtool/ethtool_test_util.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::collectors::ethtool_testing::FamilySamples;
using ::fabricmon::collectors::ethtool_testing::FindSample;
using ::fabricmon::testing::StatusIs;
using ::fabricmon::testing::TempTree;
using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::SizeIs;

int Shell(const std::string& command) {
  const int status = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::atomic<int> namespace_counter{0};

class EthtoolNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root to create a network namespace and veth pairs";
    }
    if (Shell("ip netns list") != 0) {
      GTEST_SKIP() << "`ip netns` is unavailable (iproute2 missing?)";
    }
    ns_ = absl::StrCat("fmtest-", getpid(), "-", namespace_counter++);
    (void)Shell("ip netns del " + ns_);  // a stale one from a crashed run with the same pid
    if (Shell("ip netns add " + ns_) != 0) {
      GTEST_SKIP() << "cannot create network namespace " << ns_ << " (no CAP_SYS_ADMIN?)";
    }
    created_ = true;
    const std::string ip = "ip -n " + ns_ + " ";
    ASSERT_EQ(Shell(ip + "link add fmva type veth peer name fmvb"), 0);
    // A second pair with 16 queues: 145 statistics, more than GetStats' minimum headroom.
    ASSERT_EQ(Shell(ip + "link add fmga numrxqueues 16 numtxqueues 16 type veth peer name fmgb"),
              0);
    for (const char* dev : {"fmva", "fmvb", "fmga", "fmgb"}) {
      ASSERT_EQ(Shell(ip + "link set " + dev + " up"), 0) << dev;
    }
    InNamespace([this] {
      api_ = CreateIoctlEthtoolApi();
      ctl_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      packet_fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
      fmva_index_ = if_nametoindex("fmva");
      fmvb_index_ = if_nametoindex("fmvb");
    });
    ASSERT_NE(api_, nullptr) << "could not enter " << ns_;
    ASSERT_GE(ctl_fd_, 0);
    ASSERT_GE(packet_fd_, 0);
    ASSERT_NE(fmva_index_, 0u);
    ASSERT_NE(fmvb_index_, 0u);
    // veth counts rx_queue_0_xdp_packets only on its NAPI path: GRO on at the receiver, and no
    // TSO at the sender (veth_skb_is_eligible_for_gro). Legacy ethtool ioctls; no ethtool(8).
    ASSERT_TRUE(SetFeature("fmvb", ETHTOOL_SGRO, 1));
    ASSERT_TRUE(SetFeature("fmva", ETHTOOL_STSO, 0));
    ASSERT_TRUE(SetFeature("fmva", ETHTOOL_SGSO, 0));
  }

  void TearDown() override {
    api_.reset();
    if (ctl_fd_ >= 0) {
      close(ctl_fd_);
    }
    if (packet_fd_ >= 0) {
      close(packet_fd_);
    }
    if (created_) {
      EXPECT_EQ(Shell("ip netns del " + ns_), 0) << "leaked network namespace " << ns_;
    }
  }

  // Runs `body` on a thread that has joined the test namespace. Sockets created there keep
  // that namespace for their whole life, whichever thread uses them later.
  void InNamespace(const std::function<void()>& body) {
    std::thread([&] {
      const int fd = open(("/var/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        return;
      }
      const int entered = setns(fd, CLONE_NEWNET);
      close(fd);
      if (entered == 0) {
        body();
      }
    }).join();
  }

  std::unique_ptr<EthtoolApi> ApiInNamespace() {
    std::unique_ptr<EthtoolApi> api;
    InNamespace([&] { api = CreateIoctlEthtoolApi(); });
    return api;
  }

  bool SetFeature(const char* dev, uint32_t cmd, uint32_t value) {
    ethtool_value request{};
    request.cmd = cmd;
    request.data = value;
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, dev, IFNAMSIZ - 1);
    ifr.ifr_data = reinterpret_cast<char*>(&request);
    return ioctl(ctl_fd_, SIOCETHTOOL, &ifr) == 0;
  }

  // Sends `count` broadcast Ethernet frames (local experimental ethertype) out of fmva.
  void SendFrames(int count) {
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = static_cast<int>(fmva_index_);
    to.sll_halen = ETH_ALEN;
    std::memset(to.sll_addr, 0xff, ETH_ALEN);
    unsigned char frame[64] = {};
    std::memset(frame, 0xff, ETH_ALEN);                               // destination
    const unsigned char source[ETH_ALEN] = {0x02, 0, 0, 0, 0, 0x01};  // locally administered
    std::memcpy(frame + ETH_ALEN, source, ETH_ALEN);
    frame[12] = 0x88;  // ethertype 0x88b5: IEEE 802 local experimental
    frame[13] = 0xb5;
    for (int i = 0; i < count; ++i) {
      ASSERT_EQ(
          sendto(packet_fd_, frame, sizeof(frame), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
          static_cast<ssize_t>(sizeof(frame)))
          << std::strerror(errno);
    }
  }

  // Value of `key` on `netdev` through the api under test.
  uint64_t StatOf(EthtoolApi& api, const std::string& netdev, const std::string& key) {
    absl::StatusOr<std::vector<std::string>> names = api.GetStringSet(netdev);
    EXPECT_TRUE(names.ok()) << names.status();
    if (!names.ok()) {
      return 0;
    }
    std::vector<uint64_t> values(names->size());
    EXPECT_THAT(api.GetStats(netdev, values), testing::IsOk());
    auto it = std::find(names->begin(), names->end(), key);
    EXPECT_NE(it, names->end()) << key;
    EXPECT_EQ(values.size(), names->size());
    if (it == names->end() || values.size() != names->size()) {
      return 0;
    }
    return values[static_cast<size_t>(it - names->begin())];
  }

  // Polls until `key` on fmvb reaches `at_least` (softirq delivery is asynchronous) or 5 s pass.
  uint64_t WaitForRx(EthtoolApi& api, uint64_t at_least) {
    uint64_t value = 0;
    for (int i = 0; i < 500; ++i) {
      value = StatOf(api, "fmvb", "rx_queue_0_xdp_packets");
      if (value >= at_least) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return value;
  }

  std::string ns_;
  bool created_ = false;
  std::unique_ptr<EthtoolApi> api_;
  int ctl_fd_ = -1;
  int packet_fd_ = -1;
  unsigned fmva_index_ = 0;
  unsigned fmvb_index_ = 0;
};

TEST_F(EthtoolNetnsTest, DriverInfoOfVeth) {
  absl::StatusOr<EthtoolDriverInfo> info = api_->GetDriver("fmva");
  FABRICMON_ASSERT_OK(info);
  EXPECT_EQ(info->driver, "veth");
  EXPECT_GT(info->n_stats, 0u);
}

TEST_F(EthtoolNetnsTest, StringSetMatchesStatsAndDriverInfo) {
  absl::StatusOr<EthtoolDriverInfo> info = api_->GetDriver("fmva");
  FABRICMON_ASSERT_OK(info);
  absl::StatusOr<std::vector<std::string>> names = api_->GetStringSet("fmva");
  FABRICMON_ASSERT_OK(names);
  ASSERT_THAT(*names, ::testing::Not(IsEmpty()));
  EXPECT_EQ(names->size(), info->n_stats);
  EXPECT_THAT(*names, Contains("peer_ifindex"));
  EXPECT_THAT(*names, Contains("rx_queue_0_xdp_packets"));
  std::vector<uint64_t> values(names->size());
  FABRICMON_ASSERT_OK(api_->GetStats("fmva", values));
  EXPECT_EQ(values.size(), names->size());
  EXPECT_EQ(StatOf(*api_, "fmva", "peer_ifindex"), fmvb_index_);
}

TEST_F(EthtoolNetnsTest, ValuesMoveWithTraffic) {
  const uint64_t before = StatOf(*api_, "fmvb", "rx_queue_0_xdp_packets");
  SendFrames(20);
  const uint64_t after = WaitForRx(*api_, before + 20);
  EXPECT_GE(after, before + 20);
  EXPECT_LT(after, before + 1000);  // bounded: only our frames and a few IPv6 ones
}

TEST_F(EthtoolNetnsTest, StaleCountIsAbortedNeverAnOverwrite) {
  // fmga has 145 statistics; a caller that believes it has 10 gets 64 slots of headroom. Older
  // kernels copy all 145 regardless of the count passed (the guard page turns that into EFAULT),
  // newer ones answer n_stats = 0: both are Aborted, never a write past the buffer.
  std::vector<uint64_t> values(10);
  EXPECT_THAT(api_->GetStats("fmga", values), StatusIs(absl::StatusCode::kAborted));
  absl::StatusOr<std::vector<std::string>> names = api_->GetStringSet("fmga");
  FABRICMON_ASSERT_OK(names);
  EXPECT_GT(names->size(), 10u + 64u);
  values.assign(names->size(), 0);
  FABRICMON_ASSERT_OK(api_->GetStats("fmga", values));
  EXPECT_EQ(values.size(), names->size());
  // A caller whose count is too large: older kernels return the smaller current set, newer
  // ones refuse.
  std::vector<uint64_t> big(names->size());
  absl::Status status = api_->GetStats("fmva", big);
  if (status.ok()) {
    EXPECT_LT(big.size(), names->size());
  } else {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kAborted));
  }
  std::vector<uint64_t> none;
  EXPECT_THAT(api_->GetStats("fmva", none), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(EthtoolNetnsTest, MissingNetdevIsNotFound) {
  EXPECT_THAT(api_->GetDriver("fmnosuch0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(api_->GetStringSet("fmnosuch0"), StatusIs(absl::StatusCode::kNotFound));
  std::vector<uint64_t> values(4);
  EXPECT_THAT(api_->GetStats("fmnosuch0", values), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(api_->GetDriver("a-name-longer-than-ifnamsiz"),
              StatusIs(absl::StatusCode::kNotFound));
  // The host's netdevs are not visible from the namespace's socket, nor the reverse.
  EXPECT_THAT(CreateIoctlEthtoolApi()->GetDriver("fmva"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(EthtoolNetnsTest, LoopbackHasNoStatistics) {
  EXPECT_THAT(api_->GetDriver("lo"), StatusIs(absl::StatusCode::kUnimplemented));
  absl::StatusOr<std::vector<std::string>> names = api_->GetStringSet("lo");
  if (names.ok()) {
    EXPECT_THAT(*names, IsEmpty());
  } else {
    EXPECT_THAT(names, StatusIs(absl::StatusCode::kUnimplemented));
  }
  std::vector<uint64_t> values(1);
  EXPECT_THAT(api_->GetStats("lo", values), StatusIs(absl::StatusCode::kUnimplemented));
}

TEST_F(EthtoolNetnsTest, CollectorEndToEndOnTheRealApi) {
  // Soft-RoCE style mapping: an RDMA device whose GID names the veth (no `device` link).
  TempTree tree;
  tree.WriteFile("class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "fmvb\n");
  tree.WriteFile("class/net/fmvb/type", "1\n");
  tree.WriteFile("class/net/lo/type", "772\n");
  tree.WriteFile("class/infiniband/rxe1/ports/1/gid_attrs/ndevs/0", "lo\n");  // no stats
  v1::EthtoolCollectorConfig config;
  config.set_sysfs_root(tree.root());
  config.set_extra_keys("rx_queue_0_xdp_.*");
  std::unique_ptr<EthtoolApi> api = ApiInNamespace();
  ASSERT_NE(api, nullptr);
  auto collector = EthtoolCollector::Create(config, std::move(api));
  FABRICMON_ASSERT_OK(collector);
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK((*collector)->Discover(inventory));
  EXPECT_THAT((*collector)->collected_netdevs(), ::testing::ElementsAre("fmvb"));

  auto packets = [&]() -> uint64_t {
    RecordingSink sink;
    EXPECT_THAT((*collector)->Collect(sink), testing::IsOk());
    EXPECT_NE(FindSample(sink.samples(), "fabricmon_roce_netdev_info",
                         {{"netdev", "fmvb"}, {"driver", "veth"}, {"rdma_device", "rxe0"}}),
              nullptr);
    // veth is not mlx5: no typed fabricmon_roce_* counters, only the selected keys.
    EXPECT_THAT(FamilySamples(sink.samples(), "fabricmon_roce_kernel_bytes_total"), IsEmpty());
    const RecordedSample* sample =
        FindSample(sink.samples(), "fabricmon_ethtool_stat_total",
                   {{"netdev", "fmvb"}, {"key", "rx_queue_0_xdp_packets"}});
    EXPECT_NE(sample, nullptr);
    return sample == nullptr ? 0 : sample->raw_value;
  };
  const uint64_t before = packets();
  SendFrames(10);
  WaitForRx(*api_, before + 10);
  EXPECT_GE(packets(), before + 10);
}

}  // namespace
}  // namespace fabricmon::collectors
