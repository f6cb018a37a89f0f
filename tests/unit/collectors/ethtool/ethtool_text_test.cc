#include "collectors/ethtool/ethtool_text.h"

#include <string>

#include "daemon/common/file_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::collectors::ethtool {
namespace {

using ::fabricmon::testing::SharedFixture;
using ::fabricmon::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::SizeIs;

auto Stat(const std::string& key, uint64_t value) {
  return ::testing::AllOf(Field(&EthtoolStat::key, key), Field(&EthtoolStat::value, value));
}

std::string ReadFixture(const std::string& name) {
  absl::StatusOr<std::string> text = ReadSmallFile(SharedFixture("ethtool/" + name), 1 << 20);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

TEST(EthtoolTextTest, ParsesIndentedCaptureWithHeader) {
  auto parsed = ParseEthtoolStatsText(ReadFixture("mlx5_bpf-list_xdp_kernel5.15_nonzero.txt"));
  FABRICMON_ASSERT_OK(parsed);
  EXPECT_EQ(parsed->header_lines, 1u);  // "NIC statistics:"
  EXPECT_EQ(parsed->rejected_lines, 0u);
  ASSERT_THAT(parsed->stats, SizeIs(101));
  EXPECT_THAT(parsed->stats.front(), Stat("rx_packets", 333854100));
  EXPECT_THAT(parsed->stats.back(), Stat("rx0_xdp_tx_cqes", 87229139));
}

TEST(EthtoolTextTest, ParsesUnindentedCaptureWithoutHeader) {
  auto parsed = ParseEthtoolStatsText(ReadFixture("mlx5_connectx4_ubuntu18.04_ethq-tests.txt"));
  FABRICMON_ASSERT_OK(parsed);
  EXPECT_EQ(parsed->header_lines, 0u);
  EXPECT_EQ(parsed->rejected_lines, 0u);
  EXPECT_THAT(parsed->stats, SizeIs(751));  // PROVENANCE.md: 751 counters
  EXPECT_THAT(parsed->stats.front(), Stat("rx_packets", 845320277));
}

TEST(EthtoolTextTest, SixSpaceIndentation) {
  auto parsed =
      ParseEthtoolStatsText(ReadFixture("mlx5_lkml-2024-11_grep-pci_signal-integrity.txt"));
  FABRICMON_ASSERT_OK(parsed);
  EXPECT_THAT(parsed->stats,
              ElementsAre(Stat("rx_pci_signal_integrity", 1), Stat("tx_pci_signal_integrity", 1471),
                          Stat("outbound_pci_stalled_rd", 0), Stat("outbound_pci_stalled_wr", 0),
                          Stat("outbound_pci_stalled_rd_events", 0),
                          Stat("outbound_pci_stalled_wr_events", 0)));
}

TEST(EthtoolTextTest, SettingsDumpIsNotAStatisticsCapture) {
  // `ethtool eth1` would otherwise yield "PHYAD: 0" as a statistic.
  EXPECT_THAT(ParseEthtoolStatsText(ReadFixture("azhpc-diag_endure-vm_eth1_ethtool-settings.txt")),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(EthtoolTextTest, KeepsTrailingSpaceOfKernelStringForNormalisation) {
  // One mlx5 en_stats.c version has "tx_pause_storm_warning_events " (collectors/ethtool/
  // README.md, "Trailing-space keys"); ethtool prints it as "name : value".
  auto parsed = ParseEthtoolStatsText("     tx_pause_storm_warning_events : 7\n");
  FABRICMON_ASSERT_OK(parsed);
  ASSERT_THAT(parsed->stats, ElementsAre(Stat("tx_pause_storm_warning_events ", 7)));
  EXPECT_EQ(NormalizeStatKey(parsed->stats[0].key), "tx_pause_storm_warning_events");
}

TEST(EthtoolTextTest, NormalizeStopsAtNulAndTrims) {
  EXPECT_EQ(NormalizeStatKey(std::string("rx_bytes\0garbage", 16)), "rx_bytes");
  EXPECT_EQ(NormalizeStatKey("  tx_bytes \t"), "tx_bytes");
  EXPECT_EQ(NormalizeStatKey(""), "");
}

TEST(EthtoolTextTest, HostileInput) {
  const std::string text =
      "NIC statistics:\r\n"
      "     good: 1\r\n"
      "garbage line without colon\n"
      "     negative: -5\n"
      "     max: 18446744073709551615\n"
      "     too_big: 18446744073709551616\n"
      "     way_too_big: 999999999999999999999999999\n"
      "     hex: 0x10\n"
      "     suffix: 10 pkts\n"
      "     float: 1.5\n"
      "     : 3\n"
      "\t\ttabbed:\t4\t\n"
      "     with:colon: 5\n"
      "     nospace:6\n" +
      std::string("     nul\0key: 7\n", 16) +
      "\n\n   \n"
      "Standard stats for eth0:\n"
      "     last: 8";  // no trailing newline
  auto parsed = ParseEthtoolStatsText(text);
  FABRICMON_ASSERT_OK(parsed);
  EXPECT_THAT(parsed->stats,
              ElementsAre(Stat("good", 1), Stat("max", 18446744073709551615u), Stat("tabbed", 4),
                          Stat("with:colon", 5), Stat("nospace", 6), Stat("last", 8)));
  EXPECT_EQ(parsed->header_lines, 2u);
  // garbage, negative, too_big, way_too_big, hex, suffix, float, empty key, NUL key.
  EXPECT_EQ(parsed->rejected_lines, 9u);
}

TEST(EthtoolTextTest, EmptyAndHeaderOnlyInputsAreEmptySets) {
  for (const char* text : {"", "\n\n", "NIC statistics:\n", "   \t  \n"}) {
    auto parsed = ParseEthtoolStatsText(text);
    FABRICMON_ASSERT_OK(parsed);
    EXPECT_TRUE(parsed->stats.empty()) << text;
  }
}

TEST(EthtoolTextTest, BinaryGarbageNeverCrashes) {
  std::string text;
  for (int i = 0; i < 4096; ++i) {
    text.push_back(static_cast<char>((i * 7919) % 256));
  }
  auto parsed = ParseEthtoolStatsText(text);
  FABRICMON_ASSERT_OK(parsed);
  for (const EthtoolStat& stat : parsed->stats) {
    EXPECT_FALSE(stat.key.empty());
  }
}

TEST(EthtoolTextTest, OverlongKeyRejected) {
  auto parsed = ParseEthtoolStatsText(std::string(1000, 'k') + ": 1\n");
  FABRICMON_ASSERT_OK(parsed);
  EXPECT_TRUE(parsed->stats.empty());
  EXPECT_EQ(parsed->rejected_lines, 1u);
}

TEST(EthtoolTextTest, DriverText) {
  EXPECT_EQ(ParseEthtoolDriverText("driver: mlx5_core\nversion: 5.15\nbus-info: 0000:3b:00.0\n"),
            "mlx5_core");
  EXPECT_EQ(ParseEthtoolDriverText("mlx5_core\n"), "mlx5_core");
  EXPECT_EQ(ParseEthtoolDriverText("version: 1.0\n"), "");
  EXPECT_EQ(ParseEthtoolDriverText(""), "");
}

}  // namespace
}  // namespace fabricmon::collectors::ethtool
