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
