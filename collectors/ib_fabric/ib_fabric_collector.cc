#include "collectors/ib_fabric/ib_fabric_collector.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "collectors/ib_fabric/ib_fabric_families.h"
#include "collectors/ib_fabric/mad_access.h"
#include "collectors/ib_fabric/mad_port.h"
#include "collectors/ib_sysfs/ib_sysfs_families.h"
#include "daemon/common/logging.h"
#include "daemon/common/status.h"
#include "re2/re2.h"

namespace fabricmon::collectors {

using fabric_model::LinkSpeed;
using fabric_model::Node;
using fabric_model::NodeType;
using fabric_model::Port;
using fabric_model::Subnet;
using ib_fabric::DiscoveryStats;
using ib_fabric::FabricBackend;
using ib_fabric::IbFabricOptions;
using ib_fabric::MadKind;
using ib_fabric::MadOutcome;
using ib_fabric::MadPipeline;
using ib_fabric::MadRequest;
using ib_fabric::MadResult;
using ib_fabric::MadTransport;
using ib_fabric::PipelineStats;
using ib_fabric::PmaCapabilities;
using ib_fabric::PmaCounter;
using ib_fabric::PortCounterValues;
using ib_fabric::PortInfoValues;

namespace ib_fabric {
namespace {

constexpr int64_t kDefaultIntervalMs = 10000;
constexpr int64_t kDefaultRediscoverMs = 300000;
constexpr uint32_t kDefaultConcurrency = 64;
constexpr uint32_t kDefaultPerNode = 4;
constexpr uint32_t kDefaultTimeoutMs = 200;
constexpr uint32_t kDefaultRetries = 2;
// Directed-route paths hold at most 64 hops (IBA 14.2.2; libibmad IB_SUBNET_PATH_HOPS_MAX).
constexpr uint32_t kMaxHops = 63;

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("ib_fabric.", field, ": ", why));
}

absl::Status ParseGuidList(const google::protobuf::RepeatedPtrField<std::string>& list,
                           absl::string_view field, std::set<uint64_t>& out) {
  for (const std::string& text : list) {
    std::optional<uint64_t> guid = ParseGuid(text);
    if (!guid.has_value()) {
      return Invalid(field, absl::StrCat("\"", text, "\" is not a GUID (1-16 hex digits)"));
    }
    out.insert(*guid);
  }
  return absl::OkStatus();
}

// The production backend.
class UmadBackend final : public FabricBackend {
 public:
  explicit UmadBackend(const IbFabricOptions& options) : options_(options) {}

  absl::StatusOr<Subnet> Discover(DiscoveryStats* stats) override {
    // libibnetdisc opens its own umad port; ours must not be registered meanwhile (umad2sim
    // routes a class's replies to the last registrant). The kernel frees every agent of a umad fd
    // on close; umad2sim frees only the first, which the tests' close fix makes up for.
    CloseTransport();
    absl::StatusOr<MadPortLocation> location =
        CheckMadAccess(options_.sysfs_root, options_.ca, options_.ca_port);
    if (!location.ok()) {
      return location.status();
    }
    location_ = *location;
    DiscoveryOptions discovery;
    discovery.ca = location_->ca;
    discovery.ca_port = location_->port;
    discovery.timeout_ms =
        static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.pipeline.timeout));
    discovery.retries = static_cast<uint32_t>(options_.pipeline.retries);
    discovery.max_hops = options_.max_hops;
    discovery.max_smps = static_cast<uint32_t>(std::clamp(options_.pipeline.window, 1, 8));
    return DiscoverFabric(discovery, stats);
  }

  absl::StatusOr<MadTransport*> OpenTransport() override {
    if (transport_ != nullptr) {
      return transport_.get();
    }
    if (!location_.has_value()) {
      return absl::FailedPreconditionError("ib_fabric: no MAD port resolved yet (discover first)");
    }
    absl::StatusOr<std::unique_ptr<MadPort>> port =
        MadPort::Open(location_->ca, static_cast<int>(location_->port), options_.pipeline.timeout,
                      options_.pipeline.retries);
    if (!port.ok()) {
      // Say why when the device file does: permissions or absence.
      if (!location_->umad_device.empty() &&
          access(location_->umad_device.c_str(), R_OK | W_OK) != 0 && errno != ENOENT) {
        return MapDeviceError(errno, location_->umad_device);
      }
      return port.status();
    }
    port_ = *std::move(port);
    transport_ = std::make_unique<UmadTransport>(*port_);
    return transport_.get();
  }

  void CloseTransport() override {
    transport_.reset();
    port_.reset();
  }

 private:
  const IbFabricOptions options_;
  std::optional<MadPortLocation> location_;
  std::unique_ptr<MadPort> port_;
  std::unique_ptr<UmadTransport> transport_;
};

