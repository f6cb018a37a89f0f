// What the load generator reads back from the aggregator's exposition.

#include "tests/bench/stream/loadgen_support.h"

#include "gtest/gtest.h"

namespace fabricmon::bench {
namespace {

constexpr char kExposition[] =
    "# HELP fabricmon_finding_active An active finding.\n"
    "# TYPE fabricmon_finding_active gauge\n"
    "fabricmon_finding_active{kind=\"link_degraded\",node=\"n1\",port=\"1\"} 1\n"
    "fabricmon_finding_active{kind=\"link_flapping\",node=\"n1\",port=\"1\"} 1\n"
    "fabricmon_finding_active{node=\"n2\",kind=\"link_degraded\",port=\"2\"} 1\n"
    // A value that holds the label's own text, escaped quotes and all, must not be taken for it.
    "fabricmon_finding_active{peer=\"a,kind=\\\"x\\\",kind=\",kind=\"tcp_fallback\"} 1\n"
    "fabricmon_finding_active{node=\"n3\"} 2\n"
    "fabricmon_finding_active_victims{kind=\"congestion_spreading\"} 7\n"
    "fabricmon_findings_total 9\n";

TEST(LoadgenSupportTest, SumsAFamilyAndSplitsItByALabel) {
  EXPECT_EQ(SumOfFamily(kExposition, "fabricmon_finding_active"), 6);
  EXPECT_EQ(SumOfFamily(kExposition, "fabricmon_findings_total"), 9);
  EXPECT_EQ(SumOfFamily(kExposition, "fabricmon_absent"), 0);
  const std::map<std::string, double> by_kind =
      SumOfFamilyBy(kExposition, "fabricmon_finding_active", "kind");
  const std::map<std::string, double> expected = {
      {"", 2}, {"link_degraded", 2}, {"link_flapping", 1}, {"tcp_fallback", 1}};
  EXPECT_EQ(by_kind, expected);
}

}  // namespace
}  // namespace fabricmon::bench
