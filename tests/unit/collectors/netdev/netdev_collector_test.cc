#include "collectors/netdev/netdev_collector.h"

#include <sys/stat.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectors/core/recording_sink.h"
#include "daemon/common/clock.h"
#include "daemon/common/file_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"
#include "tests/unit/collectors/netdev/netdev_test_util.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::fabricmon::testing::TempTree;
using netdev_testing::CollectOnce;
using netdev_testing::MaterializeGcmSnapshot;
using netdev_testing::Scrape;
using ::testing::HasSubstr;

constexpr char kErrors[] = "fabricmon_collector_errors_total{collector=\"netdev\",kind=\"";

std::string ErrorKey(const char* kind) { return absl::StrCat(kErrors, kind, "\"}"); }
std::string Key(const std::string& metric, const std::string& netdev) {
  return absl::StrCat(metric, "{netdev=\"", netdev, "\"}");
}

std::unique_ptr<NetdevCollector> MakeCollector(const std::string& sysfs_root,
                                               const std::string& procfs_root, bool tcp,
                                               const std::string& include = "",
                                               const std::string& exclude = "") {
  v1::NetdevCollectorConfig config;
  config.set_sysfs_root(sysfs_root);
  config.set_procfs_root(procfs_root);
  config.set_tcp(tcp);
  config.mutable_netdevs()->set_include(include);
  config.mutable_netdevs()->set_exclude(exclude);
  absl::StatusOr<std::unique_ptr<NetdevCollector>> collector = NetdevCollector::Create(config);
  EXPECT_THAT(collector, IsOk());
  return collector.ok() ? *std::move(collector) : nullptr;
}

const v1::Netdev* FindNetdev(const v1::Inventory& inventory, const std::string& name) {
  for (const v1::Netdev& netdev : inventory.netdevs()) {
    if (netdev.name() == name) {
      return &netdev;
    }
  }
  return nullptr;
}

// A netdev directory with the attribute files every kernel since 4.16 has.
struct NetdevFiles {
  std::string type = "1\n";
  std::string operstate = "up\n";
  std::string carrier = "1\n";
  std::string carrier_changes = "2\n";
  std::string carrier_up_count = "1\n";
  std::string carrier_down_count = "1\n";
  std::string mtu = "1500\n";
  std::string speed = "25000\n";
  std::string dev_port = "0\n";
  std::map<std::string, std::string> statistics = {{"rx_bytes", "1000\n"},
                                                   {"tx_bytes", "2000\n"},
                                                   {"rx_packets", "10\n"},
                                                   {"tx_packets", "20\n"}};
};

void WriteNetdev(const TempTree& tree, const std::string& dir, const NetdevFiles& files) {
  tree.WriteFile(dir + "/type", files.type);
  tree.WriteFile(dir + "/operstate", files.operstate);
  tree.WriteFile(dir + "/carrier", files.carrier);
  tree.WriteFile(dir + "/carrier_changes", files.carrier_changes);
  tree.WriteFile(dir + "/carrier_up_count", files.carrier_up_count);
  tree.WriteFile(dir + "/carrier_down_count", files.carrier_down_count);
  tree.WriteFile(dir + "/mtu", files.mtu);
  tree.WriteFile(dir + "/speed", files.speed);
  tree.WriteFile(dir + "/dev_port", files.dev_port);
  for (const auto& [name, value] : files.statistics) {
    tree.WriteFile(dir + "/statistics/" + name, value);
  }
}

// A physical netdev the way sysfs lays it out: class/net/<name> → devices/.../<bdf>/net/<name>,
// whose `device` points back at the PCI function.
void WritePciNetdev(const TempTree& tree, const std::string& bdf, const std::string& name,
                    const NetdevFiles& files, const std::string& driver = "") {
  const std::string pci = "devices/pci0000:00/" + bdf;
  WriteNetdev(tree, pci + "/net/" + name, files);
  tree.Symlink(pci + "/net/" + name + "/device", "../../../" + bdf);
  tree.Symlink("class/net/" + name, "../../" + pci + "/net/" + name);
  if (!driver.empty()) {
    tree.MakeDir("bus/pci/drivers/" + driver);
    tree.Symlink(pci + "/driver", "../../../bus/pci/drivers/" + driver);
  }
}

// ---------------------------------------------------------------------------------------------
// Configuration and registration

