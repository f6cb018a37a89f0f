#include "collectors/core/rdma_netdev_map.h"

#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::collectors {
namespace {

using ::fabricmon::testing::SharedFixture;
using ::fabricmon::testing::TempTree;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr RdmaNetdevSource kGid = RdmaNetdevSource::kGidTable;
constexpr RdmaNetdevSource kPci = RdmaNetdevSource::kPciFunction;

using LinkTuple = std::tuple<std::string, std::string, uint32_t, RdmaNetdevSource>;

std::vector<LinkTuple> Tuples(const std::vector<RdmaNetdevLink>& links) {
  std::vector<LinkTuple> out;
  for (const RdmaNetdevLink& link : links) {
    out.emplace_back(link.netdev, link.rdma_device, link.port, link.source);
  }
  return out;
}

// A netdev of a PCI function that has RDMA devices (what class/net/<n>/device resolves to).
void AddPciNetdev(const TempTree& tree, const std::string& netdev, const std::string& rdma,
                  const char* dev_port) {
  tree.WriteFile("class/net/" + netdev + "/type", "1\n");
  tree.MakeDir("class/net/" + netdev + "/device/infiniband/" + rdma);
  if (dev_port != nullptr) {
    tree.WriteFile("class/net/" + netdev + "/dev_port", dev_port);
  }
}

void AddGid(const TempTree& tree, const std::string& rdma, int port, int index,
            const std::string& content) {
  tree.WriteFile("class/infiniband/" + rdma + "/ports/" + std::to_string(port) +
                     "/gid_attrs/ndevs/" + std::to_string(index),
                 content);
}

TEST(RdmaNetdevMapTest, RealTreesWithoutAnyMappingGiveNone) {
  // procfs's capture: mlx5_0 (RoCE VF), mlx4_0 (2 ports), hfi1_0, and an eth0 whose `device` link
  // dangles; no GID tables, no device/infiniband. node_exporter's and gpud's: class/infiniband
  // alone (gpud's mlx5_bond_0 is a RoCE bond whose netdev was not captured).
  for (const char* tree : {"sysfs/procfs/sys", "sysfs/node_exporter/sys", "sysfs/gpud-h100/sys"}) {
    const RdmaNetdevMap map = RdmaNetdevMap::Read(SharedFixture(tree));
    EXPECT_THAT(map.links(), IsEmpty()) << tree;
    EXPECT_THAT(map.NetdevsOf("mlx5_0", 1), IsEmpty()) << tree;
    EXPECT_THAT(map.NetdevsOf("mlx4_0", 2), IsEmpty()) << tree;
    EXPECT_FALSE(map.LinkOf("eth0").has_value()) << tree;
  }
  // A dangling `device` link still makes eth0 physical.
  EXPECT_THAT(PhysicalNetdevsBelow(SharedFixture("sysfs/procfs/sys"), "eth0"), ElementsAre("eth0"));
}

TEST(RdmaNetdevMapTest, AbsentRootGivesNone) {
  const RdmaNetdevMap map = RdmaNetdevMap::Read("/nonexistent/sys");
  EXPECT_THAT(map.links(), IsEmpty());
  EXPECT_THAT(PhysicalNetdevsBelow("/nonexistent/sys", "eth0"), ElementsAre("eth0"));
}

TEST(RdmaNetdevMapTest, GidTablesOnTheProcfsCapture) {
  // The real mlx5_0 / mlx4_0 / hfi1_0 tree, with what a RoCE host adds: GID tables on mlx5_0
  // (several GIDs of one netdev, an unused entry, an entry that cannot be read, a netdev of
  // another namespace) and IPoIB netdevs on both ports of mlx4_0.
  TempTree tree;
  tree.CopyTree(SharedFixture("sysfs/procfs/sys/class"), "class");
  AddGid(tree, "mlx5_0", 1, 0, "eth0\n");
  AddGid(tree, "mlx5_0", 1, 1, "eth0\n");
  AddGid(tree, "mlx5_0", 1, 2, "");
  tree.MakeDir("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3");  // unreadable
  AddGid(tree, "mlx5_0", 1, 4, "podnet0\n");  // not in class/net: another namespace
  AddGid(tree, "mlx4_0", 1, 0, "");           // InfiniBand ports: GIDs name no netdev
  AddPciNetdev(tree, "ib0", "mlx4_0", "0\n");
  AddPciNetdev(tree, "ib1", "mlx4_0", "1\n");

  const RdmaNetdevMap map = RdmaNetdevMap::Read(tree.root());
  EXPECT_THAT(Tuples(map.links()),
              ElementsAre(LinkTuple{"eth0", "mlx5_0", 1, kGid}, LinkTuple{"ib0", "mlx4_0", 1, kPci},
                          LinkTuple{"ib1", "mlx4_0", 2, kPci}));
  EXPECT_THAT(map.NetdevsOf("mlx5_0", 1), ElementsAre("eth0"));
  EXPECT_THAT(map.NetdevsOf("mlx4_0", 1), ElementsAre("ib0"));
  EXPECT_THAT(map.NetdevsOf("mlx4_0", 2), ElementsAre("ib1"));
  EXPECT_THAT(map.NetdevsOf("hfi1_0", 1), IsEmpty());
  EXPECT_THAT(map.NetdevsOf("mlx5_0", 2), IsEmpty());
  ASSERT_TRUE(map.LinkOf("ib1").has_value());
  EXPECT_EQ(map.LinkOf("ib1")->port, 2u);
  EXPECT_FALSE(map.LinkOf("podnet0").has_value());
}

TEST(RdmaNetdevMapTest, SeveralNetdevsOnOnePortGidTableFirst) {
  // A RoCE port whose GID table names a VLAN and its parent, and whose PCI function also has the
  // parent and a second function netdev on the same port.
  TempTree tree;
  AddPciNetdev(tree, "ens1f0", "mlx5_0", "0\n");
  AddPciNetdev(tree, "aaa0", "mlx5_0", "0\n");
  tree.WriteFile("class/net/ens1f0.100/type", "1\n");
  AddGid(tree, "mlx5_0", 1, 0, "ens1f0\n");
  AddGid(tree, "mlx5_0", 1, 3, "ens1f0.100\n");

  const RdmaNetdevMap map = RdmaNetdevMap::Read(tree.root());
  EXPECT_THAT(map.NetdevsOf("mlx5_0", 1), ElementsAre("ens1f0", "ens1f0.100", "aaa0"));
  EXPECT_THAT(Tuples(map.LinksOf("ens1f0")), ElementsAre(LinkTuple{"ens1f0", "mlx5_0", 1, kGid},
                                                         LinkTuple{"ens1f0", "mlx5_0", 1, kPci}));
  EXPECT_EQ(map.LinkOf("ens1f0")->source, kGid);
  EXPECT_EQ(map.LinkOf("aaa0")->source, kPci);
}

TEST(RdmaNetdevMapTest, DevPortAbsentIsPortOneAndGarbageIsUnknown) {
  TempTree tree;
  AddPciNetdev(tree, "eth_old", "mlx5_1", nullptr);  // kernels before 3.15: one port
  AddPciNetdev(tree, "eth_empty", "mlx5_2", "\n");
  AddPciNetdev(tree, "eth_bad", "mlx5_3", "port two\n");
  AddPciNetdev(tree, "eth_huge", "mlx5_4", "4294967295\n");
  const RdmaNetdevMap map = RdmaNetdevMap::Read(tree.root());
  EXPECT_THAT(map.NetdevsOf("mlx5_1", 1), ElementsAre("eth_old"));
  EXPECT_THAT(map.NetdevsOf("mlx5_2", 1), ElementsAre("eth_empty"));
  EXPECT_THAT(map.NetdevsOf("mlx5_3", 1), IsEmpty());
  ASSERT_TRUE(map.LinkOf("eth_bad").has_value());
  EXPECT_EQ(map.LinkOf("eth_bad")->port, 0u);  // behind mlx5_3, port unknown
  EXPECT_EQ(map.LinkOf("eth_huge")->port, 0u);
}

TEST(RdmaNetdevMapTest, FromTheRdmaSideWhenClassNetWasNotCaptured) {
  // A capture of class/infiniband alone: the bus device's net/ entries, and GID names that cannot
  // be checked against class/net (kept), except names that are not one path component.
  TempTree tree;
  tree.WriteFile("class/infiniband/mlx5_0/device/net/ens3f0/dev_port", "0\n");
  tree.WriteFile("class/infiniband/mlx5_0/device/net/ens3f1/dev_port", "1\n");
  AddGid(tree, "mlx5_bond_0", 1, 0, "bond0\n");
  AddGid(tree, "mlx5_bond_0", 1, 1, "../../etc\n");
  AddGid(tree, "mlx5_bond_0", 1, 2, "..\n");
  const RdmaNetdevMap map = RdmaNetdevMap::Read(tree.root());
  EXPECT_THAT(map.NetdevsOf("mlx5_0", 1), ElementsAre("ens3f0"));
  EXPECT_THAT(map.NetdevsOf("mlx5_0", 2), ElementsAre("ens3f1"));
  EXPECT_THAT(map.NetdevsOf("mlx5_bond_0", 1), ElementsAre("bond0"));
  EXPECT_EQ(map.links().size(), 3u);
}

TEST(RdmaNetdevMapTest, AScopeKeepsExcludedDevicesAndNetdevsUnread) {
  // An excluded RDMA device contributes neither its GID tables nor its device/net; an excluded
  // netdev not its device/infiniband. The rest maps as without a scope.
  TempTree tree;
  tree.WriteFile("class/infiniband/mlx5_0/device/net/ens3f0/dev_port", "0\n");
  tree.WriteFile("class/infiniband/mlx5_9/device/net/ens9f0/dev_port", "0\n");
  AddGid(tree, "mlx5_9", 1, 0, "ens9f0\n");
  tree.MakeDir("class/net/ens3f0");
  tree.MakeDir("class/net/ens9f0");
  AddPciNetdev(tree, "ib0", "mlx4_0", "0\n");
  AddPciNetdev(tree, "ib1", "mlx4_1", "0\n");
  RdmaNetdevScope scope;
  scope.rdma_device = [](absl::string_view device) { return device != "mlx5_9"; };
  scope.netdev = [](absl::string_view netdev) { return netdev != "ib1"; };
  const RdmaNetdevMap map = RdmaNetdevMap::Read(tree.root(), scope);
  EXPECT_THAT(map.NetdevsOf("mlx5_0", 1), ElementsAre("ens3f0"));
  EXPECT_THAT(map.NetdevsOf("mlx4_0", 1), ElementsAre("ib0"));
  EXPECT_THAT(map.NetdevsOf("mlx5_9", 1), IsEmpty());
  EXPECT_THAT(map.NetdevsOf("mlx4_1", 1), IsEmpty());
  EXPECT_EQ(RdmaNetdevMap::Read(tree.root()).NetdevsOf("mlx5_9", 1),
            std::vector<std::string>{"ens9f0"});
}

TEST(RdmaNetdevMapTest, BothSidesOfOnePciFunctionGiveOneLink) {
  TempTree tree;
  AddPciNetdev(tree, "ens3f0", "mlx5_0", "0\n");
  tree.WriteFile("class/infiniband/mlx5_0/device/net/ens3f0/dev_port", "0\n");
  const RdmaNetdevMap map = RdmaNetdevMap::Read(tree.root());
  EXPECT_THAT(Tuples(map.links()), ElementsAre(LinkTuple{"ens3f0", "mlx5_0", 1, kPci}));
}

TEST(RdmaNetdevMapTest, NonNumericPortDirectoriesAreSkipped) {
  TempTree tree;
  tree.WriteFile("class/net/eth0/type", "1\n");
  tree.WriteFile("class/infiniband/mlx5_0/ports/x/gid_attrs/ndevs/0", "eth0\n");
  tree.WriteFile("class/infiniband/mlx5_0/ports/0/gid_attrs/ndevs/0", "eth0\n");
  tree.WriteFile("class/infiniband/mlx5_1/ports", "");  // not even a directory
  const RdmaNetdevMap map = RdmaNetdevMap::Read(tree.root());
  EXPECT_THAT(map.links(), IsEmpty());
}

TEST(PhysicalNetdevsBelowTest, VlanOnBondOnTwoPorts) {
  TempTree tree;
  tree.MakeDir("class/net/eth0/device");
  tree.MakeDir("class/net/eth1/device");
  tree.Symlink("class/net/bond0/lower_eth0", "../eth0");
  tree.Symlink("class/net/bond0/lower_eth1", "../eth1");
  tree.Symlink("class/net/bond0.100/lower_bond0", "../bond0");
  tree.WriteFile("class/net/veth0/type", "1\n");  // no device, no lowers: itself
  EXPECT_THAT(PhysicalNetdevsBelow(tree.root(), "bond0.100"), ElementsAre("eth0", "eth1"));
  EXPECT_THAT(PhysicalNetdevsBelow(tree.root(), "bond0"), ElementsAre("eth0", "eth1"));
  EXPECT_THAT(PhysicalNetdevsBelow(tree.root(), "eth1"), ElementsAre("eth1"));
  EXPECT_THAT(PhysicalNetdevsBelow(tree.root(), "veth0"), ElementsAre("veth0"));
}

TEST(PhysicalNetdevsBelowTest, LowerLinkLoopEnds) {
  TempTree tree;
  tree.Symlink("class/net/a/lower_b", "../b");
  tree.Symlink("class/net/b/lower_a", "../a");
  // a → b → a → b → a: the depth bound stops there and takes the netdev it reached.
  EXPECT_THAT(PhysicalNetdevsBelow(tree.root(), "a"), ElementsAre("a"));
}

}  // namespace
}  // namespace fabricmon::collectors
