#include "daemon/wire/batch_codec.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/agent/series_table.h"
#include "daemon/wire/series_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::wire {
namespace {

using collectors::CounterSeries;
using collectors::GaugeSeries;
using collectors::Overflow;
using collectors::SeriesDesc;
using collectors::Unit;
using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using LayoutPtr = std::shared_ptr<const std::vector<uint32_t>>;

// The aggregator's side of one stream, as AgentStream drives the decoder: declarations are
// validated and registered, layouts added, batches decoded. Counts what arrived so tests can
// check what the encoder chose to send.
class Receiver {
 public:
  absl::Status Receive(const v1::AgentMessage& message, DecodedBatch* batch) {
    switch (message.body_case()) {
      case v1::AgentMessage::kDeclarations:
        ++declaration_messages_;
        for (const v1::SeriesDeclaration& declaration : message.declarations().series()) {
          absl::StatusOr<SeriesDesc> desc = FromDeclaration(declaration);
          if (!desc.ok()) {
            return desc.status();
          }
          absl::Status declared = decoder_.Declare(declaration.id());
          if (!declared.ok()) {
            return declared;
          }
          ++declarations_[declaration.id()];
          descs_[declaration.id()] = *desc;
        }
        return absl::OkStatus();
      case v1::AgentMessage::kLayouts:
        ++layout_messages_;
        for (const v1::Layout& layout : message.layouts().layouts()) {
          absl::Status added = decoder_.AddLayout(layout);
          if (!added.ok()) {
            return added;
          }
        }
        return absl::OkStatus();
      case v1::AgentMessage::kBatch:
        ++batches_;
        return decoder_.Decode(message.batch(), batch);
      default:
        return absl::InvalidArgumentError("unexpected message");
    }
  }

  // Receives every message; the last one must be the batch, decoded into `batch`.
  void ReceiveAll(const std::vector<v1::AgentMessage>& messages, DecodedBatch* batch) {
    ASSERT_FALSE(messages.empty());
    ASSERT_TRUE(messages.back().has_batch());
    for (const v1::AgentMessage& message : messages) {
      ASSERT_THAT(Receive(message, batch), IsOk());
    }
  }

  StreamDecoder& decoder() { return decoder_; }
  const std::map<uint32_t, int>& declarations() const { return declarations_; }
  const std::map<uint32_t, SeriesDesc>& descs() const { return descs_; }
  int declaration_messages() const { return declaration_messages_; }
  int layout_messages() const { return layout_messages_; }
  int batches() const { return batches_; }