TEST(NetdevCollectorConfigTest, RejectsBadConfig) {
  v1::NetdevCollectorConfig config;
  config.mutable_netdevs()->set_include("eth(");
  EXPECT_THAT(NetdevCollector::Create(config), StatusIs(absl::StatusCode::kInvalidArgument));
  config.Clear();
  config.set_interval_ms(50);
  EXPECT_THAT(NetdevCollector::Create(config), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NetdevCollectorConfigTest, Defaults) {
  absl::StatusOr<std::unique_ptr<NetdevCollector>> collector =
      NetdevCollector::Create(v1::NetdevCollectorConfig());
  ASSERT_THAT(collector, IsOk());
  EXPECT_EQ((*collector)->name(), "netdev");
  EXPECT_EQ((*collector)->interval_ms(), 1000);
  EXPECT_EQ((*collector)->rediscover_interval_ms(), 60000);
}

TEST(NetdevCollectorRegistryTest, RegistersEnabledByDefault) {
  CollectorRegistry registry;
  RegisterNetdevCollector(registry);
  ASSERT_EQ(registry.entries().size(), 1u);
  EXPECT_EQ(registry.entries()[0].name, "netdev");
  EXPECT_TRUE(registry.entries()[0].enabled_by_default);

  v1::CollectorsConfig config;
  TempTree empty;
  config.mutable_netdev()->set_sysfs_root(empty.root());
  config.mutable_netdev()->set_procfs_root(empty.root());
  CollectorContext context{config, RealClock::Get()};
  auto created = registry.CreateEnabled(context);
  ASSERT_THAT(created, IsOk());
  ASSERT_EQ(created->size(), 1u);
  EXPECT_EQ((*created)[0]->name(), "netdev");

  config.mutable_netdev()->set_enabled(false);
  created = registry.CreateEnabled(context);
  ASSERT_THAT(created, IsOk());
  EXPECT_TRUE(created->empty());
}

TEST(NetdevCollectorTest, NothingThereIsNotFound) {
  TempTree tree;
  auto collector = MakeCollector(tree.root(), tree.root(), /*tcp=*/true);
  v1::Inventory inventory;
  EXPECT_THAT(collector->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
  RecordingSink sink;
  EXPECT_THAT(collector->Collect(sink), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(sink.samples().empty());
}

// ---------------------------------------------------------------------------------------------
// The real procfs fixture tree (shared/fixtures/sysfs/procfs, class/net/eth0)

TEST(NetdevCollectorFixtureTest, ProcfsTreeEth0ExactValues) {
  const std::string root = testing::SharedFixture("sysfs/procfs/sys");
  // Its `device` is a plain file or a dangling link depending on how the tree was unpacked
  // (PROVENANCE.md §1): either way it exists without a bus device behind it.
  struct stat st;
  ASSERT_EQ(lstat((root + "/class/net/eth0/device").c_str(), &st), 0);
  ASSERT_NE(stat((root + "/class/net/eth0/device/infiniband").c_str(), &st), 0);

  auto collector = MakeCollector(root, "/nonexistent", /*tcp=*/false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  ASSERT_EQ(collector->netdev_count(), 1u);
  const v1::Netdev* eth0 = FindNetdev(inventory, "eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_EQ(eth0->kind(), v1::Netdev::KIND_ETHERNET);
  EXPECT_EQ(eth0->driver(), "");
  EXPECT_EQ(eth0->rdma_device(), "");
  EXPECT_EQ(eth0->mtu(), 1500u);
  EXPECT_EQ(eth0->speed_bits_per_second(), 1000000000u);
  EXPECT_EQ(eth0->operstate(), "up");

  const Scrape scrape = CollectOnce(*collector);
  ASSERT_THAT(scrape.status, IsOk());
  EXPECT_EQ(scrape.Get("fabricmon_netdev_info{netdev=\"eth0\",kind=\"ethernet\",driver=\"\","
                       "rdma_device=\"\"}"),
            1);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_changes_total", "eth0")), 2);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_up_total", "eth0")), 1);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_down_total", "eth0")), 1);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier", "eth0")), 1);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_oper_state", "eth0")), 6);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_mtu_bytes", "eth0")), 1500);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_speed_bytes_per_second", "eth0")), 125e6);
  // The capture has no statistics/ directory: one "missing", nothing else wrong.
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 1);
  EXPECT_EQ(scrape.Get(ErrorKey("empty")), 0);
  EXPECT_EQ(scrape.Get(ErrorKey("not_numeric")), 0);
  EXPECT_EQ(scrape.Get(ErrorKey("unsupported")), 0);
  EXPECT_FALSE(scrape.HasPrefix("fabricmon_netdev_rx_bytes_total"));
  EXPECT_FALSE(scrape.HasPrefix("fabricmon_tcp_"));
  EXPECT_FALSE(collector->WantsRediscovery());

  // Counters are typed with their kernel widths.
  for (const RecordedSample& sample : scrape.samples) {
    if (sample.series.name == "fabricmon_netdev_carrier_changes_total") {
      EXPECT_EQ(sample.series.width_bits, 32);
      EXPECT_EQ(sample.series.overflow, Overflow::kWraps);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// IPoIB from the gcm snapshots (8 × ConnectX-6 HDR, Meta)

TEST(NetdevCollectorGcmTest, IpoibNetdevsAreKindIpoibWithTheirHca) {
  TempTree tree;
  ASSERT_TRUE(MaterializeGcmSnapshot("learn_good.json", tree));
  auto collector = MakeCollector(tree.root(), "/nonexistent", /*tcp=*/false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  ASSERT_EQ(collector->netdev_count(), 8u);
  const std::map<std::string, std::string> hca = {
      {"ib0", "mlx5_0"}, {"ib1", "mlx5_1"}, {"ib2", "mlx5_2"}, {"ib3", "mlx5_3"},
      {"ib4", "mlx5_6"}, {"ib5", "mlx5_7"}, {"ib6", "mlx5_8"}, {"ib7", "mlx5_9"}};
  const Scrape scrape = CollectOnce(*collector);
  ASSERT_THAT(scrape.status, IsOk());
  for (const auto& [name, device] : hca) {
    const v1::Netdev* netdev = FindNetdev(inventory, name);
    ASSERT_NE(netdev, nullptr) << name;
    EXPECT_EQ(netdev->kind(), v1::Netdev::KIND_IPOIB) << name;
    EXPECT_EQ(netdev->rdma_device(), device) << name;
    EXPECT_EQ(netdev->rdma_port(), 1u) << name;
    EXPECT_EQ(netdev->mtu(), 2044u) << name;
    EXPECT_EQ(netdev->speed_bits_per_second(), 200000000000u) << name;
    EXPECT_EQ(
        scrape.Get(absl::StrCat("fabricmon_netdev_info{netdev=\"", name,
                                "\",kind=\"ipoib\",driver=\"\",rdma_device=\"", device, "\"}")),
        1);
    EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_changes_total", name)), 3);
    EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_up_total", name)), 2);
    EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_down_total", name)), 1);
    EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_speed_bytes_per_second", name)), 25e9);
    EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_oper_state", name)), 6);
  }
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 8);  // no statistics/ in the snapshot
  EXPECT_EQ(scrape.Get(ErrorKey("empty")), 0);
}

TEST(NetdevCollectorGcmTest, DownIpoibPortEmptyFilesAreCountedAndHideNothingElse) {
  // ib4 is down after 49 flaps; the snapshot holds '' for carrier/speed/duplex (what reading
  // them gave: EINVAL on a real kernel).
  TempTree tree;
  ASSERT_TRUE(MaterializeGcmSnapshot("learn_ib_intf_operstate_down.json", tree));
  auto collector = MakeCollector(tree.root(), "/nonexistent", /*tcp=*/false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const Scrape scrape = CollectOnce(*collector);
  ASSERT_THAT(scrape.status, IsOk());
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_oper_state", "ib4")), 2);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_changes_total", "ib4")), 98);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_up_total", "ib4")), 49);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_down_total", "ib4")), 49);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_mtu_bytes", "ib4")), 2044);
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_carrier", "ib4")));
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_speed_bytes_per_second", "ib4")));
  EXPECT_EQ(FindNetdev(inventory, "ib4")->speed_bits_per_second(), 0u);
  // Empty speed (read once, at discovery: it is not re-read while the link does not move) and
  // empty carrier (read every cycle).
  EXPECT_EQ(scrape.Get(ErrorKey("empty")), 2);
  // The other seven are untouched.
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier", "ib5")), 1);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_speed_bytes_per_second", "ib5")), 25e9);
}

