// A stand-in for libnvidia-ml.so.1: the same C entry points, struct layouts and return codes as
// the real library (nvml.h, NVML API 12/13), with GPUs and NVLinks read from a small text file
// that a test rewrites between collection cycles. DCGM's nvml-injection library is the model;
// this one is much smaller and has no YAML.
//
// The file is named by the environment variable FABRICMON_NVML_STANDIN_STATE and re-read whenever
// it changed (inode, size or mtime), i.e. effectively on every call; replace it atomically
// (write a temporary file, rename over). Format: see README.md beside this file.
//
// Build variants (compile definitions):
//   FABRICMON_NVML_STANDIN_LEGACY              no nvmlDeviceGetFieldValues, no
//       nvmlDeviceGetComputeRunningProcesses_v3/_v2 (only the unversioned v1-struct one), no
//       nvmlDeviceGetPciInfo_v3 (only _v2): an older driver.
//   FABRICMON_NVML_STANDIN_NO_HANDLE_BY_INDEX  no nvmlDeviceGetHandleByIndex_v2 (a required entry
//       point missing).
//
// The ABI is declared here independently of collectors/nvml/nvml_abi.h, on purpose: if either
// side got a layout wrong, the tests see garbage instead of agreeing on the same mistake.

#include <sys/stat.h>
#include <sys/time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#define STANDIN_EXPORT extern "C" __attribute__((visibility("default")))

// ---- nvml.h subset -------------------------------------------------------------------------
extern "C" {
typedef int nvmlReturn_t;  // enum nvmlReturn_enum
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999,
};

struct nvmlDevice_st {
  unsigned int index;
};
typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct nvmlPciInfo_st {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef int nvmlEnableState_t;         // NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1
typedef int nvmlNvLinkErrorCounter_t;  // DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2, DL_CRC_DATA 3,
                                       // DL_ECC_DATA 4
typedef int nvmlValueType_t;           // ... NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3 ...

typedef union nvmlValue_st {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;
}  // extern "C"

static_assert(sizeof(nvmlPciInfo_t) == 68, "nvml.h nvmlPciInfo_t");
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvml.h nvmlProcessInfo_v1_t");
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvml.h nvmlProcessInfo_v2_t");
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvml.h nvmlFieldValue_t");

namespace {

constexpr unsigned int kMaxGpus = 64;
[[maybe_unused]] constexpr int kValueTypeUnsignedLongLong =
    3;  // NVML_VALUE_TYPE_UNSIGNED_LONG_LONG

using KeyValues = std::map<std::string, std::string>;

struct LinkState {
  KeyValues kv;
};

struct GpuState {
  KeyValues kv;
  bool lost = false;
  std::map<unsigned int, LinkState> links;
};

struct State {
  bool file_present = false;
  bool has_init_result = false;
  nvmlReturn_t init_result = NVML_SUCCESS;
  bool has_count = false;
  unsigned int count = 0;
  std::map<unsigned int, GpuState> gpus;
};

std::mutex g_mutex;
State g_state;
int g_init_count = 0;
// What the cached state was read from.
bool g_cached = false;
ino_t g_ino = 0;
off_t g_size = 0;
struct timespec g_mtime = {};
nvmlDevice_st g_devices[kMaxGpus];

// Splits a line into tokens at blanks, keeping "double quoted" parts (quotes removed).
std::vector<std::string> Tokenize(const std::string& line) {
  std::vector<std::string> tokens;
  std::string current;
  bool in_quotes = false;
  bool has_token = false;
  for (char c : line) {
    if (c == '"') {
      in_quotes = !in_quotes;
      has_token = true;
      continue;
    }
    if (!in_quotes && (c == ' ' || c == '\t')) {
      if (has_token) {
        tokens.push_back(current);
        current.clear();
        has_token = false;
      }
      continue;
    }
    current.push_back(c);
    has_token = true;
  }
  if (has_token) {
    tokens.push_back(current);
  }
  return tokens;
}

KeyValues ParseKeyValues(const std::vector<std::string>& tokens, size_t first) {
  KeyValues kv;
  for (size_t i = first; i < tokens.size(); ++i) {
    const size_t eq = tokens[i].find('=');
    if (eq == std::string::npos) {
      kv[tokens[i]] = "";
    } else {
      kv[tokens[i].substr(0, eq)] = tokens[i].substr(eq + 1);
    }
  }
  return kv;
}

State Parse(std::istream& in) {
  State state;
  state.file_present = true;
  std::string line;
  while (std::getline(in, line)) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) {
      line.resize(hash);
    }
    const std::vector<std::string> tokens = Tokenize(line);
    if (tokens.empty()) {
      continue;
    }
    const std::string& kind = tokens[0];
    if (kind == "init" && tokens.size() >= 2) {
      state.has_init_result = true;
      state.init_result = std::atoi(tokens[1].c_str());
    } else if (kind == "count" && tokens.size() >= 2) {
      state.has_count = true;
      state.count = static_cast<unsigned int>(std::strtoul(tokens[1].c_str(), nullptr, 10));
    } else if (kind == "gpu" && tokens.size() >= 2) {
      const unsigned int index =
          static_cast<unsigned int>(std::strtoul(tokens[1].c_str(), nullptr, 10));
      GpuState& gpu = state.gpus[index];
      for (auto& [key, value] : ParseKeyValues(tokens, 2)) {
        gpu.kv[key] = value;
      }
    } else if (kind == "link" && tokens.size() >= 3) {
      const unsigned int gpu =
          static_cast<unsigned int>(std::strtoul(tokens[1].c_str(), nullptr, 10));
      const unsigned int link =
          static_cast<unsigned int>(std::strtoul(tokens[2].c_str(), nullptr, 10));
      LinkState& state_link = state.gpus[gpu].links[link];
      for (auto& [key, value] : ParseKeyValues(tokens, 3)) {
        state_link.kv[key] = value;
      }
    } else if (kind == "lost" && tokens.size() >= 2) {
      state.gpus[static_cast<unsigned int>(std::strtoul(tokens[1].c_str(), nullptr, 10))].lost =
          true;
    }
  }
  return state;
}

