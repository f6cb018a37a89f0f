#include "collectors/ib_fabric/ib_fabric_collector.h"

#include <optional>
#include <string>

#include "collectors/core/recording_sink.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/collectors/ib_fabric/fake_fabric.h"

namespace fabricmon::collectors {
namespace {

using fabric_model::LinkSpeed;
using fabric_model::Node;
using fabric_model::NodeType;
using fabric_model::Port;
using fabric_model::Subnet;
using ::fabricmon::testing::FakeClock;
using ::fabricmon::testing::StatusIs;
using ib_fabric::MadKind;
using ib_fabric::PmaCapabilities;
using ib_fabric::PmaCounter;
using ib_fabric_testing::FakeBackend;
using ib_fabric_testing::FakeFabric;
using ib_fabric_testing::FakeNode;
using ib_fabric_testing::FakePort;
using ::testing::HasSubstr;

constexpr uint64_t kSwitch1 = 0x200000;
constexpr uint64_t kSwitch2 = 0x200001;

Port MakePort(uint32_t number, std::optional<size_t> peer, uint32_t peer_port, uint32_t lid = 0) {
  Port port;
  port.number = number;
  port.lid = lid;
  port.state = peer.has_value() ? 4 : 1;
  port.phys_state = peer.has_value() ? 5 : 2;
  port.width = peer.has_value() ? 4 : 0;
  port.speed = peer.has_value() ? LinkSpeed::kQdr : LinkSpeed::kUnknown;
  port.remote_node = peer;
  port.remote_port = peer_port;
  return port;
}

// ibsim's net.2sw2path4hca with LIDs as opensm assigns them, plus two uncabled Switch1 ports.
// Nodes: 0 Switch1 (LID 1), 1 Switch2 (LID 3), 2 Hca1 (2), 3 Hca2 (4), 4 Hca3 (5), 5 Hca4 (6).
Subnet TwoSwitchFabric() {
  Subnet t;
  auto sw = [](uint64_t guid, const char* name, uint32_t lid) {
    Node node;
    node.guid = guid;
    node.type = NodeType::kSwitch;
    node.description = name;
    node.lid = lid;
    node.num_ports = 8;
    return node;
  };
  auto ca = [](uint64_t guid, const char* name, uint32_t lid, size_t peer, uint32_t peer_port) {
    Node node;
    node.guid = guid;
    node.type = NodeType::kCa;
    node.description = name;
    node.lid = lid;
    node.num_ports = 2;
    node.ports = {MakePort(1, peer, peer_port, lid)};
    return node;
  };
  Node s1 = sw(kSwitch1, "Switch1", 1);
  s1.ports = {MakePort(1, 2, 1),
              MakePort(2, 4, 1),
              MakePort(3, 1, 3),
              MakePort(5, 1, 5),
              MakePort(7, std::nullopt, 0),
              MakePort(8, std::nullopt, 0)};
  Node s2 = sw(kSwitch2, "Switch2", 3);
  s2.ports = {MakePort(1, 3, 1), MakePort(2, 5, 1), MakePort(3, 0, 3), MakePort(5, 0, 5)};
  t.nodes = {s1,
             s2,
             ca(0x100000, "Hca1", 2, 0, 1),
             ca(0x100003, "Hca2", 4, 1, 1),
             ca(0x100006, "Hca3", 5, 0, 2),
             ca(0x100009, "Hca4", 6, 1, 2)};
  return t;
}

// What ibsim answers: CapMask 0x1300 (AllPortSelect, extended width, XmitWait).
void PopulateFabric(FakeFabric& fabric, const Subnet& topology,
                    PmaCapabilities caps = PmaCapabilities{0x1300, 0}) {
  for (const Node& node : topology.nodes) {
    if (node.type == NodeType::kSwitch) {
      FakeNode& fake = fabric.nodes[static_cast<uint16_t>(node.lid)];
      fake.caps = caps;
      for (const Port& port : node.ports) {
        FakePort& p = fake.ports[port.number];
        p.state = port.state;
        p.phys_state = port.phys_state;
        p.counters[PmaCounter::kXmitData] = 1000 + port.number;
        p.counters[PmaCounter::kXmitWait] = 10 * port.number;
      }
    } else {
      for (const Port& port : node.ports) {
        FakeNode& fake = fabric.nodes[static_cast<uint16_t>(port.lid)];
        fake.caps = caps;
        fake.ports[port.number].counters[PmaCounter::kRcvData] = 77;
      }
    }
  }
}

v1::IbFabricCollectorConfig Config(const std::string& text = "") {
  v1::IbFabricCollectorConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

struct Harness {
  explicit Harness(const std::string& config_text = "", bool populate = true)
      : topology(TwoSwitchFabric()), fabric(clock) {
    if (populate) {
      PopulateFabric(fabric, topology);
    }
    auto backend = std::make_unique<FakeBackend>(&topology, &fabric);
    backend_ptr = backend.get();
    absl::StatusOr<std::unique_ptr<IbFabricCollector>> created =
        IbFabricCollector::CreateWithBackend(Config(config_text), clock, std::move(backend));
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) {
      collector = *std::move(created);
    }
  }
  FakeClock clock;
  Subnet topology;
  FakeFabric fabric;
  FakeBackend* backend_ptr = nullptr;
  std::unique_ptr<IbFabricCollector> collector;
};

bool HasLabels(const SeriesDesc& series, const Labels& want) {
  for (const auto& label : want) {
    if (std::find(series.labels.begin(), series.labels.end(), label) == series.labels.end()) {
      return false;
    }
  }
  return true;
}

const RecordedSample* Find(const RecordingSink& sink, const std::string& name,
                           const Labels& labels = {}) {
  for (const RecordedSample& sample : sink.samples()) {
    if (sample.series.name == name && HasLabels(sample.series, labels)) {
      return &sample;
    }
  }
  return nullptr;
}

size_t Count(const RecordingSink& sink, const std::string& name, const Labels& labels = {}) {
  size_t n = 0;
  for (const RecordedSample& sample : sink.samples()) {
    n += sample.series.name == name && HasLabels(sample.series, labels);
  }
  return n;
}

Labels SwitchPort(uint64_t guid, const std::string& name, int port) {
  return {{"switch_guid", fabric_model::FormatGuid(guid)},
          {"switch", name},
          {"port", std::to_string(port)}};
}

// ---------------------------------------------------------------------------------------------

TEST(IbFabricConfigTest, DefaultsAndValidation) {
  absl::StatusOr<ib_fabric::IbFabricOptions> options = ib_fabric::ParseIbFabricConfig(Config());
  ASSERT_THAT(options, fabricmon::testing::IsOk());
  EXPECT_EQ(options->interval_ms, 10000);
  EXPECT_EQ(options->rediscover_interval_ms, 300000);
  EXPECT_EQ(options->pipeline.window, 64);
  EXPECT_EQ(options->pipeline.per_node, 4);
  EXPECT_EQ(options->pipeline.timeout, absl::Milliseconds(200));
  EXPECT_EQ(options->pipeline.retries, 2);
  EXPECT_TRUE(options->port_info);
  EXPECT_FALSE(options->all_ports);
  EXPECT_EQ(options->sysfs_root, "/sys");

  options = ib_fabric::ParseIbFabricConfig(
      Config("include_guids: '0x200000' exclude_guids: '200001' port_info: false"));
  ASSERT_THAT(options, fabricmon::testing::IsOk());
  EXPECT_EQ(options->include_guids.count(0x200000), 1u);
  EXPECT_EQ(options->exclude_guids.count(0x200001), 1u);
  EXPECT_FALSE(options->port_info);

  for (const char* bad :
       {"interval_ms: 50", "rediscover_interval_ms: 10", "concurrency: 5000",
        "per_node_inflight: 100", "mad_timeout_ms: 100000", "mad_retries: 50",
        "include_guids: 'node17'", "exclude_guids: '0x'", "exclude_description: '('",
        "include_description: '[a-'", "max_hops: 99", "ca_port: 300"}) {
    absl::StatusOr<ib_fabric::IbFabricOptions> invalid =
        ib_fabric::ParseIbFabricConfig(Config(bad));
    EXPECT_THAT(invalid, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    if (!invalid.ok()) {
      EXPECT_THAT(invalid.status().message(), HasSubstr("ib_fabric.")) << bad;
    }
  }
}

TEST(IbFabricConfigTest, RegisteredDisabledByDefault) {
  CollectorRegistry registry;
  RegisterIbFabricCollector(registry);
  ASSERT_EQ(registry.entries().size(), 1u);
  EXPECT_EQ(registry.entries()[0].name, "ib_fabric");
  EXPECT_FALSE(registry.entries()[0].enabled_by_default);
  v1::CollectorsConfig config;
  EXPECT_FALSE(registry.IsEnabled(config, registry.entries()[0]));
  config.mutable_ib_fabric()->set_enabled(true);
  EXPECT_TRUE(registry.IsEnabled(config, registry.entries()[0]));
}

TEST(IbFabricCollectorTest, DiscoverFillsInventory) {
  Harness h;
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
  EXPECT_EQ(inventory.fabric_nodes_size(), 6);
  EXPECT_EQ(inventory.fabric_links_size(), 6);  // 4 HCA cables + 2 inter-switch
  EXPECT_EQ(h.backend_ptr->opens, 1) << "the MAD port is opened at discovery";
  // Never-cabled Switch1 ports 7 and 8 are not swept: 4 + 4 switch ports.
  EXPECT_EQ(h.collector->swept_ports(), 8u);
}

TEST(IbFabricCollectorTest, CollectsSwitchPortsWithSysfsFamilies) {
  Harness h;
  h.fabric.nodes[1].ports[3].counters[PmaCounter::kLinkDowned] = 255;  // saturated 8-bit
  h.fabric.nodes[1].ports[3].counters[PmaCounter::kSymbolError] = 65535;
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
  RecordingSink sink;
  FABRICMON_ASSERT_OK(h.collector->Collect(sink));

  const RecordedSample* data =
      Find(sink, "fabricmon_ib_port_xmit_data_bytes_total", SwitchPort(kSwitch1, "Switch1", 3));
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->raw_value, 1003u);
  EXPECT_EQ(data->series.scale, 4.0);
  EXPECT_EQ(data->series.width_bits, 64);  // PortCountersExtended
  EXPECT_EQ(data->series.collector, "ib_fabric");

  const RecordedSample* wait =
      Find(sink, "fabricmon_ib_port_xmit_wait_total", SwitchPort(kSwitch2, "Switch2", 5));
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->raw_value, 50u);
  EXPECT_EQ(wait->series.width_bits, 32);
  EXPECT_EQ(wait->series.unit, Unit::kTicks);

