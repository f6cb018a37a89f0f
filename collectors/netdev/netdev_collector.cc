#include "collectors/netdev/netdev_collector.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectors/core/sysfs_value.h"
#include "collectors/netdev/netdev_families.h"
#include "collectors/netdev/proc_net_snmp_parser.h"
#include "daemon/common/logging.h"
#include "daemon/common/status.h"

namespace fabricmon::collectors {
namespace {

using netdev::NetdevKind;
using netdev::ProcNetFile;
using netdev::TcpMetricSpec;

constexpr int64_t kDefaultIntervalMs = 1000;
constexpr int64_t kDefaultRediscoverMs = 60000;
// Attribute and statistics files hold one integer or one word.
constexpr size_t kAttributeBufferSize = 64;
// /proc/net/netstat is ~4 KiB on 6.x kernels; the buffer grows (to a cap) if a kernel prints more.
constexpr size_t kProcNetInitialBuffer = 16 * 1024;
constexpr size_t kProcNetMaxBuffer = 1024 * 1024;

// ethtool speed is a u32 printed with "%d": SPEED_UNKNOWN (0xffffffff, up without link) reads
// "-1". Negative → unknown.
std::optional<int64_t> SpeedMbps(uint64_t raw) {
  const int64_t mbps = static_cast<int32_t>(static_cast<uint32_t>(raw));
  if (mbps < 0) {
    return std::nullopt;
  }
  return mbps;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool EntryExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetdevCollector>> NetdevCollector::Create(
    const v1::NetdevCollectorConfig& config) {
  absl::StatusOr<DeviceFilter> filter = DeviceFilter::Create(config.netdevs());
  if (!filter.ok()) {
    return Annotate(filter.status(), "netdev.netdevs");
  }
  const int64_t interval = config.interval_ms() ? config.interval_ms() : kDefaultIntervalMs;
  const int64_t rediscover =
      config.rediscover_interval_ms() ? config.rediscover_interval_ms() : kDefaultRediscoverMs;
  if (interval < 100) {
    return absl::InvalidArgumentError("netdev.interval_ms must be at least 100");
  }
  return std::unique_ptr<NetdevCollector>(new NetdevCollector(
      config.sysfs_root().empty() ? "/sys" : config.sysfs_root(),
      config.procfs_root().empty() ? "/proc" : config.procfs_root(), *std::move(filter),
      config.has_tcp() ? config.tcp() : true, interval, rediscover));
}

NetdevCollector::NetdevCollector(std::string sysfs_root, std::string procfs_root,
                                 DeviceFilter filter, bool tcp, int64_t interval_ms,
                                 int64_t rediscover_interval_ms)
    : sysfs_root_(std::move(sysfs_root)),
      procfs_root_(std::move(procfs_root)),
      filter_(std::move(filter)),
      tcp_(tcp),
      interval_ms_(interval_ms),
      rediscover_interval_ms_(rediscover_interval_ms),
      errors_(kNetdevCollectorName) {}

// ---------------------------------------------------------------------------------------------
// Discovery

NetdevCollector::Attribute NetdevCollector::OpenAttribute(const std::string& dir, const char* file,
                                                          SeriesDesc series) {
  Attribute attribute;
  absl::StatusOr<PreadFile> opened = PreadFile::Open(JoinPath(dir, file));
  if (opened.ok()) {
    attribute.file = *std::move(opened);
  } else {
    errors_.Record(ErrorKindFromStatus(opened.status()));
    FABRICMON_LOG_EVERY_MINUTE(Debug) << "netdev: " << opened.status();
  }
  attribute.series = std::move(series);
  return attribute;
}

std::optional<NetdevCollector::Netdev> NetdevCollector::DiscoverNetdev(
    const std::string& name, const RdmaNetdevMap& rdma_map, v1::Netdev& inventory) {
  const std::string dir = JoinPath(sysfs_root_, absl::StrCat("class/net/", name));
  if (!IsDirectory(dir)) {
    return std::nullopt;  // bonding_masters and other class/net files are not netdevs
  }

  Netdev netdev;
  netdev.name = name;
  netdev::NetdevFacts facts;
  absl::StatusOr<std::string> type_text = ReadTrimmed(JoinPath(dir, "type"));
  if (!type_text.ok()) {
    errors_.Record(ErrorKindFromStatus(type_text.status()));
  } else if (std::optional<uint64_t> type = netdev::ParseKernelInteger(*type_text);
             type.has_value()) {
    facts.type = static_cast<int>(*type);
  } else {
    errors_.Record(type_text->empty() ? ErrorKind::kEmpty : ErrorKind::kNotNumeric);
  }

  // `device` is a symlink to the bus device; virtual netdevs have none. Only its existence
  // matters: a capture may hold it as a plain file or a dangling link (procfs fixture).
  facts.has_device = EntryExists(JoinPath(dir, "device"));
  // The GID table names the exact device and port (a RoCE LAG's bond has no bus device); else
  // the RDMA device on the same bus device (mlx5 RoCE and IPoIB ports both show there).
  RdmaLink rdma;
  const std::vector<RdmaNetdevLink> links = rdma_map.LinksOf(name);
  for (const RdmaNetdevLink& link : links) {
    (link.source == RdmaNetdevSource::kGidTable ? facts.named_by_gid : facts.has_rdma_device) =
        true;
  }
  if (!links.empty()) {
    rdma = RdmaLink{links.front().rdma_device, links.front().port};
  }
  absl::StatusOr<std::string> driver = ReadLinkBasename(JoinPath(dir, "device/driver"));
  netdev.kind = netdev::ClassifyNetdev(name, facts);
  const bool rdma_kind =
      netdev.kind == NetdevKind::kRdmaEthernet || netdev.kind == NetdevKind::kIpoib;
  if (!rdma_kind) {
    rdma = RdmaLink{};
  }

  const Labels labels = {{"netdev", name}};
  netdev.oper_state = OpenAttribute(
      dir, "operstate", SeriesFromSpec(netdev::kOperStateFamily, kNetdevCollectorName, labels));
  netdev.carrier = OpenAttribute(
      dir, "carrier", SeriesFromSpec(netdev::kCarrierFamily, kNetdevCollectorName, labels));
  netdev.carrier_changes =
      OpenAttribute(dir, "carrier_changes",
                    SeriesFromSpec(netdev::kCarrierChangesFamily, kNetdevCollectorName, labels));
  netdev.carrier_up =
      OpenAttribute(dir, "carrier_up_count",
                    SeriesFromSpec(netdev::kCarrierUpFamily, kNetdevCollectorName, labels));
  netdev.carrier_down =
      OpenAttribute(dir, "carrier_down_count",
                    SeriesFromSpec(netdev::kCarrierDownFamily, kNetdevCollectorName, labels));
  netdev.mtu =
      OpenAttribute(dir, "mtu", SeriesFromSpec(netdev::kMtuFamily, kNetdevCollectorName, labels));
  netdev.speed = OpenAttribute(dir, "speed",
                               SeriesFromSpec(netdev::kSpeedFamily, kNetdevCollectorName, labels));

  // statistics/: walk the directory so counters new kernels add are exported too.
  const std::string stats_dir = JoinPath(dir, "statistics");
  absl::StatusOr<std::vector<std::string>> stat_files = ListDirectory(stats_dir);
  if (!stat_files.ok()) {
    errors_.Record(ErrorKindFromStatus(stat_files.status()));
  } else {
    for (const std::string& file : *stat_files) {
      if (SanitizeName(file).empty()) {
        continue;  // a name with no usable character cannot become a metric name
      }
      netdev::StatisticSpec spec = netdev::SpecForStatistic(file);
      netdev.statistics.push_back(
          OpenAttribute(stats_dir, file.c_str(),
                        CounterSeries(kNetdevCollectorName, spec.metric, spec.help, spec.unit,
                                      netdev::kKernelLongBits, Overflow::kWraps, 1.0, labels)));
      if (!netdev.statistics.back().file.is_open()) {
        netdev.statistics.pop_back();
      }
    }
  }

  // First speed read; later ones only when the link may have renegotiated (see header).
  if (netdev.speed.file.is_open()) {
    ++speed_reads_;
    if (std::optional<uint64_t> speed = ReadInteger(netdev.speed, /*einval_expected=*/true)) {
      netdev.speed_mbps = SpeedMbps(*speed);
    }
  }

  inventory.set_name(name);
  inventory.set_kind(netdev::NetdevKindToProto(netdev.kind));
  inventory.set_driver(driver.ok() ? *driver : "");
  inventory.set_rdma_device(rdma.device);
  inventory.set_rdma_port(rdma.port);
  if (netdev.speed_mbps.has_value()) {
    inventory.set_speed_bits_per_second(static_cast<uint64_t>(*netdev.speed_mbps) * 1000000);
  }
  if (std::optional<uint64_t> mtu = ReadInteger(netdev.mtu, false)) {
    inventory.set_mtu(static_cast<uint32_t>(*mtu));
  }
  char buffer[kAttributeBufferSize];
  if (std::optional<absl::string_view> oper =
          ReadAttribute(netdev.oper_state, false, buffer, sizeof(buffer))) {
    inventory.set_operstate(std::string(absl::StripAsciiWhitespace(*oper)));
  }

  netdev.info = SeriesFromSpec(netdev::kNetdevInfoFamily, kNetdevCollectorName,
                               {{"netdev", name},
                                {"kind", std::string(netdev::NetdevKindName(netdev.kind))},
                                {"driver", inventory.driver()},
                                {"rdma_device", rdma.device}});
  return netdev;
}

void NetdevCollector::DiscoverTcp() {
  tcp_sources_.clear();
  if (!tcp_) {
    return;
  }
  for (ProcNetFile which : {ProcNetFile::kSnmp, ProcNetFile::kNetstat}) {
    TcpSource source;
    source.which = which;
    source.path = JoinPath(procfs_root_, which == ProcNetFile::kSnmp ? "net/snmp" : "net/netstat");
    absl::StatusOr<PreadFile> file = PreadFile::Open(source.path);
    if (!file.ok()) {
      errors_.Record(ErrorKindFromStatus(file.status()));
      FABRICMON_LOG_EVERY_MINUTE(Debug) << "netdev: " << file.status();
      continue;
    }
    source.file = *std::move(file);
    if (!ReadProcNet(source, proc_buffer_)) {
      continue;
    }
    const netdev::SnmpTable table = netdev::ParseSnmpTable(proc_buffer_);
    std::vector<absl::string_view> missing_sections;
    for (const TcpMetricSpec& spec : netdev::CuratedTcpMetrics()) {
      if (spec.file != which) {
        continue;
      }
      const netdev::SnmpSection* section = table.Find(spec.section);
      if (section == nullptr) {
        // The Tcp / TcpExt line itself is missing or malformed: a broken file, count it once.
        if (std::find(missing_sections.begin(), missing_sections.end(), spec.section) ==
            missing_sections.end()) {
          missing_sections.push_back(spec.section);
          errors_.Record(ErrorKind::kMissing);
        }
        continue;
      }
      const int index = section->IndexOf(spec.key);
      if (index < 0) {
        continue;  // field not in this kernel version: not exported, not an error
      }
      Labels labels;
      if (!spec.label_name.empty()) {
        labels.emplace_back(std::string(spec.label_name), std::string(spec.label_value));
      }
      SeriesDesc series =
          spec.type == MetricType::kGauge
              ? GaugeSeries(kNetdevCollectorName, std::string(spec.metric), std::string(spec.help),
                            spec.unit, 1.0, std::move(labels))
              : CounterSeries(kNetdevCollectorName, std::string(spec.metric),
                              std::string(spec.help), spec.unit, netdev::kKernelLongBits,
                              Overflow::kWraps, 1.0, std::move(labels));
      source.fields.push_back({&spec, std::move(series), index});
    }
    if (!source.fields.empty()) {
      tcp_sources_.push_back(std::move(source));
    }
  }
}

absl::Status NetdevCollector::Discover(v1::Inventory& inventory) {
  wants_rediscovery_ = false;
  netdevs_.clear();
  known_names_.clear();

  const std::string net_dir = JoinPath(sysfs_root_, "class/net");
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(net_dir);
  if (!names.ok() && !absl::IsNotFound(names.status())) {
    errors_.Record(ErrorKindFromStatus(names.status()));
    FABRICMON_LOG_EVERY_MINUTE(Warning) << "netdev: " << names.status();
  }
  if (names.ok()) {
    const RdmaNetdevMap rdma_map = RdmaNetdevMap::Read(sysfs_root_);
    for (const std::string& name : *names) {
      // The filter runs on the name, before any file of the netdev is opened.
      if (!filter_.Allows(name)) {
        continue;
      }
      known_names_.push_back(name);
      v1::Netdev netdev_inventory;
      std::optional<Netdev> netdev = DiscoverNetdev(name, rdma_map, netdev_inventory);
      if (!netdev.has_value()) {
        continue;
      }
      *inventory.add_netdevs() = std::move(netdev_inventory);
      netdevs_.push_back(*std::move(netdev));
    }
  }
  DiscoverTcp();

  if (netdevs_.empty() && tcp_sources_.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no netdevs under ", net_dir, " and no TCP table under ", JoinPath(procfs_root_, "net")));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Collection

std::optional<absl::string_view> NetdevCollector::ReadAttribute(const Attribute& attribute,
                                                                bool einval_expected, char* buffer,
                                                                size_t capacity) {
  if (!attribute.file.is_open()) {
    return std::nullopt;  // counted when the open failed
  }
  absl::StatusOr<size_t> n = attribute.file.Read(buffer, capacity);
  if (!n.ok()) {
    if (einval_expected && absl::IsInvalidArgument(n.status())) {
      return std::nullopt;  // carrier/speed of a down netdev: the kernel's "not applicable"
    }
    const ErrorKind kind = ErrorKindFromStatus(n.status());
    errors_.Record(kind);
    if (kind == ErrorKind::kMissing || kind == ErrorKind::kUnsupported) {
      // ENODEV: the netdev is being or was unregistered (statistics answer EINVAL while it is
      // dying, net-sysfs.c netstat_show). Look again.
      wants_rediscovery_ = true;
    }
    return std::nullopt;
  }
  absl::string_view content = absl::StripAsciiWhitespace(absl::string_view(buffer, *n));
  if (content.empty()) {
    errors_.Record(ErrorKind::kEmpty);
    return std::nullopt;
  }
  return content;
}

std::optional<uint64_t> NetdevCollector::ReadInteger(const Attribute& attribute,
                                                     bool einval_expected) {
  char buffer[kAttributeBufferSize];
  std::optional<absl::string_view> content =
      ReadAttribute(attribute, einval_expected, buffer, sizeof(buffer));
  if (!content.has_value()) {
    return std::nullopt;
  }
  std::optional<uint64_t> value = netdev::ParseKernelInteger(*content);
  if (!value.has_value()) {
    errors_.Record(ErrorKind::kNotNumeric);
  }
  return value;
}

bool NetdevCollector::CheckNetdevNames() {
  const std::string net_dir = JoinPath(sysfs_root_, "class/net");
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(net_dir);
  std::vector<std::string> allowed;
  if (names.ok()) {
    for (std::string& name : *names) {
      if (filter_.Allows(name)) {
        allowed.push_back(std::move(name));
      }
    }
  }
  const bool changed = allowed != known_names_;
  for (Netdev& netdev : netdevs_) {
    netdev.vanished = changed && !std::binary_search(allowed.begin(), allowed.end(), netdev.name);
  }
  return changed;
}

void NetdevCollector::CollectNetdev(Netdev& netdev, SampleSink& sink) {
  sink.Add(netdev.info, 1);

  char buffer[kAttributeBufferSize];
  if (std::optional<absl::string_view> text =
          ReadAttribute(netdev.oper_state, false, buffer, sizeof(buffer))) {
    if (std::optional<int64_t> state = netdev::ParseOperState(*text)) {
      sink.Add(netdev.oper_state.series, static_cast<uint64_t>(*state));
      // The first cycle after discovery sets the baseline (speed was just read there).
      netdev.speed_stale = netdev.speed_stale ||
                           (netdev.last_oper_state.has_value() && netdev.last_oper_state != state);
      netdev.last_oper_state = state;
    } else {
      errors_.Record(ErrorKind::kNotNumeric);
    }
  }
  if (std::optional<uint64_t> carrier = ReadInteger(netdev.carrier, /*einval_expected=*/true)) {
    sink.Add(netdev.carrier.series, *carrier);
  }
  // Truncating to 32 bits turns the "%d" print of a wrapped atomic_t back into its counter value.
  if (std::optional<uint64_t> changes = ReadInteger(netdev.carrier_changes, false)) {
    const uint64_t value = static_cast<uint32_t>(*changes);
    sink.Add(netdev.carrier_changes.series, value);
    netdev.speed_stale = netdev.speed_stale || (netdev.last_carrier_changes.has_value() &&
                                                netdev.last_carrier_changes != value);
    netdev.last_carrier_changes = value;
  }
  if (std::optional<uint64_t> up = ReadInteger(netdev.carrier_up, false)) {
    sink.Add(netdev.carrier_up.series, static_cast<uint32_t>(*up));
  }
  if (std::optional<uint64_t> down = ReadInteger(netdev.carrier_down, false)) {
    sink.Add(netdev.carrier_down.series, static_cast<uint32_t>(*down));
  }
  if (std::optional<uint64_t> mtu = ReadInteger(netdev.mtu, false)) {
    sink.Add(netdev.mtu.series, *mtu);
  }
  if (netdev.speed_stale && netdev.speed.file.is_open()) {
    ++speed_reads_;
    netdev.speed_mbps.reset();
    if (std::optional<uint64_t> speed = ReadInteger(netdev.speed, /*einval_expected=*/true)) {
      netdev.speed_mbps = SpeedMbps(*speed);
    }
  }
  netdev.speed_stale = false;
  if (netdev.speed_mbps.has_value()) {
    sink.Add(netdev.speed.series, static_cast<uint64_t>(*netdev.speed_mbps));
  }

  for (const Attribute& statistic : netdev.statistics) {
    std::optional<absl::string_view> text = ReadAttribute(statistic, false, buffer, sizeof(buffer));
    if (!text.has_value()) {
      continue;
    }
    const ParsedCounter parsed = ParseCounter(*text);
    if (!parsed.ok) {
      errors_.Record(parsed.error);
      continue;
    }
    sink.Add(statistic.series, parsed.value);
  }
}

bool NetdevCollector::ReadProcNet(TcpSource& source, std::string& buffer) {
  size_t capacity = std::max(buffer.capacity(), kProcNetInitialBuffer);
  for (;;) {
    buffer.resize(capacity);
    absl::StatusOr<size_t> n = source.file.Read(buffer.data(), buffer.size());
    if (!n.ok()) {
      errors_.Record(ErrorKindFromStatus(n.status()));
      FABRICMON_LOG_EVERY_MINUTE(Warning) << "netdev: " << n.status();
      return false;
    }
    // These are single-record seq_files: one read returns everything that fits. A full buffer
    // may mean more was there: grow and read again from offset 0.
    if (*n < capacity || capacity >= kProcNetMaxBuffer) {
      buffer.resize(*n);
      return true;
    }
    capacity = std::min(capacity * 2, kProcNetMaxBuffer);
  }
}

void NetdevCollector::CollectTcp(SampleSink& sink) {
  for (TcpSource& source : tcp_sources_) {
    if (!ReadProcNet(source, proc_buffer_)) {
      wants_rediscovery_ = true;
      continue;
    }
    const netdev::SnmpTable table = netdev::ParseSnmpTable(proc_buffer_);
    // Real kernels print no malformed line; a hostile or truncated file is surfaced as an error.
    for (int i = 0; i < table.malformed_sections + table.malformed_values; ++i) {
      errors_.Record(ErrorKind::kNotNumeric);
    }
    std::vector<absl::string_view> missing_sections;
    for (TcpField& field : source.fields) {
      const netdev::SnmpSection* section = table.Find(field.spec->section);
      if (section == nullptr) {
        if (std::find(missing_sections.begin(), missing_sections.end(), field.spec->section) ==
            missing_sections.end()) {
          missing_sections.push_back(field.spec->section);
          errors_.Record(ErrorKind::kMissing);
          wants_rediscovery_ = true;
        }
        continue;
      }
      const int index = section->IndexOf(field.spec->key, field.index_hint);
      if (index < 0) {
        errors_.Record(ErrorKind::kMissing);
        wants_rediscovery_ = true;
        continue;
      }
      field.index_hint = index;
      sink.Add(field.series, section->values[index]);
    }
  }
}

absl::Status NetdevCollector::Collect(SampleSink& sink) {
  if (netdevs_.empty() && tcp_sources_.empty()) {
    return absl::NotFoundError("no netdevs or TCP tables discovered");
  }
  if (!netdevs_.empty() || !known_names_.empty()) {
    if (CheckNetdevNames()) {
      // A netdev appeared, vanished or was renamed: rediscover soon; read what is still here.
      wants_rediscovery_ = true;
    }
  }
  for (Netdev& netdev : netdevs_) {
    if (netdev.vanished) {
      errors_.Record(ErrorKind::kMissing);
      continue;  // its files may still answer with stale data (captures) or ENODEV (sysfs)
    }
    CollectNetdev(netdev, sink);
  }
  CollectTcp(sink);
  errors_.Emit(sink);
  return absl::OkStatus();
}

void RegisterNetdevCollector(CollectorRegistry& registry) {
  registry.Register(
      kNetdevCollectorName, /*enabled_by_default=*/true,
      [](const CollectorContext& context) -> absl::StatusOr<std::unique_ptr<Collector>> {
        auto collector = NetdevCollector::Create(context.config.netdev());
        if (!collector.ok()) {
          return collector.status();
        }
        return std::unique_ptr<Collector>(*std::move(collector));
      });
}

}  // namespace fabricmon::collectors