 private:
  StreamDecoder decoder_;
  std::map<uint32_t, int> declarations_;  // id → times declared
  std::map<uint32_t, SeriesDesc> descs_;
  int declaration_messages_ = 0;
  int layout_messages_ = 0;
  int batches_ = 0;
};

std::vector<uint64_t> ValuesInLayout(const std::vector<uint64_t>& by_index,
                                     const std::vector<uint32_t>& layout,
                                     const std::vector<uint32_t>& ids) {
  std::vector<uint64_t> out;
  for (uint32_t id : layout) {
    const size_t index = std::find(ids.begin(), ids.end(), id) - ids.begin();
    out.push_back(by_index[index]);
  }
  return out;
}

// A mix of every counter kind the collectors produce, plus gauges (signed values).
struct SeriesSet {
  std::vector<SeriesDesc> descs;
  std::vector<uint32_t> ids;  // from the agent's table, parallel to descs
};
SeriesSet MakeSeriesSet(agent::SeriesTable& table, int per_kind) {
  SeriesSet set;
  for (int i = 0; i < per_kind; ++i) {
    const collectors::Labels labels = {{"device", absl::StrCat("mlx5_", i)}, {"port", "1"}};
    set.descs.push_back(CounterSeries("test", "fabricmon_test_wrap32_total", "32-bit wrapping",
                                      Unit::kPackets, 32, Overflow::kWraps, 1.0, labels));
    set.descs.push_back(CounterSeries("test", "fabricmon_test_wrap64_total", "64-bit wrapping",
                                      Unit::kBytes, 64, Overflow::kWraps, 4.0, labels));
    set.descs.push_back(CounterSeries("test", "fabricmon_test_sat32_total", "32-bit saturating",
                                      Unit::kNone, 32, Overflow::kSaturates, 1.0, labels));
    set.descs.push_back(CounterSeries("test", "fabricmon_test_sat16_total", "16-bit saturating",
                                      Unit::kNone, 16, Overflow::kSaturates, 1.0, labels));
    set.descs.push_back(GaugeSeries("test", "fabricmon_test_temperature_celsius", "signed gauge",
                                    Unit::kCelsius, 1.0, labels));
  }
  for (const SeriesDesc& desc : set.descs) {
    set.ids.push_back(table.Intern(desc));
  }
  return set;
}

// Next raw value of a series: mostly small increments, with wraps, resets, saturation, huge
// jumps and (for gauges) negative values, so every delta shape the wire can carry occurs.
uint64_t NextValue(const SeriesDesc& desc, uint64_t value, std::mt19937_64& rng) {
  const uint64_t max = desc.MaxRaw();
  std::uniform_int_distribution<int> pick(0, 99);
  const int p = pick(rng);
  if (desc.type == collectors::MetricType::kGauge) {
    std::uniform_int_distribution<int64_t> gauge(-300, 300);
    return p < 5 ? static_cast<uint64_t>(std::numeric_limits<int64_t>::min())
                 : static_cast<uint64_t>(gauge(rng));
  }
  if (p < 5) {
    return 0;  // reset (driver reload, perfquery -R)
  }
  if (p < 10) {
    return max - std::uniform_int_distribution<uint64_t>(0, 3)(rng);  // near or at the top
  }
  if (p < 15) {
    return std::uniform_int_distribution<uint64_t>(0, max)(rng);  // anything in range
  }
  const uint64_t step = std::uniform_int_distribution<uint64_t>(0, p < 90 ? 200 : 1u << 30)(rng);
  if (desc.overflow == Overflow::kSaturates) {
    return max - value < step ? max : value + step;
  }
  // Wrapping: modulo 2^width (for 64 bits the uint64 arithmetic already is).
  return desc.width_bits >= 64 ? value + step : (value + step) & max;
}

TEST(StreamCodecTest, RandomCountersRoundTripExactly) {
  agent::SeriesTable table;
  const SeriesSet set = MakeSeriesSet(table, 8);
  const size_t n = set.descs.size();
  // The full layout and a subset (a collector whose file went missing for some cycles), each a
  // shared object reused across cycles as CycleBuilder does.
  const LayoutPtr full = std::make_shared<const std::vector<uint32_t>>(set.ids);
  std::vector<uint32_t> odd_ids;
  for (size_t i = 1; i < n; i += 2) {
    odd_ids.push_back(set.ids[i]);
  }
  const LayoutPtr odd = std::make_shared<const std::vector<uint32_t>>(odd_ids);

  std::mt19937_64 rng(20240601);
  std::vector<uint64_t> values(n);
  for (size_t i = 0; i < n; ++i) {
    values[i] = NextValue(set.descs[i], 0, rng);
  }
  StreamEncoder encoder(table);
  Receiver receiver;
  for (uint64_t sequence = 1; sequence <= 500; ++sequence) {
    for (size_t i = 0; i < n; ++i) {
      values[i] = NextValue(set.descs[i], values[i], rng);
    }
    const LayoutPtr& layout = sequence % 7 == 3 ? odd : full;
    const std::vector<uint64_t> sent = ValuesInLayout(values, *layout, set.ids);
    std::vector<v1::AgentMessage> messages;
    encoder.Encode(sequence, 1'700'000'000'000'000'000 + static_cast<int64_t>(sequence), 1234,
                   sequence % 11, layout, sent, &messages);
    DecodedBatch batch;
    receiver.ReceiveAll(messages, &batch);
    if (HasFailure()) {
      return;
    }
    ASSERT_EQ(batch.values, sent) << "sequence " << sequence;
    EXPECT_EQ(batch.sequence, sequence);
    EXPECT_EQ(batch.timestamp_unix_nanos,
              1'700'000'000'000'000'000 + static_cast<int64_t>(sequence));
    EXPECT_EQ(batch.dropped_before, sequence % 11);
    EXPECT_EQ(batch.collect_duration_us, 1234u);
    ASSERT_NE(batch.series_ids, nullptr);
    EXPECT_EQ(*batch.series_ids, *layout);
    EXPECT_EQ(batch.present, std::vector<bool>(sent.size(), true));
  }
  // Each series declared once on the stream, each layout object sent once.
  EXPECT_EQ(receiver.declarations().size(), n);
  for (const auto& [id, times] : receiver.declarations()) {
    EXPECT_EQ(times, 1) << "series " << id;
  }
  EXPECT_EQ(receiver.layout_messages(), 2);
  EXPECT_EQ(receiver.batches(), 500);
  // What was declared is what the agent's table holds.
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(receiver.descs().count(set.ids[i]), 1u);
    const SeriesDesc& got = receiver.descs().at(set.ids[i]);
    EXPECT_EQ(got.fingerprint, set.descs[i].fingerprint);
    EXPECT_EQ(got.width_bits, set.descs[i].width_bits);
    EXPECT_EQ(got.overflow, set.descs[i].overflow);
    EXPECT_EQ(got.scale, set.descs[i].scale);
  }
}

