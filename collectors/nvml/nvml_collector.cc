#include "collectors/nvml/nvml_collector.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectors/nvml/nvml_families.h"
#include "collectors/nvml/nvml_loader.h"
#include "daemon/common/logging.h"

namespace fabricmon::collectors {
namespace {

using nvml::Feature;
using nvml::nvmlReturn_t;
using nvml::ReturnName;
namespace abi = nvml::abi;

// NVML calls are ioctls into the driver, one per link and counter: an 8-GPU × 18-link node costs
// ~1,000 calls per cycle. Utilization is itself averaged over up to 1 s by the driver, so
// sub-second sampling buys nothing.
constexpr int64_t kDefaultIntervalMs = 5000;
constexpr int64_t kDefaultRediscoverMs = 60000;

struct ErrorCounterSpec {
  int counter;  // nvmlNvLinkErrorCounter_t
  const char* type;
};
// The five nvmlNvLinkErrorCounter_t values before NVML_NVLINK_ERROR_COUNT (nvml.h;
// collectors/nvml/README.md, "NVLink error counters").
constexpr ErrorCounterSpec kErrorCounters[] = {
    {abi::NVML_NVLINK_ERROR_DL_REPLAY, "replay"},
    {abi::NVML_NVLINK_ERROR_DL_RECOVERY, "recovery"},
    {abi::NVML_NVLINK_ERROR_DL_CRC_FLIT, "crc_flit"},
    {abi::NVML_NVLINK_ERROR_DL_CRC_DATA, "crc_data"},
    {abi::NVML_NVLINK_ERROR_DL_ECC_DATA, "ecc_data"},
};

struct FieldSpec {
  unsigned int field_id;
  const char* metric;
  const char* help;
  const char* outcome;  // extra "outcome" label, or null
};
// Per-link with scopeId = link id; ids 161–163 (DL_*) are gone on Blackwell, where these take
// over (Δ FAILED_EVENTS is the NVLink5 flap edge). collectors/nvml/README.md, "Blackwell
// (NVLink5) counters" and "Link flaps".
constexpr FieldSpec kFieldSpecs[] = {
    {abi::NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS,
     nvml::kNvLinkRecoveryFamily.name, nvml::kNvLinkRecoveryFamily.help, "successful"},
    {abi::NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS, nvml::kNvLinkRecoveryFamily.name,
     nvml::kNvLinkRecoveryFamily.help, "failed"},
    {abi::NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS, nvml::kNvLinkRecoveryFamily.name,
     nvml::kNvLinkRecoveryFamily.help, "all"},
    {abi::NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, nvml::kNvLinkEffectiveErrorsFamily.name,
     nvml::kNvLinkEffectiveErrorsFamily.help, nullptr},
    {abi::NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS, nvml::kNvLinkSymbolErrorsFamily.name,
     nvml::kNvLinkSymbolErrorsFamily.help, nullptr},
};

ErrorKind KindOf(nvmlReturn_t result) {
  switch (result) {
    case abi::NVML_ERROR_NOT_SUPPORTED:
      return ErrorKind::kUnsupported;
    case abi::NVML_ERROR_NO_PERMISSION:
      return ErrorKind::kPermission;
    case abi::NVML_ERROR_GPU_IS_LOST:
    case abi::NVML_ERROR_NOT_FOUND:
      return ErrorKind::kMissing;
    default:
      return ErrorKind::kIo;
  }
}

// "This query does not exist here" as opposed to "it failed this time". INVALID_ARGUMENT is
// included because drivers older than a field id answer it per value instead of NOT_SUPPORTED
// [inf: Datadog's NVML integration marks EFFECTIVE_ERRORS unsupported on INVALID_ARGUMENT].
bool IsUnsupported(nvmlReturn_t result) {
  return result == abi::NVML_ERROR_NOT_SUPPORTED || result == abi::NVML_ERROR_INVALID_ARGUMENT;
}

// A field value as an unsigned counter; false if the type is unknown or the value negative.
bool FieldValueToUint64(const abi::nvmlFieldValue_t& value, uint64_t* out) {
  switch (value.valueType) {
    case abi::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      *out = value.value.ullVal;
      return true;
    case abi::NVML_VALUE_TYPE_UNSIGNED_LONG:
      *out = value.value.ulVal;
      return true;
    case abi::NVML_VALUE_TYPE_UNSIGNED_INT:
      *out = value.value.uiVal;
      return true;
    case abi::NVML_VALUE_TYPE_UNSIGNED_SHORT:
      *out = value.value.usVal;
      return true;
    case abi::NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      if (value.value.sllVal < 0) {
        return false;
      }
      *out = static_cast<uint64_t>(value.value.sllVal);
      return true;
    case abi::NVML_VALUE_TYPE_SIGNED_INT:
      if (value.value.siVal < 0) {
        return false;
      }
      *out = static_cast<uint64_t>(value.value.siVal);
      return true;
    case abi::NVML_VALUE_TYPE_DOUBLE:
      if (!(value.value.dVal >= 0) || value.value.dVal >= 1.8e19) {
        return false;
      }
      *out = static_cast<uint64_t>(value.value.dVal);
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlCollector>> NvmlCollector::Create(
    const v1::NvmlCollectorConfig& config) {
  const std::string library =
      config.library().empty() ? std::string(nvml::kDefaultNvmlLibrary) : config.library();
  nvml::NvmlOpener opener = [library]() -> absl::StatusOr<std::unique_ptr<nvml::NvmlApi>> {
    absl::StatusOr<std::unique_ptr<nvml::NvmlLibrary>> loaded = nvml::NvmlLibrary::Load(library);
    if (!loaded.ok()) {
      return loaded.status();
    }
    return std::unique_ptr<nvml::NvmlApi>(*std::move(loaded));
  };
  return Create(config, std::move(opener));
}

absl::StatusOr<std::unique_ptr<NvmlCollector>> NvmlCollector::Create(
    const v1::NvmlCollectorConfig& config, nvml::NvmlOpener opener) {
  const int64_t interval = config.interval_ms() ? config.interval_ms() : kDefaultIntervalMs;
  const int64_t rediscover =
      config.rediscover_interval_ms() ? config.rediscover_interval_ms() : kDefaultRediscoverMs;
  if (interval < 100) {
    return absl::InvalidArgumentError("nvml.interval_ms must be at least 100");
  }
  if (opener == nullptr) {
    return absl::InvalidArgumentError("nvml: no NVML opener");
  }
  return std::unique_ptr<NvmlCollector>(new NvmlCollector(std::move(opener), interval, rediscover));
}

NvmlCollector::NvmlCollector(nvml::NvmlOpener opener, int64_t interval_ms,
                             int64_t rediscover_interval_ms)
    : opener_(std::move(opener)),
      interval_ms_(interval_ms),
      rediscover_interval_ms_(rediscover_interval_ms),
      errors_(kNvmlCollectorName) {}

NvmlCollector::~NvmlCollector() {
  // Handles die with the library: drop them first, then shut NVML down (api_'s destructor).
  gpus_.clear();
  api_.reset();
}

void NvmlCollector::BuildGpuSeries(Gpu& gpu) {
  const Labels labels = {{"gpu", gpu.label}};
  gpu.info = SeriesFromSpec(
      nvml::kGpuInfoFamily, kNvmlCollectorName,
      {{"gpu", gpu.label}, {"uuid", gpu.uuid}, {"pci_bus_id", gpu.pci_bus_id}, {"name", gpu.name}});
  gpu.lost_series = SeriesFromSpec(nvml::kGpuLostFamily, kNvmlCollectorName,
                                   {{"gpu", gpu.label}, {"uuid", gpu.uuid}});
  gpu.utilization = SeriesFromSpec(nvml::kGpuUtilizationFamily, kNvmlCollectorName, labels);
  gpu.memory_utilization =
      SeriesFromSpec(nvml::kGpuMemoryUtilizationFamily, kNvmlCollectorName, labels);
  gpu.compute_processes =
      SeriesFromSpec(nvml::kGpuComputeProcessesFamily, kNvmlCollectorName, labels);
  gpu.unsupported = SeriesFromSpec(nvml::kGpuUnsupportedFamily, kNvmlCollectorName, labels);
}

void NvmlCollector::BuildLinkSeries(const Gpu& gpu, Link& link) {
  const std::string link_label = absl::StrCat(link.index);
  const Labels labels = {{"gpu", gpu.label}, {"link", link_label}};
  link.state = SeriesFromSpec(nvml::kNvLinkStateFamily, kNvmlCollectorName, labels);
  link.info = SeriesFromSpec(
      nvml::kNvLinkInfoFamily, kNvmlCollectorName,
      {{"gpu", gpu.label}, {"link", link_label}, {"remote_pci_bus_id", link.remote_pci_bus_id}});
  link.errors.clear();
  if (api_->Has(Feature::kNvLinkErrorCounters)) {
    for (const ErrorCounterSpec& spec : kErrorCounters) {
      ErrorCounter counter;
      counter.counter = spec.counter;
      counter.series =
          SeriesFromSpec(nvml::kNvLinkErrorsFamily, kNvmlCollectorName,
                         {{"gpu", gpu.label}, {"link", link_label}, {"type", spec.type}});
      link.errors.push_back(std::move(counter));
    }
  }
  link.fields.clear();
  if (api_->Has(Feature::kFieldValues)) {
    for (const FieldSpec& spec : kFieldSpecs) {
      Labels field_labels = labels;
      if (spec.outcome != nullptr) {
        field_labels.emplace_back("outcome", spec.outcome);
      }
      FieldValue field;
      field.field_id = spec.field_id;
      field.series = CounterSeries(kNvmlCollectorName, spec.metric, spec.help, Unit::kNone, 64,
                                   Overflow::kWraps, 1.0, std::move(field_labels));
      link.fields.push_back(std::move(field));
    }
  }
}

absl::Status NvmlCollector::Discover(v1::Inventory& inventory) {
  if (api_ == nullptr) {
    absl::StatusOr<std::unique_ptr<nvml::NvmlApi>> opened = opener_();
    if (!opened.ok()) {
      gpus_.clear();
      wants_rediscovery_ = false;
      return opened.status();
    }
    api_ = *std::move(opened);
  }
  // Handles of the previous discovery stay valid (same NVML session) but are re-read anyway:
  // indices can map to other GPUs after a hot reset.
  gpus_.clear();

  unsigned int count = 0;
  const nvmlReturn_t count_result = api_->DeviceGetCount(&count);
  if (count_result != abi::NVML_SUCCESS) {
    // The driver went away under an open session (unloaded, reset): start over with nvmlInit.
    api_.reset();
    wants_rediscovery_ = false;
    return absl::UnavailableError(
        absl::StrCat("nvml: nvmlDeviceGetCount_v2: ", ReturnName(count_result)));
  }

  std::map<unsigned int, Identity> known;
  for (unsigned int index = 0; index < count; ++index) {
    Gpu gpu;
    gpu.index = index;
    gpu.label = absl::StrCat(index);
    const nvmlReturn_t result = api_->DeviceGetHandleByIndex(index, &gpu.handle);
    if (result == abi::NVML_ERROR_NO_PERMISSION) {
      // Containers and cgroups hide GPUs that are not ours: not an error.
      FABRICMON_LOG(Debug) << "nvml: GPU " << index << " is not accessible to this process";
      continue;
    }
    v1::Gpu gpu_inventory;
    if (result == abi::NVML_ERROR_GPU_IS_LOST) {
      gpu.lost = true;
    } else if (result != abi::NVML_SUCCESS) {
      errors_.Record(KindOf(result));
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "nvml: skipping GPU " << index
          << ": nvmlDeviceGetHandleByIndex_v2: " << ReturnName(result);
      continue;
    } else {
      DiscoverGpu(gpu, gpu_inventory);
    }
    if (gpu.lost) {
      // A lost GPU cannot name itself; keep what the last discovery knew so its series (and
      // fabricmon_gpu_lost{uuid}) stay continuous.
      auto it = known_.find(index);
      if (it != known_.end()) {
        gpu.uuid = it->second.uuid;
        gpu.pci_bus_id = it->second.pci_bus_id;
        gpu.name = it->second.name;
      }
      gpu.links.clear();
      gpu_inventory.clear_nvlinks();
      gpu_inventory.clear_compute_pids();
      FABRICMON_LOG_EVERY_MINUTE(Warning)
          << "nvml: GPU " << index << " (" << gpu.uuid << ") is lost (NVML_ERROR_GPU_IS_LOST)";
    }
    known[index] = {gpu.uuid, gpu.pci_bus_id, gpu.name};
    BuildGpuSeries(gpu);
    gpu_inventory.set_index(index);
    gpu_inventory.set_uuid(gpu.uuid);
    gpu_inventory.set_pci_bus_id(gpu.pci_bus_id);
    gpu_inventory.set_name(gpu.name);
    *inventory.add_gpus() = std::move(gpu_inventory);
    gpus_.push_back(std::move(gpu));
  }
  known_ = std::move(known);
  wants_rediscovery_ = false;
  if (gpus_.empty()) {
    // Do not keep NVML (and its /dev/nvidia* descriptors) open on a node with nothing to read.
    api_.reset();
    return absl::NotFoundError(
        absl::StrCat("nvml: no accessible GPU (nvmlDeviceGetCount_v2 = ", count, ")"));
  }
  return absl::OkStatus();
}

bool NvmlCollector::DiscoverGpu(Gpu& gpu, v1::Gpu& inventory) {
  nvmlReturn_t result = api_->DeviceGetUuid(gpu.handle, &gpu.uuid);
  if (result != abi::NVML_SUCCESS && HandleFailure(gpu, result, "nvmlDeviceGetUUID", nullptr)) {
    return false;
  }
  if (api_->Has(Feature::kName)) {
    result = api_->DeviceGetName(gpu.handle, &gpu.name);
    if (result != abi::NVML_SUCCESS && HandleFailure(gpu, result, "nvmlDeviceGetName", nullptr)) {
      return false;
    }
  }
  if (api_->Has(Feature::kPciInfo)) {
    result = api_->DeviceGetPciBusId(gpu.handle, &gpu.pci_bus_id);
    if (result != abi::NVML_SUCCESS &&
        HandleFailure(gpu, result, "nvmlDeviceGetPciInfo", nullptr)) {
      return false;
    }
  }
  gpu.utilization_supported = api_->Has(Feature::kUtilization);
  gpu.processes_supported = api_->Has(Feature::kComputeProcesses);
  if (gpu.processes_supported) {
    std::vector<uint32_t> pids;
    result = api_->DeviceGetComputePids(gpu.handle, &pids);
    if (result == abi::NVML_SUCCESS) {
      for (uint32_t pid : pids) {
        inventory.add_compute_pids(pid);
      }
    } else if (result == abi::NVML_ERROR_NOT_SUPPORTED) {
      gpu.processes_supported = false;
      ++gpu.unsupported_queries;
    } else if (HandleFailure(gpu, result, "nvmlDeviceGetComputeRunningProcesses", nullptr)) {
      return false;
    }
  }

  if (!api_->Has(Feature::kNvLinkState)) {
    return true;
  }
  // Probe links until the driver says there is no such link (nvml.h: NOT_SUPPORTED when the
  // device has no NVLink / the link does not exist, INVALID_ARGUMENT past the device's range).
  // NVML_NVLINK_MAX_LINKS is only the ceiling: 6 on V100, 12 on A100, 18 on H100/B200.
  for (unsigned int index = 0; index < abi::NVML_NVLINK_MAX_LINKS; ++index) {
    bool active = false;
    result = api_->DeviceGetNvLinkState(gpu.handle, index, &active);
    if (result == abi::NVML_ERROR_NOT_SUPPORTED || result == abi::NVML_ERROR_INVALID_ARGUMENT) {
      break;
    }
    if (result != abi::NVML_SUCCESS) {
      if (HandleFailure(gpu, result, "nvmlDeviceGetNvLinkState", nullptr)) {
        return false;
      }
      continue;  // a transient failure of one link does not end the probe
    }
    Link link;
    link.index = index;
    link.active = active;
    if (api_->Has(Feature::kNvLinkRemotePci)) {
      result = api_->DeviceGetNvLinkRemotePciBusId(gpu.handle, index, &link.remote_pci_bus_id);
      if (result == abi::NVML_ERROR_GPU_IS_LOST) {
        MarkLost(gpu, nullptr);
        return false;
      }
      if (result != abi::NVML_SUCCESS) {
        link.remote_pci_bus_id.clear();  // an inactive link has no remote end to report
      }
    }
    BuildLinkSeries(gpu, link);
    v1::NvLink* link_inventory = inventory.add_nvlinks();
    link_inventory->set_link(index);
    link_inventory->set_active(active);
    link_inventory->set_remote_pci_bus_id(link.remote_pci_bus_id);
    gpu.links.push_back(std::move(link));
  }
  return true;
}

bool NvmlCollector::HandleFailure(Gpu& gpu, nvmlReturn_t result, absl::string_view what,
                                  SampleSink* sink) {
  if (result == abi::NVML_ERROR_GPU_IS_LOST) {
    MarkLost(gpu, sink);
    return true;
  }
  errors_.Record(KindOf(result));
  FABRICMON_LOG_EVERY_MINUTE(Warning)
      << "nvml: GPU " << gpu.index << ": " << what << ": " << ReturnName(result);
  return false;
}

void NvmlCollector::MarkLost(Gpu& gpu, SampleSink* sink) {
  if (!gpu.lost) {
    errors_.Record(ErrorKind::kMissing);
  }
  gpu.lost = true;
  if (sink != nullptr) {
    // Lost during collection: re-discover now rather than at the next interval, so the node's
    // inventory shows the loss promptly.
    wants_rediscovery_ = true;
    sink->Add(gpu.lost_series, 1);
    FABRICMON_LOG_EVERY_MINUTE(Warning)
        << "nvml: GPU " << gpu.index << " (" << gpu.uuid << ") is lost (NVML_ERROR_GPU_IS_LOST)";
  }
}

absl::Status NvmlCollector::Collect(SampleSink& sink) {
  if (api_ == nullptr || gpus_.empty()) {
    return absl::NotFoundError("nvml: no GPUs discovered");
  }
  for (Gpu& gpu : gpus_) {
    CollectGpu(gpu, sink);
  }
  errors_.Emit(sink);
  return absl::OkStatus();
}

void NvmlCollector::CollectGpu(Gpu& gpu, SampleSink& sink) {
  sink.Add(gpu.info, 1);
  if (gpu.lost) {
    // Nothing else can be read from a lost GPU until a reset; it stays listed as lost.
    sink.Add(gpu.lost_series, 1);
    return;
  }
  if (gpu.utilization_supported) {
    abi::nvmlUtilization_t utilization{};
    const nvmlReturn_t result = api_->DeviceGetUtilization(gpu.handle, &utilization);
    if (result == abi::NVML_SUCCESS) {
      sink.Add(gpu.utilization, utilization.gpu);
      sink.Add(gpu.memory_utilization, utilization.memory);
    } else if (result == abi::NVML_ERROR_NOT_SUPPORTED) {
      gpu.utilization_supported = false;
      ++gpu.unsupported_queries;
    } else if (HandleFailure(gpu, result, "nvmlDeviceGetUtilizationRates", &sink)) {
      return;
    }
  }
  if (gpu.processes_supported) {
    std::vector<uint32_t> pids;
    const nvmlReturn_t result = api_->DeviceGetComputePids(gpu.handle, &pids);
    if (result == abi::NVML_SUCCESS) {
      sink.Add(gpu.compute_processes, pids.size());
    } else if (result == abi::NVML_ERROR_NOT_SUPPORTED) {
      gpu.processes_supported = false;
      ++gpu.unsupported_queries;
    } else if (HandleFailure(gpu, result, "nvmlDeviceGetComputeRunningProcesses", &sink)) {
      return;
    }
  }

  for (Link& link : gpu.links) {
    bool active = false;
    nvmlReturn_t result = api_->DeviceGetNvLinkState(gpu.handle, link.index, &active);
    if (IsUnsupported(result)) {
      // The link answered at discovery and no longer does: the link set changed.
      wants_rediscovery_ = true;
      continue;
    }
    if (result != abi::NVML_SUCCESS) {
      if (HandleFailure(gpu, result, "nvmlDeviceGetNvLinkState", &sink)) {
        return;
      }
    } else {
      if (active != link.active) {
        // A link that came up (or went down) may have a new remote end.
        link.active = active;
        link.remote_pci_bus_id.clear();
        if (api_->Has(Feature::kNvLinkRemotePci)) {
          std::string remote;
          result = api_->DeviceGetNvLinkRemotePciBusId(gpu.handle, link.index, &remote);
          if (result == abi::NVML_ERROR_GPU_IS_LOST) {
            MarkLost(gpu, &sink);
            return;
          }
          if (result == abi::NVML_SUCCESS) {
            link.remote_pci_bus_id = std::move(remote);
          }
        }
        link.info = SeriesFromSpec(nvml::kNvLinkInfoFamily, kNvmlCollectorName,
                                   {{"gpu", gpu.label},
                                    {"link", absl::StrCat(link.index)},
                                    {"remote_pci_bus_id", link.remote_pci_bus_id}});
      }
      sink.Add(link.state, active ? 1 : 0);
      sink.Add(link.info, 1);
    }
    for (ErrorCounter& counter : link.errors) {
      if (!counter.supported) {
        continue;
      }
      uint64_t value = 0;
      result = api_->DeviceGetNvLinkErrorCounter(gpu.handle, link.index, counter.counter, &value);
      if (result == abi::NVML_SUCCESS) {
        sink.Add(counter.series, value);
      } else if (result == abi::NVML_ERROR_NOT_SUPPORTED) {
        // e.g. DL counters on Blackwell (collectors/nvml/README.md), ECC on generations without it.
        counter.supported = false;
        ++gpu.unsupported_queries;
      } else if (HandleFailure(gpu, result, "nvmlDeviceGetNvLinkErrorCounter", &sink)) {
        return;
      }
    }
  }
  CollectFieldValues(gpu, sink);
  if (gpu.lost) {
    return;
  }
  sink.Add(gpu.lost_series, 0);
  sink.Add(gpu.unsupported, gpu.unsupported_queries);
}

void NvmlCollector::CollectFieldValues(Gpu& gpu, SampleSink& sink) {
  // One nvmlDeviceGetFieldValues call per GPU for every (link, field) still believed supported:
  // one driver round trip instead of links × fields.
  std::vector<abi::nvmlFieldValue_t> request;
  std::vector<FieldValue*> targets;
  for (Link& link : gpu.links) {
    for (FieldValue& field : link.fields) {
      if (!field.supported) {
        continue;
      }
      abi::nvmlFieldValue_t value{};
      value.fieldId = field.field_id;
      value.scopeId = link.index;  // per-link fields: scopeId carries the link id
      request.push_back(value);
      targets.push_back(&field);
    }
  }
  if (request.empty()) {
    return;
  }
  const nvmlReturn_t result =
      api_->DeviceGetFieldValues(gpu.handle, request.data(), request.size());
  if (result != abi::NVML_SUCCESS) {
    (void)HandleFailure(gpu, result, "nvmlDeviceGetFieldValues", &sink);  // lost is in gpu.lost
    return;
  }
  for (size_t i = 0; i < request.size(); ++i) {
    const abi::nvmlFieldValue_t& value = request[i];
    FieldValue& field = *targets[i];
    // nvml.h: value is undefined unless this entry's own nvmlReturn is NVML_SUCCESS.
    if (value.nvmlReturn == abi::NVML_SUCCESS) {
      uint64_t raw = 0;
      if (FieldValueToUint64(value, &raw)) {
        sink.Add(field.series, raw);
      } else {
        errors_.Record(ErrorKind::kNotNumeric);
      }
    } else if (IsUnsupported(value.nvmlReturn)) {
      field.supported = false;  // not asked again until the next discovery
      ++gpu.unsupported_queries;
    } else if (value.nvmlReturn == abi::NVML_ERROR_GPU_IS_LOST) {
      MarkLost(gpu, &sink);
      return;
    } else {
      errors_.Record(KindOf(value.nvmlReturn));
    }
  }
}

Diagnosis NvmlCollector::Diagnose(const DiagnosisInput& input) const {
  Diagnosis diagnosis = DefaultDiagnosis(kNvmlCollectorName, input);
  if (diagnosis.works) {
    diagnosis.reads =
        absl::StrCat(input.found.gpus_size(), " GPU(s) through NVML, ", input.samples, " series");
    return diagnosis;
  }
  const absl::Status& failed = input.discovery.ok() ? input.collection : input.discovery;
  if (absl::StartsWith(failed.message(), "cannot load")) {
    diagnosis.fix =
        "install the NVIDIA driver (libnvidia-ml.so.1), or set nvml { library: \"/path/to/"
        "libnvidia-ml.so.1\" }; on nodes without NVIDIA GPUs set nvml { enabled: false }";
  } else if (absl::IsNotFound(failed)) {
    diagnosis.fix =
        "NVML sees no GPU this process may use (driver not loaded, GPUs hidden by "
        "the container or cgroup); on nodes without GPUs set nvml { enabled: false }";
  } else if (absl::IsFailedPrecondition(failed) || absl::IsUnavailable(failed)) {
    diagnosis.fix =
        "NVML did not start: check `nvidia-smi`; after a driver upgrade reload the "
        "kernel module or reboot";
  }
  return diagnosis;
}

void RegisterNvmlCollector(CollectorRegistry& registry) {
  registry.Register(
      kNvmlCollectorName, /*enabled_by_default=*/true,
      [](const CollectorContext& context) -> absl::StatusOr<std::unique_ptr<Collector>> {
        auto collector = NvmlCollector::Create(context.config.nvml());
        if (!collector.ok()) {
          return collector.status();
        }
        return std::unique_ptr<Collector>(*std::move(collector));
      },
      [](const v1::CollectorsConfig& config) -> std::string {
        if (config.nvml().library().find('/') != std::string::npos) {
          return "";  // a library named by path: the one the operator chose
        }
        return absl::StrCat(
            "this host's NVML library, ",
            config.nvml().library().empty() ? nvml::kDefaultNvmlLibrary : config.nvml().library(),
            " on the loader path; nvml.library set to a file path loads that "
            "one instead");
      });
}

}  // namespace fabricmon::collectors
