#include "collectors/ib_sysfs/ib_counters_parser.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "daemon/common/file_reader.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/unit/collectors/ib_sysfs/ib_sysfs_test_util.h"

namespace fabricmon::collectors::ib_sysfs {
namespace {

using ib_sysfs_testing::PmaFile;
using ib_sysfs_testing::PmaFiles;

// ---------------------------------------------------------------------------------------------
// counters/ (PMA): every file the kernel's sysfs.c defines, in both groups.

// (file, extended group?) for every file in every group it exists in (unicast/multicast only in
// the extended group).
std::vector<std::tuple<PmaFile, bool>> PmaCases() {
  std::vector<std::tuple<PmaFile, bool>> cases;
  for (const PmaFile& pma : PmaFiles()) {
    if (!pma.ext_only) {
      cases.emplace_back(pma, false);
    }
    cases.emplace_back(pma, true);
  }
  return cases;
}

class IbCountersParserPmaTest : public ::testing::TestWithParam<std::tuple<PmaFile, bool>> {};

TEST_P(IbCountersParserPmaTest, MapsWidthUnitAndScale) {
  const auto& [pma, extended] = GetParam();
  const CounterSpec spec = SpecForCounter(CounterGroup::kCounters, pma.file, extended, "mlx5_core");
  EXPECT_FALSE(spec.skip);
  EXPECT_EQ(spec.metric, pma.metric);
  EXPECT_EQ(spec.unit, pma.unit);
  EXPECT_EQ(spec.scale, pma.scale);
  // IBA PortCounters "clamp at all ones": every PMA counter saturates, whatever its width.
  EXPECT_EQ(spec.overflow, Overflow::kSaturates);
  const uint8_t want_width = pma.traffic ? (extended ? 64 : 32) : pma.width;
  EXPECT_EQ(spec.width_bits, want_width);
  EXPECT_FALSE(spec.help.empty());
}

INSTANTIATE_TEST_SUITE_P(
    AllPmaFiles, IbCountersParserPmaTest, ::testing::ValuesIn(PmaCases()),
    [](const ::testing::TestParamInfo<IbCountersParserPmaTest::ParamType>& info) {
      return std::string(std::get<0>(info.param).file) +
             (std::get<1>(info.param) ? "_extended" : "_legacy");
    });

TEST(IbCountersParserTest, PortXmitWaitStays32BitInTheExtendedGroup) {
  // PortXmitWait lives in PortCounters (offset 320) even where the data counters come from
  // PortCountersExtended; the 64-bit one needs AdditionalPortCountersExtended, which sysfs lacks.
  for (bool extended : {false, true}) {
    const CounterSpec spec =
        SpecForCounter(CounterGroup::kCounters, "port_xmit_wait", extended, "");
    EXPECT_EQ(spec.width_bits, 32) << extended;
    EXPECT_EQ(spec.unit, Unit::kTicks);
  }
}

TEST(IbCountersParserTest, DataCountersAreWordsTimesFour) {
  for (const char* file : {"port_xmit_data", "port_rcv_data"}) {
    const CounterSpec spec = SpecForCounter(CounterGroup::kCounters, file, true, "");
    EXPECT_EQ(spec.scale, 4.0) << file;  // octets / 4, never × lanes
    EXPECT_EQ(spec.unit, Unit::kBytes) << file;
    EXPECT_TRUE(absl::EndsWith(spec.metric, "_bytes_total")) << spec.metric;
  }
  // Packets are not scaled.
  EXPECT_EQ(SpecForCounter(CounterGroup::kCounters, "port_xmit_packets", true, "").scale, 1.0);
}

TEST(IbCountersParserTest, UnknownCountersFileIsA64BitWrappingCounter) {
  const CounterSpec spec = SpecForCounter(CounterGroup::kCounters, "port_future_thing", false, "");
  EXPECT_EQ(spec.metric, "fabricmon_ib_port_future_thing_total");
  EXPECT_EQ(spec.width_bits, 64);
  EXPECT_EQ(spec.overflow, Overflow::kWraps);
  EXPECT_FALSE(spec.skip);
}

// ---------------------------------------------------------------------------------------------
// counters_ext/ (kernels < 4.5): always 64-bit, folded into the counters/ families.

struct ExtCase {
  const char* file;
  const char* metric;
  Unit unit;
  double scale;
};

class IbCountersParserCountersExtTest : public ::testing::TestWithParam<ExtCase> {};

TEST_P(IbCountersParserCountersExtTest, MapsToTheCountersFamilyAt64Bits) {
  const ExtCase& c = GetParam();
  // pma_extended=false on purpose: counters_ext/ is 64-bit regardless of counters/.
  const CounterSpec spec = SpecForCounter(CounterGroup::kCountersExt, c.file, false, "mlx4_core");
  EXPECT_EQ(spec.metric, c.metric);
  EXPECT_EQ(spec.width_bits, 64);
  EXPECT_EQ(spec.unit, c.unit);
  EXPECT_EQ(spec.scale, c.scale);
  EXPECT_EQ(spec.overflow, Overflow::kSaturates);
}

INSTANTIATE_TEST_SUITE_P(
    AllCountersExtFiles, IbCountersParserCountersExtTest,
    ::testing::Values(
        ExtCase{"port_xmit_data_64", "fabricmon_ib_port_xmit_data_bytes_total", Unit::kBytes, 4},
        ExtCase{"port_rcv_data_64", "fabricmon_ib_port_rcv_data_bytes_total", Unit::kBytes, 4},
        ExtCase{"port_xmit_packets_64", "fabricmon_ib_port_xmit_packets_total", Unit::kPackets, 1},
        ExtCase{"port_rcv_packets_64", "fabricmon_ib_port_rcv_packets_total", Unit::kPackets, 1},
        ExtCase{"port_unicast_xmit_packets", "fabricmon_ib_unicast_xmit_packets_total",
                Unit::kPackets, 1},
        ExtCase{"port_unicast_rcv_packets", "fabricmon_ib_unicast_rcv_packets_total",
                Unit::kPackets, 1},
        ExtCase{"port_multicast_xmit_packets", "fabricmon_ib_multicast_xmit_packets_total",
                Unit::kPackets, 1},
        ExtCase{"port_multicast_rcv_packets", "fabricmon_ib_multicast_rcv_packets_total",
                Unit::kPackets, 1}));

// ---------------------------------------------------------------------------------------------
// hw_counters/: widths by driver (collectors/ib_sysfs/README.md, "hw_counters").

struct HwCase {
  const char* driver;
  const char* file;
  const char* metric;
  uint8_t width;
  Unit unit;
};

class IbCountersParserHwCounterTest : public ::testing::TestWithParam<HwCase> {};

TEST_P(IbCountersParserHwCounterTest, MapsWidthByDriver) {
  const HwCase& c = GetParam();
  const CounterSpec spec = SpecForCounter(CounterGroup::kHwCounters, c.file, false, c.driver);
  EXPECT_FALSE(spec.skip);
  EXPECT_EQ(spec.metric, c.metric);
  EXPECT_EQ(spec.width_bits, c.width);
  EXPECT_EQ(spec.overflow, Overflow::kWraps);  // driver counters wrap; they are not PMA
  EXPECT_EQ(spec.unit, c.unit);
  EXPECT_EQ(spec.scale, 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    Mlx5QCounters, IbCountersParserHwCounterTest,
    ::testing::Values(
        // be32_to_cpu q-counters: 32-bit.
        HwCase{"mlx5_core", "rx_write_requests", "fabricmon_ib_hw_rx_write_requests_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "rx_read_requests", "fabricmon_ib_hw_rx_read_requests_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "rx_atomic_requests", "fabricmon_ib_hw_rx_atomic_requests_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "rx_dct_connect", "fabricmon_ib_hw_rx_dct_connect_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "out_of_buffer", "fabricmon_ib_hw_out_of_buffer_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "out_of_sequence", "fabricmon_ib_hw_out_of_sequence_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "duplicate_request", "fabricmon_ib_hw_duplicate_request_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "rnr_nak_retry_err", "fabricmon_ib_hw_rnr_nak_retry_err_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "packet_seq_err", "fabricmon_ib_hw_packet_seq_err_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "implied_nak_seq_err", "fabricmon_ib_hw_implied_nak_seq_err_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "local_ack_timeout_err", "fabricmon_ib_hw_local_ack_timeout_err_total",
               32, Unit::kNone},
        HwCase{"mlx5_core", "resp_local_length_error",
               "fabricmon_ib_hw_resp_local_length_error_total", 32, Unit::kNone},
        HwCase{"mlx5_core", "resp_cqe_error", "fabricmon_ib_hw_resp_cqe_error_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "req_cqe_error", "fabricmon_ib_hw_req_cqe_error_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "req_remote_invalid_request",
               "fabricmon_ib_hw_req_remote_invalid_request_total", 32, Unit::kNone},
        HwCase{"mlx5_core", "req_remote_access_errors",
               "fabricmon_ib_hw_req_remote_access_errors_total", 32, Unit::kNone},
        HwCase{"mlx5_core", "resp_remote_access_errors",
               "fabricmon_ib_hw_resp_remote_access_errors_total", 32, Unit::kNone},
        HwCase{"mlx5_core", "resp_cqe_flush_error", "fabricmon_ib_hw_resp_cqe_flush_error_total",
               32, Unit::kNone},
        HwCase{"mlx5_core", "req_cqe_flush_error", "fabricmon_ib_hw_req_cqe_flush_error_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "roce_adp_retrans", "fabricmon_ib_hw_roce_adp_retrans_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "roce_adp_retrans_to", "fabricmon_ib_hw_roce_adp_retrans_to_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "roce_slow_restart", "fabricmon_ib_hw_roce_slow_restart_total", 32,
               Unit::kNone},
        HwCase{"mlx5_core", "roce_slow_restart_cnps",
               "fabricmon_ib_hw_roce_slow_restart_cnps_total", 32, Unit::kNone},
        HwCase{"mlx5_core", "roce_slow_restart_trans",
               "fabricmon_ib_hw_roce_slow_restart_trans_total", 32, Unit::kNone}));

INSTANTIATE_TEST_SUITE_P(
    Mlx5CongestionCounters, IbCountersParserHwCounterTest,
    ::testing::Values(
        // Read from the 64-bit (_high) congestion fields and PPCNT: 64-bit.
        HwCase{"mlx5_core", "rp_cnp_ignored", "fabricmon_ib_hw_rp_cnp_ignored_total", 64,
               Unit::kNone},
        HwCase{"mlx5_core", "rp_cnp_handled", "fabricmon_ib_hw_rp_cnp_handled_total", 64,
               Unit::kNone},
        HwCase{"mlx5_core", "np_ecn_marked_roce_packets",
               "fabricmon_ib_hw_np_ecn_marked_roce_packets_total", 64, Unit::kPackets},
        HwCase{"mlx5_core", "np_cnp_sent", "fabricmon_ib_hw_np_cnp_sent_total", 64, Unit::kNone},
        HwCase{"mlx5_core", "rx_icrc_encapsulated", "fabricmon_ib_hw_rx_icrc_encapsulated_total",
               64, Unit::kNone}));

INSTANTIATE_TEST_SUITE_P(
    OtherDrivers, IbCountersParserHwCounterTest,
    ::testing::Values(
        // irdma: 64-bit MIB-style names, octets are bytes.
        HwCase{"irdma", "ip4InOctets", "fabricmon_ib_hw_ip4inoctets_total", 64, Unit::kBytes},
        HwCase{"irdma", "ip6OutPkts", "fabricmon_ib_hw_ip6outpkts_total", 64, Unit::kPackets},
        HwCase{"irdma", "tcpRetransSegs", "fabricmon_ib_hw_tcpretranssegs_total", 64, Unit::kNone},
        HwCase{"irdma", "cnpHandled", "fabricmon_ib_hw_cnphandled_total", 64, Unit::kNone},
        // efa: bytes and packets.
        HwCase{"efa", "rx_bytes", "fabricmon_ib_hw_rx_bytes_total", 64, Unit::kBytes},
        HwCase{"efa", "tx_pkts", "fabricmon_ib_hw_tx_pkts_total", 64, Unit::kPackets},
        HwCase{"efa", "rdma_read_bytes", "fabricmon_ib_hw_rdma_read_bytes_total", 64, Unit::kBytes},
        HwCase{"efa", "rdma_read_wr_err", "fabricmon_ib_hw_rdma_read_wr_err_total", 64,
               Unit::kNone},
        // hfi1 (OmniPath): names with spaces and commas are sanitized.
        HwCase{"hfi1", "Pio Reserved 30", "fabricmon_ib_hw_pio_reserved_30_total", 64, Unit::kNone},
        HwCase{"hfi1", "CceMiscInt,32", "fabricmon_ib_hw_ccemiscint_32_total", 64, Unit::kNone},
        // An mlx5 q-counter name under another driver is not assumed 32-bit.
        HwCase{"bnxt_re", "out_of_buffer", "fabricmon_ib_hw_out_of_buffer_total", 64, Unit::kNone},
        HwCase{"", "rx_write_requests", "fabricmon_ib_hw_rx_write_requests_total", 64,
               Unit::kNone}));

TEST(IbCountersParserTest, HwCountersLifespanIsASettingNotACounter) {
  for (const char* driver : {"mlx5_core", "efa", ""}) {
    EXPECT_TRUE(SpecForCounter(CounterGroup::kHwCounters, "lifespan", false, driver).skip)
        << driver;
  }
  // Only in hw_counters/: a counters/ file of that name would be a counter.
  EXPECT_FALSE(SpecForCounter(CounterGroup::kCounters, "lifespan", false, "mlx5_core").skip);
}

// ---------------------------------------------------------------------------------------------

struct NameCase {
  const char* in;
  const char* out;
};

class IbCountersParserSanitizeNameTest : public ::testing::TestWithParam<NameCase> {};

TEST_P(IbCountersParserSanitizeNameTest, LowerSnakeCase) {
  EXPECT_EQ(SanitizeName(GetParam().in), GetParam().out) << GetParam().in;
}

INSTANTIATE_TEST_SUITE_P(
    Table, IbCountersParserSanitizeNameTest,
    ::testing::Values(NameCase{"VL15_dropped", "vl15_dropped"},
                      NameCase{"Pio Reserved 30", "pio_reserved_30"},
                      NameCase{"CceMiscInt,32", "ccemiscint_32"},
                      NameCase{"RcvHdrOvr 3", "rcvhdrovr_3"},
                      NameCase{"ip4InOctets", "ip4inoctets"}, NameCase{"a  ,, b", "a_b"},
                      NameCase{"  leading", "leading"}, NameCase{"trailing__", "trailing"},
                      NameCase{"x-y.z", "x_y_z"},
                      NameCase{"tx_pause_storm_warning_events ", "tx_pause_storm_warning_events"},
                      NameCase{"", ""}, NameCase{",,,", ""}, NameCase{"caf\xc3\xa9", "caf"}));

struct DriverCase {
  const char* link;
  const char* device;
  const char* hca_type;
  const char* want;
};

class IbCountersParserDriverFamilyTest : public ::testing::TestWithParam<DriverCase> {};

TEST_P(IbCountersParserDriverFamilyTest, PrefersTheDriverLink) {
  const DriverCase& c = GetParam();
  EXPECT_EQ(DriverFamily(c.link, c.device, c.hca_type), c.want)
      << c.link << " " << c.device << " " << c.hca_type;
}

INSTANTIATE_TEST_SUITE_P(
    Table, IbCountersParserDriverFamilyTest,
    ::testing::Values(
        // systemd-renamed HCA: the link decides.
        DriverCase{"mlx5_core", "ibp12s0", "MT4129", "mlx5_core"},
        DriverCase{"irdma", "rocep152s0f0", "", "irdma"},
        DriverCase{"efa", "rdmap16s27", "", "efa"},
        // A misleading name loses to the link.
        DriverCase{"mlx4_core", "mlx5_0", "MT4099", "mlx4_core"},
        // Captures without device/driver: hints from name or hca_type (ConnectX-4+ = MT41xx).
        DriverCase{"", "mlx5_bond_0", "", "mlx5_core"},
        DriverCase{"", "ibp12s0", "MT4129", "mlx5_core"},
        DriverCase{"", "mlx5_bond_0", "MT41692", "mlx5_core"},
        DriverCase{"", "mlx4_0", "MT4099", ""}, DriverCase{"", "hfi1_0", "", ""},
        DriverCase{"", "x", "MT41", ""}));

// ---------------------------------------------------------------------------------------------

struct StateCase {
  const char* in;
  bool ok;
  uint32_t code;
  const char* name;
};

class IbCountersParserPortStateTest : public ::testing::TestWithParam<StateCase> {};

TEST_P(IbCountersParserPortStateTest, ParsesCodeAndName) {
  const StateCase& c = GetParam();
  const PortStateValue v = ParsePortState(c.in);
  EXPECT_EQ(v.ok, c.ok) << c.in;
  if (c.ok) {
    EXPECT_EQ(v.code, c.code) << c.in;
    EXPECT_EQ(v.name, c.name) << c.in;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, IbCountersParserPortStateTest,
                         ::testing::Values(StateCase{"4: ACTIVE\n", true, 4, "ACTIVE"},
                                           StateCase{"5: LinkUp\n", true, 5, "LinkUp"},
                                           StateCase{"1: DOWN", true, 1, "DOWN"},
                                           StateCase{"2: Polling\n", true, 2, "Polling"},
                                           StateCase{"0: <unknown>\n", true, 0, "<unknown>"},
                                           StateCase{"  3:ARMED  ", true, 3, "ARMED"},
                                           StateCase{"7", true, 7, ""}, StateCase{"", false, 0, ""},
                                           StateCase{"\n", false, 0, ""},
                                           StateCase{"ACTIVE", false, 0, ""},
                                           StateCase{"x: y", false, 0, ""},
                                           StateCase{"-1: bad", false, 0, ""},
                                           StateCase{"99999999999: big", false, 0, ""}));

struct RateCase {
  const char* in;
  uint64_t bits;
};

class IbCountersParserRateTest : public ::testing::TestWithParam<RateCase> {};

TEST_P(IbCountersParserRateTest, BitsPerSecond) {
  EXPECT_EQ(ParseRateBitsPerSecond(GetParam().in), GetParam().bits) << GetParam().in;
}

INSTANTIATE_TEST_SUITE_P(
    Table, IbCountersParserRateTest,
    ::testing::Values(RateCase{"400 Gb/sec (4X NDR)\n", 400'000'000'000},
                      RateCase{"200 Gb/sec (2X NDR)", 200'000'000'000},
                      RateCase{"800 Gb/sec (4X XDR)", 800'000'000'000},
                      RateCase{"100 Gb/sec (4X EDR)", 100'000'000'000},
                      RateCase{"56 Gb/sec (4X FDR)", 56'000'000'000},
                      RateCase{"14.0625 Gb/sec (1X FDR)", 14'062'500'000},
                      RateCase{"40 Gb/sec (4X QDR)", 40'000'000'000},
                      RateCase{"25 Gb/sec (1X EDR)", 25'000'000'000},
                      RateCase{"10 Gb/sec (4X)", 10'000'000'000},
                      RateCase{"5 Gb/sec (1X DDR)", 5'000'000'000},
                      RateCase{"2.5 Gb/sec (1X SDR)", 2'500'000'000},
                      RateCase{"10 Mb/sec", 10'000'000}, RateCase{"1 Tb/sec", 1'000'000'000'000},
                      // Junk: no leading rate.
                      RateCase{"0: <unknown>", 0}, RateCase{"0: <unknown>\n", 0}, RateCase{"", 0},
                      RateCase{"\n", 0}, RateCase{"Gb/sec", 0}, RateCase{"400", 0},
                      RateCase{"400 Kb/sec", 0}, RateCase{"abc Gb/sec", 0},
                      RateCase{"-5 Gb/sec", 0},
                      // Non-finite or beyond 64 bits must not reach a float→int conversion.
                      RateCase{"nan Gb/sec", 0}, RateCase{"inf Gb/sec", 0},
                      RateCase{"1e300 Gb/sec", 0}, RateCase{"1e11 Gb/sec", 0}));

TEST(IbCountersParserTest, RealDegradedPortFromAzureCapture) {
  // ../shared/fixtures/sysfs/azhpc-diagnostics-endure: a real rate file and a real "0: <unknown>".
  absl::StatusOr<std::string> rate =
      ReadSmallFile(testing::SharedFixture("sysfs/azhpc-diagnostics-endure/rate"));
  ASSERT_TRUE(rate.ok()) << rate.status();
  EXPECT_EQ(ParseRateBitsPerSecond(*rate), 5'000'000'000u);
  absl::StatusOr<std::string> phys =
      ReadSmallFile(testing::SharedFixture("sysfs/azhpc-diagnostics-endure/phys_state"));
  ASSERT_TRUE(phys.ok()) << phys.status();
  const PortStateValue state = ParsePortState(*phys);
  EXPECT_TRUE(state.ok);
  EXPECT_EQ(state.code, 0u);
  EXPECT_EQ(state.name, "<unknown>");
  EXPECT_EQ(ParseRateBitsPerSecond(*phys), 0u);
}

struct LidCase {
  const char* in;
  uint32_t lid;
};

class IbCountersParserLidTest : public ::testing::TestWithParam<LidCase> {};

TEST_P(IbCountersParserLidTest, HexOnly) {
  EXPECT_EQ(ParseLid(GetParam().in), GetParam().lid) << GetParam().in;
}

INSTANTIATE_TEST_SUITE_P(Table, IbCountersParserLidTest,
                         ::testing::Values(LidCase{"0x1b\n", 27}, LidCase{"0x1", 1},
                                           LidCase{"0x0\n", 0}, LidCase{"0xbfff", 0xbfff},
                                           LidCase{"0xFFFF", 0xffff}, LidCase{"27", 0},
                                           LidCase{"0x", 0}, LidCase{"0xzz", 0}, LidCase{"", 0},
                                           LidCase{"0x1ffffffff", 0}, LidCase{"-0x1", 0}));

}  // namespace
}  // namespace fabricmon::collectors::ib_sysfs
