#include "daemon/remote_write/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/remote_write/protobuf_wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "snappy.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::remote_write {
namespace {

using ::fabricmon::testing::StatusIs;

std::vector<std::pair<std::string, std::string>> Labels(const v1::prompb::TimeSeries& series) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& label : series.labels()) {
    out.emplace_back(label.name(), label.value());
  }
  return out;
}

// The uncompressed request for `samples`, as a shard writes it.
std::string RawRequest(absl::Span<const PendingSample> samples, const LabelPairs& external,
                       const LabelPairs& aggregator = {}) {
  EncodedSamples encoded;
  EncodeSamples(samples, LabelMerger(external, aggregator), encoded);
  return std::string(encoded.bytes());
}

TEST(LabelSetTest, SortsWithNameFirstAndDropsEmptyValues) {
  auto set = MakeLabelSet(
      "fabricmon_ib_port_xmit_data_bytes_total",
      {{"port", "1"}, {"node", "n1"}, {"device", "mlx5_0"}, {"empty", ""}, {"Zeta", "z"}});
  EXPECT_THAT(DecodeLabels(*set),
              ::testing::ElementsAre(
                  ::testing::Pair("Zeta", "z"),  // byte order: upper case sorts before '_'
                  ::testing::Pair("__name__", "fabricmon_ib_port_xmit_data_bytes_total"),
                  ::testing::Pair("device", "mlx5_0"), ::testing::Pair("node", "n1"),
                  ::testing::Pair("port", "1")));
  auto same = MakeLabelSet("fabricmon_ib_port_xmit_data_bytes_total",
                           {{"device", "mlx5_0"}, {"node", "n1"}, {"port", "1"}, {"Zeta", "z"}});
  EXPECT_EQ(set->hash, same->hash);
  auto other = MakeLabelSet("fabricmon_ib_port_xmit_data_bytes_total",
                            {{"device", "mlx5_0"}, {"node", "n2"}, {"port", "1"}, {"Zeta", "z"}});
  EXPECT_NE(set->hash, other->hash);
}

TEST(LabelSetTest, ADuplicateNameKeepsItsFirstValue) {
  auto set = MakeLabelSet("m", {{"a", "1"}, {"a", "2"}, {"__name__", "evil"}});
  EXPECT_THAT(DecodeLabels(*set),
              ::testing::ElementsAre(::testing::Pair("__name__", "m"), ::testing::Pair("a", "1")));
}

// What the aggregator's own series are looked up by each tick (EncodeLabelsInto) must be byte
// for byte the label set's bytes, whatever order, empty values, repeats, a `__name__` among the
// labels or more labels than the short sort takes; and a buffer used before is replaced.
TEST(LabelSetTest, EncodeLabelsIntoWritesTheLabelSetsBytes) {
  std::vector<LabelPairs> cases = {
      {},
      {{"node", "n1"}},
      {{"port", "1"}, {"node", "n1"}, {"device", "mlx5_0"}, {"empty", ""}, {"Zeta", "z"}},
      {{"a", "1"}, {"a", "2"}, {"__name__", "evil"}, {"b", ""}, {"a", "3"}},
  };
  LabelPairs many;
  for (int i = 40; i > 0; --i) {
    many.emplace_back(absl::StrCat("l", i % 17), absl::StrCat("v", i));
  }
  cases.push_back(many);
  std::string out = "left over from before";
  for (const LabelPairs& labels : cases) {
    LabelRefs refs;
    for (const auto& [name, value] : labels) {
      refs.emplace_back(name, value);
    }
    EncodeLabelsInto("fabricmon_m", refs, out);
    EXPECT_EQ(out, MakeLabelSet("fabricmon_m", labels)->encoded) << labels.size() << " labels";
  }
}

