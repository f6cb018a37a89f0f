#include "collectors/ib_fabric/mad_access.h"

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::collectors::ib_fabric {
namespace {

using ::fabricmon::testing::StatusIs;
using ::fabricmon::testing::TempTree;
using ::testing::HasSubstr;

void AddPort(const TempTree& tree, const std::string& ca, int port, const std::string& link_layer,
             const std::string& state) {
  const std::string dir = "class/infiniband/" + ca + "/ports/" + std::to_string(port) + "/";
  if (!link_layer.empty()) {
    tree.WriteFile(dir + "link_layer", link_layer + "\n");
  }
  tree.WriteFile(dir + "state", state + "\n");
}

void AddUmad(const TempTree& tree, int umad, const std::string& ca, int port) {
  const std::string dir = "class/infiniband_mad/umad" + std::to_string(umad) + "/";
  tree.WriteFile(dir + "ibdev", ca + "\n");
  tree.WriteFile(dir + "port", std::to_string(port) + "\n");
}

TEST(MadAccessTest, RoceOnlyNodeIsFailedPrecondition) {
  // The H100 RoCE node of shared/fixtures/ib/ibstat (gpud): CX-7 ports with link layer Ethernet.
  TempTree tree;
  AddPort(tree, "mlx5_0", 1, "Ethernet", "4: ACTIVE");
  AddPort(tree, "mlx5_1", 1, "Ethernet", "4: ACTIVE");
  absl::StatusOr<MadPortLocation> location = CheckMadAccess(tree.root(), "", 0, tree.root());
  ASSERT_THAT(location, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(location.status().message(), HasSubstr("MADs are not available on RoCE ports"));
  EXPECT_THAT(location.status().message(), HasSubstr("mlx5_0 port 1"));
  // Asking for the RoCE port by name says the same.
  EXPECT_THAT(CheckMadAccess(tree.root(), "mlx5_1", 1, tree.root()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(MadAccessTest, PicksTheActiveInfiniBandPortNextToRoce) {
  // Azure HPC: mlx5_an0 is accelerated-networking Ethernet, mlx5_ib0 an HDR port
  // (shared/fixtures/ib/ibstatus).
  TempTree tree;
  AddPort(tree, "mlx5_an0", 1, "Ethernet", "4: ACTIVE");
  AddPort(tree, "mlx5_ib0", 1, "InfiniBand", "1: DOWN");
  AddPort(tree, "mlx5_ib1", 1, "InfiniBand", "4: ACTIVE");
  AddUmad(tree, 0, "mlx5_ib0", 1);
  AddUmad(tree, 1, "mlx5_ib1", 1);
  absl::StatusOr<MadPortLocation> location = CheckMadAccess(tree.root(), "", 0, "/dev/ib");
  ASSERT_THAT(location, fabricmon::testing::IsOk());
  EXPECT_EQ(location->ca, "mlx5_ib1");
  EXPECT_EQ(location->port, 1u);
  EXPECT_EQ(location->link_layer, "InfiniBand");
  EXPECT_EQ(location->umad_device, "/dev/ib/umad1");  // absent file: left to the open
  // A down IB port is still chosen when it is the only one named.
  location = CheckMadAccess(tree.root(), "mlx5_ib0", 0, "/dev/ib");
  ASSERT_THAT(location, fabricmon::testing::IsOk());
  EXPECT_EQ(location->umad_device, "/dev/ib/umad0");
}

TEST(MadAccessTest, MissingLinkLayerMeansInfiniBand) {
  // Old kernels and ibsim's umad2sim tree have no link_layer file.
  TempTree tree;
  AddPort(tree, "ibsim0", 1, "", "4: ACTIVE");
  absl::StatusOr<MadPortLocation> location = CheckMadAccess(tree.root(), "", 0, tree.root());
  ASSERT_THAT(location, fabricmon::testing::IsOk());
  EXPECT_EQ(location->ca, "ibsim0");
  EXPECT_EQ(location->link_layer, "InfiniBand");
  EXPECT_EQ(location->umad_device, "");
}

TEST(MadAccessTest, AbsentHardwareIsNotFound) {
  TempTree tree;
  EXPECT_THAT(CheckMadAccess(tree.root(), "", 0, tree.root()),
              StatusIs(absl::StatusCode::kNotFound));
  AddPort(tree, "mlx5_0", 1, "InfiniBand", "4: ACTIVE");
  EXPECT_THAT(CheckMadAccess(tree.root(), "mlx5_9", 0, tree.root()),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(CheckMadAccess(tree.root(), "mlx5_0", 2, tree.root()),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(MadAccessTest, MapsDeviceErrorsNamingTheDevice) {
  absl::Status denied = MapDeviceError(EACCES, "/dev/infiniband/umad0");
  EXPECT_THAT(denied, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(denied.message(), HasSubstr("/dev/infiniband/umad0"));
  EXPECT_THAT(denied.message(), HasSubstr("read/write access"));
  EXPECT_THAT(MapDeviceError(EPERM, "/dev/infiniband/umad3"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  absl::Status missing = MapDeviceError(ENOENT, "/dev/infiniband/umad0");
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(missing.message(), HasSubstr("ib_umad"));
  EXPECT_THAT(MapDeviceError(ENODEV, "/dev/x"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(MapDeviceError(EIO, "/dev/x"), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(MadAccessTest, LinkLayerCheck) {
  MadPortLocation location;
  location.ca = "mlx5_2";
  location.port = 1;
  location.link_layer = "Ethernet";
  EXPECT_THAT(CheckLinkLayer(location), StatusIs(absl::StatusCode::kFailedPrecondition));
  location.link_layer = "InfiniBand";
  FABRICMON_EXPECT_OK(CheckLinkLayer(location));
  location.link_layer = "";
  FABRICMON_EXPECT_OK(CheckLinkLayer(location));
}

}  // namespace
}  // namespace fabricmon::collectors::ib_fabric
