#include "collectors/ethtool/ethtool_collector.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectors/ethtool/capture_dir_ethtool_api.h"
#include "collectors/ethtool/ethtool_families.h"
#include "collectors/ethtool/ethtool_text.h"
#include "collectors/ethtool/mlx5_stat_specs.h"
#include "collectors/ethtool/netdev_discovery.h"
#include "daemon/common/logging.h"
#include "daemon/common/status.h"
#include "re2/re2.h"

namespace fabricmon::collectors {
namespace {

using ethtool::kEthtoolExtraDroppedFamily;
using ethtool::kEthtoolExtraFamily;
using ethtool::kEthtoolReloadsFamily;
using ethtool::kEthtoolStatKeysFamily;
using ethtool::kRoceNetdevInfoFamily;

constexpr int64_t kDefaultIntervalMs = 1000;
constexpr int64_t kDefaultRediscoverMs = 60000;
constexpr uint32_t kDefaultExtraKeysLimit = 64;

// Label values must be valid UTF-8; kernel stat names are ASCII, but a capture or a buggy driver
// may carry anything. Non-printable and non-ASCII bytes become '_'.
std::string LabelSafe(absl::string_view key) {
  std::string out(key);
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      c = '_';
    }
  }
  return out;
}

v1::Netdev& InventoryNetdev(v1::Inventory& inventory, const std::string& name) {
  // The netdev collector may have listed it already: merge instead of duplicating.
  for (v1::Netdev& netdev : *inventory.mutable_netdevs()) {
    if (netdev.name() == name) {
      return netdev;
    }
  }
  v1::Netdev* netdev = inventory.add_netdevs();
  netdev->set_name(name);
  return *netdev;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EthtoolCollector>> EthtoolCollector::Create(
    const v1::EthtoolCollectorConfig& config, std::unique_ptr<EthtoolApi> api) {
  if (api == nullptr) {
    return absl::InvalidArgumentError("ethtool: no EthtoolApi");
  }
  absl::StatusOr<DeviceFilter> filter = DeviceFilter::Create(config.netdevs());
  if (!filter.ok()) {
    return Annotate(filter.status(), "ethtool.netdevs");
  }
  std::unique_ptr<re2::RE2> extra;
  if (!config.extra_keys().empty()) {
    re2::RE2::Options options;
    options.set_log_errors(false);
    // Byte semantics: a key with a stray non-UTF-8 byte must still be selectable by ".*".
    options.set_encoding(re2::RE2::Options::EncodingLatin1);
    extra = std::make_unique<re2::RE2>(config.extra_keys(), options);
    if (!extra->ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ethtool.extra_keys '", config.extra_keys(), "': ", extra->error()));
    }
  }
  const int64_t interval = config.interval_ms() ? config.interval_ms() : kDefaultIntervalMs;
  const int64_t rediscover =
      config.rediscover_interval_ms() ? config.rediscover_interval_ms() : kDefaultRediscoverMs;
  if (interval < 100) {
    return absl::InvalidArgumentError("ethtool.interval_ms must be at least 100");
  }
  if (interval < 1000) {
    // On mlx5 each GSTATS makes the firmware read PPCNT register groups
    // (collectors/ethtool/README.md, "GSTATS costs firmware work").
    FABRICMON_LOG(Warning) << "ethtool: interval_ms " << interval
                           << " < 1000: each cycle costs synchronous NIC firmware reads";
  }
  const uint32_t limit =
      config.extra_keys_limit() ? config.extra_keys_limit() : kDefaultExtraKeysLimit;
  const std::string root = config.sysfs_root().empty() ? "/sys" : config.sysfs_root();
  return std::unique_ptr<EthtoolCollector>(new EthtoolCollector(
      std::move(api), root, *std::move(filter), std::move(extra), limit,
      config.all_physical_netdevs(), config.verify_string_set(), interval, rediscover));
}

EthtoolCollector::EthtoolCollector(std::unique_ptr<EthtoolApi> api, std::string root,
                                   DeviceFilter filter, std::unique_ptr<re2::RE2> extra_keys,
                                   uint32_t extra_keys_limit, bool all_physical,
                                   bool verify_string_set, int64_t interval_ms,
                                   int64_t rediscover_interval_ms)
    : api_(std::move(api)),
      root_(std::move(root)),
      filter_(std::move(filter)),
      extra_keys_(std::move(extra_keys)),
      extra_keys_limit_(extra_keys_limit),
      all_physical_(all_physical),
      verify_string_set_(verify_string_set),
      interval_ms_(interval_ms),
      rediscover_interval_ms_(rediscover_interval_ms),
      errors_(kEthtoolCollectorName) {}

EthtoolCollector::~EthtoolCollector() = default;

std::vector<std::string> EthtoolCollector::collected_netdevs() const {
  std::vector<std::string> names;
  for (const Netdev& netdev : netdevs_) {
    if (netdev.active) {
      names.push_back(netdev.name);
    }
  }
  return names;
}

absl::Status EthtoolCollector::Discover(v1::Inventory& inventory) {
  wants_rediscovery_ = false;
  refused_.clear();
  std::vector<ethtool::NetdevCandidate> candidates = ethtool::FindNetdevs(root_, all_physical_);
  std::vector<Netdev> netdevs;
  size_t allowed = 0;
  for (ethtool::NetdevCandidate& candidate : candidates) {
    // The filter runs on the name before any ioctl touches the netdev.
    if (!filter_.Allows(candidate.name)) {
      FABRICMON_LOG(Debug) << "ethtool: " << candidate.name << " excluded by filter";
      continue;
    }
    ++allowed;
    Netdev netdev;
    netdev.name = candidate.name;
    netdev.rdma_devices = absl::StrJoin(candidate.rdma_devices, ",");

    absl::StatusOr<EthtoolDriverInfo> info = api_->GetDriver(netdev.name);
    if (!info.ok() && !absl::IsUnimplemented(info.status())) {
      // NotFound: listed in sysfs but gone (or renamed) by now.
      errors_.Record(ErrorKindFromStatus(info.status()));
      refused_.emplace_back(netdev.name, info.status());
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "ethtool: skipping " << netdev.name << ": " << info.status();
      continue;
    }
    netdev.driver = info.ok() ? info->driver : "";

    absl::StatusOr<std::vector<std::string>> names = api_->GetStringSet(netdev.name);
    if (!names.ok() || names->empty()) {
      // EOPNOTSUPP or an empty set: this netdev has no ethtool statistics. Skipped until the
      // next discovery rather than asked again every cycle.
      const absl::Status status =
          names.ok() ? absl::UnimplementedError("empty ETH_SS_STATS string set") : names.status();
      errors_.Record(ErrorKindFromStatus(status));
      refused_.emplace_back(netdev.name, status);
      FABRICMON_LOG_EVERY_MINUTE(Info) << "ethtool: no statistics from " << netdev.name << " ("
                                       << netdev.driver << "): " << status;
      continue;
    }
    const Labels labels = {{"netdev", netdev.name}};
    netdev.info = SeriesFromSpec(
        kRoceNetdevInfoFamily, kEthtoolCollectorName,
        {{"netdev", netdev.name}, {"driver", netdev.driver}, {"rdma_device", netdev.rdma_devices}});
    netdev.key_count = SeriesFromSpec(kEthtoolStatKeysFamily, kEthtoolCollectorName, labels);
    netdev.reloads = SeriesFromSpec(kEthtoolReloadsFamily, kEthtoolCollectorName, labels);
    netdev.extra_dropped_series =
        SeriesFromSpec(kEthtoolExtraDroppedFamily, kEthtoolCollectorName, labels);
    Bind(netdev, *names);

    v1::Netdev& entry = InventoryNetdev(inventory, netdev.name);
    if (entry.driver().empty()) {
      entry.set_driver(netdev.driver);
    }
    if (!candidate.rdma_devices.empty()) {
      entry.set_kind(v1::Netdev::KIND_RDMA_ETHERNET);
      entry.set_rdma_device(candidate.rdma_devices.front());
      entry.set_rdma_port(candidate.rdma_port);
    } else if (entry.kind() == v1::Netdev::KIND_UNSPECIFIED) {
      entry.set_kind(v1::Netdev::KIND_ETHERNET);
    }
    netdevs.push_back(std::move(netdev));
  }
  netdevs_ = std::move(netdevs);
  if (allowed == 0) {
    return absl::NotFoundError(
        absl::StrCat("no RoCE netdev under ", root_,
                     all_physical_ ? " (netdevs behind RDMA devices or with a device link)"
                                   : " (netdevs behind RDMA devices)",
                     candidates.empty() ? "" : " allowed by ethtool.netdevs"));
  }
  if (netdevs_.empty()) {
    return absl::NotFoundError(
        absl::StrCat("none of ", allowed, " netdev(s) has ethtool statistics"));
  }
  return absl::OkStatus();
}

void EthtoolCollector::Bind(Netdev& netdev, const std::vector<std::string>& raw_names) {
  netdev.keys.clear();
  netdev.keys.reserve(raw_names.size());
  for (const std::string& raw : raw_names) {
    netdev.keys.push_back(ethtool::NormalizeStatKey(raw));  // trailing-space keys, see README.md
  }
  netdev.bindings.clear();
  netdev.extra_dropped = 0;
  const bool mlx5 = ethtool::IsMlx5Driver(netdev.driver);
  absl::flat_hash_set<absl::string_view> seen_keys;
  absl::flat_hash_set<uint64_t> seen_series;
  uint32_t extra_kept = 0;
  for (uint32_t i = 0; i < netdev.keys.size(); ++i) {
    const std::string& key = netdev.keys[i];
    // Drivers may repeat a name; the first one wins, as in any name-keyed view of ethtool -S.
    if (key.empty() || !seen_keys.insert(key).second) {
      continue;
    }
    if (mlx5) {
      if (std::optional<ethtool::StatSpec> spec = ethtool::Mlx5StatSpec(key)) {
        Labels labels = {{"netdev", netdev.name}};
        labels.insert(labels.end(), spec->labels.begin(), spec->labels.end());
        SeriesDesc series =
            spec->type == MetricType::kGauge
                ? GaugeSeries(kEthtoolCollectorName, spec->metric, spec->help, spec->unit,
                              spec->scale, std::move(labels))
                : CounterSeries(kEthtoolCollectorName, spec->metric, spec->help, spec->unit,
                                spec->width_bits, Overflow::kWraps, spec->scale, std::move(labels));
        // Two spellings of one counter (old and new mlx5 names) never export twice.
        if (seen_series.insert(series.fingerprint).second) {
          netdev.bindings.push_back({i, std::move(series)});
        }
        continue;  // typed keys are never duplicated as extra keys
      }
    }
    if (extra_keys_ == nullptr || !re2::RE2::FullMatch(key, *extra_keys_)) {
      continue;  // per-queue chN_/rxN_/txN_ keys and everything else stay out by default
    }
    if (extra_kept >= extra_keys_limit_) {
      ++netdev.extra_dropped;
      continue;
    }
    SeriesDesc series = SeriesFromSpec(kEthtoolExtraFamily, kEthtoolCollectorName,
                                       {{"netdev", netdev.name}, {"key", LabelSafe(key)}});
    if (seen_series.insert(series.fingerprint).second) {
      netdev.bindings.push_back({i, std::move(series)});
      ++extra_kept;
    }
  }
  if (netdev.extra_dropped > 0) {
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "ethtool: " << netdev.name << ": " << netdev.extra_dropped
        << " key(s) matching extra_keys not exported (extra_keys_limit " << extra_keys_limit_
        << ")";
  }
}

absl::Status EthtoolCollector::Reload(Netdev& netdev, bool only_if_changed) {
  absl::StatusOr<std::vector<std::string>> names = api_->GetStringSet(netdev.name);
  if (!names.ok()) {
    return names.status();
  }
  if (names->empty()) {
    // The driver dropped its statistics (or answers an empty set): as if EOPNOTSUPP.
    return absl::UnimplementedError("ETH_SS_STATS is now empty");
  }
  if (only_if_changed) {
    bool same = names->size() == netdev.keys.size();
    for (size_t i = 0; same && i < names->size(); ++i) {
      same = ethtool::NormalizeStatKey((*names)[i]) == netdev.keys[i];
    }
    if (same) {
      return absl::OkStatus();
    }
  }
  Bind(netdev, *names);
  ++reload_counts_[netdev.name];
  return absl::OkStatus();
}

void EthtoolCollector::Fail(Netdev& netdev, const absl::Status& status) {
  const ErrorKind kind = ErrorKindFromStatus(status);
  errors_.Record(kind);
  if (absl::IsNotFound(status)) {
    // ENODEV: the netdev vanished (driver reload, rename). Stop asking; re-discover early.
    netdev.active = false;
    wants_rediscovery_ = true;
  } else if (absl::IsUnimplemented(status)) {
    netdev.active = false;  // EOPNOTSUPP is permanent for this driver instance
  }
  FABRICMON_LOG_EVERY_MINUTE(Warning) << "ethtool: " << netdev.name << ": " << status;
}

void EthtoolCollector::CollectNetdev(Netdev& netdev, SampleSink& sink) {
  if (verify_string_set_) {
    // Catches same-size changes (PFC moved between priorities) that the count cannot show.
    absl::Status status = Reload(netdev, /*only_if_changed=*/true);
    if (!status.ok()) {
      Fail(netdev, status);
      return;
    }
  }

  netdev.values.resize(netdev.keys.size());
  absl::Status status = api_->GetStats(netdev.name, netdev.values);
  bool values_usable = status.ok();
  if (absl::IsAborted(status)) {
    // The set grew past what the call could hold: re-read the names now, values next cycle.
    status = Reload(netdev, /*only_if_changed=*/false);
  } else if (status.ok() && netdev.values.size() != netdev.keys.size()) {
    // The key set changed (DCB, channels; README.md, "The key set depends on configuration"). The
    // values came from one GSTATS call; they line up with the names re-read now unless the set
    // changed yet again.
    status = Reload(netdev, /*only_if_changed=*/false);
    values_usable = status.ok() && netdev.values.size() == netdev.keys.size();
  }
  if (!status.ok()) {
    Fail(netdev, status);
    return;
  }

  sink.Add(netdev.info, 1);
  if (values_usable) {
    for (const Binding& binding : netdev.bindings) {
      sink.Add(binding.series, netdev.values[binding.index]);
    }
  }
  sink.Add(netdev.key_count, netdev.keys.size());
  sink.Add(netdev.reloads, reload_counts_[netdev.name]);
  if (extra_keys_ != nullptr) {
    sink.Add(netdev.extra_dropped_series, netdev.extra_dropped);
  }
}

absl::Status EthtoolCollector::Collect(SampleSink& sink) {
  if (netdevs_.empty()) {
    return absl::NotFoundError("no RoCE netdev discovered");
  }
  for (Netdev& netdev : netdevs_) {
    if (netdev.active) {
      CollectNetdev(netdev, sink);
    }
  }
  errors_.Emit(sink);
  return absl::OkStatus();
}

Diagnosis EthtoolCollector::Diagnose(const DiagnosisInput& input) const {
  Diagnosis diagnosis = DefaultDiagnosis(kEthtoolCollectorName, input);
  std::vector<std::string> names;
  for (const Netdev& netdev : netdevs_) {
    names.push_back(netdev.name);
  }
  if (!names.empty()) {
    diagnosis.reads = absl::StrCat("ethtool statistics of ", absl::StrJoin(names, ", "), ", ",
                                   input.samples, " series");
  }
  if (refused_.empty()) {
    if (absl::IsNotFound(input.discovery)) {
      diagnosis.fix =
          "ethtool reads the netdevs behind RDMA devices (RoCE): none here. Set "
          "ethtool { all_physical_netdevs: true } to read every physical NIC, or "
          "ethtool { enabled: false }";
    }
    return diagnosis;
  }
  std::vector<std::string> problems;
  std::vector<std::string> refused_names;
  bool permission = false;
  for (const auto& [name, status] : refused_) {
    const char* why = absl::IsPermissionDenied(status) ? "EPERM"
                      : absl::IsUnimplemented(status)  ? "EOPNOTSUPP"
                                                       : nullptr;
    permission = permission || absl::IsPermissionDenied(status);
    problems.push_back(absl::StrCat("ethtool ioctl refused on ", name, " (",
                                    why != nullptr ? why : absl::StatusCodeToString(status.code()),
                                    ": ", status.message(), ")"));
    refused_names.push_back(name);
  }
  diagnosis.works = false;
  diagnosis.problem = absl::StrJoin(problems, "; ");
  diagnosis.fix = absl::StrCat(
      permission ? "read-only ethtool queries need no capability, so EPERM is a policy of the "
                   "container, seccomp or LSM around the agent: allow SIOCETHTOOL there, or "
                 : "",
      "leave them out: ethtool { netdevs { exclude: \"", absl::StrJoin(refused_names, "|"),
      "\" } }");
  return diagnosis;
}

void RegisterEthtoolCollector(CollectorRegistry& registry) {
  registry.Register(
      kEthtoolCollectorName, /*enabled_by_default=*/true,
      [](const CollectorContext& context) -> absl::StatusOr<std::unique_ptr<Collector>> {
        const v1::EthtoolCollectorConfig& config = context.config.ethtool();
        // stats_dir: `ethtool -S` text files instead of the ioctl (simulation, offline replay).
        auto collector = EthtoolCollector::Create(
            config, config.stats_dir().empty() ? CreateIoctlEthtoolApi()
                                               : CreateCaptureDirEthtoolApi(config.stats_dir()));
        if (!collector.ok()) {
          return collector.status();
        }
        return std::unique_ptr<Collector>(*std::move(collector));
      },
      [](const v1::CollectorsConfig& config) -> std::string {
        if (!config.ethtool().stats_dir().empty()) {
          return "";
        }
        return "the SIOCETHTOOL ioctl of this host's netdevs; ethtool.stats_dir reads captured "
               "`ethtool -S` files instead";
      });
}

}  // namespace fabricmon::collectors
