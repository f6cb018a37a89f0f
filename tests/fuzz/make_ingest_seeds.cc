// Writes the hand-made seeds of the ingest fuzz target (tests/fuzz/corpus/ingest/): streams as the
// real agent encodes them (wire::StreamEncoder), framed as ingest_fuzz.cc reads them
// (<varint length><AgentMessage>, a zero-length record = reconnect).
//
//   fabricmon_fuzz_make_ingest_seeds OUT_DIR

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "collectors/core/sample.h"
#include "daemon/wire/batch_codec.h"
#include "daemon/wire/series_codec.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::fuzz {
namespace {

using collectors::Overflow;
using collectors::SeriesDesc;
using collectors::Unit;

class Lookup final : public wire::SeriesLookup {
 public:
  uint32_t Add(SeriesDesc desc) {
    series_.push_back(std::move(desc));
    return static_cast<uint32_t>(series_.size());  // ids dense from 1
  }
  const SeriesDesc* Find(uint32_t id) const override {
    return id >= 1 && id <= series_.size() ? &series_[id - 1] : nullptr;
  }

 private:
  std::vector<SeriesDesc> series_;
};

class Writer {
 public:
  void Message(const v1::AgentMessage& message) {
    const std::string bytes = message.SerializeAsString();
    Varint(bytes.size());
    out_ += bytes;
  }
  void Reconnect() { out_.push_back('\0'); }
  void Save(const std::string& path) const {
    std::ofstream(path, std::ios::binary) << out_;
    std::printf("%s: %zu bytes\n", path.c_str(), out_.size());
  }