TEST(NetdevCollectorGcmTest, RdmaDeviceComesFromTheNetdevsOwnPciFunction) {
  // The "misbound" snapshot: ib0/mlx5_0 and ib1/mlx5_1 sit on swapped PCI functions and the HCA
  // beside ib2 is mlx5_12. The mapping follows the tree, never the names.
  TempTree tree;
  ASSERT_TRUE(MaterializeGcmSnapshot("learn_ib_misbound_if.json", tree));
  auto collector = MakeCollector(tree.root(), "/nonexistent", /*tcp=*/false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const std::map<std::string, std::string> expected = {
      {"ib0", "mlx5_0"}, {"ib1", "mlx5_1"}, {"ib2", "mlx5_12"}, {"ib3", "mlx5_3"}};
  for (const auto& [name, device] : expected) {
    const v1::Netdev* netdev = FindNetdev(inventory, name);
    ASSERT_NE(netdev, nullptr) << name;
    EXPECT_EQ(netdev->rdma_device(), device) << name;
    EXPECT_EQ(netdev->kind(), v1::Netdev::KIND_IPOIB) << name;
  }
  struct stat st;
  EXPECT_EQ(stat((tree.root() + "/devices/pci0000:00/0000:12:00.0/net/ib0").c_str(), &st), 0);
}

// ---------------------------------------------------------------------------------------------
// Kinds on a hand-built tree

TEST(NetdevCollectorKindTest, ClassifiesEveryKindAndSkipsNonNetdevEntries) {
  TempTree tree;
  // RoCE port found through the RDMA device on its PCI function (mlx5: the IB device's parent is
  // the PCI function, so device/infiniband/ lists it).
  WritePciNetdev(tree, "0000:01:00.0", "enp1s0f0np0", NetdevFiles(), "mlx5_core");
  tree.MakeDir("devices/pci0000:00/0000:01:00.0/infiniband/mlx5_0");
  // RoCE LAG: the bond has no bus device; only the GID table of mlx5_bond_0 names it.
  WriteNetdev(tree, "devices/virtual/net/bond0", NetdevFiles());
  tree.Symlink("class/net/bond0", "../../devices/virtual/net/bond0");
  tree.WriteFile("class/infiniband/mlx5_bond_0/ports/1/gid_attrs/ndevs/0", "bond0\n");
  tree.WriteFile("class/infiniband/mlx5_bond_0/ports/1/gid_attrs/ndevs/1", "bond0\n");
  tree.WriteFile("class/infiniband/mlx5_bond_0/ports/1/gid_attrs/ndevs/2", "");  // unused GID
  // IPoIB on the second port of a dual-port function: device/infiniband exists, type 32 wins.
  NetdevFiles ipoib;
  ipoib.type = "32\n";
  ipoib.dev_port = "1\n";
  ipoib.mtu = "4092\n";
  WritePciNetdev(tree, "0000:02:00.0", "ibp2s0d1", ipoib, "mlx4_core");
  tree.MakeDir("devices/pci0000:00/0000:02:00.0/infiniband/mlx4_0");
  // Plain Ethernet, a veth, loopback and a raw-IP modem.
  WritePciNetdev(tree, "0000:03:00.0", "eno1", NetdevFiles(), "igb");
  WriteNetdev(tree, "devices/virtual/net/veth9", NetdevFiles());
  tree.Symlink("class/net/veth9", "../../devices/virtual/net/veth9");
  NetdevFiles lo;
  lo.type = "772\n";
  lo.operstate = "unknown\n";
  lo.mtu = "65536\n";
  WriteNetdev(tree, "devices/virtual/net/lo", lo);
  tree.Symlink("class/net/lo", "../../devices/virtual/net/lo");
  NetdevFiles wwan;
  wwan.type = "519\n";
  WritePciNetdev(tree, "0000:04:00.0", "wwan0", wwan);
  // class/net also holds plain files when the bonding module is loaded.
  tree.WriteFile("class/net/bonding_masters", "bond0\n");

  auto collector = MakeCollector(tree.root(), "/nonexistent", /*tcp=*/false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  EXPECT_EQ(collector->netdev_count(), 7u);
  EXPECT_EQ(FindNetdev(inventory, "bonding_masters"), nullptr);

  struct Expected {
    const char* name;
    v1::Netdev::Kind kind;
    const char* kind_label;
    const char* driver;
    const char* rdma_device;
    uint32_t rdma_port;
  };
  const Expected expected[] = {
      {"enp1s0f0np0", v1::Netdev::KIND_RDMA_ETHERNET, "rdma_ethernet", "mlx5_core", "mlx5_0", 1},
      {"bond0", v1::Netdev::KIND_RDMA_ETHERNET, "rdma_ethernet", "", "mlx5_bond_0", 1},
      {"ibp2s0d1", v1::Netdev::KIND_IPOIB, "ipoib", "mlx4_core", "mlx4_0", 2},
      {"eno1", v1::Netdev::KIND_ETHERNET, "ethernet", "igb", "", 0},
      {"veth9", v1::Netdev::KIND_VIRTUAL, "virtual", "", "", 0},
      {"lo", v1::Netdev::KIND_LOOPBACK, "loopback", "", "", 0},
      {"wwan0", v1::Netdev::KIND_UNSPECIFIED, "other", "", "", 0},
  };
  const Scrape scrape = CollectOnce(*collector);
  ASSERT_THAT(scrape.status, IsOk());
  for (const Expected& e : expected) {
    const v1::Netdev* netdev = FindNetdev(inventory, e.name);
    ASSERT_NE(netdev, nullptr) << e.name;
    EXPECT_EQ(netdev->kind(), e.kind) << e.name;
    EXPECT_EQ(netdev->driver(), e.driver) << e.name;
    EXPECT_EQ(netdev->rdma_device(), e.rdma_device) << e.name;
    EXPECT_EQ(netdev->rdma_port(), e.rdma_port) << e.name;
    EXPECT_EQ(scrape.Get(absl::StrCat("fabricmon_netdev_info{netdev=\"", e.name, "\",kind=\"",
                                      e.kind_label, "\",driver=\"", e.driver, "\",rdma_device=\"",
                                      e.rdma_device, "\"}")),
              1)
        << e.name;
  }
  // Counters keep only the netdev label: kind lives on the info series alone.
  for (const RecordedSample& sample : scrape.samples) {
    if (absl::StartsWith(sample.series.name, "fabricmon_netdev_") &&
        sample.series.name != "fabricmon_netdev_info") {
      ASSERT_EQ(sample.series.labels.size(), 1u) << sample.series.name;
      EXPECT_EQ(sample.series.labels[0].first, "netdev");
    }
  }
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_oper_state", "lo")), 0);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_mtu_bytes", "lo")), 65536);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_rx_bytes_total", "enp1s0f0np0")), 1000);
  EXPECT_EQ(scrape.Get(ErrorKey("missing")) + scrape.Get(ErrorKey("empty")) +
                scrape.Get(ErrorKey("not_numeric")) + scrape.Get(ErrorKey("io")),
            0);
}

