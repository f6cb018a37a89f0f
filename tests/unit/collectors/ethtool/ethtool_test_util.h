#pragma once

// Shared helpers of the ethtool collector tests: sysfs trees that make netdevs discoverable, the
// real captures of ../shared/fixtures/ethtool, and sample lookups.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/core/recording_sink.h"
#include "collectors/core/sample.h"
#include "collectors/ethtool/ethtool_collector.h"
#include "fabricmon/v1/config.pb.h"
#include "tests/fakes/ethtool/fixture_ethtool_api.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::collectors::ethtool_testing {

// A netdev sysfs entry: class/net/<netdev>/{type, device -> PCI function}.
void AddPhysicalNetdev(const testing::TempTree& tree, const std::string& netdev,
                       const std::string& type = "1");
// A RoCE netdev: the above plus class/infiniband/<rdma>/ports/<port>/gid_attrs/ndevs/<index>.
void AddRoceNetdev(const testing::TempTree& tree, const std::string& netdev,
                   const std::string& rdma, int port = 1, int gid_index = 0);

// One real capture and the netdev name the tests give it.
struct Capture {
  std::string file;    // under ../shared/fixtures/ethtool
  std::string netdev;  // <= 15 characters
};
// The `ethtool -S` captures with their netdev names (not the settings dump).
const std::vector<Capture>& KnownCaptures();
inline constexpr char kSettingsCapture[] = "azhpc-diag_endure-vm_eth1_ethtool-settings.txt";

// A collector over `api`, discovering in `tree`. `config.sysfs_root` is set to the tree.
std::unique_ptr<EthtoolCollector> MakeCollector(const testing::TempTree& tree,
                                                std::unique_ptr<FixtureEthtoolApi> api,
                                                v1::EthtoolCollectorConfig config = {});

// The sample of family `name` whose labels are exactly `labels`; nullptr if absent.
const RecordedSample* FindSample(const std::vector<RecordedSample>& samples, absl::string_view name,
                                 const Labels& labels);
// Samples of family `name` whose labels contain netdev=`netdev` (any netdev if empty).
std::vector<const RecordedSample*> FamilySamples(const std::vector<RecordedSample>& samples,
                                                 absl::string_view name,
                                                 absl::string_view netdev = "");
// The label value of `name` in `labels`, or "".
std::string LabelOf(const Labels& labels, absl::string_view name);

}  // namespace fabricmon::collectors::ethtool_testing