absl::string_view TypeLabel(NodeType type) {
  switch (type) {
    case NodeType::kSwitch:
      return "switch";
    case NodeType::kCa:
      return "ca";
    case NodeType::kRouter:
      return "router";
    case NodeType::kUnknown:
      break;
  }
  return "unknown";
}

}  // namespace

absl::StatusOr<IbFabricOptions> ParseIbFabricConfig(const v1::IbFabricCollectorConfig& config) {
  IbFabricOptions o;
  o.ca = config.ca();
  o.ca_port = config.ca_port();
  if (o.ca_port > 254) {
    return Invalid("ca_port", "must be 1..254 (0 = default)");
  }
  o.interval_ms = config.interval_ms() != 0 ? config.interval_ms() : kDefaultIntervalMs;
  if (o.interval_ms < 100) {
    return Invalid("interval_ms", "must be at least 100");
  }
  o.rediscover_interval_ms =
      config.rediscover_interval_ms() != 0 ? config.rediscover_interval_ms() : kDefaultRediscoverMs;
  if (o.rediscover_interval_ms < 1000) {
    return Invalid("rediscover_interval_ms", "must be at least 1000");
  }
  const uint32_t concurrency =
      config.concurrency() != 0 ? config.concurrency() : kDefaultConcurrency;
  if (concurrency > 1024) {
    return Invalid("concurrency", "must be 1..1024");
  }
  const uint32_t per_node =
      config.per_node_inflight() != 0 ? config.per_node_inflight() : kDefaultPerNode;
  if (per_node > 64) {
    return Invalid("per_node_inflight", "must be 1..64");
  }
  const uint32_t timeout_ms =
      config.mad_timeout_ms() != 0 ? config.mad_timeout_ms() : kDefaultTimeoutMs;
  if (timeout_ms > 60000) {
    return Invalid("mad_timeout_ms", "must be 1..60000");
  }
  const uint32_t retries = config.mad_retries() != 0 ? config.mad_retries() : kDefaultRetries;
  if (retries > 10) {
    return Invalid("mad_retries", "must be 0..10");
  }
  o.pipeline.window = static_cast<int>(concurrency);
  o.pipeline.per_node = static_cast<int>(per_node);
  o.pipeline.timeout = absl::Milliseconds(timeout_ms);
  o.pipeline.retries = static_cast<int>(retries);
  o.include_hca_ports = config.include_hca_ports();
  o.port_info = config.has_port_info() ? config.port_info() : true;
  o.all_ports = config.all_ports();
  absl::Status status = ParseGuidList(config.include_guids(), "include_guids", o.include_guids);
  if (!status.ok()) {
    return status;
  }
  status = ParseGuidList(config.exclude_guids(), "exclude_guids", o.exclude_guids);
  if (!status.ok()) {
    return status;
  }
  for (const auto& [field, pattern] : {std::pair<absl::string_view, const std::string*>{
                                           "include_description", &config.include_description()},
                                       {"exclude_description", &config.exclude_description()}}) {
    if (pattern->empty()) {
      continue;
    }
    re2::RE2 re(*pattern, re2::RE2::Quiet);
    if (!re.ok()) {
      return Invalid(field, absl::StrCat("bad RE2 pattern: ", re.error()));
    }
  }
  o.include_description = config.include_description();
  o.exclude_description = config.exclude_description();
  o.sysfs_root = config.sysfs_root().empty() ? "/sys" : config.sysfs_root();
  if (config.max_hops() > kMaxHops) {
    return Invalid("max_hops", "must be 0..63");
  }
  o.max_hops = config.max_hops();
  return o;
}