TEST(NetdevCollectorFilterTest, IncludeExcludeOnNetdevNames) {
  TempTree tree;
  WriteNetdev(tree, "class/net/eth0", NetdevFiles());
  WriteNetdev(tree, "class/net/eth1", NetdevFiles());
  WriteNetdev(tree, "class/net/lo", NetdevFiles());
  auto collector = MakeCollector(tree.root(), "/nonexistent", false, "eth.*", "eth1");
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  ASSERT_EQ(inventory.netdevs_size(), 1);
  EXPECT_EQ(inventory.netdevs(0).name(), "eth0");
  // Excluded netdevs coming and going do not trigger rediscovery.
  tree.Remove("class/net/eth1");
  WriteNetdev(tree, "class/net/lo2", NetdevFiles());
  const Scrape scrape = CollectOnce(*collector);
  EXPECT_TRUE(scrape.Has(Key("fabricmon_netdev_mtu_bytes", "eth0")));
  EXPECT_FALSE(collector->WantsRediscovery());

  // The default keeps loopback (exported with kind=loopback; consumers filter on kind).
  auto all = MakeCollector(tree.root(), "/nonexistent", false);
  v1::Inventory everything;
  ASSERT_THAT(all->Discover(everything), IsOk());
  EXPECT_EQ(everything.netdevs_size(), 3);  // eth0, lo, lo2
  // Filtering everything out with no TCP table left is "absent hardware".
  auto none = MakeCollector(tree.root(), "/nonexistent", false, "nomatch");
  v1::Inventory nothing;
  EXPECT_THAT(none->Discover(nothing), StatusIs(absl::StatusCode::kNotFound));
}

