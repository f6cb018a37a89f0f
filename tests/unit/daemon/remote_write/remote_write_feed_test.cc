#include "daemon/aggregator/remote_write_feed.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "collectors/core/sample.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/capturing_sender.h"
#include "tests/testing/fake_clock.h"

namespace fabricmon::aggregator {
namespace {

using remote_write::LabelPairs;
using store::NodeState;
using store::SlotRef;

struct Received {
  LabelPairs labels;
  int64_t timestamp_ms;
  double value;
};

// Node name → its samples (timestamp ms, value) in arrival order.
using SamplesByNode = std::map<std::string, std::vector<std::pair<int64_t, double>>>;

// The same nodes, each with the same samples in the same order (a staleness marker matching
// one).
void ExpectSamplesByNode(const SamplesByNode& got, const SamplesByNode& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [node, samples] : expected) {
    const auto it = got.find(node);
    ASSERT_NE(it, got.end()) << node;
    ASSERT_EQ(it->second.size(), samples.size()) << node;
    for (size_t k = 0; k < samples.size(); ++k) {
      EXPECT_EQ(it->second[k].first, samples[k].first) << node << " " << k;
      if (remote_write::IsStaleNaN(samples[k].second)) {
        EXPECT_TRUE(remote_write::IsStaleNaN(it->second[k].second)) << node << " " << k;
      } else {
        EXPECT_EQ(it->second[k].second, samples[k].second) << node << " " << k;
      }
    }
  }
}

class RemoteWriteFeedTest : public ::testing::Test {
 protected:
  std::unique_ptr<RemoteWriteFeed> MakeFeed(LabelPairs external = {},
                                            LabelPairs aggregator_labels = {}) {
    remote_write::QueueOptions queue;
    queue.shards = 2;
    std::vector<RemoteWriteFeed::EndpointEntry> endpoints;
    endpoints.push_back(
        Entry({"test", std::move(external), queue, std::move(aggregator_labels)}, bodies_));
    return std::make_unique<RemoteWriteFeed>(std::move(endpoints), clock_);
  }
  // An endpoint whose requests' bodies go to `bodies`.
  RemoteWriteFeed::EndpointEntry Entry(remote_write::EndpointOptions options,
                                       std::vector<std::string>& bodies) {
    auto endpoint = remote_write::Endpoint::Create(
        std::move(options),
        [this, &bodies]() -> absl::StatusOr<std::unique_ptr<remote_write::Sender>> {
          return std::unique_ptr<remote_write::Sender>(
              std::make_unique<testing::CapturingSender>(bodies, mu_));
        },
        clock_);
    EXPECT_TRUE(endpoint.ok());
    RemoteWriteFeed::EndpointEntry entry;
    entry.endpoint = *std::move(endpoint);
    entry.flush_deadline_nanos = int64_t{5} * 1000000000;
    return entry;
  }
  // Everything the receiver got, by series (labels as "k=v,..."), in arrival order.
  std::map<std::string, std::vector<Received>> ReceivedBySeries() {
    absl::MutexLock lock(&mu_);
    std::map<std::string, std::vector<Received>> out;
    for (const std::string& body : bodies_) {
      auto request = remote_write::DecodeWriteRequest(body);
      EXPECT_TRUE(request.ok());
      for (const auto& series : request->timeseries()) {
        LabelPairs labels;
        std::string key;
        for (const auto& label : series.labels()) {
          labels.emplace_back(label.name(), label.value());
          key += label.name() + "=" + label.value() + ",";
        }
        for (const auto& sample : series.samples()) {
          out[key].push_back({labels, sample.timestamp(), sample.value()});
        }
      }
    }
    return out;
  }