// Re-reads the state file if it changed since the last read. Caller holds g_mutex.
void Refresh() {
  const char* path = std::getenv("FABRICMON_NVML_STANDIN_STATE");
  struct stat st;
  if (path == nullptr || stat(path, &st) != 0) {
    g_state = State();
    g_cached = false;
    return;
  }
  if (g_cached && st.st_ino == g_ino && st.st_size == g_size &&
      st.st_mtim.tv_sec == g_mtime.tv_sec && st.st_mtim.tv_nsec == g_mtime.tv_nsec) {
    return;
  }
  std::ifstream in(path);
  if (!in) {
    g_state = State();
    g_cached = false;
    return;
  }
  g_state = Parse(in);
  g_cached = true;
  g_ino = st.st_ino;
  g_size = st.st_size;
  g_mtime = st.st_mtim;
}

// Appends one line to the call log named by FABRICMON_NVML_STANDIN_LOG, if set.
void LogCall(const char* function, long gpu = -1, long link = -1) {
  const char* path = std::getenv("FABRICMON_NVML_STANDIN_LOG");
  if (path == nullptr) {
    return;
  }
  FILE* file = std::fopen(path, "a");
  if (file == nullptr) {
    return;
  }
  std::fprintf(file, "%s", function);
  if (gpu >= 0) {
    std::fprintf(file, " %ld", gpu);
  }
  if (link >= 0) {
    std::fprintf(file, " %ld", link);
  }
  std::fprintf(file, "\n");
  std::fclose(file);
}

unsigned int DeviceCount() {
  if (g_state.has_count) {
    return g_state.count;
  }
  return g_state.gpus.empty() ? 0 : g_state.gpus.rbegin()->first + 1;
}

