#include "daemon/remote_write/keyed_batch_writer.h"

#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/testing/capturing_sender.h"
#include "tests/testing/fake_clock.h"

namespace fabricmon::remote_write {
namespace {

class KeyedBatchWriterTest : public ::testing::Test {
 protected:
  // An endpoint of one shard whose requests hold at most `per_send` samples.
  void Start(size_t per_send) {
    QueueOptions queue;
    queue.shards = 1;
    queue.max_samples_per_send = per_send;
    auto endpoint = Endpoint::Create(
        {"test", {{"cluster", "c1"}}, queue, {{"shard", "s1"}}},
        [this]() -> absl::StatusOr<std::unique_ptr<Sender>> {
          return std::unique_ptr<Sender>(std::make_unique<testing::CapturingSender>(bodies_, mu_));
        },
        clock_);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *std::move(endpoint);
    endpoint_->Start();
  }
  // `key` names `set` from now on, as a writer's caller says it.
  void Remember(KeyedBatchWriter& writer, uint32_t key, std::shared_ptr<const LabelSet> set) {
    labels_.Set(key, std::move(set));
    writer.Changed(key);
  }
  void Forget(KeyedBatchWriter& writer, uint32_t key) { Remember(writer, key, nullptr); }
  static std::shared_ptr<const LabelSet> Series(const std::string& device) {
    return MakeLabelSet("fabricmon_x_total", {{"node", "n1"}, {"device", device}},
                        SeriesOrigin::kAgent);
  }
  // Every sample received, as "device@timestamp" → value, after the endpoint flushed.
  std::map<std::string, double> Received() {
    endpoint_->Shutdown(int64_t{5} * 1000000000);
    absl::MutexLock lock(&mu_);
    std::map<std::string, double> out;
    for (const std::string& body : bodies_) {
      auto request = DecodeWriteRequest(body);
      EXPECT_TRUE(request.ok()) << request.status();
      for (const auto& series : request->timeseries()) {
        std::string device;
        for (const auto& label : series.labels()) {
          if (label.name() == "device") {
            device = label.value();
          }
        }
        for (const auto& sample : series.samples()) {
          const std::string key = absl::StrCat(device, "@", sample.timestamp());
          EXPECT_EQ(out.count(key), 0u) << key << " twice";
          out[key] = sample.value();
        }
      }
    }
    return out;
  }

