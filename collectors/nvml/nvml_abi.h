#pragma once

// The part of NVML's C ABI that fabricmon uses, declared here so the build needs no CUDA/NVML SDK
// (Debian main ships no nvml.h; Fluent Bit's in_gpu_metrics does the same). Every declaration
// mirrors nvml.h (NVML API 12/13, as shipped with the R5xx drivers and in NVIDIA/DCGM
// sdk/nvidia/nvml/nvml.h); names are kept exactly as in nvml.h so each line can be checked
// against the header by grep. Sizes and offsets are pinned by static_asserts below: a mistake
// here is a silent memory corruption at run time, not a compile error.
//
// Only declarations: no NVIDIA code is copied. Nothing here is linked; functions are looked up
// with dlsym() by nvml_loader.cc.

#include <cstddef>
#include <cstdint>

namespace fabricmon::collectors::nvml::abi {

// nvml.h: `typedef enum nvmlReturn_enum {...} nvmlReturn_t;` — a C enum, passed as int.
using nvmlReturn_t = int;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_ALREADY_INITIALIZED = 5;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_POWER = 8;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
inline constexpr nvmlReturn_t NVML_ERROR_IRQ_ISSUE = 11;
inline constexpr nvmlReturn_t NVML_ERROR_LIBRARY_NOT_FOUND = 12;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
inline constexpr nvmlReturn_t NVML_ERROR_CORRUPTED_INFOROM = 14;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 16;
inline constexpr nvmlReturn_t NVML_ERROR_OPERATING_SYSTEM = 17;
inline constexpr nvmlReturn_t NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18;
inline constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
inline constexpr nvmlReturn_t NVML_ERROR_MEMORY = 20;
inline constexpr nvmlReturn_t NVML_ERROR_NO_DATA = 21;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

// nvml.h: `typedef struct nvmlDevice_st* nvmlDevice_t;` — an opaque handle owned by the library,
// valid from nvmlDeviceGetHandleByIndex_v2 until nvmlShutdown.
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

// nvml.h: NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_BUFFER_SIZE ("guaranteed to be
// large enough" for nvmlDeviceGetUUID / nvmlDeviceGetName).
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
// nvml.h: NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE (busId) and _V2_SIZE (busIdLegacy).
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;

// nvml.h: nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v2/_v3 and
// nvmlDeviceGetNvLinkRemotePciInfo_v2 (the v1 functions used an older 16-byte-busId layout with
// reserved words, which is why only the _v2/_v3 entry points are resolved).
struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];  // "%04X:%02X:%02X.0"
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;                        // 16-bit device id << 16 | 16-bit vendor id
  unsigned int pciSubSystemId;                     // added in NVML 2.285
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];  // "%08X:%02X:%02X.0", e.g. 00000000:18:00.0
};

// nvml.h: nvmlUtilization_t — percent of the last sample period (1/6 s to 1 s by product).
struct nvmlUtilization_t {
  unsigned int gpu;     // one or more kernels executing
  unsigned int memory;  // device memory being read or written
};

// nvml.h: nvmlProcessInfo_v1_t, filled by the unversioned nvmlDeviceGetComputeRunningProcesses.
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};

// nvml.h: nvmlProcessInfo_v2_t (== nvmlProcessInfo_t in API 11/12), filled by
// nvmlDeviceGetComputeRunningProcesses_v2 and _v3.
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;      // 0xFFFFFFFF without MIG
  unsigned int computeInstanceId;  // 0xFFFFFFFF without MIG
};

// nvml.h: `typedef enum nvmlEnableState_enum {...} nvmlEnableState_t;`
using nvmlEnableState_t = int;
inline constexpr nvmlEnableState_t NVML_FEATURE_DISABLED = 0;
inline constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;

// nvml.h: `typedef enum nvmlNvLinkErrorCounter_enum {...} nvmlNvLinkErrorCounter_t;`
// (collectors/nvml/README.md, "NVLink error counters").
using nvmlNvLinkErrorCounter_t = int;
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_REPLAY = 0;  // data link TX replays
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_RECOVERY = 1;  // link recoveries
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_CRC_FLIT = 2;  // flit CRC errors
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_CRC_DATA = 3;  // data CRC errors
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_DL_ECC_DATA = 4;  // data ECC errors
inline constexpr nvmlNvLinkErrorCounter_t NVML_NVLINK_ERROR_COUNT = 5;

