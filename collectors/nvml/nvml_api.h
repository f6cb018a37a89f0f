#pragma once

// The seam between the NVML collector and libnvidia-ml: a small interface over exactly the NVML
// calls the collector makes. Production uses NvmlLibrary (nvml_loader.h: dlopen + dlsym of the
// real C ABI); tests mostly load a stand-in library through that same production path
// (tests/fakes/nvml_standin) and may also inject their own NvmlApi for cases a library cannot
// produce.
//
// Methods return the raw nvmlReturn_t, not absl::Status: the collector's behaviour depends on the
// exact code (NOT_SUPPORTED ends a link probe and is remembered, GPU_IS_LOST marks a GPU lost,
// anything else is counted and retried), and mapping to Status would lose that. Outputs are only
// written on NVML_SUCCESS. ABI variants (struct versions, _v2/_v3 entry points, buffer sizing)
// are hidden behind these methods.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/nvml/nvml_abi.h"

namespace fabricmon::collectors::nvml {

using abi::nvmlReturn_t;
using Device = abi::nvmlDevice_t;

// Entry points the collector can live without. A library that lacks one (an older driver, a
// stand-in variant) disables that feature: its methods return NVML_ERROR_FUNCTION_NOT_FOUND.
enum class Feature : uint8_t {
  kName,                 // nvmlDeviceGetName
  kPciInfo,              // nvmlDeviceGetPciInfo_v3, else _v2
  kUtilization,          // nvmlDeviceGetUtilizationRates
  kComputeProcesses,     // nvmlDeviceGetComputeRunningProcesses_v3, else _v2, else unversioned
  kNvLinkState,          // nvmlDeviceGetNvLinkState
  kNvLinkRemotePci,      // nvmlDeviceGetNvLinkRemotePciInfo_v2
  kNvLinkErrorCounters,  // nvmlDeviceGetNvLinkErrorCounter
  kFieldValues,          // nvmlDeviceGetFieldValues (NVLink5 counters)
  kCount,
};

absl::string_view FeatureName(Feature feature);

// An initialised NVML. Implementations are used from one thread at a time (the collector's);
// NVML itself is thread-safe (nvml.h), so several instances may coexist.
class NvmlApi {
 public:
  virtual ~NvmlApi() = default;

  // Whether the optional entry points behind `feature` were found.
  virtual bool Has(Feature feature) const = 0;

  // nvmlDeviceGetCount_v2: GPUs visible to this process (cgroups/containers may hide some).
  virtual nvmlReturn_t DeviceGetCount(unsigned int* count) = 0;
  // nvmlDeviceGetHandleByIndex_v2. The handle stays valid until the NvmlApi is destroyed.
  // GPU_IS_LOST for a GPU that fell off the bus; NO_PERMISSION for one the process may not use.
  virtual nvmlReturn_t DeviceGetHandleByIndex(unsigned int index, Device* device) = 0;
  // nvmlDeviceGetUUID ("GPU-5269b708-..."), nvmlDeviceGetName, and the PCI bus id in NVML's
  // "%08X:%02X:%02X.0" form (nvmlPciInfo_t.busId, e.g. "00000000:18:00.0").
  virtual nvmlReturn_t DeviceGetUuid(Device device, std::string* uuid) = 0;
  virtual nvmlReturn_t DeviceGetName(Device device, std::string* name) = 0;
  virtual nvmlReturn_t DeviceGetPciBusId(Device device, std::string* bus_id) = 0;
  // nvmlDeviceGetUtilizationRates: percent over the driver's last sample period.
  virtual nvmlReturn_t DeviceGetUtilization(Device device, abi::nvmlUtilization_t* utilization) = 0;
  // nvmlDeviceGetComputeRunningProcesses*: PIDs (in the driver's PID namespace) of compute
  // contexts on the GPU. Handles the INSUFFICIENT_SIZE retry internally.
  virtual nvmlReturn_t DeviceGetComputePids(Device device, std::vector<uint32_t>* pids) = 0;
  // nvmlDeviceGetNvLinkState. NOT_SUPPORTED / INVALID_ARGUMENT: no such link (end of the probe).
  virtual nvmlReturn_t DeviceGetNvLinkState(Device device, unsigned int link, bool* active) = 0;
  // nvmlDeviceGetNvLinkRemotePciInfo_v2, as a bus id in the same form as DeviceGetPciBusId.
  virtual nvmlReturn_t DeviceGetNvLinkRemotePciBusId(Device device, unsigned int link,
                                                     std::string* bus_id) = 0;
  // nvmlDeviceGetNvLinkErrorCounter (64-bit, unsigned long long in nvml.h).
  virtual nvmlReturn_t DeviceGetNvLinkErrorCounter(Device device, unsigned int link,
                                                   abi::nvmlNvLinkErrorCounter_t counter,
                                                   uint64_t* value) = 0;
  // nvmlDeviceGetFieldValues: the caller fills fieldId/scopeId of each entry; on return every
  // entry carries its own nvmlReturn. The call's own return covers the device (GPU_IS_LOST...).
  virtual nvmlReturn_t DeviceGetFieldValues(Device device, abi::nvmlFieldValue_t* values,
                                            size_t count) = 0;

  // Human-readable text for a return code (nvmlErrorString when the library has it).
  virtual std::string ErrorString(nvmlReturn_t result) const = 0;
};

// Opens an initialised NVML. The collector calls it from Discover() until it succeeds, so a
// daemon that starts before the driver (or on a node without GPUs) needs no restart.
// Errors: NotFound when the library or the driver is absent (not a failure: the node has no
// NVIDIA GPUs); anything else is a real problem (see NvmlLibrary::Load).
using NvmlOpener = std::function<absl::StatusOr<std::unique_ptr<NvmlApi>>()>;

// The nvml.h name of a return code ("NVML_ERROR_GPU_IS_LOST"), "NVML_ERROR_<n>" if unknown.
std::string ReturnName(nvmlReturn_t result);

}  // namespace fabricmon::collectors::nvml