TEST(EncoderTest, RoundTripsThroughSnappyAndProtobuf) {
  auto a = MakeLabelSet("fabricmon_a_total", {{"node", "n1"}});
  auto b = MakeLabelSet("fabricmon_b", {{"node", "n1"}, {"cluster", "own"}});
  std::vector<PendingSample> samples = {
      {a, 1700000000000, 1.5, 0}, {b, 1700000000000, -2, 0}, {a, 1700000001000, 2.5, 0}};
  const std::string body = EncodeWriteRequest(samples, {{"cluster", "c1"}, {"shard", "s0"}});
  // The body is snappy's block format: a raw-length varint, then the compressed data.
  size_t length = 0;
  ASSERT_TRUE(snappy::GetUncompressedLength(body.data(), body.size(), &length));
  absl::StatusOr<v1::prompb::WriteRequest> decoded = DecodeWriteRequest(body);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->ByteSizeLong(), length);
  ASSERT_EQ(decoded->timeseries_size(), 3);
  // One TimeSeries per sample, in order, external labels merged in sorted order and never
  // overriding the series' own (b keeps cluster="own").
  const auto& first = decoded->timeseries(0);
  EXPECT_THAT(Labels(first), ::testing::ElementsAre(
                                 ::testing::Pair("__name__", "fabricmon_a_total"),
                                 ::testing::Pair("cluster", "c1"), ::testing::Pair("node", "n1"),
                                 ::testing::Pair("shard", "s0")));
  ASSERT_EQ(first.samples_size(), 1);
  EXPECT_EQ(first.samples(0).timestamp(), 1700000000000);
  EXPECT_EQ(first.samples(0).value(), 1.5);
  const auto& second = decoded->timeseries(1);
  EXPECT_THAT(Labels(second), ::testing::ElementsAre(::testing::Pair("__name__", "fabricmon_b"),
                                                     ::testing::Pair("cluster", "own"),
                                                     ::testing::Pair("node", "n1"),
                                                     ::testing::Pair("shard", "s0")));
  ASSERT_EQ(second.samples_size(), 1);
  EXPECT_EQ(second.samples(0).value(), -2);
  const auto& third = decoded->timeseries(2);
  EXPECT_EQ(Labels(third), Labels(first));
  ASSERT_EQ(third.samples_size(), 1);
  EXPECT_EQ(third.samples(0).timestamp(), 1700000001000);
  EXPECT_EQ(third.samples(0).value(), 2.5);
}

// The shard name goes on the aggregator's own series only: a node's series is one series
// whatever shard wrote it (a replay to another shard is an exact duplicate), while the
// operator's external labels go on both.
TEST(EncoderTest, AggregatorLabelsGoOnTheAggregatorsSeriesOnly) {
  auto agent = MakeLabelSet("fabricmon_a_total", {{"node", "n1"}}, SeriesOrigin::kAgent);
  auto own = MakeLabelSet("fabricmon_finding_active", {{"node", "n1"}}, SeriesOrigin::kAggregator);
  // An agent series that has a label of the aggregator label's name keeps its own value.
  auto agent_with_zone =
      MakeLabelSet("fabricmon_b", {{"node", "n2"}, {"zone", "own"}}, SeriesOrigin::kAgent);
  std::vector<PendingSample> samples = {
      {agent, 1000, 1, 0}, {own, 1000, 1, 0}, {agent_with_zone, 1000, 2, 0}, {agent, 2000, 3, 0}};
  // External labels before, between and after `shard` in name order.
  const LabelPairs external = {{"a_first", "x"}, {"cluster", "c1"}, {"zone", "z"}};
  const std::string body = EncodeWriteRequest(samples, external, {{"shard", "s0"}});
  absl::StatusOr<v1::prompb::WriteRequest> decoded = DecodeWriteRequest(body);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->timeseries_size(), 4);
  EXPECT_THAT(
      Labels(decoded->timeseries(0)),
      ::testing::ElementsAre(::testing::Pair("__name__", "fabricmon_a_total"),
                             ::testing::Pair("a_first", "x"), ::testing::Pair("cluster", "c1"),
                             ::testing::Pair("node", "n1"), ::testing::Pair("zone", "z")));
  EXPECT_EQ(decoded->timeseries(0).samples_size(), 1);
  EXPECT_EQ(Labels(decoded->timeseries(3)), Labels(decoded->timeseries(0)));
  EXPECT_THAT(
      Labels(decoded->timeseries(1)),
      ::testing::ElementsAre(::testing::Pair("__name__", "fabricmon_finding_active"),
                             ::testing::Pair("a_first", "x"), ::testing::Pair("cluster", "c1"),
                             ::testing::Pair("node", "n1"), ::testing::Pair("shard", "s0"),
                             ::testing::Pair("zone", "z")));
  EXPECT_THAT(
      Labels(decoded->timeseries(2)),
      ::testing::ElementsAre(::testing::Pair("__name__", "fabricmon_b"),
                             ::testing::Pair("a_first", "x"), ::testing::Pair("cluster", "c1"),
                             ::testing::Pair("node", "n2"), ::testing::Pair("zone", "own")));
  // Still byte for byte what protobuf serializes.
  EXPECT_EQ(RawRequest(samples, external, {{"shard", "s0"}}), decoded->SerializeAsString());
}

