#include "collectors/ethtool/mlx5_stat_specs.h"

#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::collectors::ethtool {
namespace {

// --- Family names and help texts (one place, so every key that feeds a family agrees). ---

constexpr char kPauseFrames[] = "fabricmon_roce_pfc_pause_frames_total";
constexpr char kPauseFramesHelp[] =
    "Pause frames per priority (PFC, priority 0-7) or IEEE 802.3x link pause "
    "(priority=\"global\"). "
    "direction=rx: the peer paused us (look downstream); tx: we paused the peer (look at our RX "
    "buffers, PCIe, host). ethtool {rx,tx}_prio<p>_pause, {rx,tx}_global_pause.";
constexpr char kPauseDuration[] = "fabricmon_roce_pfc_pause_duration_seconds_total";
constexpr char kPauseDurationHelp[] =
    "Time paused, in seconds (driver counts microseconds); rate() is the fraction of time "
    "paused. Labels as fabricmon_roce_pfc_pause_frames_total. ethtool "
    "{rx,tx}_prio<p>_pause_duration, {rx,tx}_global_pause_duration.";
constexpr char kPauseTransitions[] = "fabricmon_roce_pfc_pause_transitions_total";
constexpr char kPauseTransitionsHelp[] =
    "XOFF to XON transitions of received pause (RX only in mlx5). ethtool "
    "rx_prio<p>_pause_transition, rx_global_pause_transition.";
constexpr char kStormWarning[] = "fabricmon_roce_pause_storm_warning_events_total";
constexpr char kStormWarningHelp[] =
    "The device kept sending pause past the minor stall watermark. ethtool "
    "tx_pause_storm_warning_events.";
constexpr char kStormError[] = "fabricmon_roce_pause_storm_error_events_total";
constexpr char kStormErrorHelp[] =
    "Pause stall reached the critical watermark: pause TX disabled, drops possible. ethtool "
    "tx_pause_storm_error_events.";
constexpr char kPauseCtrl[] = "fabricmon_roce_phy_pause_ctrl_frames_total";
constexpr char kPauseCtrlHelp[] =
    "Link-layer pause MAC control frames on the physical port (PFC and 802.3x). ethtool "
    "{rx,tx}_pause_ctrl_phy (older kernels: pause_ctrl_{rx,tx}).";

constexpr char kPrioBytes[] = "fabricmon_roce_prio_bytes_total";
constexpr char kPrioBytesHelp[] =
    "Bytes per priority on the physical port. ethtool {rx,tx}_prio<p>_bytes.";
constexpr char kPrioPackets[] = "fabricmon_roce_prio_packets_total";
constexpr char kPrioPacketsHelp[] =
    "Packets per priority on the physical port. ethtool {rx,tx}_prio<p>_packets.";
constexpr char kPrioDiscards[] = "fabricmon_roce_rx_prio_discards_total";
constexpr char kPrioDiscardsHelp[] =
    "Received packets of a priority discarded by the device for lack of receive buffer. ethtool "
    "rx_prio<p>_discards.";
constexpr char kPrioBufDiscards[] = "fabricmon_roce_rx_prio_buffer_discards_total";
constexpr char kPrioBufDiscardsHelp[] =
    "Received unicast packets of a priority dropped for lack of per-host receive buffers. "
    "ethtool rx_prio<p>_buf_discard.";
constexpr char kPrioCongDiscards[] = "fabricmon_roce_rx_prio_congestion_discards_total";
constexpr char kPrioCongDiscardsHelp[] =
    "Received packets of a priority dropped because of congestion. ethtool "
    "rx_prio<p>_cong_discard.";
constexpr char kPrioMarked[] = "fabricmon_roce_rx_prio_ecn_marked_packets_total";
constexpr char kPrioMarkedHelp[] =
    "Received packets of a priority ECN-marked by the device. ethtool rx_prio<p>_marked.";

constexpr char kKernelBytes[] = "fabricmon_roce_kernel_bytes_total";
constexpr char kKernelBytesHelp[] =
    "Bytes through the netdev's software path (kernel stack, not RDMA). ethtool {rx,tx}_bytes.";
constexpr char kKernelPackets[] = "fabricmon_roce_kernel_packets_total";
constexpr char kKernelPacketsHelp[] =
    "Packets through the netdev's software path (kernel stack, not RDMA). ethtool "
    "{rx,tx}_packets.";
constexpr char kPhyBytes[] = "fabricmon_roce_phy_bytes_total";
constexpr char kPhyBytesHelp[] =
    "Bytes on the wire of the physical port: kernel, RDMA and other functions' traffic, with "
    "headers and FCS. ethtool {rx,tx}_bytes_phy (older kernels: octets_received, octets_tx).";
constexpr char kPhyPackets[] = "fabricmon_roce_phy_packets_total";
constexpr char kPhyPacketsHelp[] =
    "Packets on the wire of the physical port. ethtool {rx,tx}_packets_phy (older kernels: "
    "frames_rx, frames_tx).";
constexpr char kRdmaBytes[] = "fabricmon_roce_rdma_bytes_total";
constexpr char kRdmaBytesHelp[] =
    "RDMA (RoCE, UD, RC) bytes through this function's vport, by cast. ethtool "
    "{rx,tx}_vport_rdma_{unicast,multicast}_bytes.";
constexpr char kRdmaPackets[] = "fabricmon_roce_rdma_packets_total";
constexpr char kRdmaPacketsHelp[] =
    "RDMA (RoCE, UD, RC) packets through this function's vport, by cast. ethtool "
    "{rx,tx}_vport_rdma_{unicast,multicast}_packets.";
constexpr char kVportBytes[] = "fabricmon_roce_vport_bytes_total";
constexpr char kVportBytesHelp[] =
    "Non-RDMA bytes through this function's vport (kernel, raw Ethernet, DPDK), by cast. "
    "ethtool {rx,tx}_vport_{unicast,multicast,broadcast}_bytes (older kernels: "
    "{rx,tx}_{unicast,multicast,broadcast}_bytes).";
constexpr char kVportPackets[] = "fabricmon_roce_vport_packets_total";
constexpr char kVportPacketsHelp[] =
    "Non-RDMA packets through this function's vport, by cast. ethtool "
    "{rx,tx}_vport_{unicast,multicast,broadcast}_packets.";

constexpr char kPhyDiscards[] = "fabricmon_roce_phy_discards_total";
constexpr char kPhyDiscardsHelp[] =
    "Packets dropped by the physical port: rx for lack of buffers, tx for head-of-line blocking "
    "or pause. ethtool {rx,tx}_discards_phy.";
constexpr char kOutOfBuffer[] = "fabricmon_roce_rx_out_of_buffer_total";
constexpr char kOutOfBufferHelp[] =
    "Packets dropped because a receive queue had no software buffers (host too slow). ethtool "
    "rx_out_of_buffer.";
constexpr char kBufferThreshold[] = "fabricmon_roce_rx_buffer_passed_threshold_events_total";
constexpr char kBufferThresholdHelp[] =
    "Times the port's receive buffer passed its fill threshold (85%). ethtool "
    "rx_buffer_passed_thres_phy.";

constexpr char kLinkDown[] = "fabricmon_roce_link_down_events_total";
constexpr char kLinkDownHelp[] =
    "Link operational state changes to down (flaps; 32-bit, wraps). ethtool link_down_events_phy.";
constexpr char kRecovery[] = "fabricmon_roce_phy_recovery_events_total";
constexpr char kRecoveryHelp[] =
    "Successful physical-layer recovery events. ethtool total_success_recovery_phy.";
// Bit counts keep the unit bit (the BER needs bits, not bytes); the names say "bit" because
// promtool's lint reads a "bits" token as "use bytes".
constexpr char kRxBits[] = "fabricmon_roce_phy_rx_bit_total";
constexpr char kRxBitsHelp[] =
    "Number of bits received on the physical port (BER denominator). ethtool rx_bits_phy.";
constexpr char kCorrectedBits[] = "fabricmon_roce_phy_rx_corrected_bit_total";
constexpr char kCorrectedBitsHelp[] =
    "Number of bits corrected by FEC on the physical port; rate / rate of "
    "fabricmon_roce_phy_rx_bit_total = pre-FEC BER. ethtool rx_corrected_bits_phy.";
constexpr char kPcsSymbol[] = "fabricmon_roce_phy_rx_pcs_symbol_errors_total";
constexpr char kPcsSymbolHelp[] =
    "PCS symbol errors on the physical port. ethtool rx_pcs_symbol_err_phy.";
constexpr char kLaneErrors[] = "fabricmon_roce_phy_rx_lane_errors_total";
constexpr char kLaneErrorsHelp[] = "Errors per physical lane. ethtool rx_err_lane_<l>_phy.";
constexpr char kCrc[] = "fabricmon_roce_phy_rx_crc_errors_total";
constexpr char kCrcHelp[] =
    "Received frames with a bad FCS on the physical port. ethtool rx_crc_errors_phy (older "
    "kernels: check_seq_err).";
constexpr char kSymbol[] = "fabricmon_roce_phy_rx_symbol_errors_total";
constexpr char kSymbolHelp[] =
    "Symbol errors during carrier on the physical port. ethtool rx_symbol_err_phy (older "
    "kernels: symbol_err).";

constexpr char kPciIntegrity[] = "fabricmon_roce_pcie_signal_integrity_events_total";
constexpr char kPciIntegrityHelp[] =
    "PCIe physical-layer recovery transitions (signal integrity). ethtool "
    "{rx,tx}_pci_signal_integrity.";
constexpr char kPciStalled[] = "fabricmon_roce_pcie_outbound_stalled_ratio";
constexpr char kPciStalledHelp[] =
    "Fraction of the last second the device's outbound PCIe reads/writes stalled for lack of "
    "credits (gauge; the driver reports percent). ethtool outbound_pci_stalled_{rd,wr}.";
constexpr char kPciStalledEvents[] = "fabricmon_roce_pcie_outbound_stalled_events_total";
constexpr char kPciStalledEventsHelp[] =
    "Seconds in which outbound PCIe reads/writes stalled. ethtool "
    "outbound_pci_stalled_{rd,wr}_events.";
constexpr char kPciOverflow[] = "fabricmon_roce_pcie_outbound_buffer_overflow_total";
constexpr char kPciOverflowHelp[] =
    "Packets dropped for PCIe outbound buffer overflow. ethtool outbound_pci_buffer_overflow.";
constexpr char kModule[] = "fabricmon_roce_module_events_total";
constexpr char kModuleHelp[] =
    "Transceiver module events: unplug, bus_stuck, high_temp, bad_shorted. ethtool module_<event>.";

StatSpec Counter(const char* metric, const char* help, Unit unit, Labels labels,
                 uint8_t width_bits = 64, double scale = 1.0) {
  StatSpec spec;
  spec.metric = metric;
  spec.help = help;
  spec.type = MetricType::kCounter;
  spec.unit = unit;
  spec.width_bits = width_bits;
  spec.scale = scale;
  spec.labels = std::move(labels);
  return spec;
}

StatSpec Gauge(const char* metric, const char* help, Unit unit, double scale, Labels labels) {
  StatSpec spec;
  spec.metric = metric;
  spec.help = help;
  spec.type = MetricType::kGauge;
  spec.unit = unit;
  spec.width_bits = 0;
  spec.scale = scale;
  spec.labels = std::move(labels);
  return spec;
}

Labels Dir(const char* direction) { return {{"direction", direction}}; }

using ExactTable = absl::flat_hash_map<std::string, StatSpec>;

// `alias` exports exactly like `existing` (copied first: inserting may rehash the table).
void Alias(ExactTable& t, const std::string& alias, const std::string& existing) {
  StatSpec spec = t.at(existing);
  t[alias] = std::move(spec);
}

// Keys without a priority or lane number, including the pre-4.9 mlx5 spellings whose meaning the
// counter group makes certain (IEEE 802.3 group: a_frames_*, a_octets_*, FCS, symbol and pause
// MAC-control counters; vport group: {rx,tx}_{unicast,multicast,broadcast}_*). The ubuntu16.04
// capture confirms it: octets_tx - tx_bytes = 4 B FCS × frames_tx, and
// rx_{unicast,multicast,broadcast}_packets add up to frames_rx.
ExactTable BuildExactTable() {
  ExactTable t;
  for (const char* d : {"rx", "tx"}) {
    const std::string p(d);
    // Three byte accountings that must not be confused (README.md, "Three byte accountings").
    t[p + "_bytes"] = Counter(kKernelBytes, kKernelBytesHelp, Unit::kBytes, Dir(d));
    t[p + "_packets"] = Counter(kKernelPackets, kKernelPacketsHelp, Unit::kPackets, Dir(d));
    t[p + "_bytes_phy"] = Counter(kPhyBytes, kPhyBytesHelp, Unit::kBytes, Dir(d));
    t[p + "_packets_phy"] = Counter(kPhyPackets, kPhyPacketsHelp, Unit::kPackets, Dir(d));
    for (const char* cast : {"unicast", "multicast"}) {
      Labels labels = {{"direction", d}, {"cast", cast}};
      t[absl::StrCat(p, "_vport_rdma_", cast, "_bytes")] =
          Counter(kRdmaBytes, kRdmaBytesHelp, Unit::kBytes, labels);
      t[absl::StrCat(p, "_vport_rdma_", cast, "_packets")] =
          Counter(kRdmaPackets, kRdmaPacketsHelp, Unit::kPackets, labels);
    }
    for (const char* cast : {"unicast", "multicast", "broadcast"}) {
      Labels labels = {{"direction", d}, {"cast", cast}};
      StatSpec bytes = Counter(kVportBytes, kVportBytesHelp, Unit::kBytes, labels);
      StatSpec packets = Counter(kVportPackets, kVportPacketsHelp, Unit::kPackets, labels);
      t[absl::StrCat(p, "_vport_", cast, "_bytes")] = bytes;
      t[absl::StrCat(p, "_vport_", cast, "_packets")] = packets;
      t[absl::StrCat(p, "_", cast, "_bytes")] = bytes;      // pre-4.9 vport group
      t[absl::StrCat(p, "_", cast, "_packets")] = packets;  // pre-4.9 vport group
    }
    // *_global_pause_duration is in µs → seconds (README.md, "Pause duration is in microseconds").
    Labels global = {{"direction", d}, {"priority", "global"}};
    t[p + "_global_pause"] = Counter(kPauseFrames, kPauseFramesHelp, Unit::kPackets, global);
    t[p + "_global_pause_duration"] =
        Counter(kPauseDuration, kPauseDurationHelp, Unit::kSeconds, global, 64, 1e-6);
    t[p + "_pause_ctrl_phy"] = Counter(kPauseCtrl, kPauseCtrlHelp, Unit::kPackets, Dir(d));
    t[p + "_discards_phy"] = Counter(kPhyDiscards, kPhyDiscardsHelp, Unit::kPackets, Dir(d));
    t[p + "_pci_signal_integrity"] = Counter(kPciIntegrity, kPciIntegrityHelp, Unit::kNone, Dir(d));
  }
  // The transition counter exists for RX only (README.md, "Pause direction").
  t["rx_global_pause_transition"] = Counter(kPauseTransitions, kPauseTransitionsHelp, Unit::kNone,
                                            {{"direction", "rx"}, {"priority", "global"}});
  // Pre-4.9 IEEE 802.3 group names.
  Alias(t, "octets_received", "rx_bytes_phy");
  Alias(t, "octets_tx", "tx_bytes_phy");
  Alias(t, "frames_rx", "rx_packets_phy");
  Alias(t, "frames_tx", "tx_packets_phy");
  Alias(t, "pause_ctrl_rx", "rx_pause_ctrl_phy");
  Alias(t, "pause_ctrl_tx", "tx_pause_ctrl_phy");

  // warning = minor watermark; error = critical, pause TX disabled (README.md, "Pause storms").
  t["tx_pause_storm_warning_events"] = Counter(kStormWarning, kStormWarningHelp, Unit::kNone, {});
  t["tx_pause_storm_error_events"] = Counter(kStormError, kStormErrorHelp, Unit::kNone, {});

  t["rx_out_of_buffer"] = Counter(kOutOfBuffer, kOutOfBufferHelp, Unit::kPackets, {});
  t["rx_buffer_passed_thres_phy"] =
      Counter(kBufferThreshold, kBufferThresholdHelp, Unit::kNone, {});

  // The one 32-bit mlx5 ethtool counter (README.md, "link_down_events_phy is 32-bit").
  t["link_down_events_phy"] = Counter(kLinkDown, kLinkDownHelp, Unit::kNone, {}, 32);
  t["total_success_recovery_phy"] = Counter(kRecovery, kRecoveryHelp, Unit::kNone, {});
  t["rx_bits_phy"] = Counter(kRxBits, kRxBitsHelp, Unit::kBits, {});
  t["rx_corrected_bits_phy"] = Counter(kCorrectedBits, kCorrectedBitsHelp, Unit::kBits, {});
  t["rx_pcs_symbol_err_phy"] = Counter(kPcsSymbol, kPcsSymbolHelp, Unit::kNone, {});
  t["rx_crc_errors_phy"] = Counter(kCrc, kCrcHelp, Unit::kPackets, {});
  Alias(t, "check_seq_err", "rx_crc_errors_phy");
  t["rx_symbol_err_phy"] = Counter(kSymbol, kSymbolHelp, Unit::kNone, {});
  Alias(t, "symbol_err", "rx_symbol_err_phy");

  // outbound_pci_stalled_{rd,wr} are percent of the last second — gauges (a generic "everything
  // is a counter" dump mis-types them; README.md, "PCIe stall keys are gauges"). Percent × 0.01 →
  // ratio.
  t["outbound_pci_stalled_rd"] =
      Gauge(kPciStalled, kPciStalledHelp, Unit::kRatio, 0.01, {{"operation", "read"}});
  t["outbound_pci_stalled_wr"] =
      Gauge(kPciStalled, kPciStalledHelp, Unit::kRatio, 0.01, {{"operation", "write"}});
  t["outbound_pci_stalled_rd_events"] =
      Counter(kPciStalledEvents, kPciStalledEventsHelp, Unit::kNone, {{"operation", "read"}});
  t["outbound_pci_stalled_wr_events"] =
      Counter(kPciStalledEvents, kPciStalledEventsHelp, Unit::kNone, {{"operation", "write"}});
  t["outbound_pci_buffer_overflow"] = Counter(kPciOverflow, kPciOverflowHelp, Unit::kPackets, {});

  for (const char* event : {"unplug", "bus_stuck", "high_temp", "bad_shorted"}) {
    t[absl::StrCat("module_", event)] =
        Counter(kModule, kModuleHelp, Unit::kNone, {{"event", event}});
  }
  return t;
}

const ExactTable& Exact() {
  static const ExactTable* table = new ExactTable(BuildExactTable());
  return *table;
}

// "rx_prio3_pause_duration" → direction "rx", priority '3', rest "pause_duration".
bool SplitPriorityKey(absl::string_view key, absl::string_view* direction, char* priority,
                      absl::string_view* rest) {
  if (key.size() < 9 || key.substr(2, 5) != "_prio" || key[8] != '_') {
    return false;
  }
  const absl::string_view dir = key.substr(0, 2);
  if (dir != "rx" && dir != "tx") {
    return false;
  }
  // IEEE 802.1p priorities are 0-7; anything else is not a priority counter.
  if (key[7] < '0' || key[7] > '7') {
    return false;
  }
  *direction = dir;
  *priority = key[7];
  *rest = key.substr(9);
  return true;
}

std::optional<StatSpec> PrioritySpec(absl::string_view key) {
  absl::string_view d;
  char p = 0;
  absl::string_view rest;
  if (!SplitPriorityKey(key, &d, &p, &rest)) {
    return std::nullopt;
  }
  const std::string direction(d);
  const std::string priority(1, p);
  const Labels dir_prio = {{"direction", direction}, {"priority", priority}};
  const Labels prio = {{"priority", priority}};
  // Per-priority pause stats exist only for PFC-enabled priorities (README.md, "The key set
  // depends on configuration").
  if (rest == "pause") {
    return Counter(kPauseFrames, kPauseFramesHelp, Unit::kPackets, dir_prio);
  }
  if (rest == "pause_duration") {
    // Microseconds → seconds, so rate() = fraction of time paused (README.md, "Pause duration
    // is in microseconds").
    return Counter(kPauseDuration, kPauseDurationHelp, Unit::kSeconds, dir_prio, 64, 1e-6);
  }
  if (rest == "bytes") {
    return Counter(kPrioBytes, kPrioBytesHelp, Unit::kBytes, dir_prio);
  }
  if (rest == "packets") {
    return Counter(kPrioPackets, kPrioPacketsHelp, Unit::kPackets, dir_prio);
  }
  if (d != "rx") {
    return std::nullopt;
  }
  if (rest == "pause_transition") {
    return Counter(kPauseTransitions, kPauseTransitionsHelp, Unit::kNone, dir_prio);
  }
  // Four different per-priority RX drop/mark causes (README.md, "Per-priority receive drops"); kept
  // apart because they are not known to be disjoint.
  if (rest == "discards") {
    return Counter(kPrioDiscards, kPrioDiscardsHelp, Unit::kPackets, prio);
  }
  if (rest == "buf_discard") {
    return Counter(kPrioBufDiscards, kPrioBufDiscardsHelp, Unit::kPackets, prio);
  }
  if (rest == "cong_discard") {
    return Counter(kPrioCongDiscards, kPrioCongDiscardsHelp, Unit::kPackets, prio);
  }
  if (rest == "marked") {
    return Counter(kPrioMarked, kPrioMarkedHelp, Unit::kPackets, prio);
  }
  return std::nullopt;
}

// "rx_err_lane_2_phy" → lane "2".
std::optional<StatSpec> LaneSpec(absl::string_view key) {
  constexpr absl::string_view kPrefix = "rx_err_lane_";
  constexpr absl::string_view kSuffix = "_phy";
  if (!absl::StartsWith(key, kPrefix) || !absl::EndsWith(key, kSuffix)) {
    return std::nullopt;
  }
  absl::string_view lane = key.substr(kPrefix.size(), key.size() - kPrefix.size() - kSuffix.size());
  if (lane.size() != 1 || lane[0] < '0' || lane[0] > '7') {
    return std::nullopt;
  }
  return Counter(kLaneErrors, kLaneErrorsHelp, Unit::kNone, {{"lane", std::string(lane)}});
}

}  // namespace