  const RecordedSample* downed =
      Find(sink, "fabricmon_ib_link_downed_total", SwitchPort(kSwitch1, "Switch1", 3));
  ASSERT_NE(downed, nullptr);
  EXPECT_EQ(downed->series.width_bits, 8);
  EXPECT_EQ(downed->series.overflow, Overflow::kSaturates);
  EXPECT_TRUE(downed->series.IsSaturated(downed->raw_value));
  const RecordedSample* symbol =
      Find(sink, "fabricmon_ib_symbol_error_total", SwitchPort(kSwitch1, "Switch1", 3));
  ASSERT_NE(symbol, nullptr);
  EXPECT_TRUE(symbol->series.IsSaturated(symbol->raw_value));
  const RecordedSample* healthy =
      Find(sink, "fabricmon_ib_link_downed_total", SwitchPort(kSwitch1, "Switch1", 1));
  ASSERT_NE(healthy, nullptr);
  EXPECT_FALSE(healthy->series.IsSaturated(healthy->raw_value));

  // Port state and rate, same families as ib_sysfs.
  const RecordedSample* state =
      Find(sink, "fabricmon_ib_port_state", SwitchPort(kSwitch1, "Switch1", 1));
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->raw_value, 4u);
  const RecordedSample* rate =
      Find(sink, "fabricmon_ib_port_rate_bytes_per_second", SwitchPort(kSwitch1, "Switch1", 1));
  ASSERT_NE(rate, nullptr);
  EXPECT_EQ(rate->raw_value, 40'000'000'000u);  // 4X QDR, bits; exported ×1/8
  EXPECT_EQ(rate->series.scale, 1.0 / 8);

  // The cable in a separate info series.
  Labels info = SwitchPort(kSwitch1, "Switch1", 1);
  info.push_back({"peer_guid", "0x0000000000100000"});
  info.push_back({"peer", "Hca1"});
  info.push_back({"peer_port", "1"});
  info.push_back({"peer_type", "ca"});
  info.push_back({"width", "4x"});
  info.push_back({"speed", "QDR"});
  EXPECT_NE(Find(sink, "fabricmon_ib_fabric_link_info", info), nullptr);
  EXPECT_EQ(Count(sink, "fabricmon_ib_fabric_link_info"), 8u);  // every cabled switch port

  // Counters carry only switch labels: no peer, no GUID × everything.
  for (const RecordedSample& sample : sink.samples()) {
    if (sample.series.name == "fabricmon_ib_port_xmit_wait_total") {
      EXPECT_EQ(sample.series.labels.size(), 3u);
    }
  }
  // 8 ports × (PortInfo + PortCountersExtended + PortCounters) + 2 ClassPortInfo.
  EXPECT_EQ(h.fabric.log.size(), 26u);
  EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total"), 8u);
  EXPECT_EQ(Count(sink, "fabricmon_ib_unicast_xmit_packets_total"), 8u);
  EXPECT_EQ(Find(sink, "fabricmon_ib_port_state", SwitchPort(kSwitch1, "Switch1", 7)), nullptr);

  // Self metrics.
  EXPECT_EQ(Find(sink, "fabricmon_ib_fabric_nodes", {{"type", "switch"}})->raw_value, 2u);
  EXPECT_EQ(Find(sink, "fabricmon_ib_fabric_nodes", {{"type", "ca"}})->raw_value, 4u);
  EXPECT_EQ(Find(sink, "fabricmon_ib_fabric_links")->raw_value, 6u);
  EXPECT_EQ(Find(sink, "fabricmon_ib_fabric_mads_total", {{"result", "ok"}})->raw_value, 26u);
  EXPECT_EQ(Find(sink, "fabricmon_ib_fabric_node_up", {{"switch", "Switch2"}})->raw_value, 1u);
  EXPECT_NE(Find(sink, "fabricmon_ib_fabric_sweep_duration_seconds"), nullptr);
  EXPECT_NE(Find(sink, "fabricmon_collector_errors_total", {{"kind", "io"}}), nullptr);
  EXPECT_FALSE(h.collector->WantsRediscovery());

  // Second sweep: capabilities are cached; only the per-port MADs.
  h.fabric.log.clear();
  RecordingSink again;
  FABRICMON_ASSERT_OK(h.collector->Collect(again));
  EXPECT_EQ(h.fabric.log.size(), 24u);
}

TEST(IbFabricCollectorTest, DeadSwitchAffectsOnlyItsPorts) {
  Harness h("mad_timeout_ms: 50 mad_retries: 1");
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
  RecordingSink first;
  FABRICMON_ASSERT_OK(h.collector->Collect(first));  // capabilities known for both
  h.fabric.nodes[3].dead = true;                     // Switch2 stops answering
  h.fabric.log.clear();
  RecordingSink sink;
  FABRICMON_ASSERT_OK(h.collector->Collect(sink));
  EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch1"}}), 4u);
  EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch2"}}), 0u);
  EXPECT_EQ(Find(sink, "fabricmon_ib_fabric_node_up", {{"switch", "Switch2"}})->raw_value, 0u);
  EXPECT_EQ(Find(sink, "fabricmon_ib_fabric_node_up", {{"switch", "Switch1"}})->raw_value, 1u);
  EXPECT_EQ(
      Find(sink, "fabricmon_ib_fabric_mad_timeouts_total", {{"switch", "Switch2"}})->raw_value, 1u);
  EXPECT_GE(Find(sink, "fabricmon_collector_errors_total", {{"kind", "io"}})->raw_value, 1u);
  EXPECT_EQ(Find(sink, "fabricmon_ib_fabric_mads_total", {{"result", "skipped"}})->raw_value,
            11u);  // 4 ports × 3 MADs, one timed out
  size_t to_dead = 0;
  for (const auto& request : h.fabric.log) {
    to_dead += request.lid == 3;
  }
  EXPECT_EQ(to_dead, 2u) << "one request, two attempts; the rest skipped";
  // The link info of the dead switch stays (it is topology, not a reading).
  EXPECT_EQ(Count(sink, "fabricmon_ib_fabric_link_info", {{"switch", "Switch2"}}), 4u);
}

TEST(IbFabricCollectorTest, LinkDownAsksForRediscoveryAndStaysSwept) {
  Harness h;
  v1::Inventory before;
  FABRICMON_ASSERT_OK(h.collector->Discover(before));
  RecordingSink first;
  FABRICMON_ASSERT_OK(h.collector->Collect(first));
  EXPECT_FALSE(h.collector->WantsRediscovery());

  // ibsim `Unlink "Switch1"[3]`: both ends Down/Polling; the SM-less fabric loses the cable.
  h.fabric.nodes[1].ports[3].state = 1;
  h.fabric.nodes[1].ports[3].phys_state = 2;
  h.fabric.nodes[1].ports[3].counters[PmaCounter::kLinkDowned] = 1;
  h.fabric.nodes[3].ports[3].state = 1;
  h.fabric.nodes[3].ports[3].phys_state = 2;
  RecordingSink down;
  FABRICMON_ASSERT_OK(h.collector->Collect(down));
  EXPECT_TRUE(h.collector->WantsRediscovery());
  EXPECT_EQ(Find(down, "fabricmon_ib_port_state", SwitchPort(kSwitch1, "Switch1", 3))->raw_value,
            1u);
  EXPECT_EQ(
      Find(down, "fabricmon_ib_port_phys_state", SwitchPort(kSwitch1, "Switch1", 3))->raw_value,
      2u);
  EXPECT_EQ(
      Find(down, "fabricmon_ib_port_rate_bytes_per_second", SwitchPort(kSwitch1, "Switch1", 3))
          ->raw_value,
      0u);
  EXPECT_EQ(
      Find(down, "fabricmon_ib_link_downed_total", SwitchPort(kSwitch1, "Switch1", 3))->raw_value,
      1u);

  // The rediscovery no longer sees the cable: the inventory changes, the port stays swept.
  h.topology.nodes[0].ports[2] = MakePort(3, std::nullopt, 0);
  h.topology.nodes[1].ports[2] = MakePort(3, std::nullopt, 0);
  v1::Inventory after;
  FABRICMON_ASSERT_OK(h.collector->Discover(after));
  EXPECT_EQ(after.fabric_links_size(), 5);
  EXPECT_FALSE(h.collector->WantsRediscovery());
  RecordingSink still;
  FABRICMON_ASSERT_OK(h.collector->Collect(still));
  EXPECT_NE(Find(still, "fabricmon_ib_link_downed_total", SwitchPort(kSwitch1, "Switch1", 3)),
            nullptr)
      << "a port that was ever connected stays swept";
  EXPECT_EQ(Find(still, "fabricmon_ib_fabric_link_info", SwitchPort(kSwitch1, "Switch1", 3)),
            nullptr);
  EXPECT_FALSE(h.collector->WantsRediscovery()) << "Down matches the discovery now";
}

TEST(IbFabricCollectorTest, FiltersByDescriptionAndGuid) {
  {
    Harness h("exclude_description: 'Switch2'");
    v1::Inventory inventory;
    FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
    EXPECT_EQ(inventory.fabric_nodes_size(), 6) << "the inventory is the whole subnet";
    RecordingSink sink;
    FABRICMON_ASSERT_OK(h.collector->Collect(sink));
    EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch2"}}), 0u);
    EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch1"}}), 4u);
  }
  {
    Harness h("include_guids: '0x200001'");
    v1::Inventory inventory;
    FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
    RecordingSink sink;
    FABRICMON_ASSERT_OK(h.collector->Collect(sink));
    EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total"), 4u);
    EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch2"}}), 4u);
  }
  {
    Harness h("all_ports: true");
    v1::Inventory inventory;
    FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
    EXPECT_EQ(h.collector->swept_ports(), 10u);
  }
}

TEST(IbFabricCollectorTest, HcaPortsSeenFromTheFabric) {
  Harness h("include_hca_ports: true");
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
  RecordingSink sink;
  FABRICMON_ASSERT_OK(h.collector->Collect(sink));
  const RecordedSample* rcv =
      Find(sink, "fabricmon_ib_port_rcv_data_bytes_total",
           {{"ca_guid", "0x0000000000100006"}, {"ca", "Hca3"}, {"port", "1"}});
  ASSERT_NE(rcv, nullptr);
  EXPECT_EQ(rcv->raw_value, 77u);
  EXPECT_EQ(Count(sink, "fabricmon_ib_fabric_link_info", {{"ca", "Hca3"}}), 0u);
}

TEST(IbFabricCollectorTest, AdditionalExtendedCountersNeedOneMadPerPort) {
  Harness h("port_info: false", /*populate=*/false);
  PopulateFabric(h.fabric, h.topology,
                 PmaCapabilities{ib_fabric::kCapExtendedWidth | ib_fabric::kCapXmitWait,
                                 ib_fabric::kCap2AdditionalExtended});
  h.fabric.nodes[1].ports[1].counters[PmaCounter::kXmitWait] = 1ull << 40;
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
  RecordingSink sink;
  FABRICMON_ASSERT_OK(h.collector->Collect(sink));
  for (const auto& request : h.fabric.log) {
    EXPECT_NE(request.kind, MadKind::kPortCounters);
    EXPECT_NE(request.kind, MadKind::kPortInfo);
  }
  EXPECT_EQ(h.fabric.log.size(), 2u + 8u);
  const RecordedSample* wait =
      Find(sink, "fabricmon_ib_port_xmit_wait_total", SwitchPort(kSwitch1, "Switch1", 1));
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->series.width_bits, 64);
  EXPECT_EQ(wait->raw_value, 1ull << 40);
  // port_info: false — state from discovery.
  EXPECT_EQ(Find(sink, "fabricmon_ib_port_state", SwitchPort(kSwitch1, "Switch1", 1))->raw_value,
            4u);
}