  testing::FakeClock clock_;
  absl::Mutex mu_;
  std::vector<std::string> bodies_;
};

TEST_F(RemoteWriteFeedTest, SendsStoredSamplesAsMetricsShowsThemAtTheirTimestamps) {
  NodeState node("gpu-node-1", 4, 1000);
  const collectors::SeriesDesc bytes = collectors::CounterSeries(
      "ib_sysfs", "fabricmon_ib_port_xmit_data_bytes_total", "h", collectors::Unit::kBytes, 64,
      collectors::Overflow::kWraps, 4.0, {{"device", "mlx5_0"}, {"port", "1"}});
  const collectors::SeriesDesc temp =
      collectors::GaugeSeries("ib_sysfs", "fabricmon_ib_port_state", "h", collectors::Unit::kNone,
                              1.0, {{"port", "1"}, {"device", "mlx5_0"}});
  auto a = node.DeclareSlot(bytes, 0);
  auto b = node.DeclareSlot(temp, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<SlotRef> slots = {*a, *b};
  auto feed = MakeFeed({{"cluster", "c1"}, {"node", "external-never-wins"}});
  auto stream = feed->OpenStream();
  const int64_t t0 = clock_.NowUnixNanos() - 2'000'000'123;  // the agent's timestamps
  const int64_t t1 = t0 + 1'000'000'000;
  ASSERT_TRUE(node.AppendBatchToSlots(1, 0, t0, slots, std::vector<uint64_t>{100, 4}, {true, true},
                                      clock_.NowUnixNanos())
                  .stored);
  stream->OnStored(node, slots, {true, true}, nullptr);
  ASSERT_TRUE(node.AppendBatchToSlots(2, 0, t1, slots, std::vector<uint64_t>{250, 0}, {true, false},
                                      clock_.NowUnixNanos())
                  .stored);
  stream->OnStored(node, slots, {true, false}, nullptr);
  feed->Shutdown();

  auto received = ReceivedBySeries();
  ASSERT_EQ(received.size(), 2u);
  const std::string bytes_key =
      "__name__=fabricmon_ib_port_xmit_data_bytes_total,cluster=c1,device=mlx5_0,"
      "node=gpu-node-1,port=1,";
  ASSERT_TRUE(received.count(bytes_key)) << received.begin()->first;
  const auto& counter = received[bytes_key];
  ASSERT_EQ(counter.size(), 2u);
  EXPECT_EQ(counter[0].timestamp_ms, t0 / 1000000);  // the agent's time, to the millisecond
  EXPECT_EQ(counter[0].value, 400);                  // raw × scale, as /metrics exports it
  EXPECT_EQ(counter[1].timestamp_ms, t1 / 1000000);
  EXPECT_EQ(counter[1].value, 1000);
  const std::string state_key =
      "__name__=fabricmon_ib_port_state,cluster=c1,device=mlx5_0,node=gpu-node-1,port=1,";
  ASSERT_TRUE(received.count(state_key));
  ASSERT_EQ(received[state_key].size(), 1u);  // absent from the second batch: nothing sent
  EXPECT_EQ(received[state_key][0].value, 4);
}

// The feed keeps each slot's scale rather than reading the description for every sample: a
// series declared again with another scale (an agent upgrade; same slot, same generation) must
// send its values at the new one from its next sample.
TEST_F(RemoteWriteFeedTest, ASeriesDeclaredAgainWithAnotherScaleSendsItsNewValues) {
  NodeState node("gpu-node-1", 4, 1000);
  auto declare = [&](double scale) {
    return node.DeclareSlot(
        collectors::CounterSeries("ib_sysfs", "fabricmon_ib_port_xmit_data_bytes_total", "h",
                                  collectors::Unit::kBytes, 64, collectors::Overflow::kWraps, scale,
                                  {{"device", "mlx5_0"}, {"port", "1"}}),
        0);
  };
  auto before = declare(4.0);
  ASSERT_TRUE(before.ok());
  auto feed = MakeFeed();
  auto stream = feed->OpenStream();
  const int64_t t0 = clock_.NowUnixNanos() - 2'000'000'000;
  ASSERT_TRUE(node.AppendBatchToSlots(1, 0, t0, {*before}, std::vector<uint64_t>{100}, {true},
                                      clock_.NowUnixNanos())
                  .stored);
  stream->OnStored(node, {*before}, {true}, nullptr);
  auto after = declare(0.5);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->index, before->index);
  ASSERT_EQ(after->generation, before->generation);
  ASSERT_TRUE(node.AppendBatchToSlots(2, 0, t0 + 1'000'000'000, {*after},
                                      std::vector<uint64_t>{100}, {true}, clock_.NowUnixNanos())
                  .stored);
  stream->OnStored(node, {*after}, {true}, nullptr);
  feed->Shutdown();

  auto received = ReceivedBySeries();
  ASSERT_EQ(received.size(), 1u);
  const auto& samples = received.begin()->second;
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].value, 400);
  EXPECT_EQ(samples[1].value, 50) << "the value at the scale it was declared with last";
}