// The field numbers are the protocol: check the bytes of a minimal request by hand
// (WriteRequest.timeseries = 1, TimeSeries.labels = 1 / samples = 2, Label.name = 1 / value = 2,
// Sample.value = 1 (double) / timestamp = 2 (int64)).
TEST(EncoderTest, UsesTheSpecsFieldNumbers) {
  auto set = MakeLabelSet("m", {});
  std::vector<PendingSample> samples = {{set, 5, 1.0, 0}};
  const std::string raw = RawRequest(samples, {});
  const std::string expected_label = std::string("\x0a\x08__name__\x12\x01m", 13);
  std::string sample("\x09", 1);
  const double one = 1.0;
  char bits[8];
  std::memcpy(bits, &one, 8);
  sample.append(bits, 8);
  sample.append("\x10\x05", 2);
  std::string series;
  series.append("\x0a", 1);
  series.push_back(static_cast<char>(expected_label.size()));
  series.append(expected_label);
  series.append("\x12", 1);
  series.push_back(static_cast<char>(sample.size()));
  series.append(sample);
  std::string request("\x0a", 1);
  request.push_back(static_cast<char>(series.size()));
  request.append(series);
  EXPECT_EQ(raw, request);
}

// The reference: the request built as protobuf messages and serialized by protobuf itself.
v1::prompb::WriteRequest ReferenceRequest(absl::Span<const PendingSample> samples,
                                          const LabelPairs& external) {
  v1::prompb::WriteRequest request;
  for (const PendingSample& sample : samples) {
    v1::prompb::TimeSeries* series = request.add_timeseries();
    LabelPairs merged = external;
    for (const auto& own : DecodeLabels(*sample.series)) {
      auto same = std::find_if(merged.begin(), merged.end(),
                               [&](const auto& label) { return label.first == own.first; });
      if (same != merged.end()) {
        same->second = own.second;
      } else {
        merged.push_back(own);
      }
    }
    std::sort(merged.begin(), merged.end());
    for (const auto& [name, value] : merged) {
      v1::prompb::Label* label = series->add_labels();
      label->set_name(name);
      label->set_value(value);
    }
    v1::prompb::Sample* out = series->add_samples();
    out->set_value(sample.value);
    out->set_timestamp(sample.timestamp_ms);
  }
  return request;
}

// The hand-written bytes are protobuf's, byte for byte, on what varies: interleaved series,
// external labels before, between and after a series' own (and one it overrides), lengths past
// one varint byte, values protobuf leaves out (+0.0, timestamp 0) or keeps (-0.0, NaNs),
// negative timestamps (ten-byte varints); and runs concatenated are still one request.
TEST(EncoderTest, WritesExactlyWhatProtobufSerializes) {
  const std::string long_value(300, 'v');
  std::vector<std::shared_ptr<const LabelSet>> sets = {
      MakeLabelSet("fabricmon_a_total", {{"node", "n1"}, {"device", "mlx5_0"}, {"port", "1"}}),
      MakeLabelSet("fabricmon_b", {{"node", long_value}, {"cluster", "own"}}),
      MakeLabelSet("m", {}),
      MakeLabelSet(std::string(200, 'n'), {{"zz", "last"}, {"A", "first"}}),
  };
  const LabelPairs external = {{"B", "ext-b"}, {"cluster", "c1"}, {"shard", "s0"}, {"zzz", "z"}};
  const double values[] = {0.0, -0.0, 1.5, StaleNaN(), std::nan(""), 1e300, -7};
  const int64_t timestamps[] = {0, 1, 127, 128, 1700000000000, -1, -1700000000000};
  std::string all_raw;
  std::vector<PendingSample> all_samples;
  for (int round = 0; round < 3; ++round) {
    std::vector<PendingSample> samples;
    for (int i = 0; i < 40 - 13 * round; ++i) {
      samples.push_back({sets[(i * 7 + round) % sets.size()], timestamps[(i + round) % 7],
                         values[(i * 3) % 7], 0});
    }
    const std::string raw = RawRequest(samples, external);
    EXPECT_EQ(raw, ReferenceRequest(samples, external).SerializeAsString());
    absl::StatusOr<v1::prompb::WriteRequest> decoded =
        DecodeWriteRequest(EncodeWriteRequest(samples, external));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->SerializeAsString(), raw);
    EXPECT_EQ(RawRequest(samples, {}), ReferenceRequest(samples, {}).SerializeAsString());
    all_raw += raw;
    all_samples.insert(all_samples.end(), samples.begin(), samples.end());
  }
  EXPECT_EQ(all_raw, ReferenceRequest(all_samples, external).SerializeAsString());
  EXPECT_EQ(RawRequest({}, external), "");
  absl::StatusOr<v1::prompb::WriteRequest> empty = DecodeWriteRequest(EncodeWriteRequest({}, {}));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->timeseries_size(), 0);
}

