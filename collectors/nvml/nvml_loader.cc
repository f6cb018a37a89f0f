#include "collectors/nvml/nvml_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"

namespace fabricmon::collectors::nvml {
namespace {

using abi::NVML_ERROR_FUNCTION_NOT_FOUND;
using abi::NVML_ERROR_INSUFFICIENT_SIZE;
using abi::NVML_ERROR_INVALID_ARGUMENT;
using abi::NVML_SUCCESS;

// dlsym() result for `name`, or null. POSIX guarantees a data pointer converts to a function
// pointer for dlsym's purposes.
template <typename Fn>
Fn Resolve(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// Copies a NUL-terminated string out of a fixed NVML buffer; never reads past it even if the
// library forgot the terminator.
std::string FromBuffer(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

// Reads the PIDs of compute processes with one of the nvmlDeviceGetComputeRunningProcesses entry
// points. nvml.h: with *infoCount too small the call returns NVML_ERROR_INSUFFICIENT_SIZE and sets
// *infoCount to the number needed; with 0 processes it returns NVML_SUCCESS. Processes can start
// between two calls, so retry a few times with some headroom.
template <typename Info, typename Fn>
nvmlReturn_t ReadPids(Fn fn, Device device, std::vector<uint32_t>* pids) {
  std::vector<Info> infos;
  unsigned int capacity = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    infos.assign(capacity, Info{});
    unsigned int count = capacity;
    const nvmlReturn_t result = fn(device, &count, infos.empty() ? nullptr : infos.data());
    if (result == NVML_SUCCESS) {
      count = std::min<unsigned int>(count, capacity);
      pids->clear();
      pids->reserve(count);
      for (unsigned int i = 0; i < count; ++i) {
        pids->push_back(infos[i].pid);
      }
      return NVML_SUCCESS;
    }
    if (result != NVML_ERROR_INSUFFICIENT_SIZE) {
      return result;
    }
    capacity = std::max(count, capacity) + 8;
  }
  return NVML_ERROR_INSUFFICIENT_SIZE;
}

}  // namespace

void NvmlLibrary::DlCloser::operator()(void* handle) const {
  if (handle != nullptr) {
    dlclose(handle);
  }
}

std::string NvmlLibrary::DescribeSearch(const std::string& path) {
  if (path.find('/') != std::string::npos) {
    return absl::StrCat(path, " only (a path: no search)");
  }
  // dlopen(3): DT_RPATH of the caller, LD_LIBRARY_PATH, DT_RUNPATH, /etc/ld.so.cache, then the
  // default directories. fabricmon-agent has no RPATH/RUNPATH of its own.
  const char* env = std::getenv("LD_LIBRARY_PATH");
  return absl::StrCat(path, " in LD_LIBRARY_PATH (", env != nullptr && *env != '\0' ? env : "unset",
                      "), /etc/ld.so.cache, /lib, /usr/lib and their multiarch directories");
}

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Load(const std::string& path) {
  dlerror();  // clear any stale error
  // RTLD_LOCAL: NVML's symbols must not satisfy anyone else's lookups (a stand-in or a second
  // copy could otherwise shadow the real one). RTLD_NOW: fail here, not at the first call.
  DlHandle handle(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (handle == nullptr) {
    const char* error = dlerror();
    const std::string message =
        absl::StrCat("cannot load ", path, ": ", error != nullptr ? error : "unknown dlopen error");
    struct stat st;
    if (path.find('/') != std::string::npos && stat(path.c_str(), &st) == 0) {
      // The file is there but is not a library we can load (wrong architecture, truncated).
      return absl::FailedPreconditionError(message);
    }
    return absl::NotFoundError(absl::StrCat(message, "; tried ", DescribeSearch(path)));
  }

  Symbols s;
  std::vector<std::string> missing_required;
  std::vector<std::string> missing_optional;
  void* h = handle.get();
  auto require = [&](auto& slot, const char* name) {
    slot = Resolve<std::remove_reference_t<decltype(slot)>>(h, name);
    if (slot == nullptr) {
      missing_required.emplace_back(name);
    }
  };
  // Optional: tries each name in order (newest ABI first) and keeps the first one found.
  auto optional = [&](auto& slot, std::initializer_list<const char*> names) {
    for (const char* name : names) {
      slot = Resolve<std::remove_reference_t<decltype(slot)>>(h, name);
      if (slot != nullptr) {
        return;
      }
    }
    missing_optional.emplace_back(*names.begin());
  };
  require(s.init, "nvmlInit_v2");
  require(s.shutdown, "nvmlShutdown");
  require(s.get_count, "nvmlDeviceGetCount_v2");
  require(s.get_handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  require(s.get_uuid, "nvmlDeviceGetUUID");
  optional(s.error_string, {"nvmlErrorString"});
  optional(s.get_name, {"nvmlDeviceGetName"});
  // _v3 and _v2 share the nvmlPciInfo_t layout; v3 fixed how the bus id is filled on some
  // platforms (nvml.h maps the unversioned name to _v3).
  optional(s.get_pci_info, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"});
  optional(s.get_utilization, {"nvmlDeviceGetUtilizationRates"});
  // _v3 (API 12) and _v2 (API 11) both fill nvmlProcessInfo_v2_t; the unversioned one fills the
  // 16-byte nvmlProcessInfo_v1_t and is only the last resort.
  optional(s.get_processes_v2,
           {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  if (s.get_processes_v2 == nullptr) {
    optional(s.get_processes_v1, {"nvmlDeviceGetComputeRunningProcesses"});
  }
  optional(s.get_nvlink_state, {"nvmlDeviceGetNvLinkState"});
  optional(s.get_nvlink_remote_pci, {"nvmlDeviceGetNvLinkRemotePciInfo_v2"});
  optional(s.get_nvlink_error_counter, {"nvmlDeviceGetNvLinkErrorCounter"});
  optional(s.get_field_values, {"nvmlDeviceGetFieldValues"});

  if (!missing_required.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " lacks required NVML entry points (driver too old?): ",
                     absl::StrJoin(missing_required, ", ")));
  }
  if (!missing_optional.empty()) {
    FABRICMON_LOG(Info) << "nvml: " << path << " lacks " << absl::StrJoin(missing_optional, ", ")
                        << " (older entry points are used where they exist, otherwise the "
                           "metrics that need them are not collected)";
  }

  const nvmlReturn_t result = s.init();
  if (result != NVML_SUCCESS) {
    const std::string message = absl::StrCat(
        "nvmlInit_v2 failed: ", ReturnName(result), " (",
        s.error_string != nullptr ? s.error_string(result) : "no nvmlErrorString", ")");
    switch (result) {
      case abi::NVML_ERROR_DRIVER_NOT_LOADED:  // library installed, kernel module not loaded
      case abi::NVML_ERROR_LIBRARY_NOT_FOUND:
        return absl::NotFoundError(message);
      case abi::NVML_ERROR_TIMEOUT:
      case abi::NVML_ERROR_UNKNOWN:
        return absl::UnavailableError(message);
      default:
        // NO_PERMISSION (device nodes), LIB_RM_VERSION_MISMATCH (driver upgraded, module not
        // reloaded), OPERATING_SYSTEM (cgroups): a broken setup that the operator must see.
        return absl::FailedPreconditionError(message);
    }
  }
  return std::unique_ptr<NvmlLibrary>(
      new NvmlLibrary(std::move(handle), s, std::move(missing_optional)));
}

NvmlLibrary::NvmlLibrary(DlHandle handle, const Symbols& symbols, std::vector<std::string> missing)
    : handle_(std::move(handle)), symbols_(symbols), missing_symbols_(std::move(missing)) {}

NvmlLibrary::~NvmlLibrary() {
  // Balances the nvmlInit_v2 of Load(); handle_ is closed after this body returns.
  const nvmlReturn_t result = symbols_.shutdown();
  if (result != NVML_SUCCESS) {
    FABRICMON_LOG(Warning) << "nvml: nvmlShutdown failed: " << ReturnName(result);
  }
}

bool NvmlLibrary::Has(Feature feature) const {
  switch (feature) {
    case Feature::kName:
      return symbols_.get_name != nullptr;
    case Feature::kPciInfo:
      return symbols_.get_pci_info != nullptr;
    case Feature::kUtilization:
      return symbols_.get_utilization != nullptr;
    case Feature::kComputeProcesses:
      return symbols_.get_processes_v2 != nullptr || symbols_.get_processes_v1 != nullptr;
    case Feature::kNvLinkState:
      return symbols_.get_nvlink_state != nullptr;
    case Feature::kNvLinkRemotePci:
      return symbols_.get_nvlink_remote_pci != nullptr;
    case Feature::kNvLinkErrorCounters:
      return symbols_.get_nvlink_error_counter != nullptr;
    case Feature::kFieldValues:
      return symbols_.get_field_values != nullptr;
    case Feature::kCount:
      break;
  }
  return false;
}

nvmlReturn_t NvmlLibrary::DeviceGetCount(unsigned int* count) { return symbols_.get_count(count); }

nvmlReturn_t NvmlLibrary::DeviceGetHandleByIndex(unsigned int index, Device* device) {
  return symbols_.get_handle_by_index(index, device);
}

nvmlReturn_t NvmlLibrary::DeviceGetUuid(Device device, std::string* uuid) {
  char buffer[abi::NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  const nvmlReturn_t result = symbols_.get_uuid(device, buffer, sizeof(buffer));
  if (result == NVML_SUCCESS) {
    *uuid = FromBuffer(buffer, sizeof(buffer));
  }
  return result;
}

nvmlReturn_t NvmlLibrary::DeviceGetName(Device device, std::string* name) {
  if (symbols_.get_name == nullptr) {
    return NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  char buffer[abi::NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  const nvmlReturn_t result = symbols_.get_name(device, buffer, sizeof(buffer));
  if (result == NVML_SUCCESS) {
    *name = FromBuffer(buffer, sizeof(buffer));
  }
  return result;
}

nvmlReturn_t NvmlLibrary::DeviceGetPciBusId(Device device, std::string* bus_id) {
  if (symbols_.get_pci_info == nullptr) {
    return NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  abi::nvmlPciInfo_t pci{};
  const nvmlReturn_t result = symbols_.get_pci_info(device, &pci);
  if (result == NVML_SUCCESS) {
    *bus_id = FromBuffer(pci.busId, sizeof(pci.busId));
  }
  return result;
}

nvmlReturn_t NvmlLibrary::DeviceGetUtilization(Device device, abi::nvmlUtilization_t* utilization) {
  if (symbols_.get_utilization == nullptr) {
    return NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  return symbols_.get_utilization(device, utilization);
}

nvmlReturn_t NvmlLibrary::DeviceGetComputePids(Device device, std::vector<uint32_t>* pids) {
  if (symbols_.get_processes_v2 != nullptr) {
    return ReadPids<abi::nvmlProcessInfo_v2_t>(symbols_.get_processes_v2, device, pids);
  }
  if (symbols_.get_processes_v1 != nullptr) {
    return ReadPids<abi::nvmlProcessInfo_v1_t>(symbols_.get_processes_v1, device, pids);
  }
  return NVML_ERROR_FUNCTION_NOT_FOUND;
}

nvmlReturn_t NvmlLibrary::DeviceGetNvLinkState(Device device, unsigned int link, bool* active) {
  if (symbols_.get_nvlink_state == nullptr) {
    return NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  abi::nvmlEnableState_t state = abi::NVML_FEATURE_DISABLED;
  const nvmlReturn_t result = symbols_.get_nvlink_state(device, link, &state);
  if (result == NVML_SUCCESS) {
    *active = state == abi::NVML_FEATURE_ENABLED;
  }
  return result;
}

nvmlReturn_t NvmlLibrary::DeviceGetNvLinkRemotePciBusId(Device device, unsigned int link,
                                                        std::string* bus_id) {
  if (symbols_.get_nvlink_remote_pci == nullptr) {
    return NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  abi::nvmlPciInfo_t pci{};
  const nvmlReturn_t result = symbols_.get_nvlink_remote_pci(device, link, &pci);
  if (result == NVML_SUCCESS) {
    *bus_id = FromBuffer(pci.busId, sizeof(pci.busId));
  }
  return result;
}

nvmlReturn_t NvmlLibrary::DeviceGetNvLinkErrorCounter(Device device, unsigned int link,
                                                      abi::nvmlNvLinkErrorCounter_t counter,
                                                      uint64_t* value) {
  if (symbols_.get_nvlink_error_counter == nullptr) {
    return NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  unsigned long long raw = 0;  // NOLINT(runtime/int): the ABI type
  const nvmlReturn_t result = symbols_.get_nvlink_error_counter(device, link, counter, &raw);
  if (result == NVML_SUCCESS) {
    *value = raw;
  }
  return result;
}

nvmlReturn_t NvmlLibrary::DeviceGetFieldValues(Device device, abi::nvmlFieldValue_t* values,
                                               size_t count) {
  if (symbols_.get_field_values == nullptr) {
    return NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  if (count > static_cast<size_t>(INT_MAX)) {  // valuesCount is an int in nvml.h
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return symbols_.get_field_values(device, static_cast<int>(count), values);
}

std::string NvmlLibrary::ErrorString(nvmlReturn_t result) const {
  if (symbols_.error_string != nullptr) {
    const char* text = symbols_.error_string(result);
    if (text != nullptr) {
      return text;
    }
  }
  return ReturnName(result);
}

}  // namespace fabricmon::collectors::nvml