  StoredLabels labels_;
  testing::FakeClock clock_;
  absl::Mutex mu_;
  std::vector<std::string> bodies_;
  std::unique_ptr<Endpoint> endpoint_;
};

// A batch larger than a request is written in pieces, each a layout with a template of its own
// once it came a second time; a new layout is encoded the first time it comes.
TEST_F(KeyedBatchWriterTest, RepeatedLayoutsAreWrittenInPiecesByTemplates) {
  Start(5);
  KeyedBatchWriter writer({endpoint_.get()}, labels_);
  for (uint32_t key = 0; key < 12; ++key) {
    Remember(writer, key, Series(absl::StrCat("d", key)));
  }
  std::map<std::string, double> expected;
  auto write = [&](int64_t t, size_t count) {
    std::vector<KeyedSample> batch;
    for (uint32_t key = 0; key < count; ++key) {
      const double value = key % 3 == 0 ? 0 : static_cast<double>(t * 100 + key);
      batch.push_back({key, t, value});
      expected[absl::StrCat("d", key, "@", t)] = value;
    }
    writer.Write(batch, /*route=*/0, clock_.MonotonicNanos(), nullptr);
  };
  write(1000, 12);  // three pieces, each seen once
  const size_t first = writer.MemoryBytes();
  write(2000, 12);  // three templates built
  const size_t built = writer.MemoryBytes();
  EXPECT_GT(built, first);
  write(3000, 12);
  EXPECT_EQ(writer.MemoryBytes(), built);  // none built again
  write(4000, 4);                          // a new layout: encoded
  EXPECT_EQ(writer.MemoryBytes(), built);
  write(5000, 4);  // and then by a template of its own
  EXPECT_GT(writer.MemoryBytes(), built);
  EXPECT_EQ(endpoint_->stats().samples_templated.load(), 12u + 12u + 4u);
  EXPECT_EQ(Received(), expected);
}

// An agent's collectors take turns on its stream, each with its own layout: each layout keeps
// its template while the others come between.
TEST_F(KeyedBatchWriterTest, LayoutsTakingTurnsEachKeepATemplate) {
  Start(10000);
  KeyedBatchWriter writer({endpoint_.get()}, labels_);
  for (uint32_t key = 0; key < 10; ++key) {
    Remember(writer, key, Series(absl::StrCat("d", key)));
  }
  std::map<std::string, double> expected;
  auto write = [&](int64_t t, uint32_t first_key, uint32_t end_key) {
    std::vector<KeyedSample> batch;
    for (uint32_t key = first_key; key < end_key; ++key) {
      batch.push_back({key, t, static_cast<double>(t + key)});
      expected[absl::StrCat("d", key, "@", t)] = static_cast<double>(t + key);
    }
    writer.Write(batch, 0, clock_.MonotonicNanos(), nullptr);
  };
  std::vector<size_t> memory;
  for (int64_t round = 0; round < 5; ++round) {
    write(1000 + round * 1000, 0, 6);       // one collector's series
    write(1000 + round * 1000 + 7, 6, 10);  // another's, read a moment later
    memory.push_back(writer.MemoryBytes());
  }
  EXPECT_GT(memory[1], memory[0]);  // both built in the second round
  EXPECT_EQ(memory[4], memory[1]);  // and kept: none built again
  EXPECT_EQ(Received(), expected);
}

// Layouts alike in length and first key (a collector whose series changed after its first; two
// collectors' batches that begin with one series) take turns: a piece is first tried against
// the one used last, which is not its own every other time, and is then found by its hash. Each
// keeps its template, and every sample goes with its own labels.
TEST_F(KeyedBatchWriterTest, LayoutsAlikeInLengthAndFirstKeyKeepTheirOwnTemplates) {
  Start(10000);
  KeyedBatchWriter writer({endpoint_.get()}, labels_);
  for (uint32_t key = 0; key < 12; ++key) {
    Remember(writer, key, Series(absl::StrCat("d", key)));
  }
  const std::vector<std::vector<uint32_t>> layouts = {
      {0, 1, 2, 3, 4}, {0, 5, 6, 7, 8}, {0, 1, 2, 4, 3}, {0, 9, 10, 11, 1}};
  std::map<std::string, double> expected;
  std::vector<uint64_t> built;
  for (int64_t round = 0; round < 6; ++round) {
    for (size_t l = 0; l < layouts.size(); ++l) {
      const int64_t t = 1000 + round * 1000 + static_cast<int64_t>(l);
      std::vector<KeyedSample> batch;
      for (const uint32_t key : layouts[l]) {
        const double value = static_cast<double>(t * 10 + key);
        batch.push_back({key, t, value});
        expected[absl::StrCat("d", key, "@", t)] = value;
      }
      writer.Write(batch, 0, clock_.MonotonicNanos(), nullptr);
    }
    built.push_back(writer.templates_built());
  }
  EXPECT_EQ(built[0], 0u);
  EXPECT_EQ(built[1], layouts.size());  // each built the second time it came
  EXPECT_EQ(built[5], layouts.size());  // and none again
  EXPECT_EQ(endpoint_->stats().samples_templated.load(), 5u * layouts.size() * 5);
  EXPECT_EQ(Received(), expected);
}

// A stream's new series (keys no template holds, and their saturation flags forgotten) leave
// the templates be; labels changed under a key a template holds build the templates again.
TEST_F(KeyedBatchWriterTest, OnlyLabelsATemplateHoldsBuildItAgain) {
  Start(10000);
  KeyedBatchWriter writer({endpoint_.get()}, labels_);
  for (uint32_t key = 0; key < 6; ++key) {
    Remember(writer, key, Series(absl::StrCat("d", key)));
  }
  std::map<std::string, double> expected;
  auto write_both = [&](int64_t t) {  // two collectors' layouts, in turn
    for (uint32_t first : {0u, 3u}) {
      std::vector<KeyedSample> batch;
      for (uint32_t key = first; key < first + 3; ++key) {
        batch.push_back({key, t + first, static_cast<double>(t + key)});
        expected[absl::StrCat("d", key, "@", t + first)] = static_cast<double>(t + key);
      }
      writer.Write(batch, 0, clock_.MonotonicNanos(), nullptr);
    }
  };
  write_both(1000);
  write_both(2000);
  EXPECT_EQ(writer.templates_built(), 2u);
  for (uint32_t key = 10; key < 20; ++key) {  // new series, as OnStored remembers them
    Forget(writer, key + 100);
    Remember(writer, key, Series(absl::StrCat("d", key)));
  }
  write_both(3000);
  EXPECT_EQ(writer.templates_built(), 2u);  // none built again
  Remember(writer, 4, Series("d4-renamed"));
  write_both(4000);
  EXPECT_EQ(writer.templates_built(), 4u);  // both: one version for the stream
  EXPECT_EQ(endpoint_->stats().samples_templated.load(), 18u);
  expected.erase("d4@4003");
  expected["d4-renamed@4003"] = 4004;
  EXPECT_EQ(Received(), expected);
}

// Keys relabelled, forgotten and remembered again between batches of layouts taking turns, in
// a seeded random order: every sample arrives under the labels its key had when it was written.
TEST_F(KeyedBatchWriterTest, EverySampleCarriesTheLabelsItsKeyHadWhenWritten) {
  Start(7);  // pieces too
  KeyedBatchWriter writer({endpoint_.get()}, labels_);
  constexpr uint32_t kKeys = 16;
  std::vector<std::string> device(kKeys);  // empty: forgotten (or never remembered)
  uint32_t relabels = 0;
  auto remember = [&](uint32_t key) {
    device[key] = absl::StrCat("k", key, "v", relabels++);
    Remember(writer, key, Series(device[key]));
  };
  for (uint32_t key = 0; key < kKeys; ++key) {
    remember(key);
  }
  std::mt19937 random(20261128);
  std::map<std::string, double> expected;
  for (int64_t t = 1000; t < 1000 + 600; ++t) {
    const uint32_t choice = random() % 100;
    const uint32_t key = random() % kKeys;
    if (choice < 10) {
      remember(key);
    } else if (choice < 14) {
      Forget(writer, key);
      device[key].clear();
    } else {
      // One of four collectors' layouts (keys by their residue), less the keys forgotten.
      const uint32_t layout = random() % 4;
      std::vector<KeyedSample> batch;
      for (uint32_t k = 0; k < kKeys; ++k) {
        if ((k % 4 == layout || (layout == 3 && k % 2 == 0)) && !device[k].empty()) {
          const double value = static_cast<double>(random() % 5);  // repeats: copies
          batch.push_back({k, t, value});
          expected[absl::StrCat(device[k], "@", t)] = value;
        }
      }
      writer.Write(batch, 0, clock_.MonotonicNanos(), nullptr);
    }
  }
  EXPECT_GT(endpoint_->stats().samples_templated.load(), expected.size() / 2);
  EXPECT_EQ(Received(), expected);
}

// Templates kept together hold about one sample per key remembered, however many layouts a
// stream sends (the least recently used go first), and every value still arrives.
TEST_F(KeyedBatchWriterTest, TemplatesHoldAboutOneSamplePerKey) {
  Start(10000);
  KeyedBatchWriter writer({endpoint_.get()}, labels_);
  constexpr uint32_t kKeys = 5000;
  for (uint32_t key = 0; key < kKeys; ++key) {
    Remember(writer, key, Series(absl::StrCat("d", key)));
  }
  std::map<std::string, double> expected;
  auto write_twice = [&](int64_t t, uint32_t first_key) {
    for (int64_t repeat = 0; repeat < 2; ++repeat) {
      std::vector<KeyedSample> batch;
      for (uint32_t key = first_key; key < first_key + 3000; ++key) {
        batch.push_back({key, t + repeat, static_cast<double>(key)});
        expected[absl::StrCat("d", key, "@", t + repeat)] = static_cast<double>(key);
      }
      writer.Write(batch, 0, clock_.MonotonicNanos(), nullptr);
    }
  };
  // 3,000 samples each: the bound (5,000 keys and some slack) holds three at a time.
  for (uint32_t layout = 0; layout < 3; ++layout) {
    write_twice(1000 + layout * 10, layout * 500);
  }
  const size_t three = writer.MemoryBytes();
  for (uint32_t layout = 3; layout < 8; ++layout) {
    write_twice(1000 + layout * 10, layout * 250);
  }
  EXPECT_LT(writer.MemoryBytes(), three + three / 5);
  EXPECT_EQ(Received(), expected);
}

// A key given other labels (Remember again) names them from the next batch on, though the layout
// (keys, order, timestamp sizes) is the same: a template built before is not used again.
TEST_F(KeyedBatchWriterTest, AKeyGivenOtherLabelsIsSentWithThem) {
  Start(100);
  KeyedBatchWriter writer({endpoint_.get()}, labels_);
  Remember(writer, 0, Series("a"));
  Remember(writer, 1, Series("b"));
  for (int64_t t = 1000; t <= 3000; t += 1000) {
    writer.Write({{0, t, 1}, {1, t, 2}}, 0, clock_.MonotonicNanos(), nullptr);
  }
  Remember(writer, 1, Series("c"));  // replaces b's
  for (int64_t t = 4000; t <= 6000; t += 1000) {
    writer.Write({{0, t, 1}, {1, t, 3}}, 0, clock_.MonotonicNanos(), nullptr);
  }
  const std::map<std::string, double> expected = {
      {"a@1000", 1}, {"a@2000", 1}, {"a@3000", 1}, {"a@4000", 1}, {"a@5000", 1}, {"a@6000", 1},
      {"b@1000", 2}, {"b@2000", 2}, {"b@3000", 2}, {"c@4000", 3}, {"c@5000", 3}, {"c@6000", 3}};
  EXPECT_EQ(Received(), expected);
}

}  // namespace
}  // namespace fabricmon::remote_write