// A request of a shard's size: thousands of series (the encoder's table of series grows past its
// smallest size and probes past collisions), each seen once or several times, interleaved, with
// labels of every length; still protobuf's bytes, request after request of different sizes.
TEST(EncoderTest, ManySeriesPerRequestStayProtobufsBytes) {
  std::vector<std::shared_ptr<const LabelSet>> sets;
  for (int i = 0; i < 3000; ++i) {
    sets.push_back(MakeLabelSet(absl::StrCat("fabricmon_m", i % 37, "_total"),
                                {{"node", absl::StrCat("node-", i / 487)},
                                 {"device", std::string(1 + i % 90, 'd')},
                                 {"port", absl::StrCat(i % 5)}},
                                SeriesOrigin::kAgent));
  }
  const LabelPairs external = {{"cluster", "c1"}, {"zone", "z"}};
  for (const size_t count : {size_t{2000}, size_t{6000}, size_t{17}, size_t{4500}}) {
    std::vector<PendingSample> samples;
    for (size_t i = 0; i < count; ++i) {
      // Series in a scattered order; a series repeats every few thousand samples.
      samples.push_back({sets[(i * 1237 + count) % sets.size()], static_cast<int64_t>(1000 + i),
                         static_cast<double>(i), 0});
    }
    EXPECT_EQ(RawRequest(samples, external, {{"shard", "s0"}}),
              ReferenceRequest(samples, external).SerializeAsString())
        << count;
    absl::StatusOr<v1::prompb::WriteRequest> decoded =
        DecodeWriteRequest(EncodeWriteRequest(samples, external, {{"shard", "s0"}}));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(static_cast<size_t>(decoded->timeseries_size()), count);
  }
}

// Runs compressed apart and joined are one valid body: the runs' samples in order, whatever the
// cut points, for runs of one sample, of a few, and past snappy's 64 KiB fragment (where its
// back-references restart).
TEST(EncoderTest, RunsCompressedApartJoinIntoOneRequest) {
  std::vector<std::shared_ptr<const LabelSet>> sets;
  for (int i = 0; i < 50; ++i) {
    sets.push_back(MakeLabelSet("fabricmon_m", {{"node", "n1"}, {"port", absl::StrCat(i)}},
                                SeriesOrigin::kAgent));
  }
  std::vector<PendingSample> samples;
  for (int i = 0; i < 3000; ++i) {
    samples.push_back({sets[i % sets.size()], 1700000000000 + i, static_cast<double>(i), 0});
  }
  const LabelPairs external = {{"cluster", "c1"}};
  EncodedSamples encoded;
  EncodeSamples(samples, LabelMerger(external), encoded);
  ASSERT_GT(encoded.bytes().size(), size_t{3} * 65536);
  const std::string expected = ReferenceRequest(samples, external).SerializeAsString();
  std::string scratch;
  for (const std::vector<size_t>& cuts : std::vector<std::vector<size_t>>{
           {0, 3000}, {0, 1, 2, 3000}, {0, 7, 1500, 2999, 3000}, {0, 2000, 3000}}) {
    std::vector<CompressedSamples> runs;
    size_t compressed = 0;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      runs.push_back(CompressSamples(encoded, cuts[c], cuts[c + 1], scratch));
      EXPECT_EQ(runs.back().samples, cuts[c + 1] - cuts[c]);
      compressed += runs.back().elements.size();
    }
    std::string body;
    JoinRequest(runs, body);
    EXPECT_LT(compressed, encoded.bytes().size() / 4) << "compressed";
    size_t length = 0;
    ASSERT_TRUE(snappy::GetUncompressedLength(body.data(), body.size(), &length));
    EXPECT_EQ(length, encoded.bytes().size());
    std::string raw;
    ASSERT_TRUE(snappy::Uncompress(body.data(), body.size(), &raw));
    EXPECT_EQ(raw, expected) << cuts.size();
  }
}

