// The PMA counter table, apart from pma.cc so that it carries no libibmad dependency: the
// aggregator's metric catalogue is built from it (ib_fabric_families.h).
#include "collectors/ib_fabric/pma.h"

namespace fabricmon::collectors::ib_fabric {
namespace {

// Names and help follow ib_sysfs (collectors/ib_sysfs/ib_counters_parser.cc) so that a metric
// means the same thing whichever collector produced it. Widths: IBA 1.4 Table 247 (PortCounters);
// libibmad fields.c agrees (FIELD_NOTES §3.5).
constexpr PmaCounterSpec kSpecs[] = {
    {PmaCounter::kSymbolError, "fabricmon_ib_symbol_error_total",
     "Minor link errors detected on one or more physical lanes.", Unit::kNone, 1.0, 16},
    {PmaCounter::kLinkErrorRecovery, "fabricmon_ib_link_error_recovery_total",
     "Successful link error recoveries (the link self-healed); 8-bit, saturates at 255.",
     Unit::kNone, 1.0, 8},
    {PmaCounter::kLinkDowned, "fabricmon_ib_link_downed_total",
     "Failed link error recoveries that took the link down; 8-bit, saturates at 255.", Unit::kNone,
     1.0, 8},
    {PmaCounter::kRcvErrors, "fabricmon_ib_port_rcv_errors_total",
     "Packets with errors received on the port.", Unit::kNone, 1.0, 16},
    {PmaCounter::kRcvRemotePhysicalErrors, "fabricmon_ib_port_rcv_remote_physical_errors_total",
     "Packets received marked with EBP (bad packet).", Unit::kNone, 1.0, 16},
    {PmaCounter::kRcvSwitchRelayErrors, "fabricmon_ib_port_rcv_switch_relay_errors_total",
     "Packets a switch could not forward.", Unit::kNone, 1.0, 16},
    {PmaCounter::kXmitDiscards, "fabricmon_ib_port_xmit_discards_total",
     "Outbound packets discarded (port down or congested).", Unit::kNone, 1.0, 16},
    {PmaCounter::kXmitConstraintErrors, "fabricmon_ib_port_xmit_constraint_errors_total",
     "Outbound packets not sent due to constraints.", Unit::kNone, 1.0, 8},
    {PmaCounter::kRcvConstraintErrors, "fabricmon_ib_port_rcv_constraint_errors_total",
     "Inbound packets discarded due to constraints.", Unit::kNone, 1.0, 8},
    {PmaCounter::kLocalLinkIntegrityErrors, "fabricmon_ib_local_link_integrity_errors_total",
     "Times the local physical error threshold was exceeded.", Unit::kNone, 1.0, 4},
    {PmaCounter::kExcessiveBufferOverrunErrors,
     "fabricmon_ib_excessive_buffer_overrun_errors_total",
     "Consecutive flow-control buffer overrun periods.", Unit::kNone, 1.0, 4},
    {PmaCounter::kVl15Dropped, "fabricmon_ib_vl15_dropped_total",
     "Incoming VL15 (subnet management) packets dropped.", Unit::kNone, 1.0, 16},
    // Read only from the additional extended counters: libibmad 44 places PortCounters'
    // IB_PC_QP1_DROP_F on the same bytes (22-23) as VL15Dropped, so its 16-bit value cannot be
    // told apart (checked with mad_set_field; see pma_test.cc).
    {PmaCounter::kQp1Dropped, "fabricmon_ib_qp1_dropped_total",
     "Incoming QP1 (general services) packets dropped.", Unit::kNone, 1.0, 64},
    {PmaCounter::kXmitWait, "fabricmon_ib_port_xmit_wait_total",
     "Ticks during which the port had data to send but no flow-control credits (congestion "
     "back-pressure). Tick length is device-specific.",
     Unit::kTicks, 1.0, 32},
    // PortXmitData/PortRcvData count octets divided by 4 (IBA 16.1.3.5; perfquery(8)): bytes =
    // value × 4, never × lanes (FIELD_NOTES §3.1).
    {PmaCounter::kXmitData, "fabricmon_ib_port_xmit_data_bytes_total",
     "Bytes transmitted on the port (data words × 4).", Unit::kBytes, 4.0, 32},
    {PmaCounter::kRcvData, "fabricmon_ib_port_rcv_data_bytes_total",
     "Bytes received on the port (data words × 4).", Unit::kBytes, 4.0, 32},
    {PmaCounter::kXmitPackets, "fabricmon_ib_port_xmit_packets_total",
     "Packets counted by port_xmit_packets.", Unit::kPackets, 1.0, 32},
    {PmaCounter::kRcvPackets, "fabricmon_ib_port_rcv_packets_total",
     "Packets counted by port_rcv_packets.", Unit::kPackets, 1.0, 32},
    {PmaCounter::kUnicastXmitPackets, "fabricmon_ib_unicast_xmit_packets_total",
     "Packets counted by unicast_xmit_packets.", Unit::kPackets, 1.0, 64},
    {PmaCounter::kUnicastRcvPackets, "fabricmon_ib_unicast_rcv_packets_total",
     "Packets counted by unicast_rcv_packets.", Unit::kPackets, 1.0, 64},
    {PmaCounter::kMulticastXmitPackets, "fabricmon_ib_multicast_xmit_packets_total",
     "Packets counted by multicast_xmit_packets.", Unit::kPackets, 1.0, 64},
    {PmaCounter::kMulticastRcvPackets, "fabricmon_ib_multicast_rcv_packets_total",
     "Packets counted by multicast_rcv_packets.", Unit::kPackets, 1.0, 64},
};
static_assert(sizeof(kSpecs) / sizeof(kSpecs[0]) == kPmaCounterCount, "one spec per counter");

}  // namespace

const PmaCounterSpec& SpecOf(PmaCounter counter) { return kSpecs[static_cast<size_t>(counter)]; }

}  // namespace fabricmon::collectors::ib_fabric
