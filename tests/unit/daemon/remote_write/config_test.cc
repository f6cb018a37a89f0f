#include "daemon/remote_write/config.h"

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::remote_write {
namespace {

using ::fabricmon::testing::StatusIs;
using ::testing::HasSubstr;

absl::StatusOr<std::vector<EndpointConfig>> Parse(const std::string& text) {
  v1::AggregatorConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return ParseRemoteWriteConfigs(config.remote_write());
}

TEST(RemoteWriteConfigTest, DefaultsAndRedactedName) {
  auto parsed = Parse(R"(remote_write { url: "http://user:secret@vm:8428/api/v1/write?token=x" })");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 1u);
  const EndpointConfig& c = (*parsed)[0];
  EXPECT_EQ(c.endpoint.name, "http://vm:8428/api/v1/write");  // no credentials in labels
  EXPECT_EQ(c.endpoint.queue.shards, 4u);
  EXPECT_EQ(c.endpoint.queue.max_samples_per_send, 10000u);
  EXPECT_EQ(c.endpoint.queue.capacity_samples, 1000000u);
  EXPECT_EQ(c.flush_deadline_nanos, int64_t{5000} * 1000000);
}

// A config written when the default request was 2,000 samples and that sets a capacity below
// the new default stays valid: the default request is then the capacity.
TEST(RemoteWriteConfigTest, TheDefaultRequestNeverExceedsASmallerCapacity) {
  auto parsed = Parse(R"(remote_write { url: "http://vm" queue { capacity_samples: 5000 } })");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)[0].endpoint.queue.max_samples_per_send, 5000u);
  EXPECT_EQ((*parsed)[0].endpoint.queue.capacity_samples, 5000u);
  parsed = Parse(R"(remote_write { url: "http://vm" queue { capacity_samples: 0 } })");
  EXPECT_THAT(parsed.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(parsed.status().message(), HasSubstr("capacity_samples"));
}

TEST(RemoteWriteConfigTest, ReadsTheTokenAndSortsExternalLabels) {
  testing::TempTree tree;
  tree.WriteFile("token", "  s3cr3t\n");
  auto parsed = Parse(R"(remote_write {
    url: "https://mimir/api/v1/push" name: "mimir"
    headers { key: "X-Scope-OrgID" value: "fabric" }
    external_labels { key: "shard" value: "a" }
    external_labels { key: "cluster" value: "c1" }
    bearer_token_file: ")" +
                      tree.root() + R"(/token"
  })");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const EndpointConfig& c = (*parsed)[0];
  EXPECT_EQ(c.endpoint.name, "mimir");
  ASSERT_NE(c.http.bearer_token, nullptr);
  EXPECT_EQ(c.http.bearer_token->Current(), "s3cr3t");
  EXPECT_THAT(c.http.headers, ::testing::ElementsAre(::testing::Pair("X-Scope-OrgID", "fabric")));
  EXPECT_THAT(c.endpoint.external_labels, ::testing::ElementsAre(::testing::Pair("cluster", "c1"),
                                                                 ::testing::Pair("shard", "a")));
}

TEST(RemoteWriteConfigTest, RefusesBadEndpoints) {
  testing::TempTree tree;
  tree.WriteFile("empty_token", "\n");
  const std::pair<std::string, std::string> cases[] = {
      {R"(url: "")", "must start with http"},
      {R"(url: "ftp://vm/api/v1/write")", "must start with http"},
      {R"(url: "http:///api/v1/write")", "no host"},
      {R"(url: "http://vm:8428/a b")", "spaces"},
      {R"(url: "http://vm" headers { key: "Content-Type" value: "x" })", "set by the remote-write"},
      {R"(url: "http://vm" headers { key: "X-A" value: "a\r\nInjected: 1" })",
       "not a valid header"},
      {R"(url: "http://vm" external_labels { key: "__x" value: "1" })", "not a label name"},
      {R"(url: "http://vm" external_labels { key: "1a" value: "1" })", "not a label name"},
      {R"(url: "http://vm" external_labels { key: "a" value: "" })", "empty value"},
      {R"(url: "http://vm" tls { ca_file: "/x" })", "not https"},
      {R"(url: "https://vm" tls { cert_file: "/x" })", "go together"},
      {R"(url: "http://vm" bearer_token_file: ")" + tree.root() + R"(/empty_token")", "no token"},
      {R"(url: "http://vm" queue { shards: 0 })", "queue.shards"},
      {R"(url: "http://vm" queue { max_samples_per_send: 10 capacity_samples: 5 })",
       "capacity_samples"},
      {R"(url: "http://vm" queue { min_backoff_ms: 100 max_backoff_ms: 50 })", "max_backoff_ms"},
  };
  for (const auto& [body, message] : cases) {
    auto parsed = Parse("remote_write { " + body + " }");
    EXPECT_THAT(parsed.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << body;
    EXPECT_THAT(parsed.status().message(), HasSubstr(message)) << body;
    EXPECT_THAT(parsed.status().message(), HasSubstr("remote_write[0]")) << body;
  }
}

TEST(RemoteWriteConfigTest, AnUnreadableTokenFileStopsTheStartWithoutTheToken) {
  auto parsed = Parse(R"(remote_write { url: "http://vm" bearer_token_file: "/nonexistent/t" })");
  EXPECT_THAT(parsed.status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(parsed.status().message(), HasSubstr("bearer_token_file"));
}

TEST(RemoteWriteConfigTest, TheShardNameIsAnAggregatorLabelOfEveryEndpoint) {
  v1::AggregatorConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"(remote_write { url: "http://vm:8428/api/v1/write"
                       external_labels { key: "cluster" value: "c1" }
                       external_labels { key: "zone" value: "z" } }
         remote_write { url: "http://prom:9090/api/v1/write" })",
      &config));
  auto parsed = ParseRemoteWriteConfigs(config.remote_write(), "aggregator-2:7470");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  // Sorted by name, as the encoder's merge needs; the shard name apart from them, for the
  // aggregator's own series only.
  EXPECT_THAT(
      (*parsed)[0].endpoint.external_labels,
      ::testing::ElementsAre(::testing::Pair("cluster", "c1"), ::testing::Pair("zone", "z")));
  EXPECT_THAT((*parsed)[0].endpoint.aggregator_labels,
              ::testing::ElementsAre(::testing::Pair("shard", "aggregator-2:7470")));
  EXPECT_THAT((*parsed)[1].endpoint.external_labels, ::testing::IsEmpty());
  EXPECT_THAT((*parsed)[1].endpoint.aggregator_labels,
              ::testing::ElementsAre(::testing::Pair("shard", "aggregator-2:7470")));

  // Naming the shard twice is ambiguous: refused.
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"(remote_write { url: "http://vm" external_labels { key: "shard" value: "x" } })", &config));
  const absl::Status refused =
      ParseRemoteWriteConfigs(config.remote_write(), "aggregator-2:7470").status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("set `shard` instead"));
}

TEST(RemoteWriteConfigTest, NamesMustDiffer) {
  auto parsed = Parse(R"(remote_write { url: "http://vm/w" } remote_write { url: "http://vm/w" })");
  EXPECT_THAT(parsed.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(parsed.status().message(), HasSubstr("used twice"));
}

}  // namespace
}  // namespace fabricmon::remote_write
