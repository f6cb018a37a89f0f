// Writes corpus/rdma_netlink/ seeds: RDMA netlink replies laid out like the kernel's, built with
// the unit tests' NetlinkBuilder (run by hand after changing the parser's input:
// fabricmon_fuzz_make_rdma_netlink_seeds tests/fuzz/corpus/rdma_netlink).

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/unit/collectors/rdma_qp/netlink_builder.h"

namespace {

using fabricmon::collectors::rdma_qp::testing::NetlinkBuilder;

bool Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;

  NetlinkBuilder qps;  // two devices: kernel GSI, user RC and UD QPs
  qps.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(0, "mlx5_0").Begin(RDMA_NLDEV_ATTR_RES_QP);
  qps.Qp(1, 1, 3, 0, "ib_core").Qp(0x120, 2, 3, 4242).End();
  qps.Message(RDMA_NLDEV_CMD_RES_QP_GET).Handle(1, "mlx5_1").Begin(RDMA_NLDEV_ATTR_RES_QP);
  qps.Qp(0x200, 4, 2, 4242, "", 0).Qp(0x201, 8, 6, 17).End();
  qps.Done();
  ok = ok && Write(dir, "qp_dump_two_devices", qps.bytes());

  NetlinkBuilder devices;
  devices.Message(RDMA_NLDEV_CMD_GET).Handle(0, "mlx5_0").U32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  devices.Str(RDMA_NLDEV_ATTR_FW_VERSION, "28.39.1002");
  devices.Message(RDMA_NLDEV_CMD_GET).Handle(1, "rocep1s0f1").Done();
  ok = ok && Write(dir, "device_list", devices.bytes());

  NetlinkBuilder eperm;
  eperm.Error(-EPERM);
  ok = ok && Write(dir, "error_eperm", eperm.bytes());

  const std::string full = qps.bytes();
  ok = ok && Write(dir, "truncated", full.substr(0, full.size() / 2));
  return ok ? 0 : 1;
}