TEST(StreamCodecTest, DeclaresOnlyOnFirstUseAndAgainOnANewStream) {
  agent::SeriesTable table;
  const SeriesSet set = MakeSeriesSet(table, 2);
  const LayoutPtr first_half = std::make_shared<const std::vector<uint32_t>>(
      std::vector<uint32_t>(set.ids.begin(), set.ids.begin() + 5));
  const LayoutPtr all = std::make_shared<const std::vector<uint32_t>>(set.ids);
  StreamEncoder encoder(table);

  auto count = [](const std::vector<v1::AgentMessage>& messages, v1::AgentMessage::BodyCase body) {
    int declared = 0;
    for (const auto& message : messages) {
      if (message.body_case() == body) {
        declared += body == v1::AgentMessage::kDeclarations ? message.declarations().series_size()
                                                            : message.layouts().layouts_size();
      }
    }
    return declared;
  };

  std::vector<v1::AgentMessage> messages;
  encoder.Encode(1, 1, 0, 0, first_half, std::vector<uint64_t>(5, 7), &messages);
  EXPECT_EQ(count(messages, v1::AgentMessage::kDeclarations), 5);
  EXPECT_EQ(count(messages, v1::AgentMessage::kLayouts), 1);
  // Order on the wire: declarations, then the layout using them, then the batch.
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_TRUE(messages[0].has_declarations());
  EXPECT_TRUE(messages[1].has_layouts());
  EXPECT_TRUE(messages[2].has_batch());

  messages.clear();
  encoder.Encode(2, 2, 0, 0, first_half, std::vector<uint64_t>(5, 8), &messages);
  ASSERT_EQ(messages.size(), 1u);  // just the batch
  EXPECT_THAT(messages[0].batch().value_deltas(), ElementsAre(1, 1, 1, 1, 1));

  messages.clear();
  encoder.Encode(3, 3, 0, 0, all, std::vector<uint64_t>(all->size(), 8), &messages);
  EXPECT_EQ(count(messages, v1::AgentMessage::kDeclarations), static_cast<int>(all->size()) - 5);
  EXPECT_EQ(count(messages, v1::AgentMessage::kLayouts), 1);

  // A reconnect is a new stream: everything is declared again and the first deltas are the
  // absolute values, so a decoder that never saw the old stream gets exact numbers.
  StreamEncoder next_stream(table);
  messages.clear();
  std::vector<uint64_t> values(all->size());
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = 1000 + i;
  }
  next_stream.Encode(4, 4, 0, 0, all, values, &messages);
  EXPECT_EQ(count(messages, v1::AgentMessage::kDeclarations), static_cast<int>(all->size()));
  EXPECT_EQ(count(messages, v1::AgentMessage::kLayouts), 1);
  Receiver fresh;
  DecodedBatch batch;
  fresh.ReceiveAll(messages, &batch);
  EXPECT_EQ(batch.values, values);
}