 private:
  void Varint(uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>((value & 0x7f) | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }
  std::string out_;
};

v1::Inventory NodeInventory(const std::string& node, const std::string& guid) {
  v1::Inventory inventory;
  v1::RdmaDevice* device = inventory.add_rdma_devices();
  device->set_name("mlx5_0");
  device->set_driver("mlx5_core");
  device->set_node_guid(guid);
  v1::RdmaPort* port = device->add_ports();
  port->set_number(1);
  port->set_link_layer("InfiniBand");
  port->set_state(4);
  port->set_state_name("ACTIVE");
  port->add_netdevs("ib0");
  v1::Netdev* netdev = inventory.add_netdevs();
  netdev->set_name("ib0");
  (void)node;
  return inventory;
}

v1::AgentMessage Hello(const std::string& node, const std::string& boot, uint64_t instance,
                       uint64_t last_acked, const v1::Inventory& inventory) {
  v1::AgentMessage message;
  v1::Hello* hello = message.mutable_hello();
  hello->set_node_name(node);
  hello->set_boot_id(boot);
  hello->set_agent_version("0.1.0");
  hello->set_protocol_revision(v1::PROTOCOL_REVISION_1);
  hello->set_agent_instance_id(instance);
  hello->set_last_acked_sequence(last_acked);
  hello->set_min_interval_ms(1000);
  v1::CollectorStatus* status = hello->add_collectors();
  status->set_name("ib_sysfs");
  status->set_state("OK");
  status->set_interval_ms(1000);
  *hello->mutable_inventory() = inventory;
  return message;
}

// The IB port series the detectors read, plus a gauge and an info series.
struct IbSeries {
  Lookup lookup;
  std::shared_ptr<const std::vector<uint32_t>> layout;
};
IbSeries MakeIbSeries() {
  IbSeries s;
  collectors::Labels port = {{"device", "mlx5_0"}, {"port", "1"}};
  std::vector<uint32_t> ids;
  ids.push_back(s.lookup.Add(
      collectors::CounterSeries("ib_sysfs", "fabricmon_ib_port_xmit_data_bytes_total", "data",
                                Unit::kBytes, 64, Overflow::kWraps, 4.0, port)));
  ids.push_back(s.lookup.Add(
      collectors::CounterSeries("ib_sysfs", "fabricmon_ib_port_xmit_wait_total", "wait",
                                Unit::kTicks, 64, Overflow::kWraps, 1.0, port)));
  ids.push_back(
      s.lookup.Add(collectors::CounterSeries("ib_sysfs", "fabricmon_ib_link_downed_total", "downed",
                                             Unit::kNone, 8, Overflow::kSaturates, 1.0, port)));
  ids.push_back(s.lookup.Add(
      collectors::CounterSeries("ib_sysfs", "fabricmon_ib_symbol_error_total", "symbol",
                                Unit::kNone, 16, Overflow::kSaturates, 1.0, port)));
  ids.push_back(s.lookup.Add(
      collectors::CounterSeries("ib_sysfs", "fabricmon_ib_hw_rx_write_requests_total", "q-counter",
                                Unit::kNone, 32, Overflow::kWraps, 1.0, port)));
  SeriesDesc gauge;
  gauge.collector = "ib_sysfs";
  gauge.name = "fabricmon_ib_port_state";
  gauge.help = "state";
  gauge.type = collectors::MetricType::kGauge;
  gauge.unit = Unit::kState;
  gauge.labels = port;
  gauge.Finalize();
  ids.push_back(s.lookup.Add(gauge));
  SeriesDesc info = gauge;
  info.name = "fabricmon_ib_port_info";
  info.type = collectors::MetricType::kInfo;
  info.unit = Unit::kNone;
  info.labels.emplace_back("link_layer", "InfiniBand");
  info.labels.emplace_back("description",
                           "n\xc3\xb8"
                           "de \"quoted\" \\ back\nslash");
  info.Finalize();
  ids.push_back(s.lookup.Add(info));
  s.layout = std::make_shared<const std::vector<uint32_t>>(std::move(ids));
  return s;
}

// Cycles of the IB series: traffic grows, waits grow, the port flaps twice, the q-counter wraps
// past 2^32, the symbol error counter saturates at 0xffff.
std::vector<uint64_t> Cycle(int i) {
  const uint64_t n = static_cast<uint64_t>(i);
  return {1000000 + n * 250000000,
          n * 900000,
          uint64_t{n < 3 ? 0u : (n < 5 ? 1u : 2u)},
          n < 4 ? n * 20000 : 0xffff,
          0xfffff000u + n * 0x800,
          4,
          1};
}

void EncodeCycles(wire::StreamEncoder& encoder, const IbSeries& s, int first, int last,
                  Writer& out) {
  for (int i = first; i <= last; ++i) {
    std::vector<v1::AgentMessage> messages;
    const std::vector<uint64_t> values = Cycle(i);
    encoder.Encode(static_cast<uint64_t>(i), int64_t{1700000000} * 1000000000 + i * 1000000000LL,
                   1200, 0, s.layout, values, &messages);
    for (const v1::AgentMessage& message : messages) {
      out.Message(message);
    }
  }
}

// As EncodeCycles, with the batches sent `per_message` to a SampleBatches message (a coalescing
// agent's), declarations and layouts on their own before them.
void EncodeCoalescedCycles(wire::StreamEncoder& encoder, const IbSeries& s, int first, int last,
                           int per_message, Writer& out) {
  v1::AgentMessage held;
  auto send_held = [&] {
    if (held.has_batches()) {
      out.Message(held);
      held.Clear();
    }
  };
  for (int i = first; i <= last; ++i) {
    std::vector<v1::AgentMessage> messages;
    const std::vector<uint64_t> values = Cycle(i);
    encoder.Encode(static_cast<uint64_t>(i), int64_t{1700000000} * 1000000000 + i * 1000000000LL,
                   1200, 0, s.layout, values, &messages);
    for (v1::AgentMessage& message : messages) {
      if (!message.has_batch()) {
        send_held();
        out.Message(message);
        continue;
      }
      *held.mutable_batches()->add_batch() = message.batch();
      if (held.batches().batch_size() == per_message) {
        send_held();
      }
    }
  }
  send_held();
}

}  // namespace
}  // namespace fabricmon::fuzz