std::unique_ptr<FabricBackend> MakeUmadBackend(const IbFabricOptions& options) {
  return std::make_unique<UmadBackend>(options);
}

}  // namespace ib_fabric

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<IbFabricCollector>> IbFabricCollector::Create(
    const v1::IbFabricCollectorConfig& config, Clock& clock) {
  absl::StatusOr<IbFabricOptions> options = ib_fabric::ParseIbFabricConfig(config);
  if (!options.ok()) {
    return options.status();
  }
  std::unique_ptr<FabricBackend> backend = ib_fabric::MakeUmadBackend(*options);
  return CreateWithBackend(config, clock, std::move(backend));
}

absl::StatusOr<std::unique_ptr<IbFabricCollector>> IbFabricCollector::CreateWithBackend(
    const v1::IbFabricCollectorConfig& config, Clock& clock,
    std::unique_ptr<FabricBackend> backend) {
  absl::StatusOr<IbFabricOptions> options = ib_fabric::ParseIbFabricConfig(config);
  if (!options.ok()) {
    return options.status();
  }
  std::unique_ptr<re2::RE2> include;
  std::unique_ptr<re2::RE2> exclude;
  if (!options->include_description.empty()) {
    include = std::make_unique<re2::RE2>(options->include_description, re2::RE2::Quiet);
  }
  if (!options->exclude_description.empty()) {
    exclude = std::make_unique<re2::RE2>(options->exclude_description, re2::RE2::Quiet);
  }
  return std::unique_ptr<IbFabricCollector>(new IbFabricCollector(
      *std::move(options), clock, std::move(backend), std::move(include), std::move(exclude)));
}

IbFabricCollector::IbFabricCollector(IbFabricOptions options, Clock& clock,
                                     std::unique_ptr<FabricBackend> backend,
                                     std::unique_ptr<re2::RE2> include,
                                     std::unique_ptr<re2::RE2> exclude)
    : options_(std::move(options)),
      clock_(clock),
      backend_(std::move(backend)),
      include_description_(std::move(include)),
      exclude_description_(std::move(exclude)),
      errors_(kIbFabricCollectorName) {
  const std::string c = kIbFabricCollectorName;
  sweep_duration_ = SeriesFromSpec(ib_fabric::kSweepDurationFamily, c, {});
  discovery_duration_ = SeriesFromSpec(ib_fabric::kDiscoveryDurationFamily, c, {});
  auto mads = [&c](const char* result) {
    return SeriesFromSpec(ib_fabric::kMadsFamily, c, {{"result", result}});
  };
  mads_ok_ = mads("ok");
  mads_timeout_ = mads("timeout");
  mads_error_ = mads("error");
  mads_skipped_ = mads("skipped");
  retries_ = SeriesFromSpec(ib_fabric::kMadRetriesFamily, c, {});
  discovery_smps_ = SeriesFromSpec(ib_fabric::kDiscoverySmpsFamily, c, {});
  auto nodes = [&c](const char* type) {
    return SeriesFromSpec(ib_fabric::kNodesFamily, c, {{"type", type}});
  };
  nodes_switch_ = nodes("switch");
  nodes_ca_ = nodes("ca");
  nodes_router_ = nodes("router");
  links_ = SeriesFromSpec(ib_fabric::kLinksFamily, c, {});
  swept_ports_ = SeriesFromSpec(ib_fabric::kSweptPortsFamily, c, {});
}

IbFabricCollector::~IbFabricCollector() = default;

