#include "collectors/ib_fabric/pma.h"

#include <infiniband/mad.h>

namespace fabricmon::collectors::ib_fabric {
namespace {

// libibmad's decoders take a mutable buffer but only read it.
uint32_t Field32(const uint8_t* data, MAD_FIELDS field) {
  return mad_get_field(const_cast<uint8_t*>(data), 0, field);
}
uint64_t Field64(const uint8_t* data, MAD_FIELDS field) {
  return mad_get_field64(const_cast<uint8_t*>(data), 0, field);
}

// Names and help follow ib_sysfs (collectors/ib_sysfs/ib_counters_parser.cc) so that a metric
// means the same thing whichever collector produced it. Widths: IBA 1.4 Table 247 (PortCounters);
// libibmad fields.c agrees (collectors/ib_sysfs/README.md, "Counter widths and saturation").
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
    // value × 4, never × lanes (collectors/ib_sysfs/README.md, "Data counters count 4-byte words").
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

bool IsTraffic(PmaCounter counter) {
  return counter == PmaCounter::kXmitData || counter == PmaCounter::kRcvData ||
         counter == PmaCounter::kXmitPackets || counter == PmaCounter::kRcvPackets;
}

bool IsCast(PmaCounter counter) {
  return counter == PmaCounter::kUnicastXmitPackets || counter == PmaCounter::kUnicastRcvPackets ||
         counter == PmaCounter::kMulticastXmitPackets ||
         counter == PmaCounter::kMulticastRcvPackets;
}

struct FieldPair {
  PmaCounter counter;
  MAD_FIELDS legacy;    // PortCounters field (IB_PC_*)
  MAD_FIELDS extended;  // PortCountersExtended field (IB_PC_EXT_*)
};

constexpr FieldPair kErrorFields[] = {
    {PmaCounter::kSymbolError, IB_PC_ERR_SYM_F, IB_PC_EXT_ERR_SYM_F},
    {PmaCounter::kLinkErrorRecovery, IB_PC_LINK_RECOVERS_F, IB_PC_EXT_LINK_RECOVERS_F},
    {PmaCounter::kLinkDowned, IB_PC_LINK_DOWNED_F, IB_PC_EXT_LINK_DOWNED_F},
    {PmaCounter::kRcvErrors, IB_PC_ERR_RCV_F, IB_PC_EXT_ERR_RCV_F},
    {PmaCounter::kRcvRemotePhysicalErrors, IB_PC_ERR_PHYSRCV_F, IB_PC_EXT_ERR_PHYSRCV_F},
    {PmaCounter::kRcvSwitchRelayErrors, IB_PC_ERR_SWITCH_REL_F, IB_PC_EXT_ERR_SWITCH_REL_F},
    {PmaCounter::kXmitDiscards, IB_PC_XMT_DISCARDS_F, IB_PC_EXT_XMT_DISCARDS_F},
    {PmaCounter::kXmitConstraintErrors, IB_PC_ERR_XMTCONSTR_F, IB_PC_EXT_ERR_XMTCONSTR_F},
    {PmaCounter::kRcvConstraintErrors, IB_PC_ERR_RCVCONSTR_F, IB_PC_EXT_ERR_RCVCONSTR_F},
    {PmaCounter::kLocalLinkIntegrityErrors, IB_PC_ERR_LOCALINTEG_F, IB_PC_EXT_ERR_LOCALINTEG_F},
    {PmaCounter::kExcessiveBufferOverrunErrors, IB_PC_ERR_EXCESS_OVR_F, IB_PC_EXT_ERR_EXCESS_OVR_F},
    {PmaCounter::kVl15Dropped, IB_PC_VL15_DROPPED_F, IB_PC_EXT_VL15_DROPPED_F},
    {PmaCounter::kQp1Dropped, IB_PC_VL15_DROPPED_F /* unused, see kSpecs */, IB_PC_EXT_QP1_DROP_F},
    {PmaCounter::kXmitWait, IB_PC_XMT_WAIT_F, IB_PC_EXT_XMT_WAIT_F},
};

constexpr FieldPair kTrafficFields[] = {
    {PmaCounter::kXmitData, IB_PC_XMT_BYTES_F, IB_PC_EXT_XMT_BYTES_F},
    {PmaCounter::kRcvData, IB_PC_RCV_BYTES_F, IB_PC_EXT_RCV_BYTES_F},
    {PmaCounter::kXmitPackets, IB_PC_XMT_PKTS_F, IB_PC_EXT_XMT_PKTS_F},
    {PmaCounter::kRcvPackets, IB_PC_RCV_PKTS_F, IB_PC_EXT_RCV_PKTS_F},
};

constexpr FieldPair kCastFields[] = {
    {PmaCounter::kUnicastXmitPackets, IB_PC_EXT_XMT_UPKTS_F, IB_PC_EXT_XMT_UPKTS_F},
    {PmaCounter::kUnicastRcvPackets, IB_PC_EXT_RCV_UPKTS_F, IB_PC_EXT_RCV_UPKTS_F},
    {PmaCounter::kMulticastXmitPackets, IB_PC_EXT_XMT_MPKTS_F, IB_PC_EXT_XMT_MPKTS_F},
    {PmaCounter::kMulticastRcvPackets, IB_PC_EXT_RCV_MPKTS_F, IB_PC_EXT_RCV_MPKTS_F},
};

}  // namespace

PmaCapabilities DecodeClassPortInfo(const uint8_t* data) {
  PmaCapabilities caps;
  // ClassPortInfo: CapabilityMask is bytes 2-3, CapabilityMask2 the upper 27 bits of bytes 4-7
  // (IBA Table 212; perfquery.c reads them the same way).
  caps.cap_mask = static_cast<uint16_t>(Field32(data, IB_CPI_CAPMASK_F));
  caps.cap_mask2 = Field32(data, IB_CPI_CAPMASK2_F);
  return caps;
}

const PmaCounterSpec& SpecOf(PmaCounter counter) { return kSpecs[static_cast<size_t>(counter)]; }

bool CounterAvailable(PmaCounter counter, const PmaCapabilities& caps) {
  if (IsCast(counter)) {
    // Uni/multicast packet counters exist only in the full extended set (not with NoIETF).
    return caps.extended_width();
  }
  if (counter == PmaCounter::kXmitWait) {
    return caps.xmit_wait();  // optional in PortCounters (IBA CapabilityMask bit 12)
  }
  if (counter == PmaCounter::kQp1Dropped) {
    return caps.additional_extended();  // see kSpecs
  }
  return true;
}

uint8_t CounterWidth(PmaCounter counter, const PmaCapabilities& caps) {
  if (IsCast(counter)) {
    return 64;
  }
  if (IsTraffic(counter)) {
    return caps.has_extended() ? 64 : 32;
  }
  return caps.additional_extended() ? 64 : SpecOf(counter).legacy_width;
}

void DecodePortCounters(const uint8_t* data, const PmaCapabilities& caps,
                        PortCounterValues& values) {
  if (!caps.additional_extended()) {
    for (const FieldPair& pair : kErrorFields) {
      if (CounterAvailable(pair.counter, caps)) {
        values.Set(pair.counter, Field32(data, pair.legacy));
      }
    }
  }
  if (!caps.has_extended()) {
    for (const FieldPair& pair : kTrafficFields) {
      values.Set(pair.counter, Field32(data, pair.legacy));
    }
  }
}

void DecodePortCountersExtended(const uint8_t* data, const PmaCapabilities& caps,
                                PortCounterValues& values) {
  if (!caps.has_extended()) {
    return;
  }
  for (const FieldPair& pair : kTrafficFields) {
    values.Set(pair.counter, Field64(data, pair.extended));
  }
  if (caps.extended_width()) {
    for (const FieldPair& pair : kCastFields) {
      values.Set(pair.counter, Field64(data, pair.extended));
    }
  }
  if (caps.additional_extended()) {
    for (const FieldPair& pair : kErrorFields) {
      if (CounterAvailable(pair.counter, caps)) {
        values.Set(pair.counter, Field64(data, pair.extended));
      }
    }
  }
}

uint32_t DecodePortSelect(const uint8_t* data) { return Field32(data, IB_PC_PORT_SELECT_F); }

PortInfoValues DecodePortInfo(const uint8_t* data) {
  PortInfoValues values;
  values.state = Field32(data, IB_PORT_STATE_F);
  values.phys_state = Field32(data, IB_PORT_PHYS_STATE_F);
  values.width_bits = Field32(data, IB_PORT_LINK_WIDTH_ACTIVE_F);
  values.speed = Field32(data, IB_PORT_LINK_SPEED_ACTIVE_F);
  values.speed_ext = Field32(data, IB_PORT_LINK_SPEED_EXT_ACTIVE_F);
  return values;
}

}  // namespace fabricmon::collectors::ib_fabric
