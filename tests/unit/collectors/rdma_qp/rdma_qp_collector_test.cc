#include "collectors/rdma_qp/rdma_qp_collector.h"

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectors/core/recording_sink.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/rdma_qp/netlink_builder.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::fabricmon::testing::TempTree;
using rdma_qp::testing::NetlinkBuilder;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr uint8_t kGsi = 1, kRc = 2, kUd = 4;
constexpr uint8_t kInit = 1, kRts = 3, kErr = 6;

// What the fake kernel answers: per (command, device index or -1) a reply or a failure.
struct FakeKernel {
  std::map<std::pair<uint32_t, int64_t>, absl::StatusOr<std::string>> replies;
  int dumps = 0;
  int opens = 0;
  absl::Status open_status;
};

class FakeNetlink final : public RdmaNetlink {
 public:
  explicit FakeNetlink(FakeKernel& kernel) : kernel_(kernel) {}
  absl::StatusOr<std::string> Dump(absl::string_view request) override {
    ++kernel_.dumps;
    struct nlmsghdr header;
    EXPECT_GE(request.size(), sizeof(header));
    std::memcpy(&header, request.data(), sizeof(header));
    EXPECT_EQ(header.nlmsg_len, request.size());
    EXPECT_EQ(header.nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
    EXPECT_EQ(RDMA_NL_GET_CLIENT(header.nlmsg_type), RDMA_NL_NLDEV);
    const uint32_t command = RDMA_NL_GET_OP(header.nlmsg_type);
    int64_t device = -1;
    if (request.size() >= 24) {
      uint32_t index;
      std::memcpy(&index, request.data() + 20, sizeof(index));
      device = index;
    }
    auto it = kernel_.replies.find({command, device});
    if (it == kernel_.replies.end()) {
      return absl::InternalError(absl::StrCat("fake: no reply for ", command, "/", device));
    }
    return it->second;
  }

 private:
  FakeKernel& kernel_;
};

RdmaNetlinkOpener FakeOpener(FakeKernel& kernel) {
  return [&kernel]() -> absl::StatusOr<std::unique_ptr<RdmaNetlink>> {
    ++kernel.opens;
    if (!kernel.open_status.ok()) {
      return kernel.open_status;
    }
    return std::unique_ptr<RdmaNetlink>(new FakeNetlink(kernel));
  };
}

std::string DeviceList() {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_GET).Handle(0, "mlx5_0").Message(RDMA_NLDEV_CMD_GET).Handle(1, "mlx5_1");
  b.Done();
  return b.bytes();
}

// mlx5_0: the kernel's GSI QP, two RC QPs of pid 100 and one RC QP of pid 200 still in INIT.
std::string Mlx50Qps() {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "mlx5_0").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Qp(1, kGsi, kRts, 0, "ib_core").Qp(0x100, kRc, kRts, 100).End();
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "mlx5_0").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Qp(0x101, kRc, kRts, 100).Qp(0x102, kRc, kInit, 200).End();
  b.Done();
  return b.bytes();
}

// mlx5_1: a UD QP of pid 100 and an RC QP in ERR of pid 300 (which exits before comm is read).
std::string Mlx51Qps() {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(1, "mlx5_1").Begin(RDMA_NLDEV_ATTR_RES_QP);
  b.Qp(0x200, kUd, kRts, 100).Qp(0x201, kRc, kErr, 300).End();
  b.Done();
  return b.bytes();
}

std::string ErrorReply(int error) {
  NetlinkBuilder b;
  b.Error(-error);
  return b.bytes();
}

class RdmaQpCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kernel_.replies.insert({{RDMA_NLDEV_CMD_GET, -1}, DeviceList()});
    kernel_.replies.insert({{RDMA_NLDEV_CMD_RES_QP_GET, 0}, Mlx50Qps()});
    kernel_.replies.insert({{RDMA_NLDEV_CMD_RES_QP_GET, 1}, Mlx51Qps()});
    proc_.WriteFile("100/comm", "trainer\n");
    proc_.WriteFile("200/comm", "nccl-tests\n");
  }

  std::unique_ptr<RdmaQpCollector> Make(uint32_t max_processes = 0) {
    v1::RdmaQpCollectorConfig config;
    config.set_procfs_root(proc_.root());
    config.set_max_processes(max_processes);
    absl::StatusOr<std::unique_ptr<RdmaQpCollector>> collector =
        RdmaQpCollector::Create(config, FakeOpener(kernel_));
    EXPECT_THAT(collector, IsOk());
    return collector.ok() ? *std::move(collector) : nullptr;
  }

  // name{label="value",...} → value, for every sample of one Collect().
  std::map<std::string, uint64_t> CollectOnce(RdmaQpCollector& collector) {
    RecordingSink sink;
    EXPECT_THAT(collector.Collect(sink), IsOk());
    std::map<std::string, uint64_t> out;
    for (const RecordedSample& sample : sink.samples()) {
      std::vector<std::string> labels;
      for (const auto& [name, value] : sample.series.labels) {
        labels.push_back(absl::StrCat(name, "=\"", value, "\""));
      }
      EXPECT_EQ(sample.series.collector, "rdma_qp");
      const std::string key =
          absl::StrCat(sample.series.name, "{", absl::StrJoin(labels, ","), "}");
      EXPECT_TRUE(out.emplace(key, sample.raw_value).second) << "duplicate " << key;
    }
    return out;
  }

  static std::map<std::string, uint64_t> Without(std::map<std::string, uint64_t> samples,
                                                 const std::string& prefix) {
    for (auto it = samples.begin(); it != samples.end();) {
      it = it->first.rfind(prefix, 0) == 0 ? samples.erase(it) : std::next(it);
    }
    return samples;
  }

  FakeKernel kernel_;
  TempTree proc_;
};

TEST_F(RdmaQpCollectorTest, CollectsPerDeviceAndPerProcess) {
  std::unique_ptr<RdmaQpCollector> collector = Make();
  ASSERT_NE(collector, nullptr);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  EXPECT_EQ(inventory.ByteSizeLong(), 0u);  // ib_sysfs reports the devices
  ASSERT_EQ(collector->devices().size(), 2u);

  const std::map<std::string, uint64_t> samples = CollectOnce(*collector);
  EXPECT_THAT(
      Without(samples, "fabricmon_collector_errors_total"),
      ElementsAre(
          Pair("fabricmon_rdma_process_qps{pid=\"100\",comm=\"trainer\",device=\"mlx5_0\","
               "type=\"rc\"}",
               2),
          Pair("fabricmon_rdma_process_qps{pid=\"100\",comm=\"trainer\",device=\"mlx5_1\","
               "type=\"ud\"}",
               1),
          Pair("fabricmon_rdma_process_qps{pid=\"200\",comm=\"nccl-tests\",device=\"mlx5_0\","
               "type=\"rc\"}",
               1),
          Pair("fabricmon_rdma_process_qps{pid=\"300\",comm=\"\",device=\"mlx5_1\",type=\"rc\"}",
               1),
          Pair("fabricmon_rdma_qp_processes_dropped{}", 0),
          // This process's own PID namespace decides (the test may run in a container).
          Pair("fabricmon_rdma_qp_sees_all_processes{}", InInitialPidNamespace() ? 1 : 0),
          Pair("fabricmon_rdma_qps{device=\"mlx5_0\",type=\"gsi\",state=\"rts\"}", 1),
          Pair("fabricmon_rdma_qps{device=\"mlx5_0\",type=\"rc\",state=\"init\"}", 1),
          Pair("fabricmon_rdma_qps{device=\"mlx5_0\",type=\"rc\",state=\"rts\"}", 2),
          Pair("fabricmon_rdma_qps{device=\"mlx5_1\",type=\"rc\",state=\"err\"}", 1),
          Pair("fabricmon_rdma_qps{device=\"mlx5_1\",type=\"ud\",state=\"rts\"}", 1)));
  EXPECT_EQ(samples.at("fabricmon_collector_errors_total{collector=\"rdma_qp\",kind=\"io\"}"), 0u);
  EXPECT_EQ(collector->errors().total(), 0u);
  EXPECT_FALSE(collector->WantsRediscovery());
  EXPECT_EQ(kernel_.dumps, 3);  // device list + one QP dump per device
}

