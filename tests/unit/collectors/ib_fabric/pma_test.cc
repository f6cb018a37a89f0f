#include "collectors/ib_fabric/pma.h"

#include <infiniband/mad.h>

#include "gtest/gtest.h"
#include "tests/unit/collectors/ib_fabric/fake_fabric.h"

namespace fabricmon::collectors::ib_fabric {
namespace {

using ib_fabric_testing::FakeFabric;
using ib_fabric_testing::FakePort;

TEST(PmaTest, DecodesClassPortInfoCapabilityMasks) {
  // What ibsim 0.10 answers (perfquery prints "CapMask: 0x1300"): AllPortSelect, extended
  // width, XmitWait; CapabilityMask2 0.
  PmaCapabilities ibsim{0x1300, 0};
  PmaCapabilities decoded = DecodeClassPortInfo(FakeFabric::EncodeClassPortInfo(ibsim).data());
  EXPECT_EQ(decoded.cap_mask, 0x1300);
  EXPECT_EQ(decoded.cap_mask2, 0u);
  EXPECT_TRUE(decoded.extended_width());
  EXPECT_TRUE(decoded.xmit_wait());
  EXPECT_FALSE(decoded.additional_extended());
  EXPECT_TRUE(decoded.needs_port_counters());
  EXPECT_TRUE(decoded.needs_port_counters_extended());

  // Raw bytes as on the wire: CapabilityMask bytes 2-3, CapabilityMask2 the upper 27 bits of
  // bytes 4-7 (perfquery.c: ntohl(word) >> 5).
  std::array<uint8_t, kGsDataBytes> raw{};
  raw[2] = 0x02;
  raw[3] = 0x00;  // bit 9
  raw[7] = 0x40;  // (1 << 1) << 5
  PmaCapabilities wire = DecodeClassPortInfo(raw.data());
  EXPECT_EQ(wire.cap_mask, kCapExtendedWidth);
  EXPECT_EQ(wire.cap_mask2, kCap2AdditionalExtended);
  EXPECT_TRUE(wire.additional_extended());
  EXPECT_FALSE(wire.needs_port_counters());
  EXPECT_FALSE(wire.xmit_wait());
}

TEST(PmaTest, WidthsFollowCapabilities) {
  const PmaCapabilities legacy{0, 0};
  const PmaCapabilities ext{kCapExtendedWidth | kCapXmitWait, 0};
  const PmaCapabilities noietf{kCapExtendedWidthNoIetf, 0};
  const PmaCapabilities addl{kCapExtendedWidth | kCapXmitWait, kCap2AdditionalExtended};
  // IBA PortCounters: LinkDowned 8, SymbolError 16, XmitWait 32 unless the additional counters.
  EXPECT_EQ(CounterWidth(PmaCounter::kLinkDowned, ext), 8);
  EXPECT_EQ(CounterWidth(PmaCounter::kSymbolError, ext), 16);
  EXPECT_EQ(CounterWidth(PmaCounter::kLocalLinkIntegrityErrors, ext), 4);
  EXPECT_EQ(CounterWidth(PmaCounter::kXmitWait, ext), 32);
  EXPECT_EQ(CounterWidth(PmaCounter::kXmitWait, addl), 64);
  EXPECT_EQ(CounterWidth(PmaCounter::kLinkDowned, addl), 64);
  EXPECT_EQ(CounterWidth(PmaCounter::kXmitData, legacy), 32);
  EXPECT_EQ(CounterWidth(PmaCounter::kXmitData, ext), 64);
  EXPECT_EQ(CounterWidth(PmaCounter::kXmitData, noietf), 64);
  EXPECT_FALSE(CounterAvailable(PmaCounter::kUnicastXmitPackets, noietf));
  EXPECT_TRUE(CounterAvailable(PmaCounter::kUnicastXmitPackets, ext));
  EXPECT_FALSE(CounterAvailable(PmaCounter::kXmitWait, legacy));
  EXPECT_EQ(SpecOf(PmaCounter::kXmitData).metric, "fabricmon_ib_port_xmit_data_bytes_total");
  EXPECT_EQ(SpecOf(PmaCounter::kXmitData).scale, 4.0);
  EXPECT_EQ(SpecOf(PmaCounter::kLinkDowned).metric, "fabricmon_ib_link_downed_total");
  EXPECT_EQ(SpecOf(PmaCounter::kXmitWait).unit, Unit::kTicks);
}

TEST(PmaTest, DecodesPortCountersAndExtended) {
  FakePort port;
  port.counters = {{PmaCounter::kSymbolError, 65535},
                   {PmaCounter::kLinkDowned, 255},
                   {PmaCounter::kLinkErrorRecovery, 3},
                   {PmaCounter::kXmitWait, 1234},
                   {PmaCounter::kVl15Dropped, 9},
                   {PmaCounter::kQp1Dropped, 11},
                   {PmaCounter::kLocalLinkIntegrityErrors, 15},
                   {PmaCounter::kXmitData, 99999999999},
                   {PmaCounter::kRcvPackets, 7},
                   {PmaCounter::kMulticastRcvPackets, 5}};
  const PmaCapabilities ext{kCapExtendedWidth | kCapXmitWait, 0};
  PortCounterValues values;
  DecodePortCounters(FakeFabric::EncodePortCounters(3, port).data(), ext, values);
  DecodePortCountersExtended(FakeFabric::EncodePortCountersExtended(3, port, false).data(), ext,
                             values);
  EXPECT_EQ(values.Get(PmaCounter::kSymbolError), 65535u);
  EXPECT_EQ(values.Get(PmaCounter::kLinkDowned), 255u);
  EXPECT_EQ(values.Get(PmaCounter::kLinkErrorRecovery), 3u);
  EXPECT_EQ(values.Get(PmaCounter::kXmitWait), 1234u);
  EXPECT_EQ(values.Get(PmaCounter::kVl15Dropped), 9u);
  EXPECT_FALSE(values.Has(PmaCounter::kQp1Dropped));
  EXPECT_EQ(values.Get(PmaCounter::kLocalLinkIntegrityErrors), 15u);
  EXPECT_EQ(values.Get(PmaCounter::kXmitData), 99999999999u);  // 64-bit from the extended set
  EXPECT_EQ(values.Get(PmaCounter::kRcvPackets), 7u);
  EXPECT_EQ(values.Get(PmaCounter::kMulticastRcvPackets), 5u);
  EXPECT_TRUE(values.Has(PmaCounter::kUnicastXmitPackets));
  EXPECT_EQ(DecodePortSelect(FakeFabric::EncodePortCounters(3, port).data()), 3u);

  // Without PortCountersExtended the 32-bit PortCounters data fields are used.
  PortCounterValues legacy_values;
  DecodePortCounters(FakeFabric::EncodePortCounters(3, port).data(), PmaCapabilities{0, 0},
                     legacy_values);
  EXPECT_EQ(legacy_values.Get(PmaCounter::kXmitData), 99999999999u & 0xffffffffu);
  EXPECT_FALSE(legacy_values.Has(PmaCounter::kXmitWait));  // not supported: not reported
  EXPECT_FALSE(legacy_values.Has(PmaCounter::kUnicastXmitPackets));

  // With the additional extended counters, errors and XmitWait come 64-bit from the extended set.
  const PmaCapabilities addl{kCapExtendedWidth | kCapXmitWait, kCap2AdditionalExtended};
  port.counters[PmaCounter::kXmitWait] = 1ull << 40;
  PortCounterValues addl_values;
  DecodePortCountersExtended(FakeFabric::EncodePortCountersExtended(3, port, true).data(), addl,
                             addl_values);
  EXPECT_EQ(addl_values.Get(PmaCounter::kXmitWait), 1ull << 40);
  EXPECT_EQ(addl_values.Get(PmaCounter::kSymbolError), 65535u);
  EXPECT_EQ(addl_values.Get(PmaCounter::kQp1Dropped), 11u);
}

// Why QP1Dropped is not read from PortCounters: libibmad 44 maps it onto VL15Dropped's bytes.
TEST(PmaTest, LibibmadPortCountersQp1DroppedOverlapsVl15Dropped) {
  std::array<uint8_t, kGsDataBytes> data{};
  mad_set_field(data.data(), 0, IB_PC_QP1_DROP_F, 0xabcd);
  EXPECT_EQ(mad_get_field(data.data(), 0, IB_PC_VL15_DROPPED_F), 0xabcdu)
      << "libibmad fixed the overlap: PortCounters.QP1Dropped can be read (pma.cc kSpecs)";
}

TEST(PmaTest, DecodesPortInfo) {
  FakePort port;
  port.state = 1;
  port.phys_state = 2;
  port.width_bits = 2;
  port.speed = 4;
  PortInfoValues info = DecodePortInfo(FakeFabric::EncodePortInfo(port).data());
  EXPECT_EQ(info.state, 1u);
  EXPECT_EQ(info.phys_state, 2u);
  EXPECT_EQ(info.width_bits, 2u);
  EXPECT_EQ(info.speed, 4u);
}

}  // namespace
}  // namespace fabricmon::collectors::ib_fabric