// A value from a key=value map: `*error` is set for "!<code>" values, `found` false if absent.
struct Lookup {
  bool found = false;
  nvmlReturn_t error = NVML_SUCCESS;
  std::string text;
};

Lookup Get(const KeyValues& kv, const std::string& key) {
  Lookup result;
  auto it = kv.find(key);
  if (it == kv.end()) {
    return result;
  }
  result.found = true;
  if (!it->second.empty() && it->second[0] == '!') {
    result.error = std::atoi(it->second.c_str() + 1);
  } else {
    result.text = it->second;
  }
  return result;
}

unsigned long long Number(const std::string& text) {
  return std::strtoull(text.c_str(), nullptr, 10);
}

// The GPU behind a handle, or an error code: UNINITIALIZED before nvmlInit, INVALID_ARGUMENT
// for a bad handle, GPU_IS_LOST for a GPU marked lost.
nvmlReturn_t Resolve(nvmlDevice_t device, const GpuState** gpu) {
  if (g_init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  Refresh();
  if (device == nullptr || device < &g_devices[0] || device >= &g_devices[kMaxGpus]) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  auto it = g_state.gpus.find(device->index);
  if (it == g_state.gpus.end()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (it->second.lost) {
    return NVML_ERROR_GPU_IS_LOST;
  }
  *gpu = &it->second;
  return NVML_SUCCESS;
}

// The link `link` of `gpu`, or the code a real driver gives past the last link: the GPU's
// nvlink_end=<code> if set, NOT_SUPPORTED for a GPU without links, else INVALID_ARGUMENT.
nvmlReturn_t ResolveLink(const GpuState& gpu, unsigned int link, const LinkState** out) {
  auto it = gpu.links.find(link);
  if (it != gpu.links.end()) {
    *out = &it->second;
    return NVML_SUCCESS;
  }
  const Lookup end = Get(gpu.kv, "nvlink_end");
  if (end.found) {
    return end.error != NVML_SUCCESS ? end.error : std::atoi(end.text.c_str());
  }
  return gpu.links.empty() ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

// Copies `text` into an NVML string buffer of `length` bytes.
nvmlReturn_t CopyString(const std::string& text, char* buffer, unsigned int length) {
  if (buffer == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (text.size() + 1 > length) {
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

// Fills an nvmlPciInfo_t from "00000000:18:00.0" the way NVML formats it.
void FillPci(const std::string& bus_id, nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", bus_id.c_str());
  unsigned int domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) == 4) {
    pci->domain = domain;
    pci->bus = bus;
    pci->device = device;
    std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", domain & 0xffff,
                  bus, device);
  }
  pci->pciDeviceId = 0x233010de;  // H100 SXM5 80GB << 16 | NVIDIA
}

std::vector<unsigned int> Pids(const std::string& text) {
  std::vector<unsigned int> pids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) {
      pids.push_back(static_cast<unsigned int>(std::strtoul(item.c_str(), nullptr, 10)));
    }
  }
  return pids;
}

template <typename Info>
nvmlReturn_t ComputeProcesses(nvmlDevice_t device, unsigned int* count, Info* infos) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetComputeRunningProcesses", device->index);
  if (count == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const Lookup value = Get(gpu->kv, "pids");
  if (value.error != NVML_SUCCESS) {
    return value.error;
  }
  const std::vector<unsigned int> pids = Pids(value.text);
  // nvml.h: too small a buffer → INSUFFICIENT_SIZE with *infoCount set to the size needed.
  if (*count < pids.size()) {
    *count = static_cast<unsigned int>(pids.size());
    return pids.empty() ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    infos[i] = Info{};
    infos[i].pid = pids[i];
    infos[i].usedGpuMemory = 1ull << 30;
  }
  *count = static_cast<unsigned int>(pids.size());
  return NVML_SUCCESS;
}

const char* ErrorCounterKey(nvmlNvLinkErrorCounter_t counter) {
  switch (counter) {
    case 0:
      return "replay";
    case 1:
      return "recovery";
    case 2:
      return "crc_flit";
    case 3:
      return "crc_data";
    case 4:
      return "ecc";
    default:
      return nullptr;
  }
}

[[maybe_unused]] const char* FieldKey(unsigned int field_id) {
  switch (field_id) {
    case 213:  // NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS
      return "nvl5_recovery_successful";
    case 214:  // ..._LINK_RECOVERY_FAILED_EVENTS
      return "nvl5_recovery_failed";
    case 215:  // ..._LINK_RECOVERY_EVENTS
      return "nvl5_recovery_events";
    case 219:  // NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS
      return "nvl5_effective_errors";
    case 221:  // NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS
      return "nvl5_symbol_errors";
    default:
      return nullptr;
  }
}

}  // namespace

