#include "daemon/remote_write/batch_template.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "snappy.h"

namespace fabricmon::remote_write {
namespace {

// Merged labels (as the feed keeps them) for keys 0..count-1: an ib_sysfs-like series with the
// endpoint's external label, every `long_every`-th with a value long enough for snappy's longer
// literal tags.
std::vector<std::string> MergedLabels(size_t count, size_t long_every = 0) {
  const LabelMerger merger(LabelPairs{{"cluster", "c1"}});
  std::vector<std::string> out(count);
  for (size_t i = 0; i < count; ++i) {
    LabelPairs pairs = {{"node", "gpu-node-17"},
                        {"device", absl::StrCat("mlx5_", i % 9)},
                        {"port", absl::StrCat(1 + i % 2)}};
    if (long_every != 0 && i % long_every == 0) {
      pairs.emplace_back("why", std::string(60 + i % 400, static_cast<char>('a' + i % 26)));
    }
    merger.Append(*MakeLabelSet(absl::StrCat("fabricmon_ib_port_counter_", i % 40, "_total"),
                                std::move(pairs), SeriesOrigin::kAgent),
                  out[i]);
  }
  return out;
}

// The request body for `samples` written by the encoder and compressed by snappy: the reference.
std::string Reference(const std::vector<KeyedSample>& samples,
                      const std::vector<std::string>& labels) {
  EncodedSamples encoded;
  for (const KeyedSample& sample : samples) {
    encoded.Add(labels[sample.labels_key], sample.timestamp_ms, sample.value);
  }
  std::string scratch;
  std::string body;
  JoinRequest({CompressSamples(encoded, 0, encoded.size(), scratch)}, body);
  return body;
}

// Both bodies decode (snappy's own decompressor, protobuf's parser) to the same WriteRequest.
void ExpectSameRequest(const std::string& body, const std::string& reference) {
  auto got = DecodeWriteRequest(body);
  auto want = DecodeWriteRequest(reference);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(got->timeseries_size(), want->timeseries_size());
  // Field by field first (a readable failure), then the canonical bytes (everything else).
  for (int i = 0; i < got->timeseries_size(); ++i) {
    ASSERT_EQ(got->timeseries(i).labels_size(), want->timeseries(i).labels_size()) << i;
    ASSERT_EQ(got->timeseries(i).samples_size(), 1) << i;
    const auto& a = got->timeseries(i).samples(0);
    const auto& b = want->timeseries(i).samples(0);
    EXPECT_EQ(a.timestamp(), b.timestamp()) << i;
    uint64_t bits_a;
    uint64_t bits_b;
    const double value_a = a.value();
    const double value_b = b.value();
    std::memcpy(&bits_a, &value_a, 8);
    std::memcpy(&bits_b, &value_b, 8);
    EXPECT_EQ(bits_a, bits_b) << i;  // NaN payloads and -0.0 too
  }
  EXPECT_EQ(got->SerializeAsString(), want->SerializeAsString());
}

// What Build reads labels by. (A lambda returning the std::string itself would hand Build a view
// of a temporary.)
auto LabelsOf(const std::vector<std::string>& labels) {
  return [&labels](uint32_t key) -> absl::string_view { return labels[key]; };
}

std::string Body(const CompressedSamples& run) {
  std::string body;
  JoinRequest({run}, body);
  return body;
}

TEST(BatchTemplateTest, EveryBatchOfTheLayoutDecodesToWhatTheEncoderWrites) {
  const std::vector<std::string> labels = MergedLabels(500, 37);
  // A layout: keys in an order of their own, one key twice (a series and its flag share labels
  // in no real batch, but nothing here may assume keys are distinct).
  std::vector<uint32_t> keys(labels.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = static_cast<uint32_t>((i * 7) % labels.size());
  }
  keys.push_back(keys[3]);
  const double special[] = {0.0,
                            -0.0,
                            1.0,
                            StaleNaN(),
                            std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(),
                            -1e300,
                            4.9e-324};
  std::mt19937_64 random(7);
  BatchTemplate layout;
  const int64_t base_ms = 1764300000000;  // 2025: six varint bytes, as until 2109
  for (int round = 0; round < 20; ++round) {
    std::vector<KeyedSample> batch;
    for (size_t i = 0; i < keys.size(); ++i) {
      KeyedSample sample;
      sample.labels_key = keys[i];
      // Mostly the batch's time; some samples a millisecond or more apart (collectors' own).
      sample.timestamp_ms = base_ms + 1000 * round + (random() % 5 == 0 ? random() % 900 : 0);
      switch (random() % 4) {
        case 0:
          sample.value = special[random() % std::size(special)];
          break;
        case 1:
          sample.value = static_cast<double>(random() % 4);  // often equal to another's
          break;
        default:
          sample.value = static_cast<double>(random() % 1000000007) * 4096.0;
      }
      batch.push_back(sample);
    }
    if (round == 0) {
      EXPECT_FALSE(layout.Matches(1, batch));
      ASSERT_TRUE(layout.Build(1, batch, LabelsOf(labels)));
    }
    ASSERT_TRUE(layout.Matches(1, batch)) << round;
    CompressedSamples run;
    layout.Compress(batch, run);
    EXPECT_EQ(run.samples, batch.size());
    ExpectSameRequest(Body(run), Reference(batch, labels));
  }
}

TEST(BatchTemplateTest, MatchesOnlyTheLayoutItWasBuiltFor) {
  const std::vector<std::string> labels = MergedLabels(4);
  const int64_t t = 1764300000000;
  const std::vector<KeyedSample> batch = {{0, t, 1}, {1, t, 2}, {2, t, 3}};
  BatchTemplate layout;
  ASSERT_TRUE(layout.Build(5, batch, LabelsOf(labels)));
  EXPECT_TRUE(layout.Matches(5, batch));
  EXPECT_TRUE(layout.Matches(5, {{0, t + 9, 7}, {1, t - 9, 8}, {2, t, 9}}));      // values, times
  EXPECT_FALSE(layout.Matches(6, batch));                                         // labels changed
  EXPECT_FALSE(layout.Matches(5, {{0, t, 1}, {1, t, 2}}));                        // a sample fewer
  EXPECT_FALSE(layout.Matches(5, {{0, t, 1}, {1, t, 2}, {2, t, 3}, {3, t, 4}}));  // more
  EXPECT_FALSE(layout.Matches(5, {{0, t, 1}, {2, t, 2}, {1, t, 3}}));             // order
  EXPECT_FALSE(layout.Matches(5, {{0, t, 1}, {1, t, 2}, {3, t, 3}}));             // a key
  EXPECT_FALSE(layout.Matches(5, {{0, t, 1}, {1, 0, 2}, {2, t, 3}}));             // a time's size
  EXPECT_FALSE(layout.Matches(5, {{0, t, 1}, {1, -1, 2}, {2, t, 3}}));            // ten bytes
  layout.Clear();
  EXPECT_FALSE(layout.Matches(5, batch));
}

// The one-pass check says what Matches() says, on the cases above and on random changes of a
// layout (a key, a timestamp of another size, anywhere, also between samples that share their
// time), and compresses exactly as Compress() does when it matches.
TEST(BatchTemplateTest, CompressIfMatchesIsMatchesThenCompress) {
  const std::vector<std::string> labels = MergedLabels(64);
  const int64_t t = 1764300000000;
  BatchTemplate layout;
  auto expect_agrees = [&](uint64_t version, const std::vector<KeyedSample>& batch) {
    CompressedSamples checked;
    const bool matches = layout.Matches(version, batch);
    ASSERT_EQ(layout.CompressIfMatches(version, batch, checked), matches);
    if (matches) {
      CompressedSamples compressed;
      layout.Compress(batch, compressed);
      EXPECT_EQ(checked.elements, compressed.elements);
      EXPECT_EQ(checked.raw_size, compressed.raw_size);
      EXPECT_EQ(checked.samples, batch.size());
      ExpectSameRequest(Body(checked), Reference(batch, labels));
    }
  };
  const std::vector<KeyedSample> small = {{0, t, 1}, {1, t, 2}, {2, t, 3}};
  ASSERT_TRUE(layout.Build(5, small, LabelsOf(labels)));
  for (const std::vector<KeyedSample>& batch : std::vector<std::vector<KeyedSample>>{
           small,
           {{0, t + 9, 7}, {1, t - 9, 8}, {2, t, 9}},
           {{0, t, 1}, {1, t, 2}},
           {{0, t, 1}, {1, t, 2}, {2, t, 3}, {3, t, 4}},
           {{0, t, 1}, {2, t, 2}, {1, t, 3}},
           {{0, t, 1}, {1, t, 2}, {3, t, 3}},
           {{0, t, 1}, {1, 0, 2}, {2, t, 3}},
           {{0, t, 1}, {1, -1, 2}, {2, t, 3}},
           {{0, 0, 1}, {1, 0, 2}, {2, 0, 3}},
       }) {
    expect_agrees(5, batch);
    expect_agrees(6, batch);
  }

  // Built at the epoch: the first sample's time is zero (one byte).
  const std::vector<KeyedSample> at_epoch = {{0, 0, 1}, {1, 0, 2}};
  ASSERT_TRUE(layout.Build(7, at_epoch, LabelsOf(labels)));
  expect_agrees(7, at_epoch);
  expect_agrees(7, {{0, 0, 1}, {1, t, 2}});

  // A layout whose samples' times take three sizes, in runs.
  std::vector<KeyedSample> base;
  for (uint32_t i = 0; i < 64; ++i) {
    const int64_t time = i < 20 ? t : (i < 40 ? 5 : 300);
    base.push_back({(i * 5) % 64, time, static_cast<double>(i % 7)});
  }
  ASSERT_TRUE(layout.Build(9, base, LabelsOf(labels)));
  std::mt19937_64 random(11);
  const int64_t other_times[] = {0, 7, 127, 128, 300, 16383, 16384, t, -1};
  int matched = 0;
  for (int round = 0; round < 400; ++round) {
    std::vector<KeyedSample> batch = base;
    for (KeyedSample& sample : batch) {
      sample.value = static_cast<double>(random() % 5);
      if (sample.timestamp_ms == t) {
        sample.timestamp_ms += static_cast<int64_t>(random() % 3);  // same size
      }
    }
    const size_t at = random() % batch.size();
    switch (round % 4) {
      case 0:
        break;  // unchanged layout
      case 1:
        batch[at].labels_key = static_cast<uint32_t>(random() % 64);  // maybe the same key
        break;
      case 2:
        batch[at].timestamp_ms = other_times[random() % std::size(other_times)];
        break;
      default:  // a run of samples at one other time, from `at` on
        for (size_t i = at; i < batch.size(); ++i) {
          batch[i].timestamp_ms = other_times[round % std::size(other_times)];
        }
    }
    matched += layout.Matches(9, batch) ? 1 : 0;
    expect_agrees(9, batch);
  }
  EXPECT_GT(matched, 100);  // both answers were exercised
  EXPECT_LT(matched, 350);
}

// Timestamps of every size a varint has (zero: one byte, before 1970: ten), repeated and not.
TEST(BatchTemplateTest, TimestampsOfAnySizeDecode) {
  const std::vector<std::string> labels = MergedLabels(8);
  const std::vector<KeyedSample> batch = {{0, 0, 1},
                                          {1, 0, 1},
                                          {2, -1, 0.0},
                                          {3, -1, 0.0},
                                          {4, 127, 5},
                                          {5, 128, 5},
                                          {6, int64_t{1} << 62, 6},
                                          {7, std::numeric_limits<int64_t>::min(), 7}};
  BatchTemplate layout;
  ASSERT_TRUE(layout.Build(0, batch, LabelsOf(labels)));
  CompressedSamples run;
  layout.Compress(batch, run);
  ExpectSameRequest(Body(run), Reference(batch, labels));
}

// A batch far past snappy's two-byte copy offsets (64 KiB) and with labels long enough for its
// multi-byte literal lengths: back-references never reach further than the format allows.
TEST(BatchTemplateTest, LargeBatchesAndLongLabelsDecode) {
  const std::vector<std::string> labels = MergedLabels(3000, 3);
  std::vector<KeyedSample> batch;
  for (uint32_t key = 0; key < labels.size(); ++key) {
    batch.push_back({key, 1764300000000, key % 2 == 0 ? 0.0 : static_cast<double>(key)});
  }
  BatchTemplate layout;
  ASSERT_TRUE(layout.Build(0, batch, LabelsOf(labels)));
  CompressedSamples run;
  layout.Compress(batch, run);
  EXPECT_GT(run.raw_size, size_t{1} << 17);
  ExpectSameRequest(Body(run), Reference(batch, labels));
  // A single label value longer than 65,536 bytes: a literal with a three-byte length.
  const std::vector<std::string> huge = {absl::StrCat(labels[0], std::string(70000, 'x'))};
  std::vector<KeyedSample> one = {{0, 1, 2}};
  ASSERT_TRUE(layout.Build(1, one, LabelsOf(huge)));
  layout.Compress(one, run);
  std::string raw;
  ASSERT_TRUE(snappy::Uncompress(Body(run).data(), Body(run).size(), &raw));
  EXPECT_EQ(raw.size(), run.raw_size);
}

// A request joins the template's runs with runs the shard compressed (encoder.h): one body.
TEST(BatchTemplateTest, JoinsWithRunsCompressedBySnappy) {
  const std::vector<std::string> labels = MergedLabels(50);
  std::vector<KeyedSample> batch;
  for (uint32_t key = 0; key < labels.size(); ++key) {
    batch.push_back({key, 1764300000000 + key / 10, static_cast<double>(key % 3)});
  }
  BatchTemplate layout;
  ASSERT_TRUE(layout.Build(0, batch, LabelsOf(labels)));
  std::vector<CompressedSamples> runs(3);
  layout.Compress(batch, runs[0]);
  EncodedSamples encoded;
  for (const KeyedSample& sample : batch) {
    encoded.Add(labels[sample.labels_key], sample.timestamp_ms + 1, sample.value);
  }
  std::string scratch;
  runs[1] = CompressSamples(encoded, 0, encoded.size(), scratch);
  layout.Compress(batch, runs[2]);
  std::string body;
  JoinRequest(runs, body);
  auto request = DecodeWriteRequest(body);
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->timeseries_size(), 150);
  EXPECT_EQ(request->timeseries(0).samples(0).timestamp(), 1764300000000);
  EXPECT_EQ(request->timeseries(50).samples(0).timestamp(), 1764300000001);
  EXPECT_EQ(request->timeseries(149).samples(0).value(), 49 % 3);
}

// The wire costs no more than snappy's: a node's batch of counters.
TEST(BatchTemplateTest, IsNoLargerOnTheWireThanSnappy) {
  const std::vector<std::string> labels = MergedLabels(3000);
  std::vector<KeyedSample> batch;
  for (uint32_t key = 0; key < labels.size(); ++key) {
    // Counters (distinct, growing), a fifth of them idle error counters at zero.
    batch.push_back(
        {key, 1764300000000, key % 5 == 0 ? 0.0 : static_cast<double>(key * 1000003 + 4096)});
  }
  BatchTemplate layout;
  ASSERT_TRUE(layout.Build(0, batch, LabelsOf(labels)));
  CompressedSamples run;
  layout.Compress(batch, run);
  const std::string reference = Reference(batch, labels);
  RecordProperty("template_bytes", static_cast<int>(Body(run).size()));
  RecordProperty("snappy_bytes", static_cast<int>(reference.size()));
  EXPECT_LE(Body(run).size(), reference.size())
      << "template " << Body(run).size() << " bytes, snappy " << reference.size();
}

TEST(BatchTemplateTest, KnowsTheMemoryItHolds) {
  const std::vector<std::string> labels = MergedLabels(100);
  std::vector<KeyedSample> batch;
  for (uint32_t key = 0; key < labels.size(); ++key) {
    batch.push_back({key, 1, 1});
  }
  BatchTemplate layout;
  const size_t empty = layout.MemoryBytes();
  ASSERT_TRUE(layout.Build(0, batch, LabelsOf(labels)));
  // Per sample at least its key, timestamp size, value offset, elements' end and held copies.
  EXPECT_GE(layout.MemoryBytes(), empty + 100 * (4 + 1 + 4 + 4 + 16));
  layout.Clear();
  EXPECT_FALSE(layout.Matches(0, batch));
}

}  // namespace
}  // namespace fabricmon::remote_write
namespace fabricmon::remote_write {
TEST(BatchTemplateDebug, Ops) {
  const LabelMerger merger(LabelPairs{{"cluster", "bench"}}, LabelPairs{{"shard", "bench-0"}});
  std::vector<std::string> labels(3000);
  for (int i = 0; i < 3000; ++i)
    merger.Append(*MakeLabelSet(absl::StrCat("fabricmon_ib_port_counter_", i % 40, "_total"),
                                {{"node", "gpu-node-0"},
                                 {"device", absl::StrCat("mlx5_", (i / 40) % 18)},
                                 {"port", "1"}},
                                SeriesOrigin::kAgent),
                  labels[i]);
  std::vector<KeyedSample> batch;
  for (uint32_t key = 0; key < 3000; ++key)
    batch.push_back({key, 1700000000000 + 3000, static_cast<double>(key * 1000003 + 3 * 4096)});
  BatchTemplate layout;
  ASSERT_TRUE(layout.Build(0, batch, LabelsOf(labels)));
  CompressedSamples run;
  layout.Compress(batch, run);
  printf("template %zu bytes for %zu samples = %.2f; snappy %zu\n", run.elements.size(),
         batch.size(), run.elements.size() / 3000.0, Reference(batch, labels).size());
  const std::string& e = run.elements;
  size_t p = 0, out = 0;
  while (p < e.size()) {
    unsigned char t = e[p];
    bool show = out > 200000 && out < 200400;
    if ((t & 3) == 0) {
      size_t n = (t >> 2) + 1;
      size_t hdr = 1;
      if ((t >> 2) >= 60) {
        int x = (t >> 2) - 59;
        n = 0;
        for (int k = 0; k < x; k++) n |= (size_t)(unsigned char)e[p + 1 + k] << (8 * k);
        n += 1;
        hdr += x;
      }
      if (show) {
        printf("L%zu '", n);
        for (size_t k = 0; k < n; k++) {
          char c = e[p + hdr + k];
          printf(c >= 32 && c < 127 ? "%c" : "\\x%02x", (unsigned char)c);
        }
        printf("'\n");
      }
      p += hdr + n;
      out += n;
    } else if ((t & 3) == 1) {
      size_t n = ((t >> 2) & 7) + 4;
      size_t off = ((t >> 5) << 8) | (unsigned char)e[p + 1];
      if (show) printf("C1 len %zu off %zu\n", n, off);
      p += 2;
      out += n;
    } else {
      size_t n = (t >> 2) + 1;
      size_t off = (unsigned char)e[p + 1] | ((unsigned char)e[p + 2] << 8);
      if (show) printf("C2 len %zu off %zu\n", n, off);
      p += 3;
      out += n;
    }
  }
  printf("%s\n", labels[1500].c_str());
}
}  // namespace fabricmon::remote_write