int main(int argc, char** argv) {
  using namespace fabricmon;
  using namespace fabricmon::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const IbSeries series = MakeIbSeries();
  const v1::Inventory inventory = NodeInventory("gpu-node-1", "0c42:a103:0065:bafe");

  {  // One agent, eight cycles, an inventory update.
    Writer out;
    wire::StreamEncoder encoder(series.lookup);
    out.Message(Hello("gpu-node-1", "boot-1", 0x1111, 0, inventory));
    EncodeCycles(encoder, series, 1, 8, out);
    v1::AgentMessage update;
    *update.mutable_inventory()->mutable_inventory() = inventory;
    out.Message(update);
    out.Save(dir + "/one_agent");
  }
  {  // A coalescing agent: its batches three to a SampleBatches message.
    Writer out;
    wire::StreamEncoder encoder(series.lookup);
    out.Message(Hello("gpu-node-1", "boot-1", 0x1111, 0, inventory));
    EncodeCoalescedCycles(encoder, series, 1, 9, 3, out);
    out.Save(dir + "/coalesced");
  }
  {  // The same agent reconnects and replays from sequence 3 (duplicates), then continues.
    Writer out;
    wire::StreamEncoder first(series.lookup);
    out.Message(Hello("gpu-node-1", "boot-1", 0x1111, 0, inventory));
    EncodeCycles(first, series, 1, 4, out);
    out.Reconnect();
    wire::StreamEncoder second(series.lookup);
    out.Message(Hello("gpu-node-1", "boot-1", 0x1111, 2, inventory));
    EncodeCycles(second, series, 3, 7, out);
    out.Save(dir + "/reconnect_replay");
  }
  {  // A reboot (new boot id, new instance: sequence restarts), and a second agent claiming the
     // node on the same boot (refused: duplicate_node), then another node with fabric topology.
    Writer out;
    wire::StreamEncoder first(series.lookup);
    out.Message(Hello("gpu-node-1", "boot-1", 0x1111, 0, inventory));
    EncodeCycles(first, series, 1, 3, out);
    out.Reconnect();
    wire::StreamEncoder second(series.lookup);
    out.Message(Hello("gpu-node-1", "boot-2", 0x2222, 0, inventory));
    EncodeCycles(second, series, 1, 3, out);
    out.Reconnect();
    v1::Inventory fabric = NodeInventory("gpu-node-2", "0c42:a103:0065:baff");
    v1::FabricNode* sw = fabric.add_fabric_nodes();
    sw->set_guid("0x0008f10500200b50");
    sw->set_type(v1::FabricNode::TYPE_SWITCH);
    sw->set_description("leaf01");
    sw->set_num_ports(36);
    v1::FabricLink* link = fabric.add_fabric_links();
    link->set_a_guid("0x0008f10500200b50");
    link->set_a_port(17);
    link->set_b_guid("0x0c42a1030065baff");
    link->set_b_port(1);
    link->set_width(4);
    link->set_speed("NDR");
    wire::StreamEncoder third(series.lookup);
    out.Message(Hello("gpu-node-2", "boot-9", 0x3333, 0, fabric));
    EncodeCycles(third, series, 1, 6, out);
    out.Save(dir + "/reboot_and_topology");
  }
  {  // Protocol errors, one per stream: batch before hello; unknown layout; a layout naming an
     // undeclared id; sequence 0; a declaration with the reserved node label.
    Writer out;
    v1::AgentMessage batch;
    batch.mutable_batch()->set_sequence(1);
    batch.mutable_batch()->set_layout_id(1);
    batch.mutable_batch()->add_value_deltas(5);
    out.Message(batch);
    out.Reconnect();
    out.Message(Hello("gpu-node-3", "b", 1, 0, v1::Inventory()));
    out.Message(batch);
    out.Reconnect();
    out.Message(Hello("gpu-node-4", "b", 1, 0, v1::Inventory()));
    v1::AgentMessage layouts;
    v1::Layout* layout = layouts.mutable_layouts()->add_layouts();
    layout->set_id(1);
    layout->add_series_ids(7);
    out.Message(layouts);
    out.Reconnect();
    out.Message(Hello("gpu-node-5", "b", 1, 0, v1::Inventory()));
    v1::AgentMessage declarations;
    v1::SeriesDeclaration* d = declarations.mutable_declarations()->add_series();
    *d = wire::ToDeclaration(*series.lookup.Find(1), 1);
    v1::Label* label = d->add_labels();
    label->set_name("node");
    label->set_value("spoofed");
    out.Message(declarations);
    out.Save(dir + "/protocol_errors");
  }
  return 0;
}
