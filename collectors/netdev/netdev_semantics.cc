#include "collectors/netdev/netdev_semantics.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::collectors::netdev {
namespace {

// Kernel Documentation/ABI/testing/sysfs-class-net-statistics, condensed. rx_bytes/tx_bytes are
// what the kernel stack (and drivers' software paths) moved: on RoCE NICs RDMA traffic bypasses
// them (FIELD_NOTES §3.15), which is exactly why they reveal an RDMA→TCP fallback.
struct KnownStatistic {
  absl::string_view file;
  absl::string_view help;
};
constexpr KnownStatistic kKnownStatistics[] = {
    {"collisions", "Collisions seen during packet transmission."},
    {"multicast", "Multicast packets received."},
    {"rx_bytes", "Bytes received by the netdev (kernel stack; excludes RoCE RDMA traffic)."},
    {"rx_compressed", "Compressed packets received (CSLIP, PPP)."},
    {"rx_crc_errors", "Packets received with a CRC (FCS) error."},
    {"rx_dropped",
     "Packets received but dropped before the protocol stack (no buffer, "
     "unknown protocol, filtered)."},
    {"rx_errors", "Bad packets received (sum of the rx_*_errors causes the driver tracks)."},
    {"rx_fifo_errors", "Receive FIFO overruns."},
    {"rx_frame_errors", "Packets received with a frame alignment error."},
    {"rx_length_errors", "Packets received with an invalid length."},
    {"rx_missed_errors", "Packets missed by the host because the NIC ran out of buffers."},
    {"rx_nohandler",
     "Packets received with no protocol handler (e.g. on an inactive bond "
     "slave)."},
    {"rx_over_errors", "Packets received larger than the receive buffer (overruns)."},
    {"rx_packets", "Packets received by the netdev (kernel stack)."},
    {"tx_aborted_errors", "Transmissions aborted (e.g. excessive collisions, link errors)."},
    {"tx_bytes", "Bytes transmitted by the netdev (kernel stack; excludes RoCE RDMA traffic)."},
    {"tx_carrier_errors", "Transmissions failed for lack of carrier."},
    {"tx_compressed", "Compressed packets transmitted (CSLIP, PPP)."},
    {"tx_dropped", "Packets dropped on transmit (no buffer, qdisc or driver drop)."},
    {"tx_errors", "Packets that failed to transmit."},
    {"tx_fifo_errors", "Transmit FIFO errors (underruns)."},
    {"tx_heartbeat_errors", "Transmit heartbeat (SQE test) errors."},
    {"tx_packets", "Packets transmitted by the netdev (kernel stack)."},
    {"tx_window_errors", "Late collisions on transmit (window errors)."},
};

// RFC 2012 (TCP-MIB) for the Tcp section; TcpExt names are the kernel's
// (include/uapi/linux/snmp.h LINUX_MIB_*, net/ipv4/proc.c snmp4_net_list).
constexpr absl::string_view kSegmentsHelp =
    "TCP segments received (in, incl. errors) and sent (out, excl. retransmissions); "
    "/proc/net/snmp "
    "Tcp InSegs/OutSegs. Node-wide, this network namespace.";
constexpr absl::string_view kOpensHelp =
    "TCP connections opened actively (connect, SYN-SENT) and passively (accept, SYN-RCVD); "
    "Tcp ActiveOpens/PassiveOpens.";
constexpr absl::string_view kAbortsHelp =
    "TCP connections aborted by the kernel, by reason: data (unread data at close / data after "
    "close), close, memory, timeout, linger, failed (could not send the RST); TcpExt TCPAbortOn*.";

constexpr TcpMetricSpec kTcpMetrics[] = {
    {ProcNetFile::kSnmp, "Tcp", "InSegs", "fabricmon_tcp_segments_total", "direction", "in",
     MetricType::kCounter, Unit::kPackets, kSegmentsHelp},
    {ProcNetFile::kSnmp, "Tcp", "OutSegs", "fabricmon_tcp_segments_total", "direction", "out",
     MetricType::kCounter, Unit::kPackets, kSegmentsHelp},
    {ProcNetFile::kSnmp, "Tcp", "RetransSegs", "fabricmon_tcp_retransmitted_segments_total", "", "",
     MetricType::kCounter, Unit::kPackets, "TCP segments retransmitted; Tcp RetransSegs."},
    {ProcNetFile::kSnmp, "Tcp", "InErrs", "fabricmon_tcp_receive_errors_total", "", "",
     MetricType::kCounter, Unit::kPackets,
     "TCP segments received in error (bad checksum, header); Tcp InErrs."},
    {ProcNetFile::kSnmp, "Tcp", "InCsumErrors", "fabricmon_tcp_checksum_errors_total", "", "",
     MetricType::kCounter, Unit::kPackets,
     "TCP segments received with a bad checksum; Tcp InCsumErrors."},
    {ProcNetFile::kSnmp, "Tcp", "OutRsts", "fabricmon_tcp_resets_sent_total", "", "",
     MetricType::kCounter, Unit::kPackets, "TCP segments sent with the RST flag; Tcp OutRsts."},
    {ProcNetFile::kSnmp, "Tcp", "EstabResets", "fabricmon_tcp_established_resets_total", "", "",
     MetricType::kCounter, Unit::kNone,
     "TCP connections reset from ESTABLISHED or CLOSE-WAIT; Tcp EstabResets."},
    {ProcNetFile::kSnmp, "Tcp", "AttemptFails", "fabricmon_tcp_attempt_failures_total", "", "",
     MetricType::kCounter, Unit::kNone,
     "TCP connection attempts that failed (SYN-SENT/SYN-RCVD to CLOSED or LISTEN); Tcp "
     "AttemptFails."},
    {ProcNetFile::kSnmp, "Tcp", "ActiveOpens", "fabricmon_tcp_opens_total", "mode", "active",
     MetricType::kCounter, Unit::kNone, kOpensHelp},
    {ProcNetFile::kSnmp, "Tcp", "PassiveOpens", "fabricmon_tcp_opens_total", "mode", "passive",
     MetricType::kCounter, Unit::kNone, kOpensHelp},
    {ProcNetFile::kSnmp, "Tcp", "CurrEstab", "fabricmon_tcp_established_connections", "", "",
     MetricType::kGauge, Unit::kNone,
     "TCP connections currently in ESTABLISHED or CLOSE-WAIT; Tcp CurrEstab."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPTimeouts", "fabricmon_tcp_timeouts_total", "", "",
     MetricType::kCounter, Unit::kNone,
     "TCP retransmission timer (RTO) expirations; TcpExt TCPTimeouts."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPLostRetransmit", "fabricmon_tcp_lost_retransmits_total",
     "", "", MetricType::kCounter, Unit::kPackets,
     "TCP retransmitted segments that were lost again; TcpExt TCPLostRetransmit."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPFastRetrans", "fabricmon_tcp_fast_retransmits_total", "",
     "", MetricType::kCounter, Unit::kPackets,
     "TCP fast retransmissions (loss detected by duplicate ACKs/SACK); TcpExt TCPFastRetrans."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPSynRetrans", "fabricmon_tcp_syn_retransmits_total", "",
     "", MetricType::kCounter, Unit::kPackets,
     "TCP SYN and SYN-ACK retransmissions; TcpExt TCPSynRetrans."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPSpuriousRTOs", "fabricmon_tcp_spurious_rtos_total", "",
     "", MetricType::kCounter, Unit::kNone,
     "TCP RTOs later found spurious by F-RTO; TcpExt TCPSpuriousRTOs."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPRetransFail", "fabricmon_tcp_retransmit_failures_total",
     "", "", MetricType::kCounter, Unit::kPackets,
     "TCP retransmissions the stack failed to send (e.g. no memory); TcpExt TCPRetransFail."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPAbortOnData", "fabricmon_tcp_aborts_total", "reason",
     "data", MetricType::kCounter, Unit::kNone, kAbortsHelp},
    {ProcNetFile::kNetstat, "TcpExt", "TCPAbortOnClose", "fabricmon_tcp_aborts_total", "reason",
     "close", MetricType::kCounter, Unit::kNone, kAbortsHelp},
    {ProcNetFile::kNetstat, "TcpExt", "TCPAbortOnMemory", "fabricmon_tcp_aborts_total", "reason",
     "memory", MetricType::kCounter, Unit::kNone, kAbortsHelp},
    {ProcNetFile::kNetstat, "TcpExt", "TCPAbortOnTimeout", "fabricmon_tcp_aborts_total", "reason",
     "timeout", MetricType::kCounter, Unit::kNone, kAbortsHelp},
    {ProcNetFile::kNetstat, "TcpExt", "TCPAbortOnLinger", "fabricmon_tcp_aborts_total", "reason",
     "linger", MetricType::kCounter, Unit::kNone, kAbortsHelp},
    {ProcNetFile::kNetstat, "TcpExt", "TCPAbortFailed", "fabricmon_tcp_aborts_total", "reason",
     "failed", MetricType::kCounter, Unit::kNone, kAbortsHelp},
    {ProcNetFile::kNetstat, "TcpExt", "ListenOverflows", "fabricmon_tcp_listen_overflows_total", "",
     "", MetricType::kCounter, Unit::kNone,
     "Connections dropped because a listen queue (accept backlog) was full; TcpExt "
     "ListenOverflows."},
    {ProcNetFile::kNetstat, "TcpExt", "ListenDrops", "fabricmon_tcp_listen_drops_total", "", "",
     MetricType::kCounter, Unit::kNone,
     "SYNs to LISTEN sockets dropped for any reason (includes overflows); TcpExt ListenDrops."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPBacklogDrop", "fabricmon_tcp_backlog_drops_total", "", "",
     MetricType::kCounter, Unit::kPackets,
     "Segments dropped because the socket backlog was full; TcpExt TCPBacklogDrop."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPOFOQueue", "fabricmon_tcp_out_of_order_queued_total", "",
     "", MetricType::kCounter, Unit::kPackets,
     "Segments received out of order and queued (reordering or loss on the path); TcpExt "
     "TCPOFOQueue."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPOFODrop", "fabricmon_tcp_out_of_order_drops_total", "",
     "", MetricType::kCounter, Unit::kPackets,
     "Out-of-order segments dropped (receive buffer full); TcpExt TCPOFODrop."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPMemoryPressures", "fabricmon_tcp_memory_pressures_total",
     "", "", MetricType::kCounter, Unit::kNone,
     "Times TCP entered memory pressure (tcp_mem); TcpExt TCPMemoryPressures."},
    {ProcNetFile::kNetstat, "TcpExt", "TCPDeliveredCE", "fabricmon_tcp_delivered_ce_total", "", "",
     MetricType::kCounter, Unit::kPackets,
     "Segments delivered to the peer that it reported as ECN CE-marked (congestion on the path); "
     "TcpExt TCPDeliveredCE."},
};

}  // namespace

