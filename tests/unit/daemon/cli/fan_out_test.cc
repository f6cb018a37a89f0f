#include "daemon/cli/fan_out.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace fabricmon::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename Message>
Message Parse(const std::string& text) {
  Message message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message)) << text;
  return message;
}

TEST(FanOutTest, SplitsTheAggregatorList) {
  auto one = SplitAggregators("127.0.0.1:7470");
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(*one, ElementsAre("127.0.0.1:7470"));
  auto three = SplitAggregators("a:1, b:2,c:3");
  ASSERT_TRUE(three.ok());
  EXPECT_THAT(*three, ElementsAre("a:1", "b:2", "c:3"));
  EXPECT_FALSE(SplitAggregators("").ok());
  EXPECT_FALSE(SplitAggregators("a:1,,b:2").ok());
  EXPECT_THAT(std::string(SplitAggregators("a:1,a:1").status().message()), HasSubstr("twice"));
}

TEST(FanOutTest, NodesAreOneRowEachPreferringTheShardWhereTheNodeIsUp) {
  // node-b failed over from shard 1 to shard 2: shard 1 still remembers it, down.
  const auto first = Parse<v1::ListNodesResponse>(R"(
      nodes { name: "node-a" up: true last_seen_unix_nanos: 100 series: 10 }
      nodes { name: "node-b" up: false last_seen_unix_nanos: 90 series: 10 })");
  const auto second = Parse<v1::ListNodesResponse>(R"(
      nodes { name: "node-b" up: true last_seen_unix_nanos: 95 series: 12 }
      nodes { name: "node-c" up: false last_seen_unix_nanos: 50 })");
  const v1::ListNodesResponse merged = MergeNodes({&first, &second});
  ASSERT_EQ(merged.nodes_size(), 3);
  EXPECT_EQ(merged.nodes(0).name(), "node-a");
  EXPECT_EQ(merged.nodes(1).name(), "node-b");
  EXPECT_TRUE(merged.nodes(1).up());
  EXPECT_EQ(merged.nodes(1).series(), 12u);
  EXPECT_EQ(merged.nodes(2).name(), "node-c");
  // The order of the shards does not matter.
  EXPECT_TRUE(MergeNodes({&second, &first}).nodes(1).up());
}

TEST(FanOutTest, FindingsAreConcatenatedOnceEach) {
  const auto first = Parse<v1::ListFindingsResponse>(R"(
      findings { id: "f1" kind: "link_flapping" subject { node: "node-a" } updated_unix_nanos: 5 }
      findings { id: "f2" kind: "tcp_fallback" subject { node: "node-b" } updated_unix_nanos: 5 })");
  const auto second = Parse<v1::ListFindingsResponse>(R"(
      findings { id: "f2" kind: "tcp_fallback" subject { node: "node-b" } updated_unix_nanos: 9 }
      findings { id: "f3" kind: "nvlink_degraded" subject { node: "node-c" } })");
  const v1::ListFindingsResponse merged = MergeFindings({&first, &second});
  ASSERT_EQ(merged.findings_size(), 3);
  EXPECT_EQ(merged.findings(0).id(), "f1");
  EXPECT_EQ(merged.findings(1).id(), "f2");
  EXPECT_EQ(merged.findings(1).updated_unix_nanos(), 9);  // the newer copy
  EXPECT_EQ(merged.findings(2).id(), "f3");
}

TEST(FanOutTest, DiagnoseKnowsANodeIfAnyShardDoes) {
  const std::vector<std::string> asked = {"node-a", "node-b", "node-x"};
  const auto first = Parse<v1::DiagnoseResponse>(R"(
      unknown_nodes: "node-b" unknown_nodes: "node-x"
      nodes { name: "node-a" up: true }
      verdict: "no fabric problem on node-a"
      traffic { node: "node-a" rdma_bytes_per_second: 1e9 kernel_bytes_per_second: 0 }
      findings { id: "f1" kind: "link_flapping" subject { node: "node-a" } })");
  const auto second = Parse<v1::DiagnoseResponse>(R"(
      unknown_nodes: "node-a" unknown_nodes: "node-x"
      nodes { name: "node-b" up: true }
      verdict: "node-b falls back to TCP"
      traffic { node: "node-b" rdma_bytes_per_second: 0 kernel_bytes_per_second: 5e8 })");
  const auto third = Parse<v1::DiagnoseResponse>(R"(
      unknown_nodes: "node-a" unknown_nodes: "node-b" unknown_nodes: "node-x"
      verdict: "none of these nodes is known")");
  const v1::DiagnoseResponse merged =
      MergeDiagnose({&first, &second, &third}, {"s1:7470", "s2:7470", "s3:7470"}, asked);
  EXPECT_THAT(merged.unknown_nodes(), ElementsAre("node-x"));
  ASSERT_EQ(merged.nodes_size(), 2);
  ASSERT_EQ(merged.traffic_size(), 2);
  ASSERT_EQ(merged.findings_size(), 1);
  // The third shard knows none of the nodes: its verdict is not the answer's.
  EXPECT_EQ(merged.verdict(),
            "s1:7470: no fabric problem on node-a\ns2:7470: node-b falls back to TCP");
  // One shard: its answer as it is.
  const v1::DiagnoseResponse alone = MergeDiagnose({&third}, {"s3:7470"}, asked);
  EXPECT_EQ(alone.verdict(), "none of these nodes is known");
  EXPECT_EQ(alone.unknown_nodes_size(), 3);
}

TEST(FanOutTest, TopologyIsTheUnionOfCables) {
  // The switch cable seen by the sweeper's shard; each shard sees its own hosts' cables.
  const auto first = Parse<v1::GetTopologyResponse>(R"(
      links { a { node: "node-a" device: "mlx5_0" port: 1 }
              b { node: "leaf01" port: 1 is_switch: true } source: LINK_SOURCE_FABRIC_COLLECTOR }
      links { a { node: "leaf01" port: 40 is_switch: true }
              b { node: "spine01" port: 1 is_switch: true } source: LINK_SOURCE_FABRIC_COLLECTOR }
      switches: 2 hosts: 1 resolved_unix_nanos: 10)");
  const auto second = Parse<v1::GetTopologyResponse>(R"(
      links { a { node: "node-b" device: "mlx5_0" port: 1 }
              b { node: "leaf01" port: 2 is_switch: true } source: LINK_SOURCE_FABRIC_COLLECTOR }
      links { a { node: "spine01" port: 1 is_switch: true }
              b { node: "leaf01" port: 40 is_switch: true } source: LINK_SOURCE_FABRIC_COLLECTOR }
      disagreements: "x"
      switches: 2 hosts: 1 resolved_unix_nanos: 20)");
  const v1::GetTopologyResponse merged = MergeTopology({&first, &second});
  EXPECT_EQ(merged.links_size(), 3);  // the spine cable once, whichever end a shard put first
  EXPECT_EQ(merged.switches(), 2u);
  EXPECT_EQ(merged.hosts(), 2u);
  EXPECT_EQ(merged.resolved_unix_nanos(), 20);
  EXPECT_THAT(merged.disagreements(), ElementsAre("x"));
}

}  // namespace
}  // namespace fabricmon::cli
