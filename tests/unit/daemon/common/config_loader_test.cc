#include "daemon/common/config_loader.h"

#include "fabricmon/v1/config.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon {
namespace {

using testing::StatusIs;

TEST(ConfigLoaderTest, ShippedExamplesParse) {
  v1::AgentConfig agent;
  FABRICMON_ASSERT_OK(LoadTextConfig(testing::SourcePath("deploy/config/agent.textproto"), &agent));
  EXPECT_EQ(agent.collectors().ib_sysfs().devices().exclude(), "mlx5_(10|11)");
  v1::AggregatorConfig aggregator;
  FABRICMON_ASSERT_OK(
      LoadTextConfig(testing::SourcePath("deploy/config/aggregator.textproto"), &aggregator));
  EXPECT_EQ(aggregator.grpc_listen(), "0.0.0.0:7470");
}

TEST(ConfigLoaderTest, UnknownFieldIsAnErrorWithLocation) {
  v1::AgentConfig config;
  absl::Status status =
      ParseTextConfig("aggregator: \"a:1\"\nagregator: \"typo\"\n", "a.textproto", &config);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(status.message().find("a.textproto:2"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("agregator"), absl::string_view::npos) << status;
}

TEST(ConfigLoaderTest, WrongTypeAndSyntaxErrorsAreInvalidArgument) {
  v1::AgentConfig config;
  EXPECT_THAT(ParseTextConfig("replay_buffer_bytes: \"lots\"", "x", &config),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseTextConfig("collectors { ib_sysfs { ", "x", &config),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ConfigLoaderTest, MissingFileIsNotFound) {
  v1::AgentConfig config;
  EXPECT_THAT(LoadTextConfig("/nonexistent/agent.textproto", &config),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(ConfigLoaderTest, EmptyConfigIsAllDefaults) {
  v1::AgentConfig config;
  FABRICMON_ASSERT_OK(ParseTextConfig("", "empty", &config));
  EXPECT_FALSE(config.collectors().ib_sysfs().has_enabled());
}

}  // namespace
}  // namespace fabricmon