TEST_F(RemoteWriteFeedTest, APinnedSaturatingCounterIsFlaggedUntilItMovesAgain) {
  NodeState node("n", 4, 1000);
  auto a = node.DeclareSlot(
      collectors::CounterSeries("ib_sysfs", "fabricmon_ib_port_symbol_errors_total", "h",
                                collectors::Unit::kNone, 16, collectors::Overflow::kSaturates, 1.0,
                                {{"device", "mlx5_0"}}),
      0);
  ASSERT_TRUE(a.ok());
  auto feed = MakeFeed();
  auto stream = feed->OpenStream();
  const int64_t t0 = clock_.NowUnixNanos();
  uint64_t sequence = 0;
  for (uint64_t raw : {uint64_t{65535}, uint64_t{65535}, uint64_t{3}, uint64_t{4}}) {
    ++sequence;
    ASSERT_TRUE(node.AppendBatchToSlots(sequence, 0, t0 + sequence * 1'000'000'000, {*a},
                                        std::vector<uint64_t>{raw}, {true}, t0)
                    .stored);
    stream->OnStored(node, {*a}, {true}, nullptr);
  }
  feed->Shutdown();
  auto received = ReceivedBySeries();
  const auto& flag = received
      ["__name__=fabricmon_series_saturated,device=mlx5_0,"
       "metric=fabricmon_ib_port_symbol_errors_total,node=n,"];
  ASSERT_EQ(flag.size(), 3u);  // pinned twice, then the end of the flag; nothing after
  EXPECT_EQ(flag[0].value, 1);
  EXPECT_EQ(flag[1].value, 1);
  EXPECT_TRUE(remote_write::IsStaleNaN(flag[2].value));
  EXPECT_EQ(flag[2].timestamp_ms, (t0 + 3'000'000'000) / 1000000);
  EXPECT_EQ(received["__name__=fabricmon_ib_port_symbol_errors_total,device=mlx5_0,node=n,"].size(),
            4u);
}

// The feed reads a series' labels from its slot's description and the node it was stored for
// whenever it needs them (a layout's template built, a batch no template matches): a stream's
// slots stored for another node go under that node's name, templated batches included, and back.
TEST_F(RemoteWriteFeedTest, SamplesGoUnderTheNodeTheyWereStoredFor) {
  const collectors::SeriesDesc desc = collectors::CounterSeries(
      "ib_sysfs", "fabricmon_ib_port_symbol_errors_total", "h", collectors::Unit::kNone, 16,
      collectors::Overflow::kSaturates, 1.0, {{"device", "mlx5_0"}});
  NodeState a("node-a", 4, 1000);
  NodeState b("node-b", 4, 1000);
  auto slot_a = a.DeclareSlot(desc, 0);
  auto slot_b = b.DeclareSlot(desc, 0);
  ASSERT_TRUE(slot_a.ok() && slot_b.ok());
  ASSERT_EQ(slot_a->index, slot_b->index);
  auto feed = MakeFeed();
  auto stream = feed->OpenStream();
  const int64_t t0 = clock_.NowUnixNanos();
  SamplesByNode expected;
  uint64_t sequence = 0;
  for (NodeState* node : {&a, &a, &a, &b, &b, &b, &a, &a}) {
    ++sequence;
    const int64_t t = t0 + static_cast<int64_t>(sequence) * 1'000'000'000;
    const SlotRef slot = node == &a ? *slot_a : *slot_b;
    // Pinned every other batch: the saturation flag's labels name the node too.
    const uint64_t raw = sequence % 2 == 0 ? 65535 : sequence;
    ASSERT_TRUE(
        node->AppendBatchToSlots(sequence, 0, t, {slot}, std::vector<uint64_t>{raw}, {true}, t0)
            .stored);
    stream->OnStored(*node, {slot}, {true}, nullptr);
    expected[node->name()].emplace_back(t / 1000000, static_cast<double>(raw));
  }
  feed->Shutdown();
  auto received = ReceivedBySeries();
  SamplesByNode got;
  size_t flags = 0;
  for (const auto& [key, samples] : received) {
    if (key.find("fabricmon_series_saturated") != std::string::npos) {
      flags += samples.size();
      continue;
    }
    for (const Received& sample : samples) {
      for (const auto& [name, value] : sample.labels) {
        if (name == "node") {
          got[value].emplace_back(sample.timestamp_ms, sample.value);
        }
      }
    }
  }
  ExpectSamplesByNode(got, expected);
  const auto& flag_a = received
      ["__name__=fabricmon_series_saturated,device=mlx5_0,"
       "metric=fabricmon_ib_port_symbol_errors_total,node=node-a,"];
  const auto& flag_b = received
      ["__name__=fabricmon_series_saturated,device=mlx5_0,"
       "metric=fabricmon_ib_port_symbol_errors_total,node=node-b,"];
  EXPECT_EQ(flag_a.size() + flag_b.size(), flags);
  EXPECT_FALSE(flag_b.empty());
  EXPECT_FALSE(flag_a.empty());
}

// A node's series (its counters, their saturation flag) must be the same series whatever shard
// stored it, so a batch replayed to another shard is an exact duplicate: no `shard` label on
// them. The aggregator's own families are per shard and carry it.
TEST_F(RemoteWriteFeedTest, TheShardLabelIsOnTheAggregatorsSeriesOnly) {
  NodeState node("n", 4, 1000);
  auto a = node.DeclareSlot(
      collectors::CounterSeries("ib_sysfs", "fabricmon_ib_port_symbol_errors_total", "h",
                                collectors::Unit::kNone, 16, collectors::Overflow::kSaturates, 1.0,
                                {{"device", "mlx5_0"}}),
      0);
  ASSERT_TRUE(a.ok());
  auto feed = MakeFeed({{"cluster", "c1"}}, {{"shard", "s1"}});
  auto stream = feed->OpenStream();
  const int64_t t0 = clock_.NowUnixNanos();
  ASSERT_TRUE(
      node.AppendBatchToSlots(1, 0, t0, {*a}, std::vector<uint64_t>{65535}, {true}, t0).stored);
  stream->OnStored(node, {*a}, {true}, nullptr);
  prometheus::MetricFamily active;
  active.name = "fabricmon_finding_active";
  active.type = prometheus::MetricType::Gauge;
  active.metric.emplace_back();
  active.metric.back().label = {{"kind", "link_flapping"}, {"node", "n"}};
  active.metric.back().gauge.value = 1;
  feed->ForwardFamilies({active}, t0);
  feed->Shutdown();
  auto received = ReceivedBySeries();
  std::vector<std::string> keys;
  for (const auto& [key, samples] : received) {
    keys.push_back(key);
  }
  EXPECT_THAT(
      keys, ::testing::UnorderedElementsAre(
                "__name__=fabricmon_finding_active,cluster=c1,kind=link_flapping,node=n,shard=s1,",
                "__name__=fabricmon_ib_port_symbol_errors_total,cluster=c1,device=mlx5_0,node=n,",
                "__name__=fabricmon_series_saturated,cluster=c1,device=mlx5_0,"
                "metric=fabricmon_ib_port_symbol_errors_total,node=n,"));
}

TEST_F(RemoteWriteFeedTest, ARetiredSlotSendsNothing) {
  NodeState node("n", 4, 1000);
  auto a = node.DeclareSlot(
      collectors::GaugeSeries("c", "fabricmon_x", "h", collectors::Unit::kNone, 1.0, {}), 0);
  ASSERT_TRUE(a.ok());
  auto feed = MakeFeed();
  auto stream = feed->OpenStream();
  SlotRef stale = *a;
  ++stale.generation;  // as if retired and reused since the stream declared it
  stream->OnStored(node, {stale}, {true}, nullptr);
  feed->Shutdown();
  EXPECT_TRUE(ReceivedBySeries().empty());
}

// A queued batch carries its samples' bytes, labels included: a slot retired and reused again
// and again (new labels each time, 300 kB of them in all) beside a series that lives throughout,
// then the stream gone, and every sample still leaves with its own series' labels.
TEST_F(RemoteWriteFeedTest, QueuedSamplesOutliveSeriesChurnAndTheirStream) {
  constexpr int kSeries = 300;
  const std::string pad(1000, 'p');  // 300 kB of labels in all
  NodeState node("n", 4, 3, {}, /*series_retention_nanos=*/1000);
  auto feed = MakeFeed();
  auto stream = feed->OpenStream();
  auto steady = node.DeclareSlot(
      collectors::GaugeSeries("c", "fabricmon_steady", "h", collectors::Unit::kNone, 1.0, {}), 0);
  ASSERT_TRUE(steady.ok());
  const int64_t t0 = 1'700'000'000'000'000'000;
  std::set<uint32_t> indices;
  for (int i = 0; i < kSeries; ++i) {
    const int64_t t = t0 + int64_t{i} * 1'000'000'000;
    auto slot = node.DeclareSlot(
        collectors::GaugeSeries("c", absl::StrCat("fabricmon_m", i), "h", collectors::Unit::kNone,
                                1.0, {{"pad", absl::StrCat(pad, i)}}),
        0);
    ASSERT_TRUE(slot.ok()) << slot.status();
    indices.insert(slot->index);
    // Stored a second after the last: the sweep retires the previous churned series, whose slot
    // the next declaration reuses.
    // The churned series first, so that the steady one's labels do not start the buffer: a
    // rebuild moves them.
    const std::vector<SlotRef> slots = {*slot, *steady};
    ASSERT_TRUE(node.AppendBatchToSlots(i + 1, 0, t, slots,
                                        std::vector<uint64_t>{uint64_t(i), uint64_t(1000 + i)},
                                        {true, true}, t)
                    .stored);
    stream->OnStored(node, slots, {true, true}, nullptr);
  }
  EXPECT_LE(indices.size(), 2u);  // the same slots, reused (beside the steady series')
  stream.reset();
  feed->Shutdown();
  auto received = ReceivedBySeries();
  ASSERT_EQ(received.size(), static_cast<size_t>(kSeries) + 1);
  const auto& steady_samples = received["__name__=fabricmon_steady,node=n,"];
  ASSERT_EQ(steady_samples.size(), static_cast<size_t>(kSeries));
  for (int i = 0; i < kSeries; ++i) {
    EXPECT_EQ(steady_samples[i].value, 1000 + i);
    const auto& samples =
        received[absl::StrCat("__name__=fabricmon_m", i, ",node=n,pad=", pad, i, ",")];
    ASSERT_EQ(samples.size(), 1u) << i;
    EXPECT_EQ(samples[0].value, i);
    EXPECT_EQ(samples[0].timestamp_ms, (t0 + int64_t{i} * 1'000'000'000) / 1'000'000);
  }
}

// Each endpoint has its own external labels, merged into a series' own for each endpoint: the
// same batch reaches both, each with its own labels merged in, a series' own label winning over
// an endpoint's; and a batch larger than a request is split across requests in order.
TEST_F(RemoteWriteFeedTest, EachEndpointMergesItsOwnExternalLabels) {
  std::vector<std::string> bodies[2];
  std::vector<RemoteWriteFeed::EndpointEntry> endpoints;
  const LabelPairs external[2] = {{{"cluster", "east"}}, {{"device", "never"}, {"zone", "z2"}}};
  for (int e = 0; e < 2; ++e) {
    remote_write::QueueOptions queue;
    queue.shards = 3;
    queue.max_samples_per_send = 7;
    endpoints.push_back(Entry({absl::StrCat("e", e), external[e], queue, {}}, bodies[e]));
  }
  RemoteWriteFeed feed(std::move(endpoints), clock_);
  NodeState node("gpu-9", 4, 1000);
  std::vector<SlotRef> slots;
  for (int i = 0; i < 20; ++i) {
    auto slot =
        node.DeclareSlot(collectors::GaugeSeries("c", "fabricmon_g", "h", collectors::Unit::kNone,
                                                 1.0, {{"device", absl::StrCat("mlx5_", i)}}),
                         0);
    ASSERT_TRUE(slot.ok());
    slots.push_back(*slot);
  }
  auto stream = feed.OpenStream();
  const std::vector<bool> present(slots.size(), true);
  for (int round = 0; round < 3; ++round) {
    std::vector<uint64_t> values;
    for (int i = 0; i < 20; ++i) {
      values.push_back(static_cast<uint64_t>(100 * round + i));
    }
    const int64_t t = clock_.NowUnixNanos() + int64_t{round} * 1'000'000'000;
    ASSERT_TRUE(node.AppendBatchToSlots(round + 1, 0, t, slots, values, present, t).stored);
    stream->OnStored(node, slots, present, nullptr);
  }
  stream.reset();
  feed.Shutdown();
  for (int e = 0; e < 2; ++e) {
    absl::MutexLock lock(&mu_);
    std::vector<double> sent;  // in request order
    for (const std::string& body : bodies[e]) {
      auto request = remote_write::DecodeWriteRequest(body);
      ASSERT_TRUE(request.ok());
      EXPECT_LE(request->timeseries_size(), 7) << e;
      for (const auto& series : request->timeseries()) {
        LabelPairs labels;
        for (const auto& label : series.labels()) {
          labels.emplace_back(label.name(), label.value());
        }
        ASSERT_EQ(series.samples_size(), 1);
        const int value = static_cast<int>(series.samples(0).value());
        const std::string device = absl::StrCat("mlx5_", value % 100);
        if (e == 0) {
          EXPECT_THAT(labels, ::testing::ElementsAre(::testing::Pair("__name__", "fabricmon_g"),
                                                     ::testing::Pair("cluster", "east"),
                                                     ::testing::Pair("device", device),
                                                     ::testing::Pair("node", "gpu-9")));
        } else {
          EXPECT_THAT(labels, ::testing::ElementsAre(::testing::Pair("__name__", "fabricmon_g"),
                                                     ::testing::Pair("device", device),
                                                     ::testing::Pair("node", "gpu-9"),
                                                     ::testing::Pair("zone", "z2")));
        }
        sent.push_back(value);
      }
    }
    ASSERT_EQ(sent.size(), 60u) << e;
    for (size_t k = 0; k < sent.size(); ++k) {
      EXPECT_EQ(sent[k], 100 * static_cast<int>(k / 20) + static_cast<int>(k % 20)) << e;
    }
  }
}

// A stream's batches of a layout it sent before are compressed by that layout's template
// (BatchTemplate), others as they come; a batch larger than a request goes in pieces of a
// request's size, each a layout of its own.
// Both endpoints get every value exactly, through layouts that repeat, change (a series absent,
// a series added) and repeat again.
TEST_F(RemoteWriteFeedTest, RepeatedAndChangedLayoutsAreSentExactly) {
  std::vector<std::string> bodies[2];
  std::vector<RemoteWriteFeed::EndpointEntry> endpoints;
  for (int e = 0; e < 2; ++e) {
    remote_write::QueueOptions queue;
    queue.shards = 2;
    queue.max_samples_per_send = e == 0 ? 10000 : 7;  // the second: two pieces a batch
    endpoints.push_back(Entry({absl::StrCat("e", e), {{"cluster", "c"}}, queue, {}}, bodies[e]));
  }
  RemoteWriteFeed feed(std::move(endpoints), clock_);
  NodeState node("gpu-3", 4, 1000);
  std::vector<SlotRef> slots;
  auto declare = [&](int i) {
    auto slot = node.DeclareSlot(
        collectors::CounterSeries("c", "fabricmon_c_total", "h", collectors::Unit::kNone, 64,
                                  collectors::Overflow::kWraps, 1.0,
                                  {{"device", absl::StrCat("mlx5_", i)}}),
        0);
    ASSERT_TRUE(slot.ok());
    slots.push_back(*slot);
  };
  for (int i = 0; i < 12; ++i) {
    declare(i);
  }
  auto stream = feed.OpenStream();
  // What each series should have received, by device, in order.
  SamplesByNode expected;
  const int64_t start = clock_.NowUnixNanos();
  for (int round = 0; round < 9; ++round) {
    if (round == 6) {
      declare(12);  // a series added: a new layout, with new labels
    }
    std::vector<bool> present(slots.size(), true);
    if (round >= 3) {
      present[5] = false;  // a series absent from round 3 on: the layout changes
    }
    std::vector<uint64_t> values;
    for (size_t i = 0; i < slots.size(); ++i) {
      // Idle counters (zero), equal ones, growing ones.
      values.push_back(i % 4 == 0 ? 0 : i % 4 == 1 ? 7 : 1000003 * (round + 1) + i);
    }
    const int64_t t = start + int64_t{round} * 1'000'000'000;
    ASSERT_TRUE(node.AppendBatchToSlots(round + 1, 0, t, slots, values, present, t).stored);
    stream->OnStored(node, slots, present, nullptr);
    for (size_t i = 0; i < slots.size(); ++i) {
      if (present[i]) {
        expected[absl::StrCat("mlx5_", i)].emplace_back(t / 1000000,
                                                        static_cast<double>(values[i]));
      }
    }
  }
  stream.reset();
  feed.Shutdown();
  for (int e = 0; e < 2; ++e) {
    absl::MutexLock lock(&mu_);
    SamplesByNode got;
    for (const std::string& body : bodies[e]) {
      auto request = remote_write::DecodeWriteRequest(body);
      ASSERT_TRUE(request.ok()) << request.status();
      for (const auto& series : request->timeseries()) {
        std::string device;
        for (const auto& label : series.labels()) {
          if (label.name() == "device") {
            device = label.value();
          }
        }
        ASSERT_EQ(series.samples_size(), 1);
        got[device].emplace_back(series.samples(0).timestamp(), series.samples(0).value());
      }
    }
    EXPECT_EQ(got, expected) << "endpoint " << e;
  }
}

// The aggregator's own families come in the same order every tick and are written by
// templates too, in pieces of a request's size: every value exactly, each series in order, a
// series a tick lacks marked stale (and back later as a series anew), a series listed twice in
// one tick sent once.
TEST_F(RemoteWriteFeedTest, ForwardedFamiliesAreSentExactlyTickAfterTick) {
  std::vector<std::string> bodies;
  remote_write::QueueOptions queue;
  queue.shards = 3;
  queue.max_samples_per_send = 7;
  std::vector<RemoteWriteFeed::EndpointEntry> endpoints;
  endpoints.push_back(Entry({"e", {}, queue, {{"shard", "s1"}}}, bodies));
  RemoteWriteFeed feed(std::move(endpoints), clock_);
  // Node name → its samples in arrival order.
  SamplesByNode expected;
  const int64_t start_ms = 1'700'000'000'000;
  for (int tick = 0; tick < 8; ++tick) {
    prometheus::MetricFamily up;
    up.name = "fabricmon_node_up";
    up.type = prometheus::MetricType::Gauge;
    const int64_t t_ms = start_ms + tick * 1000;
    for (int i = 0; i < 20; ++i) {
      if (i == 5 && (tick == 3 || tick == 4)) {
        if (tick == 3) {
          expected["n5"].emplace_back(t_ms, remote_write::StaleNaN());  // ended
        }
        continue;
      }
      up.metric.emplace_back();
      up.metric.back().label = {{"node", absl::StrCat("n", i)}};
      up.metric.back().gauge.value = i % 3 == 0 ? 1 : tick * 100 + i;
      expected[absl::StrCat("n", i)].emplace_back(t_ms, up.metric.back().gauge.value);
    }
    if (tick == 2) {
      up.metric.push_back(up.metric.front());  // listed twice: the first value goes
      up.metric.back().gauge.value = -1;
    }
    feed.ForwardFamilies({up}, t_ms * 1'000'000);
  }
  feed.Shutdown();
  absl::MutexLock lock(&mu_);
  SamplesByNode got;
  for (const std::string& body : bodies) {
    auto request = remote_write::DecodeWriteRequest(body);
    ASSERT_TRUE(request.ok()) << request.status();
    for (const auto& series : request->timeseries()) {
      std::string node;
      for (const auto& label : series.labels()) {
        if (label.name() == "node") {
          node = label.value();
        }
        if (label.name() == "shard") {
          EXPECT_EQ(label.value(), "s1");
        }
      }
      for (const auto& sample : series.samples()) {
        got[node].emplace_back(sample.timestamp(), sample.value());
      }
    }
  }
  ExpectSamplesByNode(got, expected);
}

// A tick's series are known by their place in the tick before, or else looked up: whatever the
// order (reversed, rotated, shuffled, a series come or gone before the others), each series keeps
// its own labels and values, ended ones get one staleness marker, and a returning one is sent.
TEST_F(RemoteWriteFeedTest, ForwardedSeriesAreSentExactlyWhateverTheirOrder) {
  auto feed = MakeFeed();
  SamplesByNode expected;  // by node
  std::mt19937 random(5);
  const int64_t start_ms = 1'700'000'000'000;
  std::vector<int> present(24);
  std::iota(present.begin(), present.end(), 0);
  std::vector<int> last = present;
  for (int tick = 0; tick < 12; ++tick) {
    const int64_t t_ms = start_ms + tick * 1000;
    std::vector<int> order = present;
    switch (tick % 4) {
      case 1:
        std::reverse(order.begin(), order.end());
        break;
      case 2:
        std::rotate(order.begin(), order.begin() + 5, order.end());
        break;
      case 3:
        std::shuffle(order.begin(), order.end(), random);
        break;
      default:
        break;  // as listed
    }
    if (tick == 4) {
      order.insert(order.begin(), 100);  // a new series before all others, this tick only
    }
    if (tick == 6) {
      order.erase(order.begin() + 3);  // one gone, back the tick after
    }
    prometheus::MetricFamily up;
    up.name = "fabricmon_node_up";
    up.type = prometheus::MetricType::Gauge;
    for (const int node : order) {
      up.metric.emplace_back();
      up.metric.back().label = {{"node", absl::StrCat("n", node)}};
      up.metric.back().gauge.value = tick * 1000 + node;
      expected[absl::StrCat("n", node)].emplace_back(t_ms, tick * 1000 + node);
    }
    for (const int node : last) {
      if (std::find(order.begin(), order.end(), node) == order.end()) {
        expected[absl::StrCat("n", node)].emplace_back(t_ms, remote_write::StaleNaN());
      }
    }
    last = order;
    feed->ForwardFamilies({up}, t_ms * 1'000'000);
  }
  feed->Shutdown();
  SamplesByNode got;
  for (const auto& [key, samples] : ReceivedBySeries()) {
    for (const Received& sample : samples) {
      for (const auto& [name, value] : sample.labels) {
        if (name == "node") {
          got[value].emplace_back(sample.timestamp_ms, sample.value);
        }
      }
    }
  }
  ExpectSamplesByNode(got, expected);
}

// A series that came or went (a finding raised or cleared before the node health series) costs
// one look-up, not one for every series after it.
TEST_F(RemoteWriteFeedTest, ASeriesComingOrGoingIsLookedUpAloneAndTheRestFoundInPlace) {
  auto feed = MakeFeed();
  auto forward = [&](const std::vector<std::string>& nodes, int tick) {
    prometheus::MetricFamily up;
    up.name = "fabricmon_node_up";
    up.type = prometheus::MetricType::Gauge;
    for (const std::string& node : nodes) {
      up.metric.emplace_back();
      up.metric.back().label = {{"node", node}};
      up.metric.back().gauge.value = tick;
    }
    const uint64_t before = feed->forwarded_series_looked_up();
    feed->ForwardFamilies({up}, (int64_t{1'700'000'000'000} + tick * 1000) * 1'000'000);
    return feed->forwarded_series_looked_up() - before;
  };
  std::vector<std::string> nodes;
  for (int i = 0; i < 50; ++i) {
    nodes.push_back(absl::StrCat("n", i));
  }
  EXPECT_EQ(forward(nodes, 0), 50u);  // all new
  EXPECT_EQ(forward(nodes, 1), 0u);
  std::vector<std::string> more = nodes;
  more.insert(more.begin() + 10, "new");
  EXPECT_EQ(forward(more, 2), 2u);  // the new one, then n10 found one place on
  EXPECT_EQ(forward(more, 3), 0u);
  EXPECT_EQ(forward(nodes, 4), 1u);  // "new" gone: n10 looked up, the rest in place
  std::vector<std::string> fewer = nodes;
  fewer.erase(fewer.begin() + 3, fewer.begin() + 6);
  EXPECT_EQ(forward(fewer, 5), 1u);
  EXPECT_EQ(forward(fewer, 6), 0u);
  feed->Shutdown();
}

TEST_F(RemoteWriteFeedTest, FamiliesAreSentEachTickAndAClearedFindingIsMarkedStale) {
  auto feed = MakeFeed();
  auto finding = [](const std::string& node) {
    prometheus::ClientMetric metric;
    metric.label = {{"kind", "link_flapping"}, {"severity", "critical"}, {"node", node}};
    metric.gauge.value = 1;
    return metric;
  };
  prometheus::MetricFamily active;
  active.name = "fabricmon_finding_active";
  active.type = prometheus::MetricType::Gauge;
  active.metric = {finding("a"), finding("b")};
  prometheus::MetricFamily other;
  other.name = "fabricmon_aggregator_samples_total";
  other.type = prometheus::MetricType::Counter;
  other.metric.emplace_back();
  other.metric.back().counter.value = 7;
  feed->ForwardFamilies({active, other}, 1'700'000'000'000'000'000);
  active.metric = {finding("b")};
  feed->ForwardFamilies({active, other}, 1'700'000'001'000'000'000);
  feed->Shutdown();
  auto received = ReceivedBySeries();
  ASSERT_EQ(received.size(), 3u);
  const auto& total = received["__name__=fabricmon_aggregator_samples_total,"];
  ASSERT_EQ(total.size(), 2u);  // every tick, counters as counters
  EXPECT_EQ(total[1].value, 7);
  const auto& a = received
      ["__name__=fabricmon_finding_active,kind=link_flapping,node=a,"
       "severity=critical,"];
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].value, 1);
  EXPECT_EQ(a[0].timestamp_ms, 1'700'000'000'000);
  EXPECT_TRUE(remote_write::IsStaleNaN(a[1].value));  // cleared: ends now
  EXPECT_EQ(a[1].timestamp_ms, 1'700'000'001'000);
  const auto& b = received
      ["__name__=fabricmon_finding_active,kind=link_flapping,node=b,"
       "severity=critical,"];
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].value, 1);
}