size_t IbFabricCollector::swept_ports() const {
  size_t n = 0;
  for (const SweptNode& node : plan_) {
    n += node.ports.size();
  }
  return n;
}

bool IbFabricCollector::NodeSelected(const Node& node) const {
  if (!options_.include_guids.empty() && options_.include_guids.count(node.guid) == 0) {
    return false;
  }
  if (options_.exclude_guids.count(node.guid) != 0) {
    return false;
  }
  if (include_description_ != nullptr &&
      !re2::RE2::FullMatch(node.description, *include_description_)) {
    return false;
  }
  if (exclude_description_ != nullptr &&
      re2::RE2::FullMatch(node.description, *exclude_description_)) {
    return false;
  }
  return true;
}

Labels IbFabricCollector::NodeLabels(const SweptNode& node) const {
  if (node.type == NodeType::kSwitch) {
    return {{"switch_guid", node.guid_label}, {"switch", node.description}};
  }
  return {{"ca_guid", node.guid_label}, {"ca", node.description}};
}

void IbFabricCollector::BuildPlan() {
  std::unordered_map<uint64_t, uint64_t> timeouts;
  for (const SweptNode& node : plan_) {
    timeouts[node.guid] = node.timeouts;
  }
  plan_.clear();
  for (size_t i = 0; i < topology_.nodes.size(); ++i) {
    const Node& node = topology_.nodes[i];
    const bool wanted = node.type == NodeType::kSwitch ||
                        (options_.include_hca_ports && node.type == NodeType::kCa);
    if (!wanted || !NodeSelected(node)) {
      continue;
    }
    SweptNode swept;
    swept.topology_index = i;
    swept.guid = node.guid;
    swept.type = node.type;
    swept.guid_label = fabric_model::FormatGuid(node.guid);
    swept.description = node.description.empty() ? swept.guid_label : node.description;
    swept.extended_speeds = node.extended_speeds;
    swept.timeouts = timeouts.count(node.guid) ? timeouts[node.guid] : 0;
    for (const Port& port : node.ports) {
      const bool connected = port.remote_node.has_value();
      const bool sweep = options_.all_ports || connected ||
                         ever_connected_.count({node.guid, port.number}) != 0 ||
                         port.state > fabric_model::kPortStateDown;
      if (!sweep) {
        continue;
      }
      SweptPort swept_port;
      swept_port.number = port.number;
      // Switch ports are addressed through the switch's LID (port 0) with PortSelect; a CA's
      // PMA answers on each port's own LID (ibsim rejects other PortSelects, IBA 16.1.3.5).
      swept_port.lid = static_cast<uint16_t>(node.type == NodeType::kSwitch ? node.lid : port.lid);
      if (swept_port.lid == 0) {
        continue;  // no LID (port not initialised by an SM): not addressable
      }
      swept_port.discovered = port;
      swept.ports.push_back(std::move(swept_port));
    }
    if (swept.ports.empty()) {
      continue;
    }
    swept.lid = swept.ports.front().lid;
    const Labels labels = NodeLabels(swept);
    const std::string c = kIbFabricCollectorName;
    swept.up = SeriesFromSpec(ib_fabric::kNodeUpFamily, c, labels);
    swept.timeouts_series = SeriesFromSpec(ib_fabric::kMadTimeoutsFamily, c, labels);
    plan_.push_back(std::move(swept));
  }
}

