#pragma once

// Builds series-store content for detector tests: nodes with series and sample histories on a
// fake clock, exactly as ingest would store them.

#include <memory>
#include <string>
#include <vector>

#include "collectors/core/sample.h"
#include "daemon/aggregator/findings_exporter.h"
#include "daemon/common/logging.h"
#include "daemon/detectors/engine.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/telemetry.pb.h"
#include "prometheus/metric_family.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::detectors::testing {

// A store keeping `samples_per_series` samples of at most `max_series_per_node` series a node.
inline store::StoreOptions StoreKeeping(size_t samples_per_series, size_t max_series_per_node) {
  store::StoreOptions options;
  options.samples_per_series = samples_per_series;
  options.max_series_per_node = max_series_per_node;
  return options;
}

class FabricFixture {
 public:
  FabricFixture() : store_(StoreKeeping(8, 100000)) {}

  // Connects a node (as a hello would).
  std::shared_ptr<store::NodeState> Node(const std::string& name,
                                         const v1::Inventory& inventory = {}) {
    auto it = nodes_.find(name);
    if (it != nodes_.end()) {
      return it->second.node;
    }
    v1::Hello hello;
    hello.set_node_name(name);
    hello.set_agent_instance_id(nodes_.size() + 1);
    hello.set_boot_id("boot-" + name);
    *hello.mutable_inventory() = inventory;
    const uint64_t token = nodes_.size() + 1;
    auto attached = store_.Attach(
        hello, token, [] {}, clock_.NowUnixNanos());
    FABRICMON_CHECK(attached.ok());
    nodes_[name] = {attached->node, 0, token};
    return attached->node;
  }

  // Ends a node's stream (as the agent going away would); the node stays in the store.
  void Disconnect(const std::string& name) {
    auto it = nodes_.find(name);
    FABRICMON_CHECK(it != nodes_.end());
    store_.Detach(*it->second.node, it->second.token, clock_.NowUnixNanos());
  }

  // Sets the value a series will have at the next Step().
  void Set(const std::string& node, const collectors::SeriesDesc& desc, uint64_t raw) {
    pending_[node].push_back({desc, raw});
  }

  // Stores every pending value at the current time, then advances the clock by `step_ms`.
  void Step(int64_t step_ms = 1000) {
    for (auto& [name, values] : pending_) {
      auto node = Node(name);
      std::vector<uint32_t> indices;
      std::vector<uint64_t> raw;
      for (const auto& [desc, value] : values) {
        auto index = node->Declare(desc);
        FABRICMON_CHECK(index.ok());
        indices.push_back(*index);
        raw.push_back(value);
      }
      std::vector<bool> present(raw.size(), true);
      (void)node->AppendBatch(++nodes_[name].sequence, 0, clock_.NowUnixNanos(), indices, raw,
                              present, clock_.NowUnixNanos());
    }
    pending_.clear();
    clock_.AdvanceMillis(step_ms);
  }

  store::SeriesStore& store() { return store_; }
  fabricmon::testing::FakeClock& clock() { return clock_; }

 private:
  struct NodeEntry {
    std::shared_ptr<store::NodeState> node;
    uint64_t sequence = 0;
    uint64_t token = 0;  // the stream token it attached with
  };
  store::SeriesStore store_;
  fabricmon::testing::FakeClock clock_;
  std::map<std::string, NodeEntry> nodes_;
  std::map<std::string, std::vector<std::pair<collectors::SeriesDesc, uint64_t>>> pending_;
};

// One host inventory: an HCA `device` with node GUID `guid` and port 1.
inline v1::Inventory Hca(const std::string& device, const std::string& guid) {
  v1::Inventory host;
  v1::RdmaDevice* hca = host.add_rdma_devices();
  hca->set_name(device);
  hca->set_node_guid(guid);
  hca->add_ports()->set_number(1);
  return host;
}

// The engine's findings and health as the aggregator exports them on /metrics.
inline std::vector<prometheus::MetricFamily> Exported(const DetectionEngine& engine) {
  return aggregator::FindingsExporter(engine).Collect();
}

// fabricmon_findings_total{kind, severity} as the engine exports it; -1 when absent.
inline double RaisedIncidents(const DetectionEngine& engine, const std::string& kind,
                              const std::string& severity) {
  for (const auto& family : Exported(engine)) {
    if (family.name != "fabricmon_findings_total") continue;
    for (const auto& metric : family.metric) {
      if (metric.label[0].value == kind && metric.label[1].value == severity) {
        return metric.counter.value;
      }
    }
  }
  return -1;
}

inline collectors::SeriesDesc HostCounter(
    const std::string& name, const std::string& device, int port, uint8_t width = 64,
    collectors::Overflow overflow = collectors::Overflow::kSaturates, double scale = 1.0) {
  return collectors::CounterSeries("ib_sysfs", name, "", collectors::Unit::kNone, width, overflow,
                                   scale, {{"device", device}, {"port", std::to_string(port)}});
}

inline collectors::SeriesDesc SwitchCounter(const std::string& name, const std::string& sw,
                                            int port, uint8_t width = 64) {
  return collectors::CounterSeries(
      "ib_fabric", name, "", collectors::Unit::kNone, width, collectors::Overflow::kSaturates, 1.0,
      {{"switch", sw}, {"switch_guid", "0x1"}, {"port", std::to_string(port)}});
}

inline collectors::SeriesDesc HostGauge(const std::string& name, const std::string& device,
                                        int port) {
  return collectors::GaugeSeries("ib_sysfs", name, "", collectors::Unit::kState, 1.0,
                                 {{"device", device}, {"port", std::to_string(port)}});
}

}  // namespace fabricmon::detectors::testing
