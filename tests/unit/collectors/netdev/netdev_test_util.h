#pragma once

// Test helpers: run one Collect() and index the samples by their exposition key
// (`name{label="value",...}`, labels in the collector's order).

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectors/core/collector.h"
#include "collectors/core/recording_sink.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::collectors::netdev_testing {

inline std::string SeriesKey(const SeriesDesc& desc) {
  if (desc.labels.empty()) {
    return desc.name;
  }
  std::string key = desc.name + "{";
  for (size_t i = 0; i < desc.labels.size(); ++i) {
    absl::StrAppend(&key, i ? "," : "", desc.labels[i].first, "=\"", desc.labels[i].second, "\"");
  }
  return key + "}";
}

struct Scrape {
  absl::Status status;
  std::vector<RecordedSample> samples;
  std::map<std::string, double> values;  // exported (scaled) values
  std::map<std::string, uint64_t> raw;

  bool Has(const std::string& key) const { return values.count(key) > 0; }
  bool HasPrefix(const std::string& prefix) const {
    for (const auto& [key, value] : values) {
      if (absl::StartsWith(key, prefix)) {
        return true;
      }
    }
    return false;
  }
  // The exported value; NaN (and a test failure) when the series is absent.
  double Get(const std::string& key) const {
    auto it = values.find(key);
    if (it == values.end()) {
      ADD_FAILURE() << "no series " << key;
      return std::nan("");
    }
    return it->second;
  }
  uint64_t Raw(const std::string& key) const {
    auto it = raw.find(key);
    if (it == raw.end()) {
      ADD_FAILURE() << "no series " << key;
      return 0;
    }
    return it->second;
  }
};

inline Scrape CollectOnce(Collector& collector) {
  RecordingSink sink;
  Scrape scrape;
  scrape.status = collector.Collect(sink);
  scrape.samples = sink.Take();
  for (const RecordedSample& sample : scrape.samples) {
    const std::string key = SeriesKey(sample.series);
    EXPECT_EQ(scrape.values.count(key), 0u) << "duplicate series " << key;
    scrape.values[key] = ExportedValue(sample.series, sample.raw_value);
    scrape.raw[key] = sample.raw_value;
  }
  return scrape;
}

// Materializes one of the facebookresearch/gcm sysfs snapshots (shared/fixtures/sysfs/gcm, a JSON
// map of /sys/bus/pci/devices/<bdf>/... path → content) as a real tree under `tree`: PCI
// functions under devices/pci0000:00/, their netdevs linked from class/net (with `device` → the
// function, as sysfs does) and their RDMA devices from class/infiniband. False (with a test
// failure) if the snapshot cannot be read.
bool MaterializeGcmSnapshot(const std::string& json_name, const testing::TempTree& tree);

}  // namespace fabricmon::collectors::netdev_testing