void IbFabricCollector::BuildPortSeries(const SweptNode& node, SweptPort& port) {
  const std::string c = kIbFabricCollectorName;
  Labels labels = NodeLabels(node);
  labels.emplace_back("port", absl::StrCat(port.number));
  port.counters.clear();
  for (size_t i = 0; i < ib_fabric::kPmaCounterCount; ++i) {
    const PmaCounter counter = static_cast<PmaCounter>(i);
    if (!ib_fabric::CounterAvailable(counter, node.caps)) {
      continue;
    }
    const ib_fabric::PmaCounterSpec& spec = ib_fabric::SpecOf(counter);
    // IBA PM counters stop at all ones (collectors/ib_fabric/README.md, "PMA capabilities"):
    // saturate, at whatever width.
    port.counters.emplace_back(
        counter, CounterSeries(c, std::string(spec.metric), std::string(spec.help), spec.unit,
                               ib_fabric::CounterWidth(counter, node.caps), Overflow::kSaturates,
                               spec.scale, labels));
  }
  // The same families and help as ib_sysfs (collectors/ib_sysfs/ib_sysfs_collector.cc).
  port.state = SeriesFromSpec(ib_sysfs::kIbPortStateFamily, c, labels);
  port.phys_state = SeriesFromSpec(ib_sysfs::kIbPortPhysStateFamily, c, labels);
  port.rate = SeriesFromSpec(ib_sysfs::kIbPortRateFamily, c, labels);
  port.width = SeriesFromSpec(ib_fabric::kPortWidthFamily, c, labels);
  port.has_link_info = false;
  const Port& discovered = port.discovered;
  if (node.type == NodeType::kSwitch && discovered.remote_node.has_value() &&
      *discovered.remote_node < topology_.nodes.size()) {
    const Node& peer = topology_.nodes[*discovered.remote_node];
    Labels info = NodeLabels(node);
    info.emplace_back("port", absl::StrCat(port.number));
    info.emplace_back("peer_guid", fabric_model::FormatGuid(peer.guid));
    info.emplace_back("peer", peer.description);
    info.emplace_back("peer_port", absl::StrCat(discovered.remote_port));
    info.emplace_back("peer_type", std::string(ib_fabric::TypeLabel(peer.type)));
    info.emplace_back("width", discovered.width != 0 ? absl::StrCat(discovered.width, "x") : "");
    info.emplace_back("speed", std::string(fabric_model::LinkSpeedName(discovered.speed)));
    port.link_info = SeriesFromSpec(ib_fabric::kLinkInfoFamily, c, std::move(info));
    port.has_link_info = true;
  }
  port.series_built = true;
}

absl::Status IbFabricCollector::Discover(v1::Inventory& inventory) {
  wants_rediscovery_ = false;
  const int64_t start = clock_.MonotonicNanos();
  DiscoveryStats stats;
  absl::StatusOr<Subnet> topology = backend_->Discover(&stats);
  last_discovery_ns_ = clock_.MonotonicNanos() - start;
  if (!topology.ok()) {
    const absl::Status status = topology.status();
    if (absl::IsNotFound(status)) {
      topology_ = Subnet();
      plan_.clear();
      link_count_ = 0;
      discovered_ = false;
      return status;  // no InfiniBand port here: hardware absent
    }
    errors_.Record(ErrorKindFromStatus(status));
    if (discovered_ && absl::IsUnavailable(status)) {
      // A failed walk (MAD timeouts near the SM, a busy fabric): keep sweeping what we knew,
      // keep it in the inventory, and try again on the next cycle.
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "ib_fabric: discovery failed, keeping the previous topology: " << status;
      fabric_model::AppendToInventory(topology_, inventory);
      wants_rediscovery_ = true;
      return absl::OkStatus();
    }
    topology_ = Subnet();
    plan_.clear();
    link_count_ = 0;
    discovered_ = false;
    return status;
  }
  discovery_smps_total_ += stats.mads;
  topology_ = *std::move(topology);
  for (const Node& node : topology_.nodes) {
    for (const Port& port : node.ports) {
      if (port.remote_node.has_value()) {
        ever_connected_.insert({node.guid, port.number});
      }
    }
  }
  BuildPlan();
  fabric_model::AppendToInventory(topology_, inventory);
  link_count_ = static_cast<size_t>(inventory.fabric_links_size());
  discovered_ = true;
  // Open the MAD port now, so that access problems show at discovery time.
  absl::StatusOr<MadTransport*> transport = backend_->OpenTransport();
  if (!transport.ok()) {
    errors_.Record(ErrorKindFromStatus(transport.status()));
    discovered_ = false;
    return transport.status();
  }
  return absl::OkStatus();
}

