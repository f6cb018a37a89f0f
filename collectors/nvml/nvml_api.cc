#include "collectors/nvml/nvml_api.h"

#include "absl/strings/str_cat.h"

namespace fabricmon::collectors::nvml {

absl::string_view FeatureName(Feature feature) {
  switch (feature) {
    case Feature::kName:
      return "name";
    case Feature::kPciInfo:
      return "pci_info";
    case Feature::kUtilization:
      return "utilization";
    case Feature::kComputeProcesses:
      return "compute_processes";
    case Feature::kNvLinkState:
      return "nvlink_state";
    case Feature::kNvLinkRemotePci:
      return "nvlink_remote_pci";
    case Feature::kNvLinkErrorCounters:
      return "nvlink_error_counters";
    case Feature::kFieldValues:
      return "field_values";
    case Feature::kCount:
      break;
  }
  return "unknown";
}

std::string ReturnName(nvmlReturn_t result) {
  switch (result) {
    case abi::NVML_SUCCESS:
      return "NVML_SUCCESS";
    case abi::NVML_ERROR_UNINITIALIZED:
      return "NVML_ERROR_UNINITIALIZED";
    case abi::NVML_ERROR_INVALID_ARGUMENT:
      return "NVML_ERROR_INVALID_ARGUMENT";
    case abi::NVML_ERROR_NOT_SUPPORTED:
      return "NVML_ERROR_NOT_SUPPORTED";
    case abi::NVML_ERROR_NO_PERMISSION:
      return "NVML_ERROR_NO_PERMISSION";
    case abi::NVML_ERROR_ALREADY_INITIALIZED:
      return "NVML_ERROR_ALREADY_INITIALIZED";
    case abi::NVML_ERROR_NOT_FOUND:
      return "NVML_ERROR_NOT_FOUND";
    case abi::NVML_ERROR_INSUFFICIENT_SIZE:
      return "NVML_ERROR_INSUFFICIENT_SIZE";
    case abi::NVML_ERROR_INSUFFICIENT_POWER:
      return "NVML_ERROR_INSUFFICIENT_POWER";
    case abi::NVML_ERROR_DRIVER_NOT_LOADED:
      return "NVML_ERROR_DRIVER_NOT_LOADED";
    case abi::NVML_ERROR_TIMEOUT:
      return "NVML_ERROR_TIMEOUT";
    case abi::NVML_ERROR_IRQ_ISSUE:
      return "NVML_ERROR_IRQ_ISSUE";
    case abi::NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML_ERROR_LIBRARY_NOT_FOUND";
    case abi::NVML_ERROR_FUNCTION_NOT_FOUND:
      return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case abi::NVML_ERROR_CORRUPTED_INFOROM:
      return "NVML_ERROR_CORRUPTED_INFOROM";
    case abi::NVML_ERROR_GPU_IS_LOST:
      return "NVML_ERROR_GPU_IS_LOST";
    case abi::NVML_ERROR_RESET_REQUIRED:
      return "NVML_ERROR_RESET_REQUIRED";
    case abi::NVML_ERROR_OPERATING_SYSTEM:
      return "NVML_ERROR_OPERATING_SYSTEM";
    case abi::NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    case abi::NVML_ERROR_IN_USE:
      return "NVML_ERROR_IN_USE";
    case abi::NVML_ERROR_MEMORY:
      return "NVML_ERROR_MEMORY";
    case abi::NVML_ERROR_NO_DATA:
      return "NVML_ERROR_NO_DATA";
    case abi::NVML_ERROR_UNKNOWN:
      return "NVML_ERROR_UNKNOWN";
    default:
      break;
  }
  return absl::StrCat("NVML_ERROR_", result);
}

}  // namespace fabricmon::collectors::nvml