TEST(IbFabricCollectorTest, NodeWithoutPmaIsSkipped) {
  Harness h;
  h.fabric.nodes[3].class_port_info_status = 3 << 2;  // attribute not supported
  v1::Inventory inventory;
  FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
  RecordingSink sink;
  FABRICMON_ASSERT_OK(h.collector->Collect(sink));
  EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total", {{"switch", "Switch2"}}), 0u);
  EXPECT_EQ(Find(sink, "fabricmon_collector_errors_total", {{"kind", "unsupported"}})->raw_value,
            1u);
  h.fabric.log.clear();
  RecordingSink again;
  FABRICMON_ASSERT_OK(h.collector->Collect(again));
  for (const auto& request : h.fabric.log) {
    EXPECT_NE(request.lid, 3) << "not asked again until rediscovery";
  }
}

TEST(IbFabricCollectorTest, DiscoveryErrorsPropagate) {
  {
    Harness h;
    h.backend_ptr->discover_status = absl::NotFoundError("no RDMA devices");
    v1::Inventory inventory;
    EXPECT_THAT(h.collector->Discover(inventory), StatusIs(absl::StatusCode::kNotFound));
    RecordingSink sink;
    EXPECT_FALSE(h.collector->Collect(sink).ok());
  }
  {
    Harness h;
    h.backend_ptr->discover_status =
        absl::FailedPreconditionError("MADs are not available on RoCE ports: mlx5_0 port 1");
    v1::Inventory inventory;
    EXPECT_THAT(h.collector->Discover(inventory), StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  {
    Harness h;
    h.backend_ptr->open_status = absl::PermissionDeniedError("/dev/infiniband/umad0");
    v1::Inventory inventory;
    EXPECT_THAT(h.collector->Discover(inventory), StatusIs(absl::StatusCode::kPermissionDenied));
  }
  {
    // A failed walk after a good one keeps the previous topology (and inventory).
    Harness h;
    v1::Inventory inventory;
    FABRICMON_ASSERT_OK(h.collector->Discover(inventory));
    h.backend_ptr->discover_status = absl::UnavailableError("walk failed");
    v1::Inventory again;
    FABRICMON_ASSERT_OK(h.collector->Discover(again));
    EXPECT_EQ(again.fabric_links_size(), 6);
    EXPECT_TRUE(h.collector->WantsRediscovery());
    RecordingSink sink;
    FABRICMON_ASSERT_OK(h.collector->Collect(sink));
    EXPECT_EQ(Count(sink, "fabricmon_ib_port_xmit_wait_total"), 8u);
  }
}

}  // namespace
}  // namespace fabricmon::collectors
