// The aggregator's /metrics server (MetricsServer: prometheus-cpp's Exposer with fabricmon's own
// text writer on GET /metrics) over real HTTP on loopback: the body is byte for byte what
// prometheus-cpp's TextSerializer writes for the same collectables, gzip when the scraper asks
// for it, everything else left to the Exposer, and two servers in one process keep apart.

#include "daemon/aggregator/metrics_server.h"

#include <zlib.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectors/core/sample.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/store/series_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/loopback.h"

namespace fabricmon::aggregator {
namespace {

using ::fabricmon::testing::HttpFetch;
using ::fabricmon::testing::HttpResponse;
using ::testing::HasSubstr;
using ::testing::Not;

std::string PrometheusCpp(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

std::string Gunzip(const std::string& compressed) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK) {
    return "<inflateInit2 failed>";
  }
  std::string out;
  char buffer[65536];
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  int result = Z_OK;
  while (result == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    result = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - stream.avail_out);
  }
  inflateEnd(&stream);
  return result == Z_STREAM_END ? out : "<corrupt gzip>";
}

// Stands in for the detection engine: another collectable served after the exporter.
class FindingsLike final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily family;
    family.name = "fabricmon_finding_active";
    family.help = "Findings holding now.";
    family.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric metric;
    metric.label = {{"kind", "link_flapping"}, {"subject", "leaf1/7"}};
    metric.gauge.value = 1;
    family.metric.push_back(metric);
    return {family};
  }
};

// A collectable with nothing to say (an engine before its first finding): an empty piece.
class Silent final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override { return {}; }
};

// A store with `nodes` nodes of `series` counters each, every series with one sample.
struct Store {
  explicit Store(int nodes, int series, const std::string& prefix) {
    for (int n = 0; n < nodes; ++n) {
      v1::Hello hello;
      hello.set_node_name(absl::StrCat(prefix, n));
      hello.set_agent_instance_id(n + 1);
      hello.set_boot_id("boot");
      auto attached = store.Attach(
          hello, n + 1, [] {}, clock.NowUnixNanos());
      EXPECT_TRUE(attached.ok()) << attached.status();
      std::vector<uint32_t> indices;
      std::vector<uint64_t> values;
      for (int s = 0; s < series; ++s) {
        auto index = attached->node->Declare(collectors::CounterSeries(
            "ib_sysfs", "fabricmon_ib_port_rcv_data_bytes_total", "Received \"data\".",
            collectors::Unit::kBytes, 64, collectors::Overflow::kWraps, 4.0,
            {{"device", "mlx5_0"}, {"port", absl::StrCat(s + 1)}}));
        EXPECT_TRUE(index.ok()) << index.status();
        indices.push_back(*index);
        values.push_back(1000 * (s + 1) + n);
      }
      attached->node->AppendBatch(1, 0, clock.NowUnixNanos(), indices, values,
                                  std::vector<bool>(indices.size(), true), clock.NowUnixNanos());
    }
    exporter = std::make_shared<MetricsExporter>(store, stats, clock, ExporterOptions{});
  }

  // What prometheus-cpp's own handler would serve for the exporter then `others`.
  std::string Reference(const std::vector<std::shared_ptr<prometheus::Collectable>>& others) {
    std::vector<prometheus::MetricFamily> families = exporter->Collect();
    for (const auto& other : others) {
      for (prometheus::MetricFamily& family : other->Collect()) {
        families.push_back(std::move(family));
      }
    }
    return PrometheusCpp(families);
  }

  testing::FakeClock clock;
  store::SeriesStore store{store::StoreOptions{}};
  IngestStats stats;
  std::shared_ptr<MetricsExporter> exporter;
};

