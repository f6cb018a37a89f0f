#pragma once

// GPUs and their NVLinks through NVML: identity, utilization, compute processes, per-link state,
// remote end and error counters, and the NVLink5 (Blackwell) per-link recovery/error counters.
//
// Discovery opens libnvidia-ml (dlopen, nvmlInit_v2 once for the collector's lifetime; RAII:
// nvmlShutdown and dlclose when the collector is destroyed), enumerates the GPUs and probes each
// GPU's links 0, 1, ... until the driver answers NOT_SUPPORTED or INVALID_ARGUMENT — a link count
// is never assumed. A query that answers NOT_SUPPORTED (an error counter the generation lacks,
// an NVLink5 field value on Hopper) is remembered and not asked again until the next discovery.
//
// A GPU that answers NVML_ERROR_GPU_IS_LOST ("fallen off the bus", nvml.h) is exported as
// fabricmon_gpu_lost = 1, asks for early re-discovery, and does not stop the other GPUs.
//
// Thread-safety: none; the agent calls Discover()/Collect() from one thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/core/collector.h"
#include "collectors/core/collector_errors.h"
#include "collectors/core/collector_registry.h"
#include "collectors/nvml/nvml_api.h"
#include "fabricmon/v1/config.pb.h"

namespace fabricmon::collectors {

inline constexpr char kNvmlCollectorName[] = "nvml";

class NvmlCollector final : public Collector {
 public:
  // Opens config.library() (default libnvidia-ml.so.1) on the first Discover().
  // InvalidArgument on a bad config; never touches the library itself.
  static absl::StatusOr<std::unique_ptr<NvmlCollector>> Create(
      const v1::NvmlCollectorConfig& config);
  // Same, with NVML supplied by `opener` (tests, fakes). `opener` is called from Discover()
  // until it succeeds.
  static absl::StatusOr<std::unique_ptr<NvmlCollector>> Create(
      const v1::NvmlCollectorConfig& config, nvml::NvmlOpener opener);

  ~NvmlCollector() override;

  absl::string_view name() const override { return kNvmlCollectorName; }
  // NotFound when the library or the driver is absent, or NVML sees no GPU. Other errors from
  // opening NVML (see NvmlLibrary::Load) are returned as they are.
  absl::Status Discover(v1::Inventory& inventory) override;
  // NotFound before a successful discovery; otherwise OK (per-GPU and per-link failures are
  // counted in fabricmon_collector_errors_total{collector="nvml"}).
  absl::Status Collect(SampleSink& sink) override;
  bool WantsRediscovery() const override { return wants_rediscovery_; }
  // Library not loadable (where it was looked for), no GPU, or NVML refusing to start.
  Diagnosis Diagnose(const DiagnosisInput& input) const override;
  int64_t interval_ms() const override { return interval_ms_; }
  int64_t rediscover_interval_ms() const override { return rediscover_interval_ms_; }

  // Whether NVML is currently open (for tests).
  bool nvml_open() const { return api_ != nullptr; }

 private:
  // One nvmlDeviceGetNvLinkErrorCounter counter of one link.
  struct ErrorCounter {
    int counter = 0;  // nvmlNvLinkErrorCounter_t
    SeriesDesc series;
    bool supported = true;
  };
  // One NVML field value (NVLink5) of one link.
  struct FieldValue {
    unsigned int field_id = 0;
    SeriesDesc series;
    bool supported = true;
  };
  struct Link {
    unsigned int index = 0;
    bool active = false;
    std::string remote_pci_bus_id;
    SeriesDesc state;
    SeriesDesc info;
    std::vector<ErrorCounter> errors;
    std::vector<FieldValue> fields;
  };
  struct Gpu {
    unsigned int index = 0;
    nvml::Device handle = nullptr;
    std::string label;  // index as a string
    std::string uuid;
    std::string pci_bus_id;
    std::string name;
    bool lost = false;
    bool utilization_supported = true;
    bool processes_supported = true;
    uint64_t unsupported_queries = 0;
    SeriesDesc info;
    SeriesDesc lost_series;
    SeriesDesc utilization;
    SeriesDesc memory_utilization;
    SeriesDesc compute_processes;
    SeriesDesc unsupported;
    std::vector<Link> links;
  };
  // What a GPU looked like at the last discovery; lets a GPU that is lost at re-discovery keep
  // its identity (NVML cannot tell the UUID of a GPU that fell off the bus).
  struct Identity {
    std::string uuid;
    std::string pci_bus_id;
    std::string name;
  };

  NvmlCollector(nvml::NvmlOpener opener, int64_t interval_ms, int64_t rediscover_interval_ms);

  // Builds the identity series of `gpu` from its uuid/pci/name.
  void BuildGpuSeries(Gpu& gpu);
  void BuildLinkSeries(const Gpu& gpu, Link& link);
  // Reads one GPU's identity and links. Returns false if the GPU turned out to be lost.
  bool DiscoverGpu(Gpu& gpu, v1::Gpu& inventory);
  void CollectGpu(Gpu& gpu, SampleSink& sink);
  void CollectFieldValues(Gpu& gpu, SampleSink& sink);
  // Handles a non-success code from a query on `gpu`: marks the GPU lost on GPU_IS_LOST (and
  // returns true: stop reading it), counts other failures. `what` names the query for logs.
  bool HandleFailure(Gpu& gpu, nvml::nvmlReturn_t result, absl::string_view what, SampleSink* sink);
  void MarkLost(Gpu& gpu, SampleSink* sink);

  const nvml::NvmlOpener opener_;
  const int64_t interval_ms_;
  const int64_t rediscover_interval_ms_;
  std::unique_ptr<nvml::NvmlApi> api_;
  std::vector<Gpu> gpus_;
  std::map<unsigned int, Identity> known_;  // by GPU index, from the last discovery
  CollectorErrors errors_;
  bool wants_rediscovery_ = false;
};

// Registers "nvml" (enabled by default: without libnvidia-ml it reports NotFound).
void RegisterNvmlCollector(CollectorRegistry& registry);

}  // namespace fabricmon::collectors