// ---- exported entry points -------------------------------------------------------------------

STANDIN_EXPORT nvmlReturn_t nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(g_mutex);
  LogCall("nvmlInit_v2");
  Refresh();
  if (!g_state.file_present) {
    return NVML_ERROR_DRIVER_NOT_LOADED;  // like a host with the library but no kernel module
  }
  if (g_state.has_init_result && g_state.init_result != NVML_SUCCESS) {
    return g_state.init_result;
  }
  ++g_init_count;  // nvml.h: init/shutdown are reference counted
  return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lock(g_mutex);
  LogCall("nvmlShutdown");
  if (g_init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  --g_init_count;
  return NVML_SUCCESS;
}

STANDIN_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error (stand-in)";
  }
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard<std::mutex> lock(g_mutex);
  LogCall("nvmlDeviceGetCount_v2");
  if (g_init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  if (count == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  Refresh();
  *count = DeviceCount();
  return NVML_SUCCESS;
}

#ifndef FABRICMON_NVML_STANDIN_NO_HANDLE_BY_INDEX
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                          nvmlDevice_t* device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  LogCall("nvmlDeviceGetHandleByIndex_v2", index);
  if (g_init_count == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  Refresh();
  if (device == nullptr || index >= DeviceCount() || index >= kMaxGpus) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  auto it = g_state.gpus.find(index);
  if (it == g_state.gpus.end()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (it->second.lost) {
    return NVML_ERROR_GPU_IS_LOST;
  }
  const Lookup handle = Get(it->second.kv, "handle");
  if (handle.error != NVML_SUCCESS) {
    return handle.error;
  }
  g_devices[index].index = index;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}
#endif

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                              unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  const nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetUUID", device->index);
  const Lookup value = Get(gpu->kv, "uuid");
  if (value.error != NVML_SUCCESS) {
    return value.error;
  }
  char fallback[64];
  std::snprintf(fallback, sizeof(fallback), "GPU-00000000-0000-0000-0000-%012u", device->index);
  return CopyString(value.found ? value.text : fallback, uuid, length);
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                              unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  const nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetName", device->index);
  const Lookup value = Get(gpu->kv, "name");
  if (value.error != NVML_SUCCESS) {
    return value.error;
  }
  return CopyString(value.found ? value.text : "NVIDIA H100 80GB HBM3", name, length);
}

namespace {
nvmlReturn_t PciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  const nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetPciInfo", device->index);
  if (pci == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const Lookup value = Get(gpu->kv, "pci");
  if (value.error != NVML_SUCCESS) {
    return value.error;
  }
  char fallback[32];
  std::snprintf(fallback, sizeof(fallback), "00000000:%02X:00.0", 0x10 + device->index);
  FillPci(value.found ? value.text : fallback, pci);
  return NVML_SUCCESS;
}
}  // namespace

#ifdef FABRICMON_NVML_STANDIN_LEGACY
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo(device, pci);
}
#else
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo(device, pci);
}
#endif

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                          nvmlUtilization_t* utilization) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  const nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetUtilizationRates", device->index);
  if (utilization == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const Lookup gpu_util = Get(gpu->kv, "util");
  const Lookup mem_util = Get(gpu->kv, "mem");
  if (gpu_util.error != NVML_SUCCESS) {
    return gpu_util.error;
  }
  if (mem_util.error != NVML_SUCCESS) {
    return mem_util.error;
  }
  utilization->gpu = static_cast<unsigned int>(Number(gpu_util.text));
  utilization->memory = static_cast<unsigned int>(Number(mem_util.text));
  return NVML_SUCCESS;
}