void IbFabricCollector::RecordOutcome(SweptNode& node, const MadResult& result) {
  switch (result.outcome) {
    case MadOutcome::kOk:
      node.responding = true;
      break;
    case MadOutcome::kTimeout:
      ++node.timeouts;
      errors_.Record(ErrorKind::kIo);
      break;
    case MadOutcome::kStatusError:
      errors_.Record(ErrorKind::kUnsupported);
      break;
    case MadOutcome::kSendError:
      errors_.Record(ErrorKind::kIo);
      break;
    case MadOutcome::kSkipped:
      break;
  }
}

absl::Status IbFabricCollector::QueryCapabilities(MadPipeline& pipeline, PipelineStats& stats) {
  std::vector<MadRequest> requests;
  std::vector<size_t> owners;
  for (size_t i = 0; i < plan_.size(); ++i) {
    SweptNode& node = plan_[i];
    if (node.caps_known || node.no_pma) {
      continue;
    }
    MadRequest request;
    request.lid = node.lid;
    request.port = static_cast<uint8_t>(node.ports.front().number);
    request.kind = MadKind::kClassPortInfo;
    request.node = static_cast<uint32_t>(i);
    requests.push_back(request);
    owners.push_back(i);
  }
  if (requests.empty()) {
    return absl::OkStatus();
  }
  std::vector<MadResult> results;
  absl::Status status = pipeline.Run(requests, results, stats);
  for (size_t r = 0; r < results.size(); ++r) {
    SweptNode& node = plan_[owners[r]];
    const MadResult& result = results[r];
    node.responding = false;
    RecordOutcome(node, result);
    if (result.outcome == MadOutcome::kOk) {
      // PerfMgt ClassPortInfo is mandatory (IBA 16.1.3.1): it tells which counters exist.
      node.caps = ib_fabric::DecodeClassPortInfo(result.data.data());
      node.caps_known = true;
      for (SweptPort& port : node.ports) {
        BuildPortSeries(node, port);
      }
    } else if (result.outcome == MadOutcome::kStatusError) {
      node.no_pma = true;  // a node without a usable PMA: not asked again until rediscovery
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "ib_fabric: " << node.description << " (" << node.guid_label
          << ") answered ClassPortInfo with MAD status 0x" << std::hex << result.mad_status
          << std::dec << "; its ports are not swept";
    }
  }
  return status;
}

