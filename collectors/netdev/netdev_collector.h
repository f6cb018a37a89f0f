#pragma once

// Host network collector: every netdev under <sysfs_root>/class/net (byte/packet/error
// statistics, carrier flaps, operstate, carrier, speed, MTU, and what kind of link it is), plus
// node-wide TCP counters from <procfs_root>/net/snmp and <procfs_root>/net/netstat.
//
// Why: the aggregator's TCP-fallback detector compares kernel-stack bytes with RDMA bytes on the
// same node (collectors/netdev/README.md, "The RDMA→TCP fallback signature").
// fabricmon_netdev_info{kind} says which netdevs are RDMA-capable Ethernet (RoCE), IPoIB,
// loopback, virtual or plain Ethernet; counters carry only {netdev} so
// their series stay stable if a netdev's classification changes. Loopback and virtual netdevs
// are exported like the rest (node_exporter does the same) and consumers filter on kind; use
// netdev.netdevs.exclude to stop reading them (e.g. "lo|veth.*|cali.*" on Kubernetes nodes).
//
// Cost model: Discover() opens every attribute and statistics file once and keeps the
// descriptor; Collect() is one pread(2) + parse per value, one directory listing of class/net
// (to notice netdevs that vanish, appear or are renamed) and one read of each /proc/net file.
// `speed` is the exception: reading it calls the driver's get_link_ksettings, which on mlx5 is a
// firmware command (restricted PFs log a kernel error per call; collectors/netdev/README.md,
// "speed is a firmware query on mlx5"), so it
// is read at discovery and then only when carrier_changes or operstate moved since the previous
// cycle — a speed change always comes with a link renegotiation. (A bond's speed can change when
// one slave drops while the bond stays up; it is refreshed at the next discovery.)
//
// Errors (fabricmon_collector_errors_total{collector="netdev"}): a missing, empty, non-numeric or
// unreadable file is counted by kind and never hides the other values. Two EINVALs are the
// kernel's normal answers and are not errors: `carrier` on an administratively down netdev and
// `speed` on a down netdev or one whose driver has no link settings (loopback, bridges); the
// value is then absent. A speed of -1 (SPEED_UNKNOWN: up, no link) is likewise absent. EINVAL
// from any other file (statistics of a netdev being unregistered) counts as "unsupported".
// A netdev that vanished (ENODEV, or gone from class/net) counts as "missing" and makes
// WantsRediscovery() true.
//
// Thread-safety: not thread-safe; the agent calls Discover()/Collect() from one thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/core/collector.h"
#include "collectors/core/collector_errors.h"
#include "collectors/core/collector_registry.h"
#include "collectors/core/device_filter.h"
#include "collectors/core/rdma_netdev_map.h"
#include "collectors/netdev/netdev_semantics.h"
#include "daemon/common/file_reader.h"
#include "fabricmon/v1/config.pb.h"

namespace fabricmon::collectors {

inline constexpr char kNetdevCollectorName[] = "netdev";

class NetdevCollector final : public Collector {
 public:
  // InvalidArgument on a bad filter pattern or an interval below 100 ms.
  static absl::StatusOr<std::unique_ptr<NetdevCollector>> Create(
      const v1::NetdevCollectorConfig& config);

  absl::string_view name() const override { return kNetdevCollectorName; }
  // Adds one v1::Netdev per allowed netdev to `inventory`. NotFound when there is neither a
  // netdev (class/net absent, empty or all filtered out) nor a readable TCP table.
  absl::Status Discover(v1::Inventory& inventory) override;
  // NotFound when Discover() found nothing; otherwise OK (per-file faults are counted).
  absl::Status Collect(SampleSink& sink) override;
  bool WantsRediscovery() const override { return wants_rediscovery_; }
  int64_t interval_ms() const override { return interval_ms_; }
  int64_t rediscover_interval_ms() const override { return rediscover_interval_ms_; }