// ---------------------------------------------------------------------------------------------
// Robustness: missing, empty, non-numeric files; vanished netdevs; wrapped carrier counters

TEST(NetdevCollectorRobustnessTest, BadFilesAreCountedAndHideNothingElse) {
  TempTree tree;
  NetdevFiles files;
  files.carrier = "yes\n";                     // not numeric
  files.mtu = "";                              // empty
  files.operstate = "sideways\n";              // not an operstate
  files.statistics["tx_bytes"] = "";           // empty
  files.statistics["rx_packets"] = "12abc\n";  // not numeric
  files.statistics["rx_errors"] = "-5\n";      // statistics are unsigned: not numeric
  WriteNetdev(tree, "class/net/eth0", files);
  tree.Remove("class/net/eth0/carrier_down_count");  // missing
  WriteNetdev(tree, "class/net/eth1", NetdevFiles());
  tree.Remove("class/net/eth1/type");  // missing type: still classified (plain Ethernet guess)

  auto collector = MakeCollector(tree.root(), "/nonexistent", false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const Scrape scrape = CollectOnce(*collector);
  ASSERT_THAT(scrape.status, IsOk());
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_rx_bytes_total", "eth0")), 1000);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_tx_packets_total", "eth0")), 20);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_changes_total", "eth0")), 2);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_carrier_up_total", "eth0")), 1);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_speed_bytes_per_second", "eth0")), 25000 * 125000.0);
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_tx_bytes_total", "eth0")));
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_rx_packets_total", "eth0")));
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_rx_errors_total", "eth0")));
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_carrier", "eth0")));
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_mtu_bytes", "eth0")));
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_oper_state", "eth0")));
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_carrier_down_total", "eth0")));
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_mtu_bytes", "eth1")), 1500);
  EXPECT_EQ(FindNetdev(inventory, "eth1")->kind(), v1::Netdev::KIND_VIRTUAL);  // no device link

  // Discovery: carrier_down_count (open) and eth1/type missing; mtu and operstate read empty /
  // odd for the inventory. Collection: mtu and tx_bytes empty; carrier, operstate, rx_packets,
  // rx_errors not numeric.
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 2);
  EXPECT_EQ(scrape.Get(ErrorKey("empty")), 3);
  EXPECT_EQ(scrape.Get(ErrorKey("not_numeric")), 4);
  EXPECT_FALSE(collector->WantsRediscovery());
}

