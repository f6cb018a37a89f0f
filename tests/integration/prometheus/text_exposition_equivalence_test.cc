// exposition::AppendText (fabricmon's serializer, used by SerializeText) must write byte for byte
// what prometheus-cpp's TextSerializer writes, since the aggregator's /metrics may be served by
// either: compared here on randomized families of every metric type (escapes, UTF-8, NaN/Inf,
// ±0, integers around the %.16g exponent threshold, random bit patterns, timestamps), and on the
// real collector's output for a captured DGX H100 tree.
//
// Also checks MetricsExporter::AppendText, which writes the aggregator's exposition straight from
// the series store, against prometheus::TextSerializer on MetricsExporter::Collect().

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "collectors/core/recording_sink.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/metrics_exporter.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/store/series_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::exposition {
namespace {

std::string PrometheusCpp(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

std::string Ours(const std::vector<prometheus::MetricFamily>& families) {
  std::string out;
  AppendText(families, &out);
  return out;
}

class Randomizer {
 public:
  explicit Randomizer(uint32_t seed) : rng_(seed) {}

  double Value() {
    static const double kSpecial[] = {0.0,
                                      -0.0,
                                      1.0,
                                      -1.0,
                                      0.5,
                                      0.1,
                                      0.1 + 0.2,
                                      1.0 / 3,
                                      1e-7,
                                      123456789.125,
                                      9007199254740992.0,  // 2^53
                                      9007199254740993.0,  // rounds to 2^53
                                      9999999999999998.0,  // < 1e16: integer form
                                      1e16,                // exponent form
                                      -1e16,
                                      1e17,
                                      18446744073709551615.0,
                                      std::numeric_limits<double>::max(),
                                      std::numeric_limits<double>::min(),
                                      std::numeric_limits<double>::denorm_min(),
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::quiet_NaN()};
    switch (rng_() % 5) {
      case 0:
        return kSpecial[rng_() % (sizeof(kSpecial) / sizeof(kSpecial[0]))];
      case 1:
        return static_cast<double>(rng_() % 100000);  // small counters
      case 2:
        return static_cast<double>(static_cast<int64_t>(rng_() << 20 | rng_())) * 4;  // bytes
      case 3: {
        uint64_t bits = static_cast<uint64_t>(rng_()) << 32 | rng_();
        double d;
        std::memcpy(&d, &bits, sizeof(d));
        return d;  // any bit pattern, NaN payloads included
      }
      default:
        return static_cast<double>(rng_() % 1000000) / 1000.0;  // seconds, ratios
    }
  }

  std::string Text(bool allow_special) {
    static const char* kPieces[] = {"mlx5_0", "1",   "",  "a\"b", "back\\slash", "new\nline",
                                    "×4 µs",  "ünï", "x", "0x1b", "\\\"\n",      "{},="};
    std::string out;
    const int n = static_cast<int>(rng_() % 3);
    for (int i = 0; i <= n; ++i) {
      out += allow_special ? kPieces[rng_() % 12] : kPieces[rng_() % 3];
    }
    return out;
  }

  prometheus::ClientMetric Metric(prometheus::MetricType type) {
    prometheus::ClientMetric metric;
    const int labels = static_cast<int>(rng_() % 4);
    for (int i = 0; i < labels; ++i) {
      metric.label.push_back({"l" + std::to_string(i), Text(true)});
    }
    if (rng_() % 4 == 0) {
      metric.timestamp_ms = static_cast<int64_t>(rng_()) * ((rng_() % 2) ? 1000 : -1);
    }
    metric.counter.value = Value();
    metric.gauge.value = Value();
    metric.untyped.value = Value();
    if (type == prometheus::MetricType::Summary) {
      metric.summary.sample_count = rng_();
      metric.summary.sample_sum = Value();
      for (int i = static_cast<int>(rng_() % 4); i > 0; --i) {
        metric.summary.quantile.push_back({Value(), Value()});
      }
    }
    if (type == prometheus::MetricType::Histogram) {
      metric.histogram.sample_count = static_cast<uint64_t>(rng_()) << 20;
      metric.histogram.sample_sum = Value();
      for (int i = static_cast<int>(rng_() % 5); i > 0; --i) {
        metric.histogram.bucket.push_back({rng_(), Value()});
      }
      if (rng_() % 2) {
        metric.histogram.bucket.push_back({rng_(), std::numeric_limits<double>::infinity()});
      }
    }
    return metric;
  }

  std::vector<prometheus::MetricFamily> Families() {
    static const prometheus::MetricType kTypes[] = {
        prometheus::MetricType::Counter, prometheus::MetricType::Gauge,
        prometheus::MetricType::Summary, prometheus::MetricType::Untyped,
        prometheus::MetricType::Histogram};
    std::vector<prometheus::MetricFamily> families;
    for (int f = static_cast<int>(rng_() % 6); f > 0; --f) {
      prometheus::MetricFamily family;
      family.name = "fabricmon_family_" + std::to_string(rng_() % 100);
      family.help = rng_() % 3 ? Text(false) + " help" : "";
      family.type = kTypes[rng_() % 5];
      for (int m = static_cast<int>(rng_() % 6); m > 0; --m) {
        family.metric.push_back(Metric(family.type));
      }
      families.push_back(std::move(family));
    }
    return families;
  }

 private:
  std::mt19937 rng_;
};

TEST(TextExpositionEquivalenceTest, RandomFamiliesMatchPrometheusCppByteForByte) {
  Randomizer random(20240611);
  for (int round = 0; round < 3000; ++round) {
    const std::vector<prometheus::MetricFamily> families = random.Families();
    ASSERT_EQ(Ours(families), PrometheusCpp(families)) << "round " << round;
  }
}

TEST(TextExpositionEquivalenceTest, AppendsToExistingText) {
  Randomizer random(7);
  const std::vector<prometheus::MetricFamily> families = random.Families();
  std::string out = "# prefix\n";
  AppendText(families, &out);
  EXPECT_EQ(out, "# prefix\n" + PrometheusCpp(families));
}

TEST(TextExpositionEquivalenceTest, CapturedDgxNodeMatchesPrometheusCpp) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(testing::SharedFixture("sysfs/gpud-h100/sys"));
  auto collector = collectors::IbSysfsCollector::Create(config);
  ASSERT_TRUE(collector.ok()) << collector.status();
  v1::Inventory inventory;
  ASSERT_TRUE((*collector)->Discover(inventory).ok());
  collectors::RecordingSink sink;
  ASSERT_TRUE((*collector)->Collect(sink).ok());
  ASSERT_GT(sink.samples().size(), 400u);
  const auto families = BuildFamilies(sink.samples(), {{"node", "gpu-node-1"}});
  EXPECT_EQ(SerializeText(families), PrometheusCpp(families));
}

// MetricsExporter::AppendText (straight from the store) against TextSerializer on Collect():
// nodes with the captured DGX series (saturated counters included), a node that went stale (its
// series are not exported), label values that need escaping, and the aggregator's own families.
TEST(TextExpositionEquivalenceTest, ExporterDirectTextEqualsSerializedCollect) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(testing::SharedFixture("sysfs/gpud-h100/sys"));
  auto collector = collectors::IbSysfsCollector::Create(config);
  ASSERT_TRUE(collector.ok()) << collector.status();
  v1::Inventory inventory;
  ASSERT_TRUE((*collector)->Discover(inventory).ok());
  collectors::RecordingSink sink;
  ASSERT_TRUE((*collector)->Collect(sink).ok());
  std::vector<collectors::RecordedSample> samples = sink.Take();
  samples.push_back(
      {collectors::GaugeSeries("test", "fabricmon_test_odd_labels", "Odd \"help\".",
                               collectors::Unit::kNone, 0.001, {{"path", "C:\\dir \"x\"\nline"}}),
       uint64_t{12345}});