absl::Status IbFabricCollector::Collect(SampleSink& sink) {
  if (!discovered_) {
    return absl::FailedPreconditionError("ib_fabric: not discovered");
  }
  const int64_t start = clock_.MonotonicNanos();
  absl::StatusOr<MadTransport*> transport = backend_->OpenTransport();
  if (!transport.ok()) {
    errors_.Record(ErrorKindFromStatus(transport.status()));
    wants_rediscovery_ = true;
    return absl::UnavailableError(
        absl::StrCat("ib_fabric: cannot open the MAD port: ", transport.status().message()));
  }
  MadPipeline pipeline(**transport, clock_, options_.pipeline);
  PipelineStats stats;
  for (SweptNode& node : plan_) {
    node.responding = node.caps_known && !node.no_pma;
  }
  absl::Status status = QueryCapabilities(pipeline, stats);

  // One request list for the whole sweep; each port's requests are contiguous.
  struct PortRef {
    size_t node;
    size_t port;
    size_t first;
    size_t count;
  };
  std::vector<MadRequest> requests;
  std::vector<PortRef> refs;
  if (status.ok()) {
    for (size_t n = 0; n < plan_.size(); ++n) {
      SweptNode& node = plan_[n];
      if (!node.caps_known || node.no_pma || !node.responding) {
        continue;
      }
      node.responding = false;  // until something answers
      for (size_t p = 0; p < node.ports.size(); ++p) {
        const SweptPort& port = node.ports[p];
        PortRef ref{n, p, requests.size(), 0};
        auto add = [&](MadKind kind) {
          MadRequest request;
          request.lid = port.lid;
          request.port = static_cast<uint8_t>(port.number);
          request.kind = kind;
          request.node = static_cast<uint32_t>(n);
          requests.push_back(request);
          ++ref.count;
        };
        if (options_.port_info) {
          add(MadKind::kPortInfo);
        }
        if (node.caps.needs_port_counters_extended()) {
          add(MadKind::kPortCountersExtended);
        }
        if (node.caps.needs_port_counters()) {
          add(MadKind::kPortCounters);
        }
        refs.push_back(ref);
      }
    }
  }
  std::vector<MadResult> results;
  if (status.ok()) {
    status = pipeline.Run(requests, results, stats);
  }
  if (!status.ok()) {
    // The port itself failed (device gone, fd error): drop it and rediscover.
    errors_.Record(ErrorKind::kIo);
    backend_->CloseTransport();
    wants_rediscovery_ = true;
    FABRICMON_LOG_EVERY_MINUTE(Warning) << "ib_fabric: sweep aborted: " << status;
  }

  for (const PortRef& ref : refs) {
    if (ref.first + ref.count > results.size()) {
      break;
    }
    SweptNode& node = plan_[ref.node];
    SweptPort& port = node.ports[ref.port];
    PortCounterValues values;
    std::optional<PortInfoValues> info;
    for (size_t r = ref.first; r < ref.first + ref.count; ++r) {
      const MadResult& result = results[r];
      RecordOutcome(node, result);
      if (result.outcome != MadOutcome::kOk) {
        continue;
      }
      switch (requests[r].kind) {
        case MadKind::kPortInfo:
          info = ib_fabric::DecodePortInfo(result.data.data());
          break;
        case MadKind::kPortCountersExtended:
          if (ib_fabric::DecodePortSelect(result.data.data()) == port.number) {
            ib_fabric::DecodePortCountersExtended(result.data.data(), node.caps, values);
          }
          break;
        case MadKind::kPortCounters:
          if (ib_fabric::DecodePortSelect(result.data.data()) == port.number) {
            ib_fabric::DecodePortCounters(result.data.data(), node.caps, values);
          }
          break;
        case MadKind::kClassPortInfo:
          break;
      }
    }
    if (!port.series_built) {
      BuildPortSeries(node, port);
    }
    for (const auto& [counter, series] : port.counters) {
      if (values.Has(counter)) {
        sink.Add(series, values.Get(counter));
      }
    }
    // State, width and rate: from this sweep's PortInfo, or from discovery when not queried.
    uint32_t state = 0;
    uint32_t phys_state = 0;
    uint32_t lanes = 0;
    LinkSpeed speed = LinkSpeed::kUnknown;
    bool have_state = false;
    if (info.has_value()) {
      have_state = true;
      state = info->state;
      phys_state = info->phys_state;
      if (state != fabric_model::kPortStateDown) {
        lanes = fabric_model::LanesFromWidthBits(info->width_bits);
        speed = fabric_model::SpeedFromPortInfo(info->speed,
                                                node.extended_speeds ? info->speed_ext : 0, 0);
        // FDR10 needs Mellanox's ExtendedPortInfo (not re-read per sweep): keep discovery's
        // answer while the base speed still reads QDR.
        if (speed == LinkSpeed::kQdr && port.discovered.speed == LinkSpeed::kFdr10) {
          speed = LinkSpeed::kFdr10;
        }
      }
      // A link that came up or went down since discovery: the cabling in the inventory is
      // stale. Ask for an early rediscovery (the agent runs it before the next cycle).
      const bool was_active = port.discovered.state == fabric_model::kPortStateActive;
      const bool is_active = state == fabric_model::kPortStateActive;
      if (was_active != is_active) {
        wants_rediscovery_ = true;
      }
    } else if (!options_.port_info) {
      have_state = true;
      state = port.discovered.state;
      phys_state = port.discovered.phys_state;
      lanes = port.discovered.width;
      speed = port.discovered.speed;
    }
    if (have_state) {
      sink.Add(port.state, state);
      sink.Add(port.phys_state, phys_state);
      sink.Add(port.width, lanes);
      sink.Add(port.rate, lanes * fabric_model::LaneBitsPerSecond(speed));
    }
    if (port.has_link_info) {
      sink.Add(port.link_info, 1);
    }
  }

  for (const SweptNode& node : plan_) {
    sink.Add(node.up, node.responding ? 1 : 0);
    sink.Add(node.timeouts_series, node.timeouts);
  }
  last_stats_ = stats;
  total_stats_.Add(stats);
  last_sweep_ns_ = clock_.MonotonicNanos() - start;
  sink.Add(sweep_duration_, static_cast<uint64_t>(last_sweep_ns_));
  sink.Add(discovery_duration_, static_cast<uint64_t>(last_discovery_ns_));
  sink.Add(mads_ok_, total_stats_.ok);
  sink.Add(mads_timeout_, total_stats_.timeouts);
  sink.Add(mads_error_, total_stats_.errors);
  sink.Add(mads_skipped_, total_stats_.skipped);
  sink.Add(retries_, total_stats_.retries);
  sink.Add(discovery_smps_, discovery_smps_total_);
  sink.Add(nodes_switch_, topology_.CountNodes(NodeType::kSwitch));
  sink.Add(nodes_ca_, topology_.CountNodes(NodeType::kCa));
  sink.Add(nodes_router_, topology_.CountNodes(NodeType::kRouter));
  sink.Add(links_, link_count_);
  sink.Add(swept_ports_, swept_ports());
  errors_.Emit(sink);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("ib_fabric: sweep aborted: ", status.message()));
  }
  return absl::OkStatus();
}