// The feed reuses one EncodedSamples per ingest thread: after Clear() a smaller batch is exactly
// its own request, nothing of the larger one before it (whose bytes still lie past it) included.
TEST(EncoderTest, AClearedRunHoldsOnlyWhatWasAddedSince) {
  auto big = MakeLabelSet("fabricmon_ib_port_rcv_data_bytes_total",
                          {{"node", std::string(200, 'n')}, {"device", "mlx5_0"}});
  auto small = MakeLabelSet("m", {{"node", "a"}});
  const std::vector<PendingSample> before(50, PendingSample{big, 1700000000000, 12345.5, 0});
  const std::vector<PendingSample> after = {{small, 1700000001000, 1, 0},
                                            {small, 1700000002000, 0, 0}};
  const LabelMerger merger({});
  EncodedSamples run;
  EncodeSamples(before, merger, run);
  run.Clear();
  EXPECT_EQ(run.size(), 0u);
  EXPECT_TRUE(run.bytes().empty());
  EncodeSamples(after, merger, run);
  EXPECT_EQ(run.size(), 2u);
  // The first sample carries its value (9 bytes); the second, 0, leaves it out.
  EXPECT_EQ(run.begin(1), (run.bytes().size() + 9) / 2);
  EXPECT_EQ(std::string(run.bytes()), ReferenceRequest(after, {}).SerializeAsString());
}

TEST(EncoderTest, VarintSizeIsTheLengthWriteVarintWrites) {
  // Every length boundary (2^(7k) - 1 and 2^(7k)), each power of two, and the extremes.
  std::vector<uint64_t> values = {0, 1, ~uint64_t{0}, uint64_t{1} << 63};
  for (int bit = 0; bit < 64; ++bit) {
    values.push_back(uint64_t{1} << bit);
    values.push_back((uint64_t{1} << bit) - 1);
    values.push_back((uint64_t{1} << bit) + 1);
  }
  for (const uint64_t value : values) {
    char out[16];
    const size_t written = wire::WriteVarint(value, out) - out;
    EXPECT_EQ(wire::VarintSize(value), written) << value;
  }
}

TEST(EncoderTest, StaleNaNIsPrometheusBitPattern) {
  const double stale = StaleNaN();
  uint64_t bits;
  std::memcpy(&bits, &stale, 8);
  EXPECT_EQ(bits, 0x7ff0000000000002ULL);
  EXPECT_TRUE(std::isnan(stale));
  EXPECT_TRUE(IsStaleNaN(stale));
  EXPECT_FALSE(IsStaleNaN(std::nan("")));
}

TEST(EncoderTest, DecodeRefusesGarbage) {
  EXPECT_THAT(DecodeWriteRequest("not snappy at all").status(),
              StatusIs(absl::StatusCode::kDataLoss));
  std::string compressed;
  const std::string junk = "\xff\xff\xff\xff";
  snappy::Compress(junk.data(), junk.size(), &compressed);
  EXPECT_THAT(DecodeWriteRequest(compressed).status(), StatusIs(absl::StatusCode::kDataLoss));
  // A length header claiming 4 GiB is refused before anything is allocated.
  EXPECT_THAT(DecodeWriteRequest(std::string("\xff\xff\xff\xff\x0f", 5)).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace fabricmon::remote_write