  // For tests and self-metrics: netdevs being read, and how many times a `speed` file was read
  // since creation (the read that may cost a firmware command).
  size_t netdev_count() const { return netdevs_.size(); }
  uint64_t speed_reads() const { return speed_reads_; }
  const CollectorErrors& errors() const { return errors_; }

 private:
  struct Attribute {
    PreadFile file;
    SeriesDesc series;
  };
  struct Netdev {
    std::string name;
    netdev::NetdevKind kind = netdev::NetdevKind::kOther;
    SeriesDesc info;
    Attribute oper_state;
    Attribute carrier;
    Attribute carrier_changes;
    Attribute carrier_up;
    Attribute carrier_down;
    Attribute mtu;
    Attribute speed;
    std::vector<Attribute> statistics;
    // Last speed read (Mb/s); nullopt when unknown (-1, EINVAL, unreadable).
    std::optional<int64_t> speed_mbps;
    bool speed_stale = false;
    std::optional<uint64_t> last_carrier_changes;
    std::optional<int64_t> last_oper_state;
    bool vanished = false;  // gone from class/net this cycle
  };
  // One exported field of /proc/net/snmp or /proc/net/netstat.
  struct TcpField {
    const netdev::TcpMetricSpec* spec;
    SeriesDesc series;
    int index_hint = -1;  // position in its section last time (steady state: one compare)
  };
  struct TcpSource {
    netdev::ProcNetFile which;
    std::string path;
    PreadFile file;
    std::vector<TcpField> fields;
  };
  // The RDMA port behind a netdev (empty for netdevs of other kinds).
  struct RdmaLink {
    std::string device;
    uint32_t port = 0;
  };

  NetdevCollector(std::string sysfs_root, std::string procfs_root, DeviceFilter filter, bool tcp,
                  int64_t interval_ms, int64_t rediscover_interval_ms);

  // Builds one netdev; nullopt when `name` is not a netdev directory (class/net/bonding_masters).
  std::optional<Netdev> DiscoverNetdev(const std::string& name, const RdmaNetdevMap& rdma_map,
                                       v1::Netdev& inventory);
  Attribute OpenAttribute(const std::string& dir, const char* file, SeriesDesc series);
  void DiscoverTcp();
  // Reads `source` whole into `buffer`. False (error counted) when unreadable.
  bool ReadProcNet(TcpSource& source, std::string& buffer);

  // Reads one attribute into `buffer`. nullopt when the file is not open, on a read error (counted
  // unless it is an expected EINVAL, see above) or when the content is empty (counted).
  std::optional<absl::string_view> ReadAttribute(const Attribute& attribute, bool einval_expected,
                                                 char* buffer, size_t capacity);
  // Attribute holding one kernel integer (%d/%u/%lu); nullopt (counted) when not a number.
  std::optional<uint64_t> ReadInteger(const Attribute& attribute, bool einval_expected);
  // Re-lists class/net and marks netdevs that are gone; true if the set of names changed.
  bool CheckNetdevNames();
  void CollectNetdev(Netdev& netdev, SampleSink& sink);
  void CollectTcp(SampleSink& sink);

  const std::string sysfs_root_;
  const std::string procfs_root_;
  const DeviceFilter filter_;
  const bool tcp_;
  const int64_t interval_ms_;
  const int64_t rediscover_interval_ms_;
  std::vector<Netdev> netdevs_;
  // Allowed class/net entries at discovery (sorted), to notice churn without re-discovering.
  std::vector<std::string> known_names_;
  std::vector<TcpSource> tcp_sources_;
  std::string proc_buffer_;
  CollectorErrors errors_;
  uint64_t speed_reads_ = 0;
  bool wants_rediscovery_ = false;
};

// Registers "netdev" (enabled by default) with `registry`.
void RegisterNetdevCollector(CollectorRegistry& registry);

}  // namespace fabricmon::collectors