Diagnosis IbFabricCollector::Diagnose(const DiagnosisInput& input) const {
  Diagnosis diagnosis = DefaultDiagnosis(kIbFabricCollectorName, input);
  if (diagnosis.works) {
    diagnosis.reads = absl::StrCat(input.found.fabric_nodes_size(), " fabric node(s), ",
                                   input.found.fabric_links_size(), " link(s) through MADs, ",
                                   input.samples, " series");
    return diagnosis;
  }
  const absl::Status& failed = input.discovery.ok() ? input.collection : input.discovery;
  if (absl::IsPermissionDenied(failed)) {
    diagnosis.fix =
        "give the agent's user read/write on /dev/infiniband/umad*: install "
        "deploy/systemd/90-fabricmon-umad.rules in /etc/udev/rules.d (group fabricmon, mode "
        "0660) and `udevadm trigger`, with fabricmon-agent.service.d/fabric-collector.conf";
  } else if (absl::IsFailedPrecondition(failed)) {
    diagnosis.fix =
        "MADs need an InfiniBand port: set ib_fabric { ca: ... ca_port: ... } to one, "
        "or ib_fabric { enabled: false } on RoCE-only nodes";
  } else if (absl::IsNotFound(failed)) {
    diagnosis.fix =
        "no InfiniBand port here: load the HCA driver and ib_umad (modprobe "
        "ib_umad), or set ib_fabric { enabled: false }";
  }
  return diagnosis;
}

void RegisterIbFabricCollector(CollectorRegistry& registry) {
  registry.Register(
      kIbFabricCollectorName, /*enabled_by_default=*/false,
      [](const CollectorContext& context) -> absl::StatusOr<std::unique_ptr<Collector>> {
        auto collector = IbFabricCollector::Create(context.config.ib_fabric(), context.clock);
        if (!collector.ok()) {
          return collector.status();
        }
        return std::unique_ptr<Collector>(*std::move(collector));
      },
      [](const v1::CollectorsConfig&) -> std::string {
        return "the fabric through this host's umad device (MADs)";
      });
}

}  // namespace fabricmon::collectors
