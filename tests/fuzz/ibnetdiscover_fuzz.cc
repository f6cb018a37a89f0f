// ibnetdiscover topology files (the default format, ibsim net files, `ibnetdiscover -p`), which
// the aggregator can load instead of a live sweep, and the inventory they turn into.

#include <string>

#include "collectors/fabric_model/ibnetdiscover_parser.h"
#include "collectors/fabric_model/subnet.h"
#include "tests/fuzz/fuzz_target.h"

FABRICMON_FUZZ_TARGET(ibnetdiscover) {
  using namespace ::fabricmon::fabric_model;
  const absl::string_view text = ::fabricmon::fuzz::AsText(data, size);

  const absl::StatusOr<ParsedSubnet> parsed = ParseIbnetdiscover(text);
  if (!parsed.ok()) {
    FABRICMON_FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  const Subnet& topology = parsed->topology;
  for (const Node& node : topology.nodes) {
    uint32_t previous = 0;
    bool first = true;
    for (const Port& port : node.ports) {
      FABRICMON_FUZZ_CHECK(first || port.number > previous);  // sorted, unique
      previous = port.number;
      first = false;
      FABRICMON_FUZZ_CHECK(node.FindPort(port.number) == &port);
      if (port.remote_node.has_value()) {
        FABRICMON_FUZZ_CHECK(*port.remote_node < topology.nodes.size());
      }
    }
    (void)node.Key();
  }
  for (const Link& link : topology.Links()) {
    FABRICMON_FUZZ_CHECK(link.a_node < topology.nodes.size());
    FABRICMON_FUZZ_CHECK(link.b_node < topology.nodes.size());
  }
  fabricmon::v1::Inventory inventory;
  AppendToInventory(topology, inventory);
  FABRICMON_FUZZ_CHECK(static_cast<size_t>(inventory.fabric_nodes_size()) == topology.nodes.size());
  // The inventory travels to the aggregator as a protobuf: it must serialize.
  std::string bytes;
  FABRICMON_FUZZ_CHECK(inventory.SerializeToString(&bytes));
}