TEST(NetdevCollectorRobustnessTest, VanishedNetdevBetweenDiscoverAndCollect) {
  TempTree tree;
  WriteNetdev(tree, "class/net/eth0", NetdevFiles());
  WriteNetdev(tree, "class/net/veth1", NetdevFiles());
  auto collector = MakeCollector(tree.root(), "/nonexistent", false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  ASSERT_EQ(collector->netdev_count(), 2u);

  tree.Remove("class/net/veth1");
  Scrape scrape = CollectOnce(*collector);
  ASSERT_THAT(scrape.status, IsOk());
  EXPECT_TRUE(collector->WantsRediscovery());
  EXPECT_TRUE(scrape.Has(Key("fabricmon_netdev_rx_bytes_total", "eth0")));
  EXPECT_FALSE(scrape.HasPrefix("fabricmon_netdev_info{netdev=\"veth1\""));
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_rx_bytes_total", "veth1")));
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 1);

  v1::Inventory again;
  ASSERT_THAT(collector->Discover(again), IsOk());
  EXPECT_FALSE(collector->WantsRediscovery());
  EXPECT_EQ(collector->netdev_count(), 1u);
  scrape = CollectOnce(*collector);
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 1);  // cumulative, no new error

  // A netdev that appears is picked up at the next discovery, early; not an error.
  WriteNetdev(tree, "class/net/veth2", NetdevFiles());
  scrape = CollectOnce(*collector);
  EXPECT_TRUE(collector->WantsRediscovery());
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 1);
  ASSERT_THAT(collector->Discover(again), IsOk());
  EXPECT_EQ(collector->netdev_count(), 2u);
}

