#include "collectors/netdev/proc_net_snmp_parser.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/common/file_reader.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::collectors::netdev {
namespace {

// ---------------------------------------------------------------------------------------------
// ParseKernelInteger

struct IntegerCase {
  const char* input;
  std::optional<uint64_t> expected;
};

class ParseKernelIntegerTest : public ::testing::TestWithParam<IntegerCase> {};

TEST_P(ParseKernelIntegerTest, ParsesOrRejects) {
  const IntegerCase& c = GetParam();
  EXPECT_EQ(ParseKernelInteger(c.input), c.expected) << "input '" << c.input << "'";
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseKernelIntegerTest,
    ::testing::Values(IntegerCase{"0", 0}, IntegerCase{"1500\n", 1500}, IntegerCase{"  42 \n", 42},
                      IntegerCase{"18446744073709551615", UINT64_MAX},
                      IntegerCase{"18446744073709551616", std::nullopt},  // 2^64
                      IntegerCase{"-1", UINT64_MAX},                      // %d of SPEED_UNKNOWN
                      IntegerCase{"-2147483648", static_cast<uint64_t>(int64_t{-2147483648})},
                      IntegerCase{"-9223372036854775808",
                                  static_cast<uint64_t>(INT64_MIN)},  // LONG_MIN
                      IntegerCase{"-9223372036854775809", std::nullopt},
                      IntegerCase{"", std::nullopt}, IntegerCase{"\n", std::nullopt},
                      IntegerCase{"-", std::nullopt}, IntegerCase{"+5", std::nullopt},
                      IntegerCase{"0x1b", std::nullopt}, IntegerCase{"1.5", std::nullopt},
                      IntegerCase{"12 34", std::nullopt}, IntegerCase{"abc", std::nullopt}));

// ---------------------------------------------------------------------------------------------
// ParseSnmpTable: real kernel output

std::string ReadTestdata(const char* name) {
  absl::StatusOr<std::string> content = ReadSmallFile(
      testing::SourcePath(std::string("tests/unit/collectors/netdev/testdata/proc/net/") + name),
      1 << 20);
  return content.ok() ? *content : std::string();
}

TEST(ParseSnmpTableTest, RealProcNetSnmp) {
  // Linux 6.18 /proc/net/snmp, captured verbatim (testdata/README.md).
  const std::string content = ReadTestdata("snmp");
  ASSERT_FALSE(content.empty());
  const SnmpTable table = ParseSnmpTable(content);
  EXPECT_EQ(table.malformed_sections, 0);
  EXPECT_EQ(table.malformed_values, 0);
  std::vector<std::string> names;
  for (const SnmpSection& section : table.sections) {
    names.push_back(section.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"Ip", "Icmp", "IcmpMsg", "Tcp", "Udp", "UdpLite"}));
  const SnmpSection* tcp = table.Find("Tcp");
  ASSERT_NE(tcp, nullptr);
  EXPECT_EQ(tcp->keys.size(), 15u);
  EXPECT_EQ(table.Value("Tcp", "InSegs"), 2231u);
  EXPECT_EQ(table.Value("Tcp", "OutSegs"), 1798u);
  EXPECT_EQ(table.Value("Tcp", "RetransSegs"), 1u);
  EXPECT_EQ(table.Value("Tcp", "OutRsts"), 18u);
  EXPECT_EQ(table.Value("Tcp", "AttemptFails"), 16u);
  EXPECT_EQ(table.Value("Tcp", "CurrEstab"), 2u);
  // MaxConn is signed (RFC 2012): "-1".
  EXPECT_EQ(static_cast<int64_t>(*table.Value("Tcp", "MaxConn")), -1);
  EXPECT_EQ(table.Value("Tcp", "NoSuchField"), std::nullopt);
  EXPECT_EQ(table.Value("NoSuchSection", "InSegs"), std::nullopt);
}

TEST(ParseSnmpTableTest, RealProcNetNetstat) {
  const std::string content = ReadTestdata("netstat");
  ASSERT_FALSE(content.empty());
  const SnmpTable table = ParseSnmpTable(content);
  EXPECT_EQ(table.malformed_sections, 0);
  EXPECT_EQ(table.malformed_values, 0);
  ASSERT_NE(table.Find("TcpExt"), nullptr);
  ASSERT_NE(table.Find("IpExt"), nullptr);
  ASSERT_NE(table.Find("MPTcpExt"), nullptr);
  EXPECT_EQ(table.Find("TcpExt")->keys.size(), 135u);
  EXPECT_EQ(table.Value("TcpExt", "TCPTimeouts"), 2u);
  EXPECT_EQ(table.Value("TcpExt", "TCPAbortOnData"), 1u);
  EXPECT_EQ(table.Value("TcpExt", "DelayedACKs"), 74u);
  EXPECT_EQ(table.Value("TcpExt", "TCPLostRetransmit"), 0u);
}