// Redeclare: the aggregator retired some series and asks for them again. Only those are
// declared again, and the deltas carry on from the state both sides kept.
TEST(StreamCodecTest, ForgottenIdsAreDeclaredAgainWithTheirDeltasIntact) {
  agent::SeriesTable table;
  const SeriesSet set = MakeSeriesSet(table, 1);
  const LayoutPtr layout = std::make_shared<const std::vector<uint32_t>>(set.ids);
  StreamEncoder encoder(table);
  Receiver receiver;
  DecodedBatch batch;
  std::vector<uint64_t> values(layout->size(), 100);
  std::vector<v1::AgentMessage> messages;
  encoder.Encode(1, 1, 0, 0, layout, values, &messages);
  receiver.ReceiveAll(messages, &batch);

  encoder.Forget({(*layout)[1], (*layout)[3], 0, 1u << 30});  // unknown ids are ignored
  for (uint64_t& value : values) value += 5;
  messages.clear();
  encoder.Encode(2, 2, 0, 0, layout, values, &messages);
  ASSERT_EQ(messages.size(), 2u);  // the two declarations, then the batch (layout known)
  ASSERT_TRUE(messages[0].has_declarations());
  std::vector<uint32_t> declared;
  for (const auto& declaration : messages[0].declarations().series()) {
    declared.push_back(declaration.id());
  }
  EXPECT_THAT(declared, ElementsAre((*layout)[1], (*layout)[3]));
  receiver.ReceiveAll(messages, &batch);
  EXPECT_EQ(batch.values, values);
}

// Churn: every cycle of a collector has a new shape (processes, veths coming and going) for as
// long as the stream lives. The encoder recycles its least recently used layouts, so the decoder
// never reaches its layout bounds and every value still decodes exactly.
TEST(StreamCodecTest, LayoutChurnStaysWithinTheDecodersBounds) {
  agent::SeriesTable table;
  std::vector<uint32_t> pool;
  for (int i = 0; i < 3000; ++i) {
    pool.push_back(table.Intern(GaugeSeries("churn", "fabricmon_churn", "h", Unit::kNone, 1.0,
                                            {{"pid", absl::StrCat(i)}})));
  }
  StreamEncoder encoder(table);
  Receiver receiver;
  DecodedBatch batch;
  std::mt19937 random(7);
  // 6,000 cycles, each a different random subset of 100..2,500 series: more layouts than the
  // decoder holds (4,096) and far more entries than its budget.
  for (uint64_t cycle = 1; cycle <= 6000; ++cycle) {
    std::shuffle(pool.begin(), pool.end(), random);
    const size_t size = 100 + random() % 2400;
    auto layout = std::make_shared<std::vector<uint32_t>>(pool.begin(), pool.begin() + size);
    std::sort(layout->begin(), layout->end());
    std::vector<uint64_t> values(size);
    for (size_t i = 0; i < size; ++i) values[i] = cycle * 10 + (*layout)[i];
    std::vector<v1::AgentMessage> messages;
    encoder.Encode(cycle, static_cast<int64_t>(cycle), 0, 0, layout, values, &messages);
    receiver.ReceiveAll(messages, &batch);
    ASSERT_EQ(batch.values, values) << "cycle " << cycle;
    ASSERT_LE(encoder.layouts_held(), StreamEncoder::kMaxLayouts);
  }
  EXPECT_LE(encoder.layout_entries(),
            StreamDecoder::kMinLayoutEntryBudget + StreamEncoder::kLayoutEntriesPerSeries * 3000);
}

