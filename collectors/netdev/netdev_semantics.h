#pragma once

// Pure mapping from /sys/class/net and /proc/net contents to fabricmon series semantics: netdev
// kinds, operstate codes, statistics file → metric, and the curated TCP counter set. Hardware and
// kernel facts are cited at the line that encodes them. No I/O; thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectors/core/sample.h"
#include "collectors/core/sysfs_value.h"  // SanitizeName
#include "fabricmon/v1/inventory.pb.h"

namespace fabricmon::collectors::netdev {

// ARPHRD_* link types (include/uapi/linux/if_arp.h) read from /sys/class/net/<if>/type.
inline constexpr int kArphrdEther = 1;
inline constexpr int kArphrdInfiniband = 32;
inline constexpr int kArphrdLoopback = 772;

// What carries a netdev's bytes. The aggregator joins fabricmon_netdev_info{kind} onto the byte
// counters to tell kernel-stack bytes on RDMA-capable NICs (possible RDMA→TCP fallback) from
// bytes on NICs that never carry RDMA.
enum class NetdevKind : uint8_t {
  kOther,         // a bus device that is neither Ethernet nor InfiniBand (e.g. raw-IP WWAN)
  kEthernet,      // Ethernet with a bus device and no RDMA device
  kRdmaEthernet,  // RDMA-capable Ethernet (RoCE, iWARP): an RDMA device sits on it
  kIpoib,         // IP over InfiniBand (ARPHRD_INFINIBAND)
  kLoopback,      // ARPHRD_LOOPBACK
  kVirtual,       // no bus device: veth, bridge, bond, vlan, tun, dummy, macvlan...
};

// Label value: "other", "ethernet", "rdma_ethernet", "ipoib", "loopback", "virtual".
absl::string_view NetdevKindName(NetdevKind kind);
// Inventory enum; kOther maps to KIND_UNSPECIFIED (the wire enum has no "other").
v1::Netdev::Kind NetdevKindToProto(NetdevKind kind);

// Facts about one netdev, gathered by the collector from sysfs.
struct NetdevFacts {
  std::optional<int> type;       // ARPHRD_* from `type`; nullopt when unreadable
  bool has_device = false;       // a `device` entry exists (symlink to the bus device)
  bool has_rdma_device = false;  // device/infiniband/<ibdev> exists (what ibdev2netdev uses)
  bool named_by_gid = false;     // a class/infiniband/*/ports/*/gid_attrs/ndevs/* names it
};

// Classification, first match wins:
//   1. type 772, or type unreadable and name "lo"          → loopback
//   2. type 32 (IPoIB, incl. pkey children)                → ipoib. Checked before the RDMA
//      rules: an IPoIB netdev's device/ also holds infiniband/.
//   3. named by a RoCE GID, or device/infiniband/ exists   → rdma_ethernet. GID naming also
//      catches netdevs without a bus device of their own (RoCE LAG bond, VLAN on a RoCE port).
//   4. no `device` entry                                   → virtual
//   5. type 1 or unreadable                                → ethernet
//   6. anything else                                       → other
NetdevKind ClassifyNetdev(absl::string_view name, const NetdevFacts& facts);

// operstate text → IF_OPER_* code (RFC 2863; include/uapi/linux/if.h): unknown 0, notpresent 1,
// down 2, lowerlayerdown 3, testing 4, dormant 5, up 6. nullopt for any other text.
std::optional<int64_t> ParseOperState(absl::string_view text);

// How statistics/<file> is exported: fabricmon_netdev_<file>_total, base unit from the name.
struct StatisticSpec {
  std::string metric;
  std::string help;
  Unit unit = Unit::kPackets;
};
StatisticSpec SpecForStatistic(absl::string_view file);
// The statistics/ files with a documented meaning (their own HELP).
std::vector<absl::string_view> KnownStatisticFiles();

// Which /proc/net file a TCP counter comes from.
enum class ProcNetFile : uint8_t { kSnmp, kNetstat };

// One field of the curated TCP set (see CuratedTcpMetrics()).
struct TcpMetricSpec {
  ProcNetFile file;
  absl::string_view section;     // "Tcp" or "TcpExt"
  absl::string_view key;         // kernel field name, e.g. "RetransSegs"
  absl::string_view metric;      // family name
  absl::string_view label_name;  // "" when the family has no label
  absl::string_view label_value;
  MetricType type;  // kCounter, or kGauge for CurrEstab
  Unit unit;
  absl::string_view help;
};

// The exported subset of /proc/net/snmp "Tcp" and /proc/net/netstat "TcpExt". All counters are
// unsigned long in the kernel (snmp_seq_show_tcp_udp / netstat_seq_show print %lu): 64-bit and
// wrapping on LP64 kernels. Fields absent from the running kernel are simply not exported.
absl::Span<const TcpMetricSpec> CuratedTcpMetrics();

}  // namespace fabricmon::collectors::netdev