TEST(ParseSnmpTableTest, LiveProcNetOfThisHostParsesCleanly) {
  // Whatever kernel runs the tests: its format must parse without a malformed line.
  for (const char* path : {"/proc/net/snmp", "/proc/net/netstat"}) {
    absl::StatusOr<std::string> content = ReadSmallFile(path, 1 << 20);
    if (!content.ok()) {
      GTEST_SKIP() << path << " not readable: " << content.status();
    }
    const SnmpTable table = ParseSnmpTable(*content);
    EXPECT_EQ(table.malformed_sections, 0) << path;
    EXPECT_EQ(table.malformed_values, 0) << path;
    EXPECT_FALSE(table.sections.empty()) << path;
  }
  absl::StatusOr<std::string> snmp = ReadSmallFile("/proc/net/snmp", 1 << 20);
  ASSERT_TRUE(snmp.ok());
  EXPECT_TRUE(ParseSnmpTable(*snmp).Value("Tcp", "InSegs").has_value());
}

// ---------------------------------------------------------------------------------------------
// ParseSnmpTable: hostile input, table-driven

struct Probe {
  const char* section;
  const char* key;
  std::optional<uint64_t> value;
};

struct TableCase {
  const char* name;
  const char* input;
  std::vector<std::string> sections;  // names kept, in order
  int malformed_sections;
  int malformed_values;
  std::vector<Probe> probes;
};

class ParseSnmpTableHostileTest : public ::testing::TestWithParam<TableCase> {};

