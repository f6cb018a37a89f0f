#include "tests/unit/collectors/ethtool/ethtool_test_util.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fabricmon::collectors::ethtool_testing {

void AddPhysicalNetdev(const testing::TempTree& tree, const std::string& netdev,
                       const std::string& type) {
  tree.WriteFile(absl::StrCat("class/net/", netdev, "/type"), type + "\n");
  tree.Symlink(absl::StrCat("class/net/", netdev, "/device"),
               absl::StrCat("../../../devices/pci0000:00/0000:00:00.0/", netdev));
}

void AddRoceNetdev(const testing::TempTree& tree, const std::string& netdev,
                   const std::string& rdma, int port, int gid_index) {
  AddPhysicalNetdev(tree, netdev);
  tree.WriteFile(
      absl::StrCat("class/infiniband/", rdma, "/ports/", port, "/gid_attrs/ndevs/", gid_index),
      netdev + "\n");
}

const std::vector<Capture>& KnownCaptures() {
  static const auto* captures = new std::vector<Capture>{
      {"mlx5_bpf-list_xdp_kernel5.15_nonzero.txt", "k515"},
      {"mlx5_bpf-list_xdp_kernel6.5_nonzero.txt", "k65"},
      {"mlx5_byteps-issue179_grep-prio_after-benchmark_truncated.txt", "bpafter"},
      {"mlx5_byteps-issue179_grep-prio_before-2to1-scenario.txt", "bp2to1"},
      {"mlx5_byteps-issue179_grep-prio_before-benchmark.txt", "bpbefore"},
      {"mlx5_connectx4_ubuntu16.04_ethq-tests.txt", "u1604"},
      {"mlx5_connectx4_ubuntu18.04_ethq-tests.txt", "u1804"},
      {"mlx5_lkml-2024-11_grep-pci_signal-integrity.txt", "lkml"},
  };
  return *captures;
}

std::unique_ptr<EthtoolCollector> MakeCollector(const testing::TempTree& tree,
                                                std::unique_ptr<FixtureEthtoolApi> api,
                                                v1::EthtoolCollectorConfig config) {
  config.set_sysfs_root(tree.root());
  auto collector = EthtoolCollector::Create(config, std::move(api));
  EXPECT_TRUE(collector.ok()) << collector.status();
  return collector.ok() ? *std::move(collector) : nullptr;
}

const RecordedSample* FindSample(const std::vector<RecordedSample>& samples, absl::string_view name,
                                 const Labels& labels) {
  for (const RecordedSample& sample : samples) {
    if (sample.series.name == name && sample.series.labels == labels) {
      return &sample;
    }
  }
  return nullptr;
}

std::vector<const RecordedSample*> FamilySamples(const std::vector<RecordedSample>& samples,
                                                 absl::string_view name, absl::string_view netdev) {
  std::vector<const RecordedSample*> out;
  for (const RecordedSample& sample : samples) {
    if (sample.series.name == name &&
        (netdev.empty() || LabelOf(sample.series.labels, "netdev") == netdev)) {
      out.push_back(&sample);
    }
  }
  return out;
}

std::string LabelOf(const Labels& labels, absl::string_view name) {
  for (const auto& [key, value] : labels) {
    if (key == name) {
      return value;
    }
  }
  return "";
}

}  // namespace fabricmon::collectors::ethtool_testing