TEST_F(RemoteWriteFeedTest, ExportsItsMetricsPerEndpoint) {
  auto feed = MakeFeed();
  prometheus::MetricFamily x;
  x.name = "fabricmon_x";
  x.type = prometheus::MetricType::Gauge;
  x.metric.emplace_back().gauge.value = 1;
  feed->ForwardFamilies({x}, clock_.NowUnixNanos());
  feed->Shutdown();
  std::map<std::string, double> values;
  for (const auto& family : feed->Collect()) {
    for (const auto& metric : family.metric) {
      std::string key = family.name;
      for (const auto& label : metric.label) {
        key += "," + label.name + "=" + label.value;
      }
      values[key] = family.type == prometheus::MetricType::Counter ? metric.counter.value
                                                                   : metric.gauge.value;
    }
  }
  EXPECT_EQ(values["fabricmon_remote_write_samples_sent_total,endpoint=test"], 1);
  size_t body_bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& body : bodies_) {
      body_bytes += body.size();
    }
  }
  EXPECT_GT(body_bytes, 0u);
  EXPECT_EQ(values["fabricmon_remote_write_sent_bytes_total,endpoint=test"], body_bytes);
  EXPECT_EQ(values["fabricmon_remote_write_requests_total,code=200,endpoint=test"], 1);
  EXPECT_EQ(values["fabricmon_remote_write_samples_pending,endpoint=test"], 0);
  EXPECT_EQ(values["fabricmon_remote_write_samples_dropped_total,endpoint=test,reason=queue_full"],
            0);
  EXPECT_EQ(values.count("fabricmon_remote_write_oldest_pending_age_seconds,endpoint=test"), 1u);
}

}  // namespace
}  // namespace fabricmon::aggregator