TEST_P(ParseSnmpTableHostileTest, KeepsWhatItCanAndCountsTheRest) {
  const TableCase& c = GetParam();
  const SnmpTable table = ParseSnmpTable(c.input);
  std::vector<std::string> names;
  for (const SnmpSection& section : table.sections) {
    names.push_back(section.name);
    EXPECT_EQ(section.keys.size(), section.values.size()) << section.name;
  }
  EXPECT_EQ(names, c.sections);
  EXPECT_EQ(table.malformed_sections, c.malformed_sections);
  EXPECT_EQ(table.malformed_values, c.malformed_values);
  for (const Probe& probe : c.probes) {
    EXPECT_EQ(table.Value(probe.section, probe.key), probe.value)
        << probe.section << "." << probe.key;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseSnmpTableHostileTest,
    ::testing::Values(
        TableCase{"Empty", "", {}, 0, 0, {{"Tcp", "InSegs", std::nullopt}}},
        TableCase{"OnlyNewlines", "\n\n\n", {}, 0, 0, {}},
        TableCase{"MinimalPair",
                  "Tcp: InSegs OutSegs\nTcp: 5 7\n",
                  {"Tcp"},
                  0,
                  0,
                  {{"Tcp", "InSegs", 5}, {"Tcp", "OutSegs", 7}}},
        TableCase{
            "NoTrailingNewline", "Tcp: InSegs\nTcp: 5", {"Tcp"}, 0, 0, {{"Tcp", "InSegs", 5}}},
        TableCase{"CrLfTabsAndRuns",
                  "Tcp:\tInSegs   OutSegs\r\nTcp: 5\t 7\r\n",
                  {"Tcp"},
                  0,
                  0,
                  {{"Tcp", "InSegs", 5}, {"Tcp", "OutSegs", 7}}},
        TableCase{"FewerValuesThanHeaderDropsSectionOnly",
                  "Ip: A B\nIp: 1 2\nTcp: InSegs OutSegs RetransSegs\nTcp: 5 7\nUdp: X\nUdp: 9\n",
                  {"Ip", "Udp"},
                  1,
                  0,
                  {{"Tcp", "InSegs", std::nullopt}, {"Ip", "B", 2}, {"Udp", "X", 9}}},
        TableCase{"MoreValuesThanHeaderDropsSection",
                  "Tcp: InSegs\nTcp: 5 7\n",
                  {},
                  1,
                  0,
                  {{"Tcp", "InSegs", std::nullopt}}},
        TableCase{"MissingTcpValueLine",
                  "Tcp: InSegs OutSegs\nUdp: X\nUdp: 9\n",
                  {"Udp"},
                  1,
                  0,
                  {{"Tcp", "InSegs", std::nullopt}, {"Udp", "X", 9}}},
        TableCase{"MissingTcpHeaderLine",
                  "Ip: A\nIp: 1\nTcp: 5 7\nUdp: X\nUdp: 9\n",
                  {"Ip", "Udp"},
                  1,
                  0,
                  {{"Tcp", "InSegs", std::nullopt}}},
        TableCase{
            "NoTcpSectionAtAll", "Ip: A\nIp: 1\n", {"Ip"}, 0, 0, {{"Tcp", "InSegs", std::nullopt}}},
        TableCase{"TruncatedAfterHeader", "Ip: A\nIp: 1\nTcp: InSegs OutSegs\n", {"Ip"}, 1, 0, {}},
        TableCase{
            "TruncatedMidValueLine", "Tcp: InSegs OutSegs RetransSegs\nTcp: 5 7", {}, 1, 0, {}},
        TableCase{
            "NonNumericValueDropsThatFieldOnly",
            "Tcp: InSegs OutSegs RetransSegs\nTcp: 5 x7 9\n",
            {"Tcp"},
            0,
            1,
            {{"Tcp", "InSegs", 5}, {"Tcp", "OutSegs", std::nullopt}, {"Tcp", "RetransSegs", 9}}},
        TableCase{"OverflowingValue",
                  "Tcp: InSegs OutSegs\nTcp: 18446744073709551616 1\n",
                  {"Tcp"},
                  0,
                  1,
                  {{"Tcp", "InSegs", std::nullopt}, {"Tcp", "OutSegs", 1}}},
        TableCase{"MaxAndNegative",
                  "Tcp: A MaxConn\nTcp: 18446744073709551615 -1\n",
                  {"Tcp"},
                  0,
                  0,
                  {{"Tcp", "A", UINT64_MAX}, {"Tcp", "MaxConn", UINT64_MAX}}},
        TableCase{"DuplicateSectionKeepsFirst",
                  "Tcp: InSegs\nTcp: 5\nTcp: InSegs\nTcp: 6\n",
                  {"Tcp"},
                  1,
                  0,
                  {{"Tcp", "InSegs", 5}}},
        TableCase{"GarbageLineBetweenSections",
                  "Ip: A\nIp: 1\nthis is not snmp\nTcp: InSegs\nTcp: 5\n",
                  {"Ip", "Tcp"},
                  1,
                  0,
                  {{"Tcp", "InSegs", 5}}},
        TableCase{"GarbageLineBetweenHeaderAndValues",
                  "Tcp: InSegs\n???\nTcp: 5\n",
                  {"Tcp"},
                  1,
                  0,
                  {{"Tcp", "InSegs", 5}}},
        TableCase{"EmptySectionName",
                  ": A\n: 1\nTcp: InSegs\nTcp: 5\n",
                  {"Tcp"},
                  2,
                  0,
                  {{"Tcp", "InSegs", 5}}},
        TableCase{"NumericHeaderIsAStrayValueLine", "Tcp: A 1\nTcp: 1 2\n", {}, 2, 0, {}},
        TableCase{"SwappedSectionLines",
                  "Tcp: InSegs\nUdp: X\nTcp: 5\nUdp: 9\n",
                  {},
                  4,
                  0,
                  {{"Tcp", "InSegs", std::nullopt}, {"Udp", "X", std::nullopt}}},
        TableCase{"EmptyPairIsASectionWithoutFields",
                  "IcmpMsg:\nIcmpMsg:\nTcp: InSegs\nTcp: 5\n",
                  {"IcmpMsg", "Tcp"},
                  0,
                  0,
                  {{"Tcp", "InSegs", 5}}}),
    [](const ::testing::TestParamInfo<TableCase>& info) { return std::string(info.param.name); });

TEST(SnmpSectionTest, IndexOfUsesHintAndFallsBack) {
  const SnmpTable table = ParseSnmpTable("Tcp: A B C\nTcp: 1 2 3\n");
  const SnmpSection* tcp = table.Find("Tcp");
  ASSERT_NE(tcp, nullptr);
  EXPECT_EQ(tcp->IndexOf("C"), 2);
  EXPECT_EQ(tcp->IndexOf("C", 2), 2);
  EXPECT_EQ(tcp->IndexOf("C", 0), 2);   // stale hint: found by search
  EXPECT_EQ(tcp->IndexOf("C", 99), 2);  // out-of-range hint
  EXPECT_EQ(tcp->IndexOf("D", 1), -1);
}

}  // namespace
}  // namespace fabricmon::collectors::netdev