// A layout pushed out and used again (a replayed cycle, a shape that comes back) is sent again
// and decodes as before.
TEST(StreamCodecTest, AnEvictedLayoutIsSentAgainWhenUsedAgain) {
  agent::SeriesTable table;
  std::vector<std::shared_ptr<const std::vector<uint32_t>>> layouts;
  for (size_t i = 0; i <= StreamEncoder::kMaxLayouts; ++i) {
    const uint32_t id = table.Intern(
        GaugeSeries("churn", "fabricmon_churn", "h", Unit::kNone, 1.0, {{"pid", absl::StrCat(i)}}));
    layouts.push_back(std::make_shared<const std::vector<uint32_t>>(std::vector<uint32_t>{id}));
  }
  StreamEncoder encoder(table);
  Receiver receiver;
  DecodedBatch batch;
  std::vector<v1::AgentMessage> messages;
  uint64_t sequence = 0;
  for (const auto& layout : layouts) {  // one more than fits: the first is evicted
    messages.clear();
    encoder.Encode(++sequence, 1, 0, 0, layout, {sequence}, &messages);
    receiver.ReceiveAll(messages, &batch);
  }
  messages.clear();
  encoder.Encode(++sequence, 1, 0, 0, layouts[0], {42}, &messages);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_TRUE(messages[0].has_layouts());
  receiver.ReceiveAll(messages, &batch);
  EXPECT_THAT(batch.values, ElementsAre(42));
  EXPECT_EQ(encoder.layouts_held(), StreamEncoder::kMaxLayouts);
}

// A node's first cycle declares thousands of series; each declarations message stays within
// 1000 series and about 16 KiB, far below the smallest max_message_bytes an aggregator accepts
// (64 KiB), however heavy the HELP texts are, and the decoder still gets every value.
TEST(StreamCodecTest, SplitsLargeDeclarationSetsIntoBoundedMessages) {
  for (const size_t help_bytes : {size_t{1}, size_t{1024}}) {
    SCOPED_TRACE(absl::StrCat("help of ", help_bytes, " bytes"));
    agent::SeriesTable table;
    std::vector<uint32_t> ids;
    for (int i = 0; i < 2500; ++i) {
      ids.push_back(table.Intern(
          CounterSeries("test", "fabricmon_test_total", std::string(help_bytes, 'h'), Unit::kNone,
                        64, Overflow::kWraps, 1.0, {{"index", absl::StrCat(i)}})));
    }
    StreamEncoder encoder(table);
    std::vector<v1::AgentMessage> messages;
    encoder.Encode(1, 1, 0, 0, std::make_shared<const std::vector<uint32_t>>(ids),
                   std::vector<uint64_t>(ids.size(), 1), &messages);
    ASSERT_GE(messages.size(), 5u);
    int declared = 0;
    for (size_t i = 0; i + 2 < messages.size(); ++i) {
      ASSERT_TRUE(messages[i].has_declarations()) << i;
      EXPECT_LE(messages[i].declarations().series_size(), 1000) << i;
      EXPECT_LE(messages[i].ByteSizeLong(), size_t{16 << 10} + help_bytes + 200) << i;
      declared += messages[i].declarations().series_size();
    }
    EXPECT_EQ(declared, 2500);
    EXPECT_TRUE(messages[messages.size() - 2].has_layouts());
    EXPECT_TRUE(messages.back().has_batch());
    Receiver receiver;
    DecodedBatch batch;
    receiver.ReceiveAll(messages, &batch);
    EXPECT_EQ(batch.values, std::vector<uint64_t>(ids.size(), 1));
  }
}

