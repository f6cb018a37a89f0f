#pragma once

// The ib_fabric collector: every switch port of an InfiniBand subnet (and optionally the CA ports
// seen from the fabric), read through MADs from one HCA port of this node.
//
//  Discover(): checks the HCA port (RoCE → FailedPrecondition, no access to the umad device →
//    PermissionDenied), walks the subnet with libibnetdisc and adds FabricNode/FabricLink to the
//    inventory (the agent sends an InventoryUpdate when that changes: links appearing or
//    disappearing, LIDs, states).
//  Collect(): one sweep. After each discovery, PerfMgt ClassPortInfo of every swept node
//    (capabilities: extended width, XmitWait, additional 64-bit counters); then per port
//    PortInfo (state, width, speed), PortCountersExtended and PortCounters as the capabilities
//    require, many in flight over one MadPort (mad_pipeline.h). A node that does not answer
//    costs one timeout chain and only its own ports; it is counted in
//    fabricmon_ib_fabric_mad_timeouts_total and fabricmon_collector_errors_total{kind="io"}.
//
// Metrics reuse ib_sysfs's families where the IBA counter is the same (bytes ×4, saturating
// narrow counters with their width) with labels naming the switch port: switch_guid, switch
// (trimmed node description), port; CA ports use ca_guid, ca, port. The cable's far end is in a
// separate fabricmon_ib_fabric_link_info series (peer_guid, peer, peer_port, peer_type, width,
// speed) so counters keep low cardinality and the aggregator joins on (switch_guid, port).
//
// Threading: Discover() and Collect() are called from one thread (the agent's collector thread);
// the collector owns one MadPort (through its backend) and no threads.

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/core/collector.h"
#include "collectors/core/collector_errors.h"
#include "collectors/core/collector_registry.h"
#include "collectors/fabric_model/subnet.h"
#include "collectors/ib_fabric/fabric_discovery.h"
#include "collectors/ib_fabric/mad_pipeline.h"
#include "collectors/ib_fabric/pma.h"
#include "daemon/common/clock.h"
#include "fabricmon/v1/config.pb.h"

namespace re2 {
class RE2;
}

namespace fabricmon::collectors {

inline constexpr char kIbFabricCollectorName[] = "ib_fabric";

namespace ib_fabric {

// The validated form of v1.IbFabricCollectorConfig (defaults applied).
struct IbFabricOptions {
  std::string ca;
  uint32_t ca_port = 0;
  int64_t interval_ms = 10000;
  int64_t rediscover_interval_ms = 300000;
  PipelineOptions pipeline;
  bool include_hca_ports = false;
  bool port_info = true;
  bool all_ports = false;
  std::set<uint64_t> include_guids;
  std::set<uint64_t> exclude_guids;
  std::string include_description;  // RE2 patterns, validated
  std::string exclude_description;
  std::string sysfs_root = "/sys";
  uint32_t max_hops = 0;
};

// Applies defaults and checks ranges and patterns. InvalidArgument names the offending field.
absl::StatusOr<IbFabricOptions> ParseIbFabricConfig(const v1::IbFabricCollectorConfig& config);

// Where topology and MADs come from: the seam tests replace. Used from one thread.
class FabricBackend {
 public:
  virtual ~FabricBackend() = default;
  // Checks the local port and walks the subnet. NotFound: no InfiniBand port here (hardware
  // absent); FailedPrecondition: RoCE port; PermissionDenied: umad device not accessible;
  // Unavailable: the walk failed.
  virtual absl::StatusOr<Subnet> Discover(DiscoveryStats* stats) = 0;
  // A transport for sweeps, valid until CloseTransport() or the next Discover().
  virtual absl::StatusOr<MadTransport*> OpenTransport() = 0;
  virtual void CloseTransport() = 0;
};

// The production backend: CheckMadAccess + libibnetdisc + a MadPort with UmadTransport.
std::unique_ptr<FabricBackend> MakeUmadBackend(const IbFabricOptions& options);

}  // namespace ib_fabric

class IbFabricCollector final : public Collector {
 public:
  // InvalidArgument on bad config. Keeps a reference to `clock`, which must outlive it.
  static absl::StatusOr<std::unique_ptr<IbFabricCollector>> Create(
      const v1::IbFabricCollectorConfig& config, Clock& clock);
  // Same, with an injected backend (tests).
  static absl::StatusOr<std::unique_ptr<IbFabricCollector>> CreateWithBackend(
      const v1::IbFabricCollectorConfig& config, Clock& clock,
      std::unique_ptr<ib_fabric::FabricBackend> backend);
  ~IbFabricCollector() override;

