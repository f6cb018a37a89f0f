#pragma once

// The families of the nvml collector (GPUs and their NVLinks). Pure data: no NVML, no I/O.

#include <vector>

#include "collectors/core/family_spec.h"

namespace fabricmon::collectors::nvml {

inline constexpr FamilySpec kGpuInfoFamily =
    InfoFamily("fabricmon_gpu_info",
               "GPU identity from NVML; value 1. gpu is the NVML index (PCI bus order), "
               "pci_bus_id is NVML's nvmlPciInfo_t.busId.");
inline constexpr FamilySpec kGpuLostFamily = GaugeFamily(
    "fabricmon_gpu_lost",
    "1 if NVML reports the GPU lost (NVML_ERROR_GPU_IS_LOST: fallen off the bus or otherwise "
    "inaccessible), else 0.",
    Unit::kState);
// nvmlUtilization_t is in percent; scale makes it a 0–1 ratio at export.
inline constexpr FamilySpec kGpuUtilizationFamily =
    GaugeFamily("fabricmon_gpu_utilization_ratio",
                "Fraction of the driver's last sample period (1/6 s to 1 s) during which one or "
                "more kernels ran (nvmlUtilization_t.gpu).",
                Unit::kRatio, 0.01);
inline constexpr FamilySpec kGpuMemoryUtilizationFamily = GaugeFamily(
    "fabricmon_gpu_memory_utilization_ratio",
    "Fraction of the driver's last sample period during which device memory was being read or "
    "written (nvmlUtilization_t.memory; bandwidth activity, not capacity used).",
    Unit::kRatio, 0.01);
inline constexpr FamilySpec kGpuComputeProcessesFamily = GaugeFamily(
    "fabricmon_gpu_compute_processes",
    "Compute processes with a context on the GPU (nvmlDeviceGetComputeRunningProcesses).",
    Unit::kNone);
inline constexpr FamilySpec kGpuUnsupportedFamily = GaugeFamily(
    "fabricmon_gpu_unsupported_queries",
    "NVML queries of the GPU and its links that answered NOT_SUPPORTED and are skipped until "
    "the next discovery (why a metric is absent).",
    Unit::kNone);
inline constexpr FamilySpec kNvLinkStateFamily =
    GaugeFamily("fabricmon_nvlink_state",
                "NVLink state from nvmlDeviceGetNvLinkState: 1 active, 0 inactive.", Unit::kState);
inline constexpr FamilySpec kNvLinkInfoFamily = InfoFamily(
    "fabricmon_nvlink_info",
    "NVLink remote end; value 1. remote_pci_bus_id is nvmlDeviceGetNvLinkRemotePciInfo_v2 (a GPU "
    "or an NVSwitch), empty when NVML does not report one (inactive link).");
// nvml.h: unsigned long long, so 64-bit and wrapping (never saturating).
inline constexpr FamilySpec kNvLinkErrorsFamily = CounterFamily(
    "fabricmon_nvlink_errors_total",
    "NVLink data-link error counters (nvmlDeviceGetNvLinkErrorCounter; 64-bit, reset only by "
    "nvmlDeviceResetNvLinkErrorCounters or driver reload): replay = TX replays, recovery = link "
    "recoveries (pre-Blackwell flap signal), crc_flit / crc_data = CRC errors, ecc_data = data "
    "ECC errors. Absent where the GPU generation does not support the counter.",
    Unit::kNone, 64, Overflow::kWraps);
inline constexpr FamilySpec kNvLinkRecoveryFamily = CounterFamily(
    "fabricmon_nvlink_recovery_events_total",
    "NVLink5 link recoveries by outcome (NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*): successful = "
    "self-healed, failed = recovery failed and the link went down (a flap), all = every event. "
    "Blackwell and later only.",
    Unit::kNone, 64, Overflow::kWraps);
inline constexpr FamilySpec kNvLinkEffectiveErrorsFamily = CounterFamily(
    "fabricmon_nvlink_effective_errors_total",
    "NVLink5 effective errors of the link (NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS). Blackwell "
    "and later only.",
    Unit::kNone, 64, Overflow::kWraps);
inline constexpr FamilySpec kNvLinkSymbolErrorsFamily = CounterFamily(
    "fabricmon_nvlink_symbol_errors_total",
    "NVLink5 symbol errors of the link (NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS). Blackwell and "
    "later only.",
    Unit::kNone, 64, Overflow::kWraps);

inline constexpr FamilySpec kNvmlFamilies[] = {
    kGpuInfoFamily,
    kGpuLostFamily,
    kGpuUtilizationFamily,
    kGpuMemoryUtilizationFamily,
    kGpuComputeProcessesFamily,
    kGpuUnsupportedFamily,
    kNvLinkStateFamily,
    kNvLinkInfoFamily,
    kNvLinkErrorsFamily,
    kNvLinkRecoveryFamily,
    kNvLinkEffectiveErrorsFamily,
    kNvLinkSymbolErrorsFamily,
};

}  // namespace fabricmon::collectors::nvml
