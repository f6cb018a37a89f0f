#include "tests/unit/collectors/netdev/netdev_test_util.h"

#include <map>

#include "absl/strings/str_split.h"
#include "daemon/common/file_reader.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::collectors::netdev_testing {

bool MaterializeGcmSnapshot(const std::string& json_name, const testing::TempTree& tree) {
  absl::StatusOr<std::string> json =
      ReadSmallFile(testing::SharedFixture("sysfs/gcm/" + json_name), 4 << 20);
  if (!json.ok()) {
    ADD_FAILURE() << json.status();
    return false;
  }
  google::protobuf::Struct snapshot;
  if (!google::protobuf::util::JsonStringToMessage(*json, &snapshot).ok()) {
    ADD_FAILURE() << "cannot parse " << json_name;
    return false;
  }
  constexpr absl::string_view kPrefix = "/sys/bus/pci/devices/";
  std::map<std::string, std::string> links;  // link path → target
  for (const auto& [path, value] : snapshot.fields()) {
    if (!absl::StartsWith(path, kPrefix)) {
      continue;
    }
    const std::string rest = path.substr(kPrefix.size());  // <bdf>/net/ib0/mtu
    const std::vector<std::string> parts = absl::StrSplit(rest, '/');
    if (parts.size() < 2) {
      continue;
    }
    const std::string& bdf = parts[0];
    tree.WriteFile("devices/pci0000:00/" + rest, value.string_value());
    if (parts.size() >= 4 && parts[1] == "net") {
      links["class/net/" + parts[2]] = "../../devices/pci0000:00/" + bdf + "/net/" + parts[2];
      links["devices/pci0000:00/" + bdf + "/net/" + parts[2] + "/device"] = "../../../" + bdf;
    }
    if (parts.size() >= 4 && parts[1] == "infiniband") {
      links["class/infiniband/" + parts[2]] =
          "../../devices/pci0000:00/" + bdf + "/infiniband/" + parts[2];
    }
  }
  for (const auto& [link, target] : links) {
    tree.Symlink(link, target);
  }
  return true;
}

}  // namespace fabricmon::collectors::netdev_testing