bool IsMlx5Driver(absl::string_view driver) { return absl::StartsWith(driver, "mlx5"); }

std::optional<StatSpec> Mlx5StatSpec(absl::string_view key) {
  const ExactTable& exact = Exact();
  auto it = exact.find(key);
  if (it != exact.end()) {
    return it->second;
  }
  if (std::optional<StatSpec> spec = PrioritySpec(key)) {
    return spec;
  }
  return LaneSpec(key);
}

std::vector<std::string> Mlx5MetricFamilies() {
  std::set<std::string> names;
  for (const auto& [key, spec] : Exact()) {
    names.insert(spec.metric);
  }
  for (const char* name :
       {kPauseFrames, kPauseDuration, kPauseTransitions, kPrioBytes, kPrioPackets, kPrioDiscards,
        kPrioBufDiscards, kPrioCongDiscards, kPrioMarked, kLaneErrors}) {
    names.insert(name);
  }
  return std::vector<std::string>(names.begin(), names.end());
}

std::vector<StatSpec> Mlx5FamilySpecs() {
  std::vector<StatSpec> specs;
  for (const auto& [key, spec] : Exact()) {
    specs.push_back(spec);
  }
  // One key per pattern family (PrioritySpec, LaneSpec).
  for (const char* key :
       {"rx_prio0_pause", "rx_prio0_pause_duration", "rx_prio0_pause_transition", "rx_prio0_bytes",
        "rx_prio0_packets", "rx_prio0_discards", "rx_prio0_buf_discard", "rx_prio0_cong_discard",
        "rx_prio0_marked", "rx_err_lane_0_phy"}) {
    if (std::optional<StatSpec> spec = Mlx5StatSpec(key)) {
      specs.push_back(*std::move(spec));
    }
  }
  return specs;
}

}  // namespace fabricmon::collectors::ethtool