TEST(StreamCodecTest, WrapsAndResetsTravelAsSmallNegativeDeltas) {
  agent::SeriesTable table;
  const uint32_t id = table.Intern(CounterSeries("test", "fabricmon_test_total", "h", Unit::kNone,
                                                 32, Overflow::kWraps, 1.0, {}));
  const LayoutPtr layout = std::make_shared<const std::vector<uint32_t>>(std::vector<uint32_t>{id});
  StreamEncoder encoder(table);
  Receiver receiver;
  const std::vector<uint64_t> sequence_of_values = {
      0xFFFFFFF0u,
      0x00000005u,  // 32-bit wrap: +21 modulo 2^32, sent as -4294967275
      0x00000009u,
      0u,  // reset to zero
      std::numeric_limits<uint64_t>::max(),
      0u,
      1u};
  uint64_t seq = 0;
  for (uint64_t value : sequence_of_values) {
    ++seq;
    std::vector<v1::AgentMessage> messages;
    encoder.Encode(seq, static_cast<int64_t>(seq), 0, 0, layout, {value}, &messages);
    DecodedBatch batch;
    receiver.ReceiveAll(messages, &batch);
    EXPECT_THAT(batch.values, ElementsAre(value));
  }
}

// --- Decoder hostile input. Every error is InvalidArgument and leaves the decoder as it was.

v1::Layout MakeLayout(uint32_t id, std::vector<uint32_t> series) {
  v1::Layout layout;
  layout.set_id(id);
  layout.mutable_series_ids()->Assign(series.begin(), series.end());
  return layout;
}

v1::SampleBatch MakeBatch(uint64_t sequence, uint32_t layout, std::vector<int64_t> deltas,
                          std::string present = "") {
  v1::SampleBatch batch;
  batch.set_sequence(sequence);
  batch.set_timestamp_unix_nanos(static_cast<int64_t>(sequence));
  batch.set_layout_id(layout);
  batch.mutable_value_deltas()->Assign(deltas.begin(), deltas.end());
  batch.set_present(std::move(present));
  return batch;
}

class StreamDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint32_t id : {1u, 2u, 3u}) {
      ASSERT_THAT(decoder_.Declare(id), IsOk());
    }
    ASSERT_THAT(decoder_.AddLayout(MakeLayout(1, {1, 2, 3})), IsOk());
    DecodedBatch batch;
    ASSERT_THAT(decoder_.Decode(MakeBatch(1, 1, {10, 20, 30}), &batch), IsOk());
  }

  // The decoder still decodes a valid batch against the state before the bad input.
  void ExpectUnchanged() {
    DecodedBatch batch;
    ASSERT_THAT(decoder_.Decode(MakeBatch(99, 1, {1, 1, 1}), &batch), IsOk());
    EXPECT_THAT(batch.values, ElementsAre(11, 21, 31));
  }

  StreamDecoder decoder_;
};