#ifdef FABRICMON_NVML_STANDIN_LEGACY
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                 unsigned int* infoCount,
                                                                 nvmlProcessInfo_v1_t* infos) {
  return ComputeProcesses(device, infoCount, infos);
}
#else
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                    unsigned int* infoCount,
                                                                    nvmlProcessInfo_v2_t* infos) {
  return ComputeProcesses(device, infoCount, infos);
}
#endif

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                     nvmlEnableState_t* isActive) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetNvLinkState", device->index, link);
  if (isActive == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const LinkState* state = nullptr;
  result = ResolveLink(*gpu, link, &state);
  if (result != NVML_SUCCESS) {
    return result;
  }
  const Lookup active = Get(state->kv, "active");
  if (active.error != NVML_SUCCESS) {
    return active.error;
  }
  *isActive = (!active.found || Number(active.text) != 0) ? 1 : 0;
  return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device,
                                                                unsigned int link,
                                                                nvmlPciInfo_t* pci) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetNvLinkRemotePciInfo_v2", device->index, link);
  if (pci == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const LinkState* state = nullptr;
  result = ResolveLink(*gpu, link, &state);
  if (result != NVML_SUCCESS) {
    return result;
  }
  const Lookup remote = Get(state->kv, "remote");
  if (remote.error != NVML_SUCCESS) {
    return remote.error;
  }
  if (!remote.found) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  FillPci(remote.text, pci);
  return NVML_SUCCESS;
}

STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                            nvmlNvLinkErrorCounter_t counter,
                                                            unsigned long long* counterValue) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetNvLinkErrorCounter", device->index, link);
  const char* key = ErrorCounterKey(counter);
  if (counterValue == nullptr || key == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const LinkState* state = nullptr;
  result = ResolveLink(*gpu, link, &state);
  if (result != NVML_SUCCESS) {
    return result;
  }
  const Lookup value = Get(state->kv, key);
  if (value.error != NVML_SUCCESS) {
    return value.error;
  }
  if (!value.found) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *counterValue = Number(value.text);
  return NVML_SUCCESS;
}

#ifndef FABRICMON_NVML_STANDIN_LEGACY
STANDIN_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                                     nvmlFieldValue_t* values) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const GpuState* gpu = nullptr;
  const nvmlReturn_t result = Resolve(device, &gpu);
  if (result != NVML_SUCCESS) {
    return result;
  }
  LogCall("nvmlDeviceGetFieldValues", device->index, valuesCount);
  if (values == nullptr || valuesCount < 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const Lookup whole = Get(gpu->kv, "fv");
  if (whole.error != NVML_SUCCESS) {
    return whole.error;
  }
  struct timeval now;
  gettimeofday(&now, nullptr);
  for (int i = 0; i < valuesCount; ++i) {
    nvmlFieldValue_t& value = values[i];
    value.timestamp = static_cast<long long>(now.tv_sec) * 1000000 + now.tv_usec;
    value.latencyUsec = 0;
    const char* key = FieldKey(value.fieldId);
    const LinkState* state = nullptr;
    if (key == nullptr || ResolveLink(*gpu, value.scopeId, &state) != NVML_SUCCESS) {
      value.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      continue;
    }
    const Lookup found = Get(state->kv, key);
    if (found.error != NVML_SUCCESS) {
      value.nvmlReturn = found.error;
    } else if (!found.found) {
      value.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    } else {
      value.nvmlReturn = NVML_SUCCESS;
      value.valueType = kValueTypeUnsignedLongLong;
      value.value.ullVal = Number(found.text);
    }
  }
  return NVML_SUCCESS;
}
#endif