std::unique_ptr<MetricsServer> Listen() {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Listen("127.0.0.1:0");
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(MetricsServerTest, ServesWhatPrometheusCppWouldWriteForTheSameCollectables) {
  Store store(3, 20, "gpu-");
  std::unique_ptr<MetricsServer> server = Listen();
  ASSERT_NE(server, nullptr);
  const std::vector<std::shared_ptr<prometheus::Collectable>> others = {
      std::make_shared<FindingsLike>()};
  server->Serve(store.exporter, others);

  absl::StatusOr<HttpResponse> response = HttpFetch(server->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_THAT(response->headers, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(response->headers, Not(HasSubstr("Content-Encoding")));
  EXPECT_EQ(response->body, store.Reference(others));
  EXPECT_THAT(response->body,
              HasSubstr("fabricmon_ib_port_rcv_data_bytes_total{node=\"gpu-2\",device=\"mlx5_0\","
                        "port=\"20\"} 80008"));
  EXPECT_THAT(response->body, HasSubstr("fabricmon_finding_active{kind=\"link_flapping\""));
  EXPECT_EQ(server->fast_scrapes(), 1u);
}

TEST(MetricsServerTest, CompressesWithGzipWhenTheScraperAcceptsIt) {
  Store store(2, 500, "gpu-");
  std::unique_ptr<MetricsServer> server = Listen();
  ASSERT_NE(server, nullptr);
  const std::vector<std::shared_ptr<prometheus::Collectable>> others = {
      std::make_shared<Silent>(), std::make_shared<FindingsLike>(), std::make_shared<Silent>()};
  server->Serve(store.exporter, others);

  // As Prometheus asks.
  absl::StatusOr<HttpResponse> response =
      HttpFetch(server->port(), "/metrics",
                {"Accept-Encoding: gzip",
                 "Accept: application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_THAT(response->headers, HasSubstr("Content-Encoding: gzip"));
  EXPECT_THAT(response->headers,
              HasSubstr(absl::StrCat("Content-Length: ", response->body.size())));
  const std::string text = Gunzip(response->body);
  EXPECT_EQ(text, store.Reference(others));
  EXPECT_LT(response->body.size() * 4, text.size());  // it did compress
}

TEST(MetricsServerTest, SendsTextAboveTheGzipLimitUncompressed) {
  Store store(2, 500, "gpu-");
  MetricsServerOptions options;
  options.gzip_max_bytes = 1000;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Listen("127.0.0.1:0", options);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->Serve(store.exporter, {});
  absl::StatusOr<HttpResponse> response =
      HttpFetch((*server)->port(), "/metrics", {"Accept-Encoding: gzip"});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_THAT(response->headers, Not(HasSubstr("Content-Encoding")));
  EXPECT_GT(response->body.size(), 1000u);
  EXPECT_EQ(response->body, store.Reference({}));
}

TEST(MetricsServerTest, LeavesOutSeriesGoneFromTheirCollectorsLastCycle) {
  Store store(1, 3, "gpu-");
  std::shared_ptr<store::NodeState> node = store.store.Find("gpu-0");
  ASSERT_NE(node, nullptr);
  // The next cycle of the collector has ports 1 and 2 only.
  node->AppendBatch(2, 0, store.clock.NowUnixNanos(), {0, 1}, {5, 6}, {true, true},
                    store.clock.NowUnixNanos());
  std::unique_ptr<MetricsServer> server = Listen();
  ASSERT_NE(server, nullptr);
  server->Serve(store.exporter, {});
  absl::StatusOr<HttpResponse> response = HttpFetch(server->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->body, HasSubstr("port=\"2\"} 24"));
  EXPECT_THAT(response->body, Not(HasSubstr("port=\"3\"")));
  EXPECT_EQ(response->body, store.Reference({}));  // Collect() leaves it out too
}

TEST(MetricsServerTest, LeavesOtherRequestsToTheExposer) {
  Store store(1, 3, "gpu-");
  std::unique_ptr<MetricsServer> server = Listen();
  ASSERT_NE(server, nullptr);
  server->Serve(store.exporter, {});

  absl::StatusOr<HttpResponse> other = HttpFetch(server->port(), "/not-metrics");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->status, 404);
  absl::StatusOr<HttpResponse> query = HttpFetch(server->port(), "/metrics?debug=1");
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->status, 200);  // the query string does not change the path
  EXPECT_EQ(query->body, store.Reference({}));
  EXPECT_EQ(server->fast_scrapes(), 1u);
}

TEST(MetricsServerTest, ServeReplacesAndClearEmpties) {
  Store first(1, 2, "old-");
  Store second(1, 2, "new-");
  std::unique_ptr<MetricsServer> server = Listen();
  ASSERT_NE(server, nullptr);

  server->Serve(first.exporter, {});
  absl::StatusOr<HttpResponse> before = HttpFetch(server->port(), "/metrics");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_THAT(before->body, HasSubstr("node=\"old-0\""));

  server->Serve(second.exporter, {});
  absl::StatusOr<HttpResponse> after = HttpFetch(server->port(), "/metrics");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(after->body, HasSubstr("node=\"new-0\""));
  EXPECT_THAT(after->body, Not(HasSubstr("old-0")));

  // Nothing served: the Exposer answers with no families (its own exposer_* aside).
  server->Clear();
  absl::StatusOr<HttpResponse> cleared = HttpFetch(server->port(), "/metrics");
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_EQ(cleared->status, 200);
  EXPECT_THAT(cleared->body, Not(HasSubstr("fabricmon_")));
  EXPECT_EQ(server->fast_scrapes(), 2u);
}

TEST(MetricsServerTest, TwoServersInOneProcessServeTheirOwnStores) {
  Store a(1, 2, "alpha-");
  Store b(1, 2, "beta-");
  std::unique_ptr<MetricsServer> server_a = Listen();
  std::unique_ptr<MetricsServer> server_b = Listen();
  ASSERT_NE(server_a, nullptr);
  ASSERT_NE(server_b, nullptr);
  server_a->Serve(a.exporter, {});
  server_b->Serve(b.exporter, {});
  absl::StatusOr<HttpResponse> from_a = HttpFetch(server_a->port(), "/metrics");
  absl::StatusOr<HttpResponse> from_b = HttpFetch(server_b->port(), "/metrics");
  ASSERT_TRUE(from_a.ok() && from_b.ok());
  EXPECT_EQ(from_a->body, a.Reference({}));
  EXPECT_EQ(from_b->body, b.Reference({}));
  // One gone, the other still serves.
  server_a.reset();
  absl::StatusOr<HttpResponse> again = HttpFetch(server_b->port(), "/metrics");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->body, b.Reference({}));
}

TEST(MetricsServerTest, AnAddressItCannotBindIsUnavailableNotAnException) {
  std::unique_ptr<MetricsServer> taken = Listen();
  ASSERT_NE(taken, nullptr);
  absl::StatusOr<std::unique_ptr<MetricsServer>> second =
      MetricsServer::Listen(absl::StrCat("127.0.0.1:", taken->port()));
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen on"));
}

}  // namespace
}  // namespace fabricmon::aggregator
