#pragma once

// InfiniBand / RoCE HCA port counters from /sys/class/infiniband: counters/, counters_ext/ and
// hw_counters/ of every port of every device (directory walk: any counter name is exported),
// plus device and port attributes.
//
// Cost model: Discover() opens every counter file once and keeps the descriptor; Collect() is one
// pread(2) + parse per value. A file that answered EINVAL (firmware-restricted PFs log a kernel
// error on every read: README.md, "Firmware-restricted functions") or "N/A (no PMA)" is not read
// again until the next discovery.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/core/collector.h"
#include "collectors/core/collector_errors.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/device_filter.h"
#include "collectors/core/rdma_netdev_map.h"
#include "daemon/common/file_reader.h"
#include "fabricmon/v1/config.pb.h"

namespace fabricmon::collectors {

inline constexpr char kIbSysfsCollectorName[] = "ib_sysfs";

class IbSysfsCollector final : public Collector {
 public:
  // InvalidArgument on a bad filter pattern.
  static absl::StatusOr<std::unique_ptr<IbSysfsCollector>> Create(
      const v1::IbSysfsCollectorConfig& config);

  absl::string_view name() const override { return kIbSysfsCollectorName; }
  // NotFound when <root>/class/infiniband is absent or holds no (allowed) device.
  absl::Status Discover(v1::Inventory& inventory) override;
  absl::Status Collect(SampleSink& sink) override;
  bool WantsRediscovery() const override { return wants_rediscovery_; }
  // No RDMA device, or devices whose every counter read fails (restricted PCI functions).
  Diagnosis Diagnose(const DiagnosisInput& input) const override;
  int64_t interval_ms() const override { return interval_ms_; }
  int64_t rediscover_interval_ms() const override { return rediscover_interval_ms_; }

  // Counter files currently being read (for tests and self-metrics).
  size_t open_counter_files() const;

 private:
  struct CounterFile {
    PreadFile file;
    SeriesDesc series;
  };
  // A small attribute re-read every cycle (state, phys_state, rate).
  struct AttributeFile {
    PreadFile file;
    SeriesDesc series;
  };
  struct Port {
    uint32_t number = 0;
    std::vector<CounterFile> counters;
    AttributeFile state;
    AttributeFile phys_state;
    AttributeFile rate;
    SeriesDesc info;
    SeriesDesc unreadable;  // gauge: counter files skipped (EINVAL / no PMA)
    uint64_t unreadable_count = 0;
    SeriesDesc lifespan;  // hw_counters/lifespan, ms → seconds
    uint64_t lifespan_ms = 0;
    bool has_lifespan = false;
  };
  struct Device {
    std::string name;
    SeriesDesc info;
    std::vector<Port> ports;
  };

  IbSysfsCollector(std::string root, DeviceFilter filter, bool hw_counters, int64_t interval_ms,
                   int64_t rediscover_interval_ms);

  absl::StatusOr<Device> DiscoverDevice(const std::string& name, v1::RdmaDevice& inventory);
  // `driver` is the driver family (see ib_sysfs::DriverFamily). Sets *all_unsupported when every
  // counter file answered EINVAL, *has_counters when the port has any counter file.
  absl::StatusOr<Port> DiscoverPort(const Device& device, const std::string& driver,
                                    const std::string& port_dir, uint32_t number,
                                    v1::RdmaPort& inventory, bool* all_unsupported,
                                    bool* has_counters);
  // What the probe reads of one port's counter files found.
  struct ProbeTally {
    bool supported = false;  // at least one file gave a number (or a transient error)
    bool einval = false;     // at least one file answered EINVAL
    bool no_pma = false;     // at least one file said "N/A (no PMA)"
  };
  // Opens and probe-reads one counter file; keeps it in `port` unless it is permanently
  // unreadable (EINVAL, no PMA).
  void AddCounterFile(Port& port, const std::string& path, SeriesDesc series, ProbeTally& tally);
  void ReadAttribute(const AttributeFile& attribute, SampleSink& sink,
                     uint64_t (*parse)(absl::string_view));

  const std::string root_;
  const DeviceFilter filter_;
  const bool hw_counters_;
  const int64_t interval_ms_;
  const int64_t rediscover_interval_ms_;
  std::vector<Device> devices_;
  RdmaNetdevMap netdev_map_;  // the ports' netdevs (inventory, port info label)
  CollectorErrors errors_;
  bool wants_rediscovery_ = false;
};

// Registers "ib_sysfs" (enabled by default) with `registry`.
void RegisterIbSysfsCollector(CollectorRegistry& registry);

}  // namespace fabricmon::collectors