TEST(NetdevCollectorRobustnessTest, CarrierCountersAre32BitAndPrintedSigned) {
  TempTree tree;
  NetdevFiles files;
  // atomic_t sums printed with %d go negative past 2^31: -2147483646 is 2^32 - 2147483646.
  files.carrier_changes = "-2147483646\n";
  files.carrier_up_count = "2147483647\n";
  files.carrier_down_count = "-2147483648\n";
  WriteNetdev(tree, "class/net/eth0", files);
  auto collector = MakeCollector(tree.root(), "/nonexistent", false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const Scrape scrape = CollectOnce(*collector);
  EXPECT_EQ(scrape.Raw(Key("fabricmon_netdev_carrier_changes_total", "eth0")), 2147483650u);
  EXPECT_EQ(scrape.Raw(Key("fabricmon_netdev_carrier_up_total", "eth0")), 2147483647u);
  EXPECT_EQ(scrape.Raw(Key("fabricmon_netdev_carrier_down_total", "eth0")), 2147483648u);
  EXPECT_EQ(scrape.Get(ErrorKey("not_numeric")), 0);
}

TEST(NetdevCollectorRobustnessTest, StatisticsAre64BitAndNewFilesAreExported) {
  TempTree tree;
  NetdevFiles files;
  files.statistics["rx_bytes"] = "18446744073709551615\n";
  files.statistics["rx_otherhost_dropped"] = "7\n";  // added in Linux 6.0
  WriteNetdev(tree, "class/net/eth0", files);
  auto collector = MakeCollector(tree.root(), "/nonexistent", false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const Scrape scrape = CollectOnce(*collector);
  EXPECT_EQ(scrape.Raw(Key("fabricmon_netdev_rx_bytes_total", "eth0")), UINT64_MAX);
  EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_rx_otherhost_dropped_total", "eth0")), 7);
  for (const RecordedSample& sample : scrape.samples) {
    if (sample.series.name == "fabricmon_netdev_rx_bytes_total") {
      EXPECT_EQ(sample.series.width_bits, 64);
      EXPECT_EQ(sample.series.overflow, Overflow::kWraps);
      EXPECT_EQ(sample.series.unit, Unit::kBytes);
    }
  }
}

TEST(NetdevCollectorSpeedTest, SpeedIsReadAgainOnlyWhenTheLinkMoved) {
  TempTree tree;
  WriteNetdev(tree, "class/net/eth0", NetdevFiles());
  auto collector = MakeCollector(tree.root(), "/nonexistent", false);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  EXPECT_EQ(collector->speed_reads(), 1u);
  EXPECT_EQ(inventory.netdevs(0).speed_bits_per_second(), 25000000000u);
  for (int i = 0; i < 3; ++i) {
    const Scrape scrape = CollectOnce(*collector);
    EXPECT_EQ(scrape.Get(Key("fabricmon_netdev_speed_bytes_per_second", "eth0")), 3.125e9);
  }
  EXPECT_EQ(collector->speed_reads(), 1u);

  // Renegotiated to 100G: a carrier flap comes with it.
  tree.WriteFile("class/net/eth0/speed", "100000\n");
  EXPECT_EQ(CollectOnce(*collector).Get(Key("fabricmon_netdev_speed_bytes_per_second", "eth0")),
            3.125e9);  // no flap yet: cached
  tree.WriteFile("class/net/eth0/carrier_changes", "4\n");
  EXPECT_EQ(CollectOnce(*collector).Get(Key("fabricmon_netdev_speed_bytes_per_second", "eth0")),
            12.5e9);
  EXPECT_EQ(collector->speed_reads(), 2u);

  // Link lost while up: SPEED_UNKNOWN prints -1 → absent, not an error. operstate moved.
  tree.WriteFile("class/net/eth0/speed", "-1\n");
  tree.WriteFile("class/net/eth0/operstate", "lowerlayerdown\n");
  const Scrape down = CollectOnce(*collector);
  EXPECT_FALSE(down.Has(Key("fabricmon_netdev_speed_bytes_per_second", "eth0")));
  EXPECT_EQ(down.Get(Key("fabricmon_netdev_oper_state", "eth0")), 3);
  EXPECT_EQ(down.Get(ErrorKey("not_numeric")), 0);
  EXPECT_EQ(collector->speed_reads(), 3u);
}

// ---------------------------------------------------------------------------------------------
// TCP from /proc/net/snmp and /proc/net/netstat

std::string Testdata(const char* relative) {
  return testing::SourcePath(std::string("tests/unit/collectors/netdev/testdata/") + relative);
}

TEST(NetdevCollectorTcpTest, CuratedCountersFromRealFiles) {
  TempTree empty;
  auto collector = MakeCollector(empty.root(), Testdata("proc"), /*tcp=*/true);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());  // no netdevs, but TCP is there
  EXPECT_EQ(inventory.netdevs_size(), 0);
  const Scrape scrape = CollectOnce(*collector);
  ASSERT_THAT(scrape.status, IsOk());
  EXPECT_EQ(scrape.Get("fabricmon_tcp_segments_total{direction=\"in\"}"), 2231);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_segments_total{direction=\"out\"}"), 1798);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_retransmitted_segments_total"), 1);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_resets_sent_total"), 18);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_established_resets_total"), 0);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_attempt_failures_total"), 16);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_opens_total{mode=\"active\"}"), 59);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_opens_total{mode=\"passive\"}"), 30);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_established_connections"), 2);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_timeouts_total"), 2);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_lost_retransmits_total"), 0);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_aborts_total{reason=\"data\"}"), 1);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_aborts_total{reason=\"timeout\"}"), 0);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_delivered_ce_total"), 0);
  // Every curated field exists in this kernel.
  size_t tcp_series = 0;
  for (const RecordedSample& sample : scrape.samples) {
    tcp_series += absl::StartsWith(sample.series.name, "fabricmon_tcp_") ? 1 : 0;
  }
  EXPECT_EQ(tcp_series, netdev::CuratedTcpMetrics().size());
  EXPECT_EQ(scrape.Get(ErrorKey("missing")) + scrape.Get(ErrorKey("not_numeric")), 0);
}