// nvml.h: NVML_NVLINK_MAX_LINKS, which grew with the GPU generations (6, 12, 18) and is 36 in
// API 13 (collectors/nvml/README.md, "Link count"). Only an upper bound for the probe loop: the
// real count is found by asking until the driver answers NOT_SUPPORTED or INVALID_ARGUMENT.
inline constexpr unsigned int NVML_NVLINK_MAX_LINKS = 36;

// nvml.h: `typedef enum nvmlValueType_enum {...} nvmlValueType_t;`
using nvmlValueType_t = int;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_DOUBLE = 0;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_INT = 1;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_LONG = 2;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_SIGNED_INT = 5;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_SHORT = 6;

// nvml.h: `typedef union nvmlValue_st {...} nvmlValue_t;`
union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
};

// nvml.h: nvmlFieldValue_t. The caller sets fieldId and scopeId (the NVLink id for per-link
// fields; collectors/nvml/README.md, "Field values and scopeId"); NVML fills the rest. nvmlReturn
// is per value and must be checked before value is read: it is undefined unless NVML_SUCCESS.
struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;    // CPU time of the sample, µs since 1970
  long long latencyUsec;  // how long the value took to update inside NVML
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};

// nvml.h NVML_FI_DEV_* field ids (collectors/nvml/README.md, "Blackwell (NVLink5) counters").
// Per-link with scopeId = link; NVLink5
// (Blackwell) and later only — earlier GPUs answer NOT_SUPPORTED per value.
inline constexpr unsigned int NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS = 213;
inline constexpr unsigned int NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS = 214;
inline constexpr unsigned int NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS = 215;
inline constexpr unsigned int NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS = 219;
inline constexpr unsigned int NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS = 221;

// Function signatures, as in nvml.h (all `DECLDIR nvmlReturn_t` with C linkage).
extern "C" {
using nvmlInit_v2_fn = nvmlReturn_t (*)();
using nvmlShutdown_fn = nvmlReturn_t (*)();
using nvmlErrorString_fn = const char* (*)(nvmlReturn_t result);
using nvmlDeviceGetCount_v2_fn = nvmlReturn_t (*)(unsigned int* deviceCount);
using nvmlDeviceGetHandleByIndex_v2_fn = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
using nvmlDeviceGetUUID_fn = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
using nvmlDeviceGetName_fn = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
// Same signature for nvmlDeviceGetPciInfo_v3 and _v2.
using nvmlDeviceGetPciInfo_fn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlPciInfo_t* pci);
using nvmlDeviceGetUtilizationRates_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                          nvmlUtilization_t* utilization);
// nvmlDeviceGetComputeRunningProcesses_v3 and _v2 (nvmlProcessInfo_v2_t array).
using nvmlDeviceGetComputeRunningProcesses_v2_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                    unsigned int* infoCount,
                                                                    nvmlProcessInfo_v2_t* infos);
// The unversioned nvmlDeviceGetComputeRunningProcesses (nvmlProcessInfo_v1_t array).
using nvmlDeviceGetComputeRunningProcesses_v1_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                    unsigned int* infoCount,
                                                                    nvmlProcessInfo_v1_t* infos);
using nvmlDeviceGetNvLinkState_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int link,
                                                     nvmlEnableState_t* isActive);
using nvmlDeviceGetNvLinkRemotePciInfo_v2_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                unsigned int link,
                                                                nvmlPciInfo_t* pci);
using nvmlDeviceGetNvLinkErrorCounter_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int link,
                                                            nvmlNvLinkErrorCounter_t counter,
                                                            unsigned long long* counterValue);
using nvmlDeviceGetFieldValues_fn = nvmlReturn_t (*)(nvmlDevice_t device, int valuesCount,
                                                     nvmlFieldValue_t* values);
}  // extern "C"

// Layout pins (x86_64 / aarch64 LP64, the platforms NVIDIA ships datacenter drivers for).
static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout (nvml.h, v2/v3)");
static_assert(offsetof(nvmlPciInfo_t, domain) == 16, "nvmlPciInfo_t.domain");
static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t.busId");
static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t");
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t");
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t");
static_assert(sizeof(nvmlValue_t) == 8, "nvmlValue_t");
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t");
static_assert(offsetof(nvmlFieldValue_t, timestamp) == 8, "nvmlFieldValue_t.timestamp");
static_assert(offsetof(nvmlFieldValue_t, nvmlReturn) == 28, "nvmlFieldValue_t.nvmlReturn");
static_assert(offsetof(nvmlFieldValue_t, value) == 32, "nvmlFieldValue_t.value");

}  // namespace fabricmon::collectors::nvml::abi