absl::string_view NetdevKindName(NetdevKind kind) {
  switch (kind) {
    case NetdevKind::kEthernet:
      return "ethernet";
    case NetdevKind::kRdmaEthernet:
      return "rdma_ethernet";
    case NetdevKind::kIpoib:
      return "ipoib";
    case NetdevKind::kLoopback:
      return "loopback";
    case NetdevKind::kVirtual:
      return "virtual";
    case NetdevKind::kOther:
      break;
  }
  return "other";
}

v1::Netdev::Kind NetdevKindToProto(NetdevKind kind) {
  switch (kind) {
    case NetdevKind::kEthernet:
      return v1::Netdev::KIND_ETHERNET;
    case NetdevKind::kRdmaEthernet:
      return v1::Netdev::KIND_RDMA_ETHERNET;
    case NetdevKind::kIpoib:
      return v1::Netdev::KIND_IPOIB;
    case NetdevKind::kLoopback:
      return v1::Netdev::KIND_LOOPBACK;
    case NetdevKind::kVirtual:
      return v1::Netdev::KIND_VIRTUAL;
    case NetdevKind::kOther:
      break;
  }
  return v1::Netdev::KIND_UNSPECIFIED;
}

NetdevKind ClassifyNetdev(absl::string_view name, const NetdevFacts& facts) {
  if (facts.type == kArphrdLoopback || (!facts.type.has_value() && name == "lo")) {
    return NetdevKind::kLoopback;
  }
  if (facts.type == kArphrdInfiniband) {
    return NetdevKind::kIpoib;
  }
  if (facts.named_by_gid || facts.has_rdma_device) {
    return NetdevKind::kRdmaEthernet;
  }
  if (!facts.has_device) {
    return NetdevKind::kVirtual;
  }
  if (!facts.type.has_value() || facts.type == kArphrdEther) {
    return NetdevKind::kEthernet;
  }
  return NetdevKind::kOther;
}