TEST(NetdevCollectorTcpTest, HostileSnmpHidesOnlyWhatIsBroken) {
  TempTree proc;
  // Tcp values one short of the header (positions untrustworthy → dropped), TcpExt fine.
  proc.WriteFile("net/snmp",
                 "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
                 "Tcp: RtoAlgorithm RtoMin InSegs OutSegs RetransSegs\nTcp: 1 200 5 7\n");
  absl::StatusOr<std::string> netstat = ReadSmallFile(Testdata("proc/net/netstat"), 1 << 20);
  ASSERT_THAT(netstat, IsOk());
  proc.WriteFile("net/netstat", *netstat);
  TempTree empty;
  auto collector = MakeCollector(empty.root(), proc.root(), true);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  Scrape scrape = CollectOnce(*collector);
  EXPECT_FALSE(scrape.HasPrefix("fabricmon_tcp_segments_total"));
  EXPECT_EQ(scrape.Get("fabricmon_tcp_timeouts_total"), 2);
  // Discovery: Tcp section missing (1); net/snmp then has nothing to export and is not read
  // again until the next discovery.
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 1);
  EXPECT_EQ(scrape.Get(ErrorKey("not_numeric")), 0);

  // Now valid at discovery, then a non-numeric InSegs and later a missing Tcp line.
  proc.WriteFile("net/snmp", "Tcp: InSegs OutSegs RetransSegs\nTcp: 5 7 1\n");
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  scrape = CollectOnce(*collector);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_segments_total{direction=\"in\"}"), 5);
  proc.WriteFile("net/snmp", "Tcp: InSegs OutSegs RetransSegs\nTcp: 5x 8 1\n");
  scrape = CollectOnce(*collector);
  EXPECT_FALSE(scrape.Has("fabricmon_tcp_segments_total{direction=\"in\"}"));
  EXPECT_EQ(scrape.Get("fabricmon_tcp_segments_total{direction=\"out\"}"), 8);
  EXPECT_EQ(scrape.Get("fabricmon_tcp_retransmitted_segments_total"), 1);
  EXPECT_EQ(scrape.Get(ErrorKey("not_numeric")), 1);  // the bad value
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 2);      // + InSegs gone from the table
  EXPECT_TRUE(collector->WantsRediscovery());

  proc.WriteFile("net/snmp", "Ip: Forwarding\nIp: 1\n");
  scrape = CollectOnce(*collector);
  EXPECT_FALSE(scrape.HasPrefix("fabricmon_tcp_segments_total"));
  EXPECT_EQ(scrape.Get("fabricmon_tcp_timeouts_total"), 2);
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 3);  // one per missing section, not per field
}

TEST(NetdevCollectorTcpTest, MissingProcFilesAreErrorsAndTcpCanBeDisabled) {
  TempTree tree;
  WriteNetdev(tree, "class/net/eth0", NetdevFiles());
  auto collector = MakeCollector(tree.root(), tree.root() + "/proc", true);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  Scrape scrape = CollectOnce(*collector);
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 2);  // net/snmp and net/netstat
  EXPECT_FALSE(scrape.HasPrefix("fabricmon_tcp_"));

  auto no_tcp = MakeCollector(tree.root(), tree.root() + "/proc", false);
  ASSERT_THAT(no_tcp->Discover(inventory), IsOk());
  scrape = CollectOnce(*no_tcp);
  EXPECT_EQ(scrape.Get(ErrorKey("missing")), 0);
}

// ---------------------------------------------------------------------------------------------
// The live host (whatever this machine has): discovery and collection succeed cleanly.

TEST(NetdevCollectorLiveTest, ThisHostsSysAndProc) {
  struct stat st;
  if (stat("/sys/class/net/lo", &st) != 0) {
    GTEST_SKIP() << "no /sys/class/net/lo on this machine";
  }
  auto collector = MakeCollector("/sys", "/proc", true);
  v1::Inventory inventory;
  ASSERT_THAT(collector->Discover(inventory), IsOk());
  const v1::Netdev* lo = FindNetdev(inventory, "lo");
  ASSERT_NE(lo, nullptr);
  EXPECT_EQ(lo->kind(), v1::Netdev::KIND_LOOPBACK);
  const Scrape scrape = CollectOnce(*collector);
  ASSERT_THAT(scrape.status, IsOk());
  EXPECT_TRUE(scrape.Has(Key("fabricmon_netdev_rx_bytes_total", "lo")));
  EXPECT_TRUE(scrape.Has("fabricmon_tcp_segments_total{direction=\"out\"}"));
  // lo's speed answers EINVAL (no link settings): absent and not an error.
  EXPECT_FALSE(scrape.Has(Key("fabricmon_netdev_speed_bytes_per_second", "lo")));
  EXPECT_EQ(scrape.Get(ErrorKey("unsupported")), 0);
  EXPECT_EQ(scrape.Get(ErrorKey("not_numeric")), 0);
  EXPECT_EQ(scrape.Get(ErrorKey("empty")), 0);
}

}  // namespace
}  // namespace fabricmon::collectors
