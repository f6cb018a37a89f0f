#pragma once

// NvmlApi over the real libnvidia-ml, loaded at run time with dlopen() (DCGM's nvml_loader and
// Fluent Bit's in_gpu_metrics do the same): fabricmon builds and runs on machines without the
// NVIDIA driver, and a node without GPUs simply has no library to load.
//
// Lifetime (RAII): Load() = dlopen → dlsym → nvmlInit_v2; the destructor calls nvmlShutdown and
// closes the dlopen handle last. NVML reference-counts init/shutdown (nvml.h), so several
// NvmlLibrary objects in one process are fine. Not copyable or movable (handles into the library
// must not outlive it). Methods are called from one thread at a time.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/nvml/nvml_api.h"

namespace fabricmon::collectors::nvml {

inline constexpr char kDefaultNvmlLibrary[] = "libnvidia-ml.so.1";

class NvmlLibrary final : public NvmlApi {
 public:
  // `path`: a soname searched on the loader path ("libnvidia-ml.so.1") or a file path.
  // Errors:
  //   NotFound — the library cannot be loaded because it is absent, or nvmlInit_v2 says the
  //     driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED / LIBRARY_NOT_FOUND): no usable
  //     NVIDIA GPU here, which is not a failure.
  //   FailedPrecondition — a file exists but is not a loadable library; a required entry point
  //     is missing (driver too old); nvmlInit_v2 failed for another reason (NO_PERMISSION,
  //     LIB_RM_VERSION_MISMATCH after a driver upgrade without reload, ...). The message carries
  //     NVML's code and text.
  //   Unavailable — nvmlInit_v2 answered TIMEOUT or UNKNOWN (may pass on the next attempt).
  static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Load(const std::string& path);
  // Where Load(path) looks for the library, in words (for its NotFound message and --doctor).
  static std::string DescribeSearch(const std::string& path);

  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;
  ~NvmlLibrary() override;

  // Preferred optional entry points that were not found, by nvml.h name (for logs and tests).
  // A feature may still work through an older entry point: ask Has().
  const std::vector<std::string>& missing_symbols() const { return missing_symbols_; }

  // NvmlApi
  bool Has(Feature feature) const override;
  nvmlReturn_t DeviceGetCount(unsigned int* count) override;
  nvmlReturn_t DeviceGetHandleByIndex(unsigned int index, Device* device) override;
  nvmlReturn_t DeviceGetUuid(Device device, std::string* uuid) override;
  nvmlReturn_t DeviceGetName(Device device, std::string* name) override;
  nvmlReturn_t DeviceGetPciBusId(Device device, std::string* bus_id) override;
  nvmlReturn_t DeviceGetUtilization(Device device, abi::nvmlUtilization_t* utilization) override;
  nvmlReturn_t DeviceGetComputePids(Device device, std::vector<uint32_t>* pids) override;
  nvmlReturn_t DeviceGetNvLinkState(Device device, unsigned int link, bool* active) override;
  nvmlReturn_t DeviceGetNvLinkRemotePciBusId(Device device, unsigned int link,
                                             std::string* bus_id) override;
  nvmlReturn_t DeviceGetNvLinkErrorCounter(Device device, unsigned int link,
                                           abi::nvmlNvLinkErrorCounter_t counter,
                                           uint64_t* value) override;
  nvmlReturn_t DeviceGetFieldValues(Device device, abi::nvmlFieldValue_t* values,
                                    size_t count) override;
  std::string ErrorString(nvmlReturn_t result) const override;

 private:
  // Closes a dlopen() handle.
  struct DlCloser {
    void operator()(void* handle) const;
  };
  using DlHandle = std::unique_ptr<void, DlCloser>;

  // Resolved entry points; null when absent (only the optional ones may be).
  struct Symbols {
    abi::nvmlInit_v2_fn init = nullptr;
    abi::nvmlShutdown_fn shutdown = nullptr;
    abi::nvmlErrorString_fn error_string = nullptr;
    abi::nvmlDeviceGetCount_v2_fn get_count = nullptr;
    abi::nvmlDeviceGetHandleByIndex_v2_fn get_handle_by_index = nullptr;
    abi::nvmlDeviceGetUUID_fn get_uuid = nullptr;
    abi::nvmlDeviceGetName_fn get_name = nullptr;
    abi::nvmlDeviceGetPciInfo_fn get_pci_info = nullptr;  // _v3, else _v2
    abi::nvmlDeviceGetUtilizationRates_fn get_utilization = nullptr;
    abi::nvmlDeviceGetComputeRunningProcesses_v2_fn get_processes_v2 = nullptr;  // _v3 or _v2
    abi::nvmlDeviceGetComputeRunningProcesses_v1_fn get_processes_v1 = nullptr;
    abi::nvmlDeviceGetNvLinkState_fn get_nvlink_state = nullptr;
    abi::nvmlDeviceGetNvLinkRemotePciInfo_v2_fn get_nvlink_remote_pci = nullptr;
    abi::nvmlDeviceGetNvLinkErrorCounter_fn get_nvlink_error_counter = nullptr;
    abi::nvmlDeviceGetFieldValues_fn get_field_values = nullptr;
  };

  NvmlLibrary(DlHandle handle, const Symbols& symbols, std::vector<std::string> missing);

  // Declared first so that it is destroyed last: the library stays mapped until the destructor
  // body has called nvmlShutdown.
  DlHandle handle_;
  const Symbols symbols_;
  const std::vector<std::string> missing_symbols_;
};

}  // namespace fabricmon::collectors::nvml
