// AggregatorServer: the configuration checks a start makes (what fabricmon-aggregator prints and
// exits 2 on), --check_config creating nothing, and a start on port 0 that listens, serves
// /metrics and stops.

#include "daemon/aggregator/aggregator_server.h"

#include <sys/stat.h>

#include <iterator>
#include <memory>
#include <set>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/common/clock.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/remote_write/encoder.h"
#include "daemon/remote_write/label_set.h"
#include "daemon/wire/aggregator_families.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::aggregator {
namespace {

using ::fabricmon::testing::TempTree;
using ::testing::HasSubstr;

v1::AggregatorConfig PlaintextConfig() {
  v1::AggregatorConfig config;
  config.mutable_tls()->set_insecure_plaintext(true);
  config.set_grpc_listen("127.0.0.1:0");
  config.set_metrics_listen("127.0.0.1:0");
  return config;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

TEST(AggregatorSettingsTest, DefaultsOfAPlaintextConfig) {
  v1::AggregatorConfig config;
  config.mutable_tls()->set_insecure_plaintext(true);
  absl::StatusOr<AggregatorSettings> settings = ResolveAggregatorSettings(config);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_TRUE(settings->security.plaintext);
  EXPECT_FALSE(settings->stream.require_peer_identity);
  EXPECT_EQ(settings->grpc_listen, "127.0.0.1:7470");
  EXPECT_EQ(settings->metrics_listen, "127.0.0.1:9470");
  EXPECT_EQ(settings->detector_tick_nanos, 1000000000);
  EXPECT_EQ(settings->store.series_retention_nanos, int64_t{900} * 1000000000);
  EXPECT_EQ(settings->store.node_retention_nanos, int64_t{86400} * 1000000000);
  EXPECT_EQ(settings->store.max_nodes, 20000u);
  EXPECT_FALSE(settings->recording.has_value());
  EXPECT_TRUE(settings->remote_write.empty());
}

TEST(AggregatorSettingsTest, RefusesWhatAStartRefuses) {
  struct Case {
    const char* what;
    void (*edit)(v1::AggregatorConfig&);
    const char* message;
  };
  const Case cases[] = {
      {"no TLS and no plaintext", [](v1::AggregatorConfig& c) { c.clear_tls(); },
       "no TLS configured"},
      {"series retention below a minute",
       [](v1::AggregatorConfig& c) { c.set_series_retention_s(5); },
       "series_retention_s must be 0 (keep forever) or at least 60, not 5"},
      {"node retention below ten minutes",
       [](v1::AggregatorConfig& c) { c.set_node_retention_s(60); },
       "node_retention_s must be 0 (keep forever) or at least 600, not 60"},
      {"a message bound below 64 KiB", [](v1::AggregatorConfig& c) { c.set_max_message_bytes(10); },
       "max_message_bytes must lie in"},
      {"recording bounds without a directory",
       [](v1::AggregatorConfig& c) { c.mutable_recording()->set_max_bytes(1 << 30); },
       "without a directory"},
      {"a role pattern that is not RE2",
       [](v1::AggregatorConfig& c) { c.mutable_authorization()->add_fabric_sweepers("(("); }, ""},
  };
  for (const Case& c : cases) {
    v1::AggregatorConfig config = PlaintextConfig();
    c.edit(config);
    absl::StatusOr<AggregatorSettings> settings = ResolveAggregatorSettings(config);
    ASSERT_FALSE(settings.ok()) << c.what;
    EXPECT_EQ(settings.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(settings.status().message(), HasSubstr(c.message)) << c.what;
  }
}

TEST(AggregatorServerTest, OperatorFilesThatCannotBeReadStopTheStart) {
  v1::AggregatorConfig config = PlaintextConfig();
  config.set_link_list_file("/nonexistent/links.txt");
  absl::StatusOr<AggregatorSettings> settings = ResolveAggregatorSettings(config);
  ASSERT_TRUE(settings.ok()) << settings.status();
  absl::StatusOr<std::unique_ptr<AggregatorServer>> server = AggregatorServer::Create(
      *std::move(settings), RealClock::Get(), AggregatorServer::Mode::kCheck);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("link_list_file: "));
  EXPECT_THAT(server.status().message(), HasSubstr("/nonexistent/links.txt"));
}

TEST(AggregatorServerTest, CheckModeCreatesNoRecordingAndCannotStart) {
  TempTree tree;
  v1::AggregatorConfig config = PlaintextConfig();
  const std::string directory = tree.root() + "/recording";
  config.mutable_recording()->set_directory(directory);
  absl::StatusOr<AggregatorSettings> settings = ResolveAggregatorSettings(config);
  ASSERT_TRUE(settings.ok()) << settings.status();
  absl::StatusOr<std::unique_ptr<AggregatorServer>> server = AggregatorServer::Create(
      *std::move(settings), RealClock::Get(), AggregatorServer::Mode::kCheck);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE(Exists(directory));
  EXPECT_EQ((*server)->Start().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AggregatorServerTest, StartsOnFreePortsServesMetricsAndStops) {
  TempTree tree;
  v1::AggregatorConfig config = PlaintextConfig();
  config.mutable_recording()->set_directory(tree.root() + "/recording");
  absl::StatusOr<AggregatorSettings> settings = ResolveAggregatorSettings(config);
  ASSERT_TRUE(settings.ok()) << settings.status();
  absl::StatusOr<std::unique_ptr<AggregatorServer>> server =
      AggregatorServer::Create(*std::move(settings), RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Exists(tree.root() + "/recording"));  // a start makes the directory
  ASSERT_TRUE((*server)->Start().ok());
  EXPECT_GT((*server)->grpc_port(), 0);
  ASSERT_GT((*server)->metrics_port(), 0);
  EXPECT_THAT((*server)->ReadyStatus(), HasSubstr("INSECURE plaintext"));
  absl::StatusOr<std::string> body =
      fabricmon::testing::HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  // The exporter's, the findings exporter's and the recording's families, all on one page.
  EXPECT_THAT(*body, HasSubstr("fabricmon_aggregator_streams"));
  EXPECT_THAT(*body, HasSubstr("fabricmon_detector_tick_seconds"));
  EXPECT_THAT(*body, HasSubstr("fabricmon_recording_active"));
  EXPECT_EQ((*server)->Start().code(), absl::StatusCode::kFailedPrecondition);
  (*server)->Shutdown();
  (*server)->Shutdown();  // idempotent
}

TEST(AggregatorServerTest, APortTakenIsUnavailable) {
  v1::AggregatorConfig first_config = PlaintextConfig();
  absl::StatusOr<AggregatorSettings> first_settings = ResolveAggregatorSettings(first_config);
  ASSERT_TRUE(first_settings.ok());
  auto first = AggregatorServer::Create(*std::move(first_settings), RealClock::Get());
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->Start().ok());

  v1::AggregatorConfig config = PlaintextConfig();
  config.set_metrics_listen("127.0.0.1:" + std::to_string((*first)->metrics_port()));
  absl::StatusOr<AggregatorSettings> settings = ResolveAggregatorSettings(config);
  ASSERT_TRUE(settings.ok());
  auto second = AggregatorServer::Create(*std::move(settings), RealClock::Get());
  ASSERT_TRUE(second.ok());
  absl::Status started = (*second)->Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kUnavailable) << started;
}

// The aggregator's half of the metric catalogue (daemon/wire/aggregator_families.h) is what its
// exporters write: every family of the exporter, the findings exporter, jobs, the recording and
// remote write, with the catalogue's HELP and type, and no catalogued family that none writes.
// The exporters name their families only through the catalogue's constants; this fails when one
// writes a family by hand that the catalogue lacks, or when a catalogued family is never written.
TEST(AggregatorServerTest, WritesExactlyTheCataloguedAggregatorFamilies) {
  TempTree tree;
  v1::AggregatorConfig config = PlaintextConfig();
  config.mutable_recording()->set_directory(tree.root() + "/recording");
  v1::RemoteWriteConfig* remote_write = config.add_remote_write();
  // Nothing listens there: the one sample below makes one failed request (code "error"), so that
  // the per-request family is written too.
  remote_write->set_url("http://127.0.0.1:1/api/v1/write");
  remote_write->mutable_queue()->set_max_samples_per_send(1);
  remote_write->mutable_queue()->set_flush_deadline_ms(0);
  // A bearer token file, so that its reload counter is written too.
  tree.WriteFile("token", "secret\n");
  remote_write->set_bearer_token_file(tree.root() + "/token");
  absl::StatusOr<AggregatorSettings> settings = ResolveAggregatorSettings(config);
  ASSERT_TRUE(settings.ok()) << settings.status();
  auto server = AggregatorServer::Create(*std::move(settings), RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->remote_write_feed(), nullptr);
  prometheus::MetricFamily x;
  x.name = "fabricmon_x";
  x.type = prometheus::MetricType::Gauge;
  x.metric.emplace_back().gauge.value = 1;
  (*server)->remote_write_feed()->ForwardFamilies({x}, RealClock::Get().NowUnixNanos());

  auto collect = [&] {
    std::vector<prometheus::MetricFamily> families = (*server)->exporter()->HealthFamilies();
    for (const std::shared_ptr<prometheus::Collectable>& collectable : (*server)->Collectables()) {
      for (prometheus::MetricFamily& family : collectable->Collect()) {
        families.push_back(std::move(family));
      }
    }
    return families;
  };
  std::vector<prometheus::MetricFamily> families;
  auto has_requests = [&] {
    for (const prometheus::MetricFamily& family : families) {
      if (family.name == wire::kRemoteWriteRequestsTotalFamily.name) {
        return true;
      }
    }
    return false;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (families = collect(); !has_requests() && absl::Now() < deadline; families = collect()) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  // The saturated-counter flag is written by the text exposition (for a node's saturated
  // counter), which this server has none of.
  prometheus::MetricFamily saturated;
  saturated.name = exposition::kSaturatedFamily;
  saturated.help = exposition::kSaturatedFamilyHelp;
  saturated.type = prometheus::MetricType::Gauge;
  families.push_back(saturated);

  std::set<std::string> written;
  for (const prometheus::MetricFamily& family : families) {
    written.insert(family.name);
    const wire::CatalogueFamily* catalogued = wire::FindAggregatorFamily(family.name);
    ASSERT_NE(catalogued, nullptr) << family.name << " is written but not catalogued";
    EXPECT_EQ(catalogued->help, family.help) << family.name;
    EXPECT_EQ(catalogued->type == collectors::MetricType::kCounter,
              family.type == prometheus::MetricType::Counter)
        << family.name;
    EXPECT_TRUE(wire::IsReservedFamily(family.name)) << family.name << ": an agent could forge it";
    EXPECT_EQ(wire::MetricCatalogue::Project().Find(family.name), nullptr) << family.name;
  }
  for (const wire::CatalogueFamily& family : wire::AggregatorFamilies()) {
    EXPECT_EQ(written.count(family.name), 1u) << family.name << " is catalogued but not written";
  }
  EXPECT_EQ(written.size(), std::size(wire::kAggregatorFamilies));
}

}  // namespace
}  // namespace fabricmon::aggregator