TEST_F(StreamDecoderTest, RefusesSeriesIdZeroAndHugeIds) {
  EXPECT_THAT(decoder_.Declare(0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(decoder_.Declare(StreamDecoder::kMaxSeriesId),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::Status huge = decoder_.Declare(std::numeric_limits<uint32_t>::max());
  EXPECT_THAT(huge, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(huge.message(), HasSubstr("4294967295"));
  EXPECT_EQ(decoder_.declared_count(), 3u);
  EXPECT_FALSE(decoder_.IsDeclared(0));
  // Declaring again is idempotent.
  EXPECT_THAT(decoder_.Declare(2), IsOk());
  EXPECT_EQ(decoder_.declared_count(), 3u);
  ExpectUnchanged();
}

TEST_F(StreamDecoderTest, RefusesLayoutWithUndeclaredIds) {
  for (uint32_t bad : {0u, 4u, 1000u, std::numeric_limits<uint32_t>::max()}) {
    SCOPED_TRACE(bad);
    absl::Status status = decoder_.AddLayout(MakeLayout(2, {1, bad, 3}));
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("undeclared series id ", bad)));
  }
  // The refused layout was not added.
  DecodedBatch batch;
  EXPECT_THAT(decoder_.Decode(MakeBatch(2, 2, {1, 1, 1}), &batch),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ExpectUnchanged();
}

TEST_F(StreamDecoderTest, RefusesLayoutIdZero) {
  EXPECT_THAT(decoder_.AddLayout(MakeLayout(0, {1})), StatusIs(absl::StatusCode::kInvalidArgument));
  ExpectUnchanged();
}

TEST_F(StreamDecoderTest, RefusesBatchWithUnknownLayout) {
  DecodedBatch batch;
  absl::Status status = decoder_.Decode(MakeBatch(2, 7, {1, 1, 1}), &batch);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status.message(), HasSubstr("unknown layout 7"));
  EXPECT_FALSE(decoder_.HasLayout(7));
  EXPECT_TRUE(decoder_.HasLayout(1));
  ExpectUnchanged();
}

TEST_F(StreamDecoderTest, RefusesWrongValueCount) {
  DecodedBatch batch;
  for (std::vector<int64_t> deltas :
       {std::vector<int64_t>{}, std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 1, 1, 1}}) {
    SCOPED_TRACE(deltas.size());
    absl::Status status = decoder_.Decode(MakeBatch(2, 1, deltas), &batch);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(status.message(), HasSubstr("values for 3 present series"));
  }
  ExpectUnchanged();
}

TEST_F(StreamDecoderTest, RefusesPresenceBitmapOfWrongSize) {
  DecodedBatch batch;
  // Three series need exactly one bitmap byte.
  for (std::string bitmap : {std::string("\x07\x00", 2), std::string(100, '\xff')}) {
    EXPECT_THAT(decoder_.Decode(MakeBatch(2, 1, {1, 1, 1}, bitmap), &batch),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  // A bitmap whose set bits disagree with the value count is a wrong value count.
  EXPECT_THAT(decoder_.Decode(MakeBatch(2, 1, {1, 1, 1}, std::string("\x05", 1)), &batch),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ExpectUnchanged();
}

TEST_F(StreamDecoderTest, AbsentValuesAreNotZeroAndKeepTheirBaseline) {
  DecodedBatch batch;
  // Series 2 absent (bit 1 clear): two values for series 1 and 3.
  ASSERT_THAT(decoder_.Decode(MakeBatch(2, 1, {5, 5}, std::string("\x05", 1)), &batch), IsOk());
  EXPECT_THAT(batch.present, ElementsAre(true, false, true));
  EXPECT_EQ(batch.values[0], 15u);
  EXPECT_EQ(batch.values[2], 35u);
  // Series 2's next delta still applies to its last value, 20.
  ASSERT_THAT(decoder_.Decode(MakeBatch(3, 1, {0, 2, 0}), &batch), IsOk());
  EXPECT_THAT(batch.values, ElementsAre(15, 22, 35));
}

TEST_F(StreamDecoderTest, RedefinedLayoutReplacesTheOldOrder) {
  ASSERT_THAT(decoder_.AddLayout(MakeLayout(1, {3, 1})), IsOk());
  DecodedBatch batch;
  ASSERT_THAT(decoder_.Decode(MakeBatch(2, 1, {1, 1}), &batch), IsOk());
  EXPECT_THAT(batch.values, ElementsAre(31, 11));
  EXPECT_THAT(*batch.series_ids, ElementsAre(3, 1));
}

TEST_F(StreamDecoderTest, BoundsTheNumberOfLayouts) {
  for (uint32_t id = 2; id <= StreamDecoder::kMaxLayouts; ++id) {
    ASSERT_THAT(decoder_.AddLayout(MakeLayout(id, {1})), IsOk());
  }
  EXPECT_THAT(decoder_.AddLayout(MakeLayout(StreamDecoder::kMaxLayouts + 1, {1})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Redefining an existing layout at the cap is still fine.
  EXPECT_THAT(decoder_.AddLayout(MakeLayout(2, {2})), IsOk());
  ExpectUnchanged();
}

}  // namespace
}  // namespace fabricmon::wire
