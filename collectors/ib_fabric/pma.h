#pragma once

// Performance Management (PMA) semantics: which counters a port's PMA has, how wide they are, and
// how to decode ClassPortInfo, PortCounters, PortCountersExtended and PortInfo payloads.
// References: IBA 1.4 vol. 1 §16.1.3 (ClassPortInfo Table 212 CapabilityMask bits, PortCounters
// Table 247, PortCountersExtended Table 250), §14.2.5.6 (PortInfo); libibmad fields.c for the
// field offsets it decodes (IB_PC_*, IB_PC_EXT_*); collectors/ib_fabric/README.md, "Field
// knowledge", and collectors/ib_sysfs/README.md, "Counter widths and saturation".
//
// Pure functions over MAD payloads (the 192 bytes after the 64-byte GS header, or the 64 bytes of
// SMP data); they use libibmad's field table but send nothing. Thread-compatible.

#include <array>
#include <bitset>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "collectors/core/sample.h"

namespace fabricmon::collectors::ib_fabric {

// Payload sizes (libibmad IB_PC_DATA_SZ, IB_SMP_DATA_SIZE).
inline constexpr size_t kGsDataBytes = 192;
inline constexpr size_t kSmpDataBytes = 64;

// ClassPortInfo.CapabilityMask bits of the PerfMgt class (IBA Table 212 / 16.1.3.1;
// collectors/ib_fabric/README.md, "PMA capabilities"). Values are host-order bit positions of the
// 16-bit field.
inline constexpr uint16_t kCapAllPortSelect = 1u << 8;         // PortSelect=0xFF aggregates
inline constexpr uint16_t kCapExtendedWidth = 1u << 9;         // PortCountersExtended, all fields
inline constexpr uint16_t kCapExtendedWidthNoIetf = 1u << 10;  // ... without uni/multicast
inline constexpr uint16_t kCapXmitWait = 1u << 12;             // PortCounters.PortXmitWait
// CapabilityMask2 bit 1 IsAdditionalPortCountersExtendedSupported: 64-bit error counters and
// PortXmitWait in PortCountersExtended (IBA 1.3 vol. 1 Table 212, libibmad
// IB_PM_IS_ADDL_PORT_CTRS_EXT_SUP).
inline constexpr uint32_t kCap2AdditionalExtended = 1u << 1;

struct PmaCapabilities {
  uint16_t cap_mask = 0;   // ClassPortInfo.CapabilityMask
  uint32_t cap_mask2 = 0;  // ClassPortInfo.CapabilityMask2 (27 bits)

  bool extended_width() const { return cap_mask & kCapExtendedWidth; }
  bool extended_noietf() const { return cap_mask & kCapExtendedWidthNoIetf; }
  // 64-bit data and packet counters are available (either flavour).
  bool has_extended() const { return extended_width() || extended_noietf(); }
  bool xmit_wait() const { return cap_mask & kCapXmitWait; }
  bool additional_extended() const {
    return has_extended() && (cap_mask2 & kCap2AdditionalExtended);
  }
  // Which queries a port needs: PortCountersExtended when 64-bit counters exist, PortCounters
  // unless PortCountersExtended also carries the error counters.
  bool needs_port_counters() const { return !additional_extended(); }
  bool needs_port_counters_extended() const { return has_extended(); }
  bool operator==(const PmaCapabilities& other) const {
    return cap_mask == other.cap_mask && cap_mask2 == other.cap_mask2;
  }
};

// Decodes a PerfMgt ClassPortInfo payload (IB_CPI_CAPMASK_F, IB_CPI_CAPMASK2_F).
PmaCapabilities DecodeClassPortInfo(const uint8_t* data);

// The counters fabricmon reads from a port's PMA.
enum class PmaCounter : uint8_t {
  kSymbolError,
  kLinkErrorRecovery,
  kLinkDowned,
  kRcvErrors,
  kRcvRemotePhysicalErrors,
  kRcvSwitchRelayErrors,
  kXmitDiscards,
  kXmitConstraintErrors,
  kRcvConstraintErrors,
  kLocalLinkIntegrityErrors,
  kExcessiveBufferOverrunErrors,
  kVl15Dropped,
  kQp1Dropped,
  kXmitWait,
  kXmitData,
  kRcvData,
  kXmitPackets,
  kRcvPackets,
  kUnicastXmitPackets,
  kUnicastRcvPackets,
  kMulticastXmitPackets,
  kMulticastRcvPackets,
  kCount,
};
inline constexpr size_t kPmaCounterCount = static_cast<size_t>(PmaCounter::kCount);

// How a counter is exported: the family name is the one ib_sysfs uses for the same IBA counter
// (collectors/ib_sysfs/ib_counters_parser.cc), so HCA ports read through sysfs and switch ports
// read through MADs land in the same families.
struct PmaCounterSpec {
  PmaCounter counter;
  absl::string_view metric;
  absl::string_view help;
  Unit unit;
  double scale;
  uint8_t legacy_width;  // width in PortCounters (IBA Table 247); 64 for extended-only ones
};
const PmaCounterSpec& SpecOf(PmaCounter counter);

// Whether `counter` exists on a PMA with `caps`, and its width there. Data and packet counters are
// 64-bit with PortCountersExtended, else the 32-bit PortCounters ones; error counters are 64-bit
// only with the additional extended counters (PortXmitWait is 32-bit otherwise;
// collectors/ib_sysfs/README.md, "XmitWait is 32-bit").
bool CounterAvailable(PmaCounter counter, const PmaCapabilities& caps);
uint8_t CounterWidth(PmaCounter counter, const PmaCapabilities& caps);

// Values decoded from one port's responses.
struct PortCounterValues {
  std::array<uint64_t, kPmaCounterCount> value{};
  std::bitset<kPmaCounterCount> present;
  void Set(PmaCounter counter, uint64_t v) {
    value[static_cast<size_t>(counter)] = v;
    present.set(static_cast<size_t>(counter));
  }
  bool Has(PmaCounter counter) const { return present.test(static_cast<size_t>(counter)); }
  uint64_t Get(PmaCounter counter) const { return value[static_cast<size_t>(counter)]; }
};

// Decodes a PortCounters payload into `values`: the error counters (and PortXmitWait when the PMA
// supports it) unless the additional extended counters supersede them, and the 32-bit data and
// packet counters when there is no PortCountersExtended.
void DecodePortCounters(const uint8_t* data, const PmaCapabilities& caps,
                        PortCounterValues& values);
// Decodes a PortCountersExtended payload: 64-bit data/packets, uni/multicast packets (only with
// kCapExtendedWidth), and the 64-bit error counters with the additional extended set.
void DecodePortCountersExtended(const uint8_t* data, const PmaCapabilities& caps,
                                PortCounterValues& values);

// The PortSelect a response answered for (both attributes carry it at the same offset), to guard
// against a misrouted reply.
uint32_t DecodePortSelect(const uint8_t* data);

// PortInfo fields the sweep refreshes (C14-24.2.1: on a Down port only the two states are valid).
struct PortInfoValues {
  uint32_t state = 0;
  uint32_t phys_state = 0;
  uint32_t width_bits = 0;
  uint32_t speed = 0;
  uint32_t speed_ext = 0;
};
PortInfoValues DecodePortInfo(const uint8_t* data);

}  // namespace fabricmon::collectors::ib_fabric
