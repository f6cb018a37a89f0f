#include "collectors/ib_sysfs/ib_sysfs_collector.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectors/core/sysfs_value.h"
#include "collectors/ib_sysfs/ib_counters_parser.h"
#include "collectors/ib_sysfs/ib_sysfs_families.h"
#include "daemon/common/logging.h"
#include "daemon/common/status.h"

namespace fabricmon::collectors {
namespace {

using ib_sysfs::CounterGroup;
using ib_sysfs::CounterSpec;
using ib_sysfs::kIbDeviceInfoFamily;
using ib_sysfs::kIbHwCountersLifespanFamily;
using ib_sysfs::kIbPortInfoFamily;
using ib_sysfs::kIbPortPhysStateFamily;
using ib_sysfs::kIbPortRateFamily;
using ib_sysfs::kIbPortStateFamily;
using ib_sysfs::kIbPortUnreadableFamily;

constexpr int64_t kDefaultIntervalMs = 1000;
constexpr int64_t kDefaultRediscoverMs = 60000;
// Counter files hold one integer; 64 bytes leave room for whitespace and odd driver output.
constexpr size_t kCounterBufferSize = 64;

std::string OptionalAttribute(const std::string& path) {
  absl::StatusOr<std::string> value = ReadTrimmed(path);
  return value.ok() ? *value : std::string();
}

uint64_t ParseStateCode(absl::string_view content) {
  return ib_sysfs::ParsePortState(content).code;
}

uint64_t ParseRate(absl::string_view content) { return ib_sysfs::ParseRateBitsPerSecond(content); }

struct Candidate {
  std::string path;
  CounterSpec spec;
};

// The width of counters/ data and packet counters is inferred from the file set (unicast_* ⇒
// PortCountersExtended). The kernel's pma_group_noietf (ClassPortInfo EXT_WIDTH_NOIETF, e.g.
// hfi1) has 64-bit data and packet counters without the unicast/multicast files, so a value above
// 2^32 - 1 proves the inference wrong: widen rather than export a raw value the series declares
// impossible (README.md, "Which counter group the kernel exposes"). Only the PMA traffic counters
// have this ambiguity.
bool IsLegacyTraffic(const SeriesDesc& series) {
  return series.width_bits == 32 && series.overflow == Overflow::kSaturates &&
         (series.unit == Unit::kBytes || series.unit == Unit::kPackets);
}

// Returns true if `series` was widened.
bool WidenIfExceeded(SeriesDesc& series, uint64_t value) {
  if (value > UINT32_MAX && IsLegacyTraffic(series)) {
    series.width_bits = 64;
    series.Finalize();  // a new fingerprint: the agent declares the wider series again
    return true;
  }
  return false;
}

// The traffic counters of a port come from one PMA group: once one has proved to be 64-bit, so
// are the others. Finalize() gives them new fingerprints, so sinks see new series and the agent
// re-declares them (the aggregator restarts the same series with the new width).
template <typename CounterFiles>
void WidenPortTraffic(CounterFiles& counters) {
  for (auto& counter : counters) {
    if (IsLegacyTraffic(counter.series)) {
      counter.series.width_bits = 64;
      counter.series.Finalize();
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<IbSysfsCollector>> IbSysfsCollector::Create(
    const v1::IbSysfsCollectorConfig& config) {
  absl::StatusOr<DeviceFilter> filter = DeviceFilter::Create(config.devices());
  if (!filter.ok()) {
    return filter.status();
  }
  const std::string root = config.sysfs_root().empty() ? "/sys" : config.sysfs_root();
  const int64_t interval = config.interval_ms() ? config.interval_ms() : kDefaultIntervalMs;
  const int64_t rediscover =
      config.rediscover_interval_ms() ? config.rediscover_interval_ms() : kDefaultRediscoverMs;
  if (interval < 100) {
    return absl::InvalidArgumentError("ib_sysfs.interval_ms must be at least 100");
  }
  const bool hw = config.has_hw_counters() ? config.hw_counters() : true;
  return std::unique_ptr<IbSysfsCollector>(
      new IbSysfsCollector(root, *std::move(filter), hw, interval, rediscover));
}

IbSysfsCollector::IbSysfsCollector(std::string root, DeviceFilter filter, bool hw_counters,
                                   int64_t interval_ms, int64_t rediscover_interval_ms)
    : root_(std::move(root)),
      filter_(std::move(filter)),
      hw_counters_(hw_counters),
      interval_ms_(interval_ms),
      rediscover_interval_ms_(rediscover_interval_ms),
      errors_(kIbSysfsCollectorName) {}

size_t IbSysfsCollector::open_counter_files() const {
  size_t n = 0;
  for (const Device& device : devices_) {
    for (const Port& port : device.ports) {
      for (const CounterFile& counter : port.counters) {
        n += counter.file.is_open() ? 1 : 0;
      }
    }
  }
  return n;
}

absl::Status IbSysfsCollector::Discover(v1::Inventory& inventory) {
  wants_rediscovery_ = false;
  const std::string class_dir = JoinPath(root_, "class/infiniband");
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(class_dir);
  if (!names.ok()) {
    devices_.clear();
    if (absl::IsNotFound(names.status())) {
      return absl::NotFoundError(absl::StrCat("no RDMA devices: ", class_dir, " is absent"));
    }
    return names.status();
  }
  // Read once per discovery, not per port: it lists class/net and every GID table.
  netdev_map_ = RdmaNetdevMap::Read(root_);
  std::vector<Device> devices;
  for (const std::string& name : *names) {
    // The filter runs on the directory name, before any file of the device is opened.
    if (!filter_.Allows(name)) {
      FABRICMON_LOG(Debug) << "ib_sysfs: " << name << " excluded by filter";
      continue;
    }
    v1::RdmaDevice device_inventory;
    absl::StatusOr<Device> device = DiscoverDevice(name, device_inventory);
    if (!device.ok()) {
      errors_.Record(ErrorKindFromStatus(device.status()));
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "ib_sysfs: skipping " << name << ": " << device.status();
      continue;
    }
    *inventory.add_rdma_devices() = std::move(device_inventory);
    devices.push_back(*std::move(device));
  }
  devices_ = std::move(devices);
  if (devices_.empty()) {
    return absl::NotFoundError(absl::StrCat("no RDMA devices under ", class_dir));
  }
  return absl::OkStatus();
}

absl::StatusOr<IbSysfsCollector::Device> IbSysfsCollector::DiscoverDevice(
    const std::string& name, v1::RdmaDevice& inventory) {
  const std::string dir = JoinPath(root_, absl::StrCat("class/infiniband/", name));
  absl::StatusOr<std::vector<std::string>> port_names = ListDirectory(JoinPath(dir, "ports"));
  if (!port_names.ok()) {
    return Annotate(port_names.status(), "ports");
  }

  Device device;
  device.name = name;
  // Identify the driver by the device/driver link, never by the device name: systemd renames
  // HCAs (README.md, "Devices are found by driver, not by name").
  absl::StatusOr<std::string> driver = ReadLinkBasename(JoinPath(dir, "device/driver"));
  inventory.set_name(name);
  inventory.set_driver(driver.ok() ? *driver : "");
  inventory.set_fw_ver(OptionalAttribute(JoinPath(dir, "fw_ver")));
  inventory.set_board_id(OptionalAttribute(JoinPath(dir, "board_id")));
  inventory.set_hca_type(OptionalAttribute(JoinPath(dir, "hca_type")));
  inventory.set_node_guid(OptionalAttribute(JoinPath(dir, "node_guid")));
  inventory.set_sys_image_guid(OptionalAttribute(JoinPath(dir, "sys_image_guid")));
  const std::string driver_family =
      ib_sysfs::DriverFamily(inventory.driver(), name, inventory.hca_type());

  bool device_all_unsupported = true;
  bool device_has_counters = false;
  for (const std::string& port_name : *port_names) {
    uint32_t number = 0;
    if (!absl::SimpleAtoi(port_name, &number)) {
      continue;
    }
    const std::string port_dir = JoinPath(dir, absl::StrCat("ports/", port_name));
    v1::RdmaPort port_inventory;
    bool all_unsupported = false;
    bool has_counters = false;
    absl::StatusOr<Port> port = DiscoverPort(device, driver_family, port_dir, number,
                                             port_inventory, &all_unsupported, &has_counters);
    if (!port.ok()) {
      errors_.Record(ErrorKindFromStatus(port.status()));
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "ib_sysfs: skipping " << name << " port " << port_name << ": " << port.status();
      continue;
    }
    device_has_counters = device_has_counters || has_counters;
    device_all_unsupported = device_all_unsupported && all_unsupported;
    *inventory.add_ports() = std::move(port_inventory);
    device.ports.push_back(*std::move(port));
  }
  const bool restricted = device_has_counters && device_all_unsupported;
  inventory.set_restricted(restricted);
  if (restricted) {
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "ib_sysfs: " << name
        << " refuses every counter read (EINVAL): firmware-restricted function? Exclude it with "
           "ib_sysfs.devices.exclude to stop the kernel log messages.";
  }

  device.info = SeriesFromSpec(kIbDeviceInfoFamily, kIbSysfsCollectorName,
                               {{"device", name},
                                {"driver", inventory.driver()},
                                {"fw_ver", inventory.fw_ver()},
                                {"board_id", inventory.board_id()},
                                {"hca_type", inventory.hca_type()},
                                {"node_guid", inventory.node_guid()},
                                {"sys_image_guid", inventory.sys_image_guid()},
                                {"restricted", restricted ? "true" : "false"}});
  return device;
}

void IbSysfsCollector::AddCounterFile(Port& port, const std::string& path, SeriesDesc series,
                                      ProbeTally& tally) {
  absl::StatusOr<PreadFile> file = PreadFile::Open(path);
  if (!file.ok()) {
    errors_.Record(ErrorKindFromStatus(file.status()));
    return;
  }
  char buffer[kCounterBufferSize];
  absl::StatusOr<size_t> n = file->Read(buffer, sizeof(buffer));
  if (!n.ok()) {
    const ErrorKind kind = ErrorKindFromStatus(n.status());
    errors_.Record(kind);
    if (kind == ErrorKind::kUnsupported) {
      // EINVAL: the PMA MAD behind the file failed; asking again only spams the kernel log.
      ++port.unreadable_count;
      tally.einval = true;
      return;
    }
  } else {
    ParsedCounter parsed = ParseCounter(absl::string_view(buffer, *n));
    if (!parsed.ok) {
      errors_.Record(parsed.error);
      if (parsed.error == ErrorKind::kNoPma) {
        // "N/A (no PMA)" is permanent for this driver (iWARP and others).
        ++port.unreadable_count;
        tally.no_pma = true;
        return;
      }
    } else {
      WidenIfExceeded(series, parsed.value);
    }
  }
  tally.supported = true;
  port.counters.push_back({*std::move(file), std::move(series)});
}

absl::StatusOr<IbSysfsCollector::Port> IbSysfsCollector::DiscoverPort(
    const Device& device, const std::string& driver, const std::string& port_dir, uint32_t number,
    v1::RdmaPort& inventory, bool* all_unsupported, bool* has_counters) {
  Port port;
  port.number = number;
  const std::string port_label = absl::StrCat(number);
  const Labels labels = {{"device", device.name}, {"port", port_label}};

  ib_sysfs::PortStateValue state =
      ib_sysfs::ParsePortState(OptionalAttribute(JoinPath(port_dir, "state")));
  ib_sysfs::PortStateValue phys =
      ib_sysfs::ParsePortState(OptionalAttribute(JoinPath(port_dir, "phys_state")));
  const std::string rate_text = OptionalAttribute(JoinPath(port_dir, "rate"));
  inventory.set_number(number);
  inventory.set_link_layer(OptionalAttribute(JoinPath(port_dir, "link_layer")));
  inventory.set_state(state.code);
  inventory.set_state_name(state.name);
  inventory.set_phys_state(phys.code);
  inventory.set_phys_state_name(phys.name);
  inventory.set_rate(rate_text);
  inventory.set_rate_bits_per_second(ib_sysfs::ParseRateBitsPerSecond(rate_text));
  inventory.set_lid(ib_sysfs::ParseLid(OptionalAttribute(JoinPath(port_dir, "lid"))));
  inventory.set_sm_lid(ib_sysfs::ParseLid(OptionalAttribute(JoinPath(port_dir, "sm_lid"))));
  for (std::string& netdev : netdev_map_.NetdevsOf(device.name, number)) {
    inventory.add_netdevs(std::move(netdev));
  }

  auto open_attribute = [&](const char* file, SeriesDesc series) {
    AttributeFile attribute;
    absl::StatusOr<PreadFile> opened = PreadFile::Open(JoinPath(port_dir, file));
    if (opened.ok()) {
      attribute.file = *std::move(opened);
    }
    attribute.series = std::move(series);
    return attribute;
  };
  port.state =
      open_attribute("state", SeriesFromSpec(kIbPortStateFamily, kIbSysfsCollectorName, labels));
  port.phys_state = open_attribute(
      "phys_state", SeriesFromSpec(kIbPortPhysStateFamily, kIbSysfsCollectorName, labels));
  port.rate =
      open_attribute("rate", SeriesFromSpec(kIbPortRateFamily, kIbSysfsCollectorName, labels));

  std::string netdevs;
  for (const std::string& netdev : inventory.netdevs()) {
    absl::StrAppend(&netdevs, netdevs.empty() ? "" : ",", netdev);
  }
  port.info = SeriesFromSpec(kIbPortInfoFamily, kIbSysfsCollectorName,
                             {{"device", device.name},
                              {"port", port_label},
                              {"link_layer", inventory.link_layer()},
                              {"netdev", netdevs},
                              {"lid", absl::StrCat(inventory.lid())},
                              {"sm_lid", absl::StrCat(inventory.sm_lid())}});
  port.unreadable = SeriesFromSpec(kIbPortUnreadableFamily, kIbSysfsCollectorName, labels);

  // Gather candidates from the three groups; when two files map to one metric (counters/ 32-bit
  // port_xmit_data vs counters_ext/ port_xmit_data_64), the wider one wins, and counters_ext/
  // wins a tie: it is 64-bit by definition, while the width of counters/ is only inferred from
  // the presence of unicast_xmit_packets (trees with both groups claiming 64 bits exist, e.g.
  // node_exporter's mlx4_0 fixture, where the two disagree).
  std::vector<Candidate> candidates;
  std::map<std::string, size_t> by_metric;
  auto gather = [&](const char* subdir, CounterGroup group) {
    const std::string dir = JoinPath(port_dir, subdir);
    absl::StatusOr<std::vector<std::string>> files = ListDirectory(dir);
    if (!files.ok()) {
      return;
    }
    const bool extended =
        std::find(files->begin(), files->end(), "unicast_xmit_packets") != files->end();
    for (const std::string& file : *files) {
      CounterSpec spec = ib_sysfs::SpecForCounter(group, file, extended, driver);
      if (spec.skip) {
        if (group == CounterGroup::kHwCounters && file == "lifespan") {
          absl::StatusOr<std::string> text = ReadTrimmed(JoinPath(dir, file));
          port.has_lifespan = text.ok() && absl::SimpleAtoi(*text, &port.lifespan_ms);
        }
        continue;
      }
      auto [it, inserted] = by_metric.emplace(spec.metric, candidates.size());
      if (inserted) {
        candidates.push_back({JoinPath(dir, file), std::move(spec)});
      } else if (spec.width_bits > candidates[it->second].spec.width_bits ||
                 (group == CounterGroup::kCountersExt &&
                  spec.width_bits == candidates[it->second].spec.width_bits)) {
        candidates[it->second] = {JoinPath(dir, file), std::move(spec)};
      }
    }
  };
  gather("counters", CounterGroup::kCounters);
  gather("counters_ext", CounterGroup::kCountersExt);
  if (hw_counters_) {
    gather("hw_counters", CounterGroup::kHwCounters);
  }
  port.lifespan = SeriesFromSpec(kIbHwCountersLifespanFamily, kIbSysfsCollectorName, labels);

  ProbeTally tally;
  bool traffic_widened = false;
  for (Candidate& candidate : candidates) {
    SeriesDesc series = CounterSeries(
        kIbSysfsCollectorName, candidate.spec.metric, candidate.spec.help, candidate.spec.unit,
        candidate.spec.width_bits, candidate.spec.overflow, candidate.spec.scale, labels);
    const size_t kept = port.counters.size();
    AddCounterFile(port, candidate.path, std::move(series), tally);
    traffic_widened =
        traffic_widened || (port.counters.size() > kept &&
                            port.counters.back().series.width_bits != candidate.spec.width_bits);
  }
  if (traffic_widened) {
    WidenPortTraffic(port.counters);
  }
  // Restricted means the firmware refuses (EINVAL); "N/A (no PMA)" is a driver without a PMA.
  *all_unsupported = tally.einval && !tally.supported;
  *has_counters = !candidates.empty();
  return port;
}

void IbSysfsCollector::ReadAttribute(const AttributeFile& attribute, SampleSink& sink,
                                     uint64_t (*parse)(absl::string_view)) {
  if (!attribute.file.is_open()) {
    return;
  }
  char buffer[kCounterBufferSize];
  absl::StatusOr<size_t> n = attribute.file.Read(buffer, sizeof(buffer));
  if (!n.ok()) {
    errors_.Record(ErrorKindFromStatus(n.status()));
    wants_rediscovery_ = wants_rediscovery_ || absl::IsNotFound(n.status());
    return;
  }
  if (*n == 0) {
    errors_.Record(ErrorKind::kEmpty);
    return;
  }
  sink.Add(attribute.series, parse(absl::string_view(buffer, *n)));
}

absl::Status IbSysfsCollector::Collect(SampleSink& sink) {
  if (devices_.empty()) {
    return absl::NotFoundError("no RDMA devices discovered");
  }
  char buffer[kCounterBufferSize];
  for (Device& device : devices_) {
    sink.Add(device.info, 1);
    for (Port& port : device.ports) {
      sink.Add(port.info, 1);
      ReadAttribute(port.state, sink, &ParseStateCode);
      ReadAttribute(port.phys_state, sink, &ParseStateCode);
      ReadAttribute(port.rate, sink, &ParseRate);
      for (CounterFile& counter : port.counters) {
        if (!counter.file.is_open()) {
          continue;
        }
        absl::StatusOr<size_t> n = counter.file.Read(buffer, sizeof(buffer));
        if (!n.ok()) {
          const ErrorKind kind = ErrorKindFromStatus(n.status());
          errors_.Record(kind);
          if (kind == ErrorKind::kUnsupported) {
            counter.file = PreadFile();  // stop asking until the next discovery
            ++port.unreadable_count;
          } else if (kind == ErrorKind::kMissing) {
            wants_rediscovery_ = true;  // ENODEV: the device went away under us
          }
          continue;
        }
        const ParsedCounter parsed = ParseCounter(absl::string_view(buffer, *n));
        if (!parsed.ok) {
          errors_.Record(parsed.error);
          continue;
        }
        if (WidenIfExceeded(counter.series, parsed.value)) {
          WidenPortTraffic(port.counters);
        }
        sink.Add(counter.series, parsed.value);
      }
      sink.Add(port.unreadable, port.unreadable_count);
      if (port.has_lifespan) {
        sink.Add(port.lifespan, port.lifespan_ms);
      }
    }
  }
  errors_.Emit(sink);
  return absl::OkStatus();
}

Diagnosis IbSysfsCollector::Diagnose(const DiagnosisInput& input) const {
  Diagnosis diagnosis = DefaultDiagnosis(kIbSysfsCollectorName, input);
  if (absl::IsNotFound(input.discovery)) {
    diagnosis.fix =
        "load the HCA's RDMA driver (mlx5_ib, ...) so that its devices appear under "
        "class/infiniband, or set ib_sysfs { enabled: false } on nodes without RDMA";
    return diagnosis;
  }
  if (!input.discovery.ok()) {
    return diagnosis;
  }
  size_t ports = 0;
  std::vector<std::string> restricted;
  for (const v1::RdmaDevice& device : input.found.rdma_devices()) {
    ports += device.ports_size();
    if (device.restricted()) {
      restricted.push_back(device.name());
    }
  }
  diagnosis.reads =
      absl::StrCat(input.found.rdma_devices_size(), " RDMA device(s), ", ports, " port(s) under ",
                   root_, "/class/infiniband, ", input.samples, " series");
  if (!restricted.empty()) {
    diagnosis.works = false;
    diagnosis.problem = absl::StrCat(
        "counters of ", absl::StrJoin(restricted, ", "),
        " unreadable: every counter read answered EINVAL (firmware-restricted PCI function)");
    diagnosis.fix = absl::StrCat("leave them out: ib_sysfs { devices { exclude: \"",
                                 absl::StrJoin(restricted, "|"), "\" } }");
  }
  return diagnosis;
}

void RegisterIbSysfsCollector(CollectorRegistry& registry) {
  registry.Register(
      kIbSysfsCollectorName, /*enabled_by_default=*/true,
      [](const CollectorContext& context) -> absl::StatusOr<std::unique_ptr<Collector>> {
        auto collector = IbSysfsCollector::Create(context.config.ib_sysfs());
        if (!collector.ok()) {
          return collector.status();
        }
        return std::unique_ptr<Collector>(*std::move(collector));
      });
}

}  // namespace fabricmon::collectors