TEST_F(RdmaQpCollectorTest, CapsProcessesAndCountsTheDropped) {
  std::unique_ptr<RdmaQpCollector> collector = Make(/*max_processes=*/2);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const std::map<std::string, uint64_t> samples = CollectOnce(*collector);
  // pid 100 owns 3 QPs; 200 and 300 one each: the tie keeps the lower pid.
  std::vector<std::string> processes;
  for (const auto& [key, value] : samples) {
    if (key.rfind("fabricmon_rdma_process_qps{", 0) == 0) {
      processes.push_back(key.substr(0, key.find(",comm")));
    }
  }
  EXPECT_THAT(processes, ElementsAre("fabricmon_rdma_process_qps{pid=\"100\"",
                                     "fabricmon_rdma_process_qps{pid=\"100\"",
                                     "fabricmon_rdma_process_qps{pid=\"200\""));
  EXPECT_EQ(samples.at("fabricmon_rdma_qp_processes_dropped{}"), 1u);
  // The per-device family still counts every QP.
  EXPECT_EQ(samples.at("fabricmon_rdma_qps{device=\"mlx5_1\",type=\"rc\",state=\"err\"}"), 1u);
}

TEST_F(RdmaQpCollectorTest, NotFoundWithoutRdmaNetlinkOrDevices) {
  kernel_.open_status = absl::NotFoundError("no RDMA netlink: ib_core not loaded");
  std::unique_ptr<RdmaQpCollector> collector = Make();
  v1::Inventory inventory;
  EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
  RecordingSink sink;
  EXPECT_THAT(collector->Collect(sink), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(sink.samples().empty());

  kernel_.open_status = absl::OkStatus();
  NetlinkBuilder none;
  none.Done();
  kernel_.replies[{RDMA_NLDEV_CMD_GET, -1}] = none.bytes();
  EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(collector->Collect(sink), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(RdmaQpCollectorTest, DeviceListErrorFailsDiscovery) {
  kernel_.replies[{RDMA_NLDEV_CMD_GET, -1}] = ErrorReply(EPERM);
  std::unique_ptr<RdmaQpCollector> collector = Make();
  v1::Inventory inventory;
  const absl::Status status = collector->Discover(inventory);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(std::string(status.message()), HasSubstr("RDMA device list"));
}

TEST_F(RdmaQpCollectorTest, OneFailingDeviceDoesNotHideTheOther) {
  kernel_.replies[{RDMA_NLDEV_CMD_RES_QP_GET, 1}] = ErrorReply(ENODEV);
  std::unique_ptr<RdmaQpCollector> collector = Make();
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const std::map<std::string, uint64_t> samples = CollectOnce(*collector);
  EXPECT_EQ(samples.at("fabricmon_rdma_qps{device=\"mlx5_0\",type=\"rc\",state=\"rts\"}"), 2u);
  EXPECT_EQ(samples.count("fabricmon_rdma_qps{device=\"mlx5_1\",type=\"ud\",state=\"rts\"}"), 0u);
  EXPECT_EQ(samples.at("fabricmon_collector_errors_total{collector=\"rdma_qp\",kind=\"missing\"}"),
            1u);
  EXPECT_TRUE(collector->WantsRediscovery());

  // A malformed reply counts as io; a timeout likewise.
  kernel_.replies[{RDMA_NLDEV_CMD_RES_QP_GET, 1}] = std::string("\x01\x02\x03", 3);
  kernel_.replies[{RDMA_NLDEV_CMD_RES_QP_GET, 0}] =
      absl::DeadlineExceededError("RDMA netlink dump: no reply within 2000 ms");
  RecordingSink sink;
  const absl::Status status = collector->Collect(sink);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded));  // every device failed
  EXPECT_THAT(std::string(status.message()), HasSubstr("QP dump of mlx5_0"));
  EXPECT_EQ(collector->errors().count(ErrorKind::kIo), 2u);
  ASSERT_FALSE(sink.samples().empty());  // the error counters still go out
  for (const RecordedSample& sample : sink.samples()) {
    EXPECT_EQ(sample.series.name, "fabricmon_collector_errors_total");
  }
}

TEST_F(RdmaQpCollectorTest, PermissionDeniedOnEveryDevice) {
  kernel_.replies[{RDMA_NLDEV_CMD_RES_QP_GET, 0}] = ErrorReply(EPERM);
  kernel_.replies[{RDMA_NLDEV_CMD_RES_QP_GET, 1}] = ErrorReply(EPERM);
  std::unique_ptr<RdmaQpCollector> collector = Make();
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  RecordingSink sink;
  EXPECT_THAT(collector->Collect(sink), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(collector->errors().count(ErrorKind::kPermission), 2u);
}

TEST_F(RdmaQpCollectorTest, ReplyWithoutDoneIsDataLoss) {
  NetlinkBuilder b;
  b.Message(RDMA_NLDEV_CMD_GET).Handle(0, "mlx5_0");
  kernel_.replies[{RDMA_NLDEV_CMD_GET, -1}] = b.bytes();
  std::unique_ptr<RdmaQpCollector> collector = Make();
  v1::Inventory inventory;
  EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(RdmaQpCollectorTest, UnprintableCommIsSanitized) {
  proc_.WriteFile("100/comm",
                  "a\x01\xff"
                  "b\n");
  std::unique_ptr<RdmaQpCollector> collector = Make();
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const std::map<std::string, uint64_t> samples = CollectOnce(*collector);
  EXPECT_EQ(samples.count("fabricmon_rdma_process_qps{pid=\"100\",comm=\"a??b\",device=\"mlx5_0\","
                          "type=\"rc\"}"),
            1u);
}

TEST(RdmaQpCollectorConfigTest, DefaultsAndValidation) {
  absl::StatusOr<std::unique_ptr<RdmaQpCollector>> collector =
      RdmaQpCollector::Create(v1::RdmaQpCollectorConfig());
  ASSERT_THAT(collector, IsOk());
  EXPECT_EQ((*collector)->name(), "rdma_qp");
  EXPECT_EQ((*collector)->interval_ms(), 10000);
  EXPECT_EQ((*collector)->rediscover_interval_ms(), 60000);

  v1::RdmaQpCollectorConfig config;
  config.set_interval_ms(50);
  EXPECT_THAT(RdmaQpCollector::Create(config), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RdmaQpCollectorConfigTest, RegisteredEnabledByDefault) {
  CollectorRegistry registry;
  RegisterRdmaQpCollector(registry);
  ASSERT_EQ(registry.entries().size(), 1u);
  EXPECT_EQ(registry.entries()[0].name, "rdma_qp");
  v1::CollectorsConfig config;
  EXPECT_TRUE(registry.IsEnabled(config, registry.entries()[0]));
  config.mutable_rdma_qp()->set_enabled(false);
  EXPECT_FALSE(registry.IsEnabled(config, registry.entries()[0]));
}

// The real socket. Without ib_core (this build machine) the protocol is unknown and Discover()
// must say NotFound, nothing else; where ib_core is loaded the test has nothing to check.
TEST(RdmaQpCollectorRealTest, DiscoverIsNotFoundWithoutIbCore) {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  if (fd >= 0) {
    ::close(fd);
    GTEST_SKIP() << "NETLINK_RDMA is available here (ib_core loaded)";
  }
  absl::StatusOr<std::unique_ptr<RdmaQpCollector>> collector =
      RdmaQpCollector::Create(v1::RdmaQpCollectorConfig());
  ASSERT_THAT(collector, IsOk());
  v1::Inventory inventory;
  const absl::Status status = (*collector)->Discover(inventory);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(status.message()), HasSubstr("ib_core not loaded"));
}

}  // namespace
}  // namespace fabricmon::collectors