  absl::string_view name() const override { return kIbFabricCollectorName; }
  absl::Status Discover(v1::Inventory& inventory) override;
  // Unavailable when no transport could be opened or it failed fatally (the collector then asks
  // for re-discovery); per-node failures are counted and Collect returns OK.
  absl::Status Collect(SampleSink& sink) override;
  bool WantsRediscovery() const override { return wants_rediscovery_; }
  // umad device permissions (and the udev rule that grants them), no InfiniBand port, RoCE.
  Diagnosis Diagnose(const DiagnosisInput& input) const override;
  int64_t interval_ms() const override { return options_.interval_ms; }
  int64_t rediscover_interval_ms() const override { return options_.rediscover_interval_ms; }

  // Introspection for tests and benchmarks.
  const fabric_model::Subnet& topology() const { return topology_; }
  const ib_fabric::PipelineStats& last_sweep_stats() const { return last_stats_; }
  size_t swept_ports() const;
  int64_t last_sweep_ns() const { return last_sweep_ns_; }

 private:
  struct SweptPort {
    uint32_t number = 0;
    uint16_t lid = 0;  // destination LID for this port's MADs
    fabric_model::Port discovered;
    bool series_built = false;
    std::vector<std::pair<ib_fabric::PmaCounter, SeriesDesc>> counters;
    SeriesDesc state;
    SeriesDesc phys_state;
    SeriesDesc width;
    SeriesDesc rate;
    bool has_link_info = false;
    SeriesDesc link_info;
  };
  struct SweptNode {
    size_t topology_index = 0;
    uint64_t guid = 0;
    fabric_model::NodeType type = fabric_model::NodeType::kSwitch;
    std::string guid_label;
    std::string description;
    uint16_t lid = 0;  // where ClassPortInfo goes
    bool extended_speeds = false;
    bool caps_known = false;
    bool no_pma = false;  // ClassPortInfo answered with an error status: skip the node
    ib_fabric::PmaCapabilities caps;
    bool responding = true;
    uint64_t timeouts = 0;
    SeriesDesc up;
    SeriesDesc timeouts_series;
    std::vector<SweptPort> ports;
  };

  IbFabricCollector(ib_fabric::IbFabricOptions options, Clock& clock,
                    std::unique_ptr<ib_fabric::FabricBackend> backend,
                    std::unique_ptr<re2::RE2> include, std::unique_ptr<re2::RE2> exclude);

  bool NodeSelected(const fabric_model::Node& node) const;
  void BuildPlan();
  void BuildPortSeries(const SweptNode& node, SweptPort& port);
  absl::Status QueryCapabilities(ib_fabric::MadPipeline& pipeline, ib_fabric::PipelineStats& stats);
  void RecordOutcome(SweptNode& node, const ib_fabric::MadResult& result);
  Labels NodeLabels(const SweptNode& node) const;

  const ib_fabric::IbFabricOptions options_;
  Clock& clock_;
  std::unique_ptr<ib_fabric::FabricBackend> backend_;
  std::unique_ptr<re2::RE2> include_description_;
  std::unique_ptr<re2::RE2> exclude_description_;

  fabric_model::Subnet topology_;
  std::set<std::pair<uint64_t, uint32_t>> ever_connected_;
  std::vector<SweptNode> plan_;
  size_t link_count_ = 0;
  bool discovered_ = false;
  bool wants_rediscovery_ = false;

  // Cumulative counters and last-sweep figures.
  ib_fabric::PipelineStats total_stats_;
  ib_fabric::PipelineStats last_stats_;
  int64_t last_sweep_ns_ = 0;
  int64_t last_discovery_ns_ = 0;
  uint64_t discovery_smps_total_ = 0;
  CollectorErrors errors_;
  SeriesDesc sweep_duration_;
  SeriesDesc discovery_duration_;
  SeriesDesc mads_ok_;
  SeriesDesc mads_timeout_;
  SeriesDesc mads_error_;
  SeriesDesc mads_skipped_;
  SeriesDesc retries_;
  SeriesDesc discovery_smps_;
  SeriesDesc nodes_switch_;
  SeriesDesc nodes_ca_;
  SeriesDesc nodes_router_;
  SeriesDesc links_;
  SeriesDesc swept_ports_;
};

// Registers "ib_fabric" (disabled by default: one or two agents per subnet sweep it).
void RegisterIbFabricCollector(CollectorRegistry& registry);

}  // namespace fabricmon::collectors