  testing::FakeClock clock;
  store::SeriesStore store(store::StoreOptions{});
  aggregator::IngestStats stats;
  stats.samples = 42;
  const char* names[] = {"gpu-b", "gpu-a", "gpu-stale", "gpu-c"};
  for (int n = 0; n < 4; ++n) {
    v1::Hello hello;
    hello.set_node_name(names[n]);
    hello.set_agent_instance_id(n + 1);
    hello.set_boot_id("boot");
    auto attached = store.Attach(
        hello, n + 1, [] {}, clock.NowUnixNanos());
    ASSERT_TRUE(attached.ok());
    std::vector<uint32_t> indices;
    std::vector<uint64_t> values;
    // Nodes declare different subsets, so families start in different nodes.
    for (size_t i = n % 2; i < samples.size(); i += 1 + (n == 3)) {
      auto index = attached->node->Declare(samples[i].series);
      ASSERT_TRUE(index.ok());
      indices.push_back(*index);
      values.push_back(samples[i].raw_value + (samples[i].series.IsSaturated(samples[i].raw_value)
                                                   ? 0
                                                   : static_cast<uint64_t>(n)));
    }
    attached->node->AppendBatch(1, 0, clock.NowUnixNanos(), indices, values,
                                std::vector<bool>(indices.size(), true), clock.NowUnixNanos());
    if (n == 2) {
      store.Detach(*attached->node, n + 1, clock.NowUnixNanos());
    }
  }
  aggregator::MetricsExporter exporter(store, stats, clock, aggregator::ExporterOptions{});
  std::string direct;
  exporter.AppendText(&direct);
  const std::string reference = PrometheusCpp(exporter.Collect());
  EXPECT_EQ(direct, reference);
  EXPECT_THAT(direct, ::testing::HasSubstr("fabricmon_series_saturated{node=\"gpu-a\""));
  EXPECT_THAT(direct, ::testing::Not(::testing::HasSubstr("{node=\"gpu-stale\",device")));
  EXPECT_THAT(direct, ::testing::HasSubstr("fabricmon_node_up{node=\"gpu-stale\"} 0"));
}

}  // namespace
}  // namespace fabricmon::exposition