std::optional<int64_t> ParseOperState(absl::string_view text) {
  // Strings of net/core/net-sysfs.c operstates[], indexed by IF_OPER_*.
  static constexpr absl::string_view kStates[] = {"unknown", "notpresent", "down", "lowerlayerdown",
                                                  "testing", "dormant",    "up"};
  text = absl::StripAsciiWhitespace(text);
  for (size_t i = 0; i < sizeof(kStates) / sizeof(kStates[0]); ++i) {
    if (text == kStates[i]) {
      return static_cast<int64_t>(i);
    }
  }
  return std::nullopt;
}

std::vector<absl::string_view> KnownStatisticFiles() {
  std::vector<absl::string_view> files;
  for (const KnownStatistic& known : kKnownStatistics) {
    files.push_back(known.file);
  }
  return files;
}

StatisticSpec SpecForStatistic(absl::string_view file) {
  StatisticSpec spec;
  const std::string name = SanitizeName(file);
  spec.metric = absl::StrCat("fabricmon_netdev_", name, "_total");
  spec.help = absl::StrCat("Netdev statistics/", file, ".");
  for (const KnownStatistic& known : kKnownStatistics) {
    if (known.file == name) {
      spec.help = absl::StrCat(known.help, " statistics/", file, ".");
      break;
    }
  }
  if (absl::EndsWith(name, "_bytes") || name == "bytes") {
    spec.unit = Unit::kBytes;
  } else if (name == "collisions") {
    spec.unit = Unit::kNone;
  } else {
    spec.unit = Unit::kPackets;  // packets, drops and every *_errors count packets
  }
  return spec;
}

absl::Span<const TcpMetricSpec> CuratedTcpMetrics() { return kTcpMetrics; }

}  // namespace fabricmon::collectors::netdev
