#include "daemon/store/series_store.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fabricmon::store {
namespace {

using collectors::CounterSeries;
using collectors::GaugeSeries;
using collectors::Overflow;
using collectors::SeriesDesc;
using collectors::Unit;
using ::fabricmon::testing::IsOk;
using ::fabricmon::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kT0 = 1'700'000'000 * kSecond;

SeriesDesc Counter(uint8_t width, Overflow overflow, double scale = 1.0,
                   std::string name = "fabricmon_test_total") {
  return CounterSeries("test", std::move(name), "h", Unit::kNone, width, overflow, scale,
                       {{"device", "mlx5_0"}});
}

// --- CounterRate: the arithmetic every rate and detector relies on.

TEST(CounterRateTest, PlainIncreaseIsScaledPerSecond) {
  const SeriesDesc desc = Counter(64, Overflow::kSaturates, /*scale=*/4.0);
  const Rate rate = CounterRate(desc, {kT0, 1000}, {kT0 + 2 * kSecond, 1500});
  EXPECT_EQ(rate.kind, Rate::Kind::kOk);
  EXPECT_DOUBLE_EQ(rate.per_second, 500 * 4.0 / 2);
}

TEST(CounterRateTest, UnwindsTheWrapOfA32BitWrappingCounter) {
  const SeriesDesc desc = Counter(32, Overflow::kWraps);
  // 0xFFFFFFF0 → 0x10 is +32 modulo 2^32, not a reset.
  const Rate rate = CounterRate(desc, {kT0, 0xFFFFFFF0u}, {kT0 + kSecond, 0x10u});
  EXPECT_EQ(rate.kind, Rate::Kind::kOk);
  EXPECT_DOUBLE_EQ(rate.per_second, 32);
  // Landing exactly on zero after the maximum is +1.
  const Rate to_zero = CounterRate(desc, {kT0, 0xFFFFFFFFu}, {kT0 + kSecond, 0});
  EXPECT_EQ(to_zero.kind, Rate::Kind::kOk);
  EXPECT_DOUBLE_EQ(to_zero.per_second, 1);
}

TEST(CounterRateTest, NarrowWrappingCountersUnwindAtTheirWidth) {
  const SeriesDesc desc = Counter(16, Overflow::kWraps);
  const Rate rate = CounterRate(desc, {kT0, 0xFFFEu}, {kT0 + kSecond, 3});
  EXPECT_EQ(rate.kind, Rate::Kind::kOk);
  EXPECT_DOUBLE_EQ(rate.per_second, 5);
}

TEST(CounterRateTest, DropOfAWrappingCounterFromItsLowerHalfIsAReset) {
  // A wrap needs the counter to have been near the top; from the lower half it was cleared.
  const SeriesDesc desc = Counter(32, Overflow::kWraps);
  EXPECT_EQ(CounterRate(desc, {kT0, 1000}, {kT0 + kSecond, 10}).kind, Rate::Kind::kReset);
}

TEST(CounterRateTest, A64BitCounterGoingDownIsAReset) {
  for (Overflow overflow : {Overflow::kWraps, Overflow::kSaturates}) {
    const SeriesDesc desc = Counter(64, overflow);
    const Rate rate =
        CounterRate(desc, {kT0, std::numeric_limits<uint64_t>::max() - 5}, {kT0 + kSecond, 10});
    EXPECT_EQ(rate.kind, Rate::Kind::kReset);
    EXPECT_EQ(rate.per_second, 0);
  }
}

TEST(CounterRateTest, SaturatedCounterAtItsMaximumIsFlaggedNotReadAsZero) {
  const SeriesDesc desc = Counter(32, Overflow::kSaturates);
  // Pinned at all ones: the true increase is unknown.
  EXPECT_EQ(CounterRate(desc, {kT0, 0xFFFFFFFFu}, {kT0 + kSecond, 0xFFFFFFFFu}).kind,
            Rate::Kind::kSaturated);
  // Reaching the maximum in this interval is saturated too (the increase may be larger).
  EXPECT_EQ(CounterRate(desc, {kT0, 100}, {kT0 + kSecond, 0xFFFFFFFFu}).kind,
            Rate::Kind::kSaturated);
  // One below the maximum is an ordinary value.
  EXPECT_EQ(CounterRate(desc, {kT0, 100}, {kT0 + kSecond, 0xFFFFFFFEu}).kind, Rate::Kind::kOk);
  // A saturating counter going down was cleared (perfquery -R): a reset, never a wrap.
  EXPECT_EQ(CounterRate(desc, {kT0, 0xFFFFFFFFu}, {kT0 + kSecond, 3}).kind, Rate::Kind::kReset);
  const SeriesDesc narrow = Counter(8, Overflow::kSaturates);
  EXPECT_EQ(CounterRate(narrow, {kT0, 7}, {kT0 + kSecond, 255}).kind, Rate::Kind::kSaturated);
}

TEST(CounterRateTest, NeedsTimeToPassAndACounter) {
  const SeriesDesc desc = Counter(64, Overflow::kWraps);
  EXPECT_EQ(CounterRate(desc, {kT0, 1}, {kT0, 2}).kind, Rate::Kind::kInsufficient);
  EXPECT_EQ(CounterRate(desc, {kT0, 1}, {kT0 - kSecond, 2}).kind, Rate::Kind::kInsufficient);
  const SeriesDesc gauge = GaugeSeries("test", "fabricmon_test", "h", Unit::kNone, 1.0, {});
  EXPECT_EQ(CounterRate(gauge, {kT0, 1}, {kT0 + kSecond, 2}).kind, Rate::Kind::kNotCounter);
}

TEST(CounterRateTest, IsNeverNegativeOrNonFinite) {
  std::mt19937_64 rng(7);
  const SeriesDesc descs[] = {Counter(32, Overflow::kWraps), Counter(64, Overflow::kWraps),
                              Counter(32, Overflow::kSaturates), Counter(16, Overflow::kSaturates),
                              Counter(4, Overflow::kWraps, 1e-6)};
  for (const SeriesDesc& desc : descs) {
    std::uniform_int_distribution<uint64_t> value(0, desc.MaxRaw());
    std::uniform_int_distribution<int64_t> dt(-kSecond, 10 * kSecond);
    for (int i = 0; i < 20000; ++i) {
      const StoredSample previous{kT0, value(rng)};
      const StoredSample latest{kT0 + dt(rng), i % 3 == 0 ? previous.raw : value(rng)};
      const Rate rate = CounterRate(desc, previous, latest);
      ASSERT_GE(rate.per_second, 0) << previous.raw << " → " << latest.raw;
      ASSERT_TRUE(std::isfinite(rate.per_second));
      if (rate.kind != Rate::Kind::kOk) {
        ASSERT_EQ(rate.per_second, 0);
      }
    }
  }
}

// --- NodeState: batches, sequences, timestamps.

class NodeStateTest : public ::testing::Test {
 protected:
  NodeStateTest() : node_("node-1", /*samples_per_series=*/4, /*max_series=*/100) {}

  void SetUp() override {
    for (const SeriesDesc& desc : {Counter(32, Overflow::kWraps, 1.0, "fabricmon_a_total"),
                                   Counter(64, Overflow::kWraps, 1.0, "fabricmon_b_total"),
                                   Counter(32, Overflow::kSaturates, 1.0, "fabricmon_c_total")}) {
      absl::StatusOr<uint32_t> index = node_.Declare(desc);
      ASSERT_THAT(index, IsOk());
      indices_.push_back(*index);
    }
  }

  NodeState::AppendResult Append(uint64_t sequence, int64_t timestamp, std::vector<uint64_t> values,
                                 uint64_t dropped_before = 0, std::vector<uint32_t> indices = {}) {
    if (indices.empty()) {
      indices = indices_;
    }
    return node_.AppendBatch(sequence, dropped_before, timestamp, indices, values,
                             std::vector<bool>(values.size(), true), timestamp);
  }

  NodeCounters Counters() const { return node_.GetSummary(false).counters; }

  // Latest raw value and sample count of series `index`.
  std::pair<uint64_t, uint32_t> Latest(uint32_t index) const {
    std::pair<uint64_t, uint32_t> out{0, 0};
    node_.WithSeries([&](const std::vector<Series>& all) {
      if (const StoredSample* latest = all[index].Latest()) {
        out = {latest->raw, all[index].count};
      }
    });
    return out;
  }

  Rate RateOf(uint32_t index) const {
    Rate rate;
    node_.WithSeries([&](const std::vector<Series>& all) { rate = all[index].CurrentRate(); });
    return rate;
  }

  NodeState node_;
  std::vector<uint32_t> indices_;
};

TEST_F(NodeStateTest, StoresBatchesAndComputesRates) {
  EXPECT_TRUE(Append(1, kT0, {10, 100, 1000}).stored);
  EXPECT_EQ(RateOf(indices_[0]).kind, Rate::Kind::kInsufficient);
  const NodeState::AppendResult result = Append(2, kT0 + kSecond, {20, 300, 1000});
  EXPECT_TRUE(result.stored);
  EXPECT_EQ(result.samples, 3u);
  EXPECT_DOUBLE_EQ(RateOf(indices_[0]).per_second, 10);
  EXPECT_DOUBLE_EQ(RateOf(indices_[1]).per_second, 200);
  EXPECT_DOUBLE_EQ(RateOf(indices_[2]).per_second, 0);
  const NodeCounters counters = Counters();
  EXPECT_EQ(counters.batches, 2u);
  EXPECT_EQ(counters.samples, 6u);
  EXPECT_EQ(node_.GetSummary(false).last_stored_sequence, 2u);
}

TEST_F(NodeStateTest, HealthReadsWhatTheSummaryDoes) {
  Append(1, kT0, {10, 100, 1000});
  Append(4, kT0 + kSecond, {20, 300, 1000}, /*dropped_before=*/1);
  Append(4, kT0 + 2 * kSecond, {20, 300, 1000});
  const NodeState::Summary summary = node_.GetSummary(false);
  const NodeState::Health health = node_.GetHealth();
  EXPECT_EQ(health.connected, summary.connected);
  EXPECT_EQ(health.last_seen_unix_nanos, summary.last_seen_unix_nanos);
  EXPECT_EQ(health.series, 3u);
  EXPECT_EQ(health.series, summary.series);
  EXPECT_EQ(health.counters.batches, 2u);
  EXPECT_EQ(health.counters.samples, 6u);
  EXPECT_EQ(health.counters.sequence_gaps, 2u);
  EXPECT_EQ(health.counters.agent_dropped_batches, 1u);
  EXPECT_EQ(health.counters.duplicate_batches, 1u);
}

TEST_F(NodeStateTest, DuplicateSequencesAreCountedAndNotStoredAgain) {
  Append(1, kT0, {10, 100, 1000});
  Append(2, kT0 + kSecond, {20, 200, 2000});
  // A replay of stored batches, with different values to prove they are not applied.
  EXPECT_FALSE(Append(2, kT0 + 2 * kSecond, {99, 99, 99}).stored);
  EXPECT_FALSE(Append(1, kT0 + 3 * kSecond, {99, 99, 99}).stored);
  const NodeCounters counters = Counters();
  EXPECT_EQ(counters.duplicate_batches, 2u);
  EXPECT_EQ(counters.batches, 2u);
  EXPECT_EQ(counters.samples, 6u);
  EXPECT_EQ(Latest(indices_[0]).first, 20u);
  EXPECT_EQ(node_.GetSummary(false).last_stored_sequence, 2u);
}

TEST_F(NodeStateTest, GapsAreCountedAndAnnouncedDropsKeptApart) {
  Append(1, kT0, {1, 1, 1});
  // Sequences 2..4 never arrived; the agent says it dropped 2 of them from its buffer.
  EXPECT_TRUE(Append(5, kT0 + kSecond, {2, 2, 2}, /*dropped_before=*/2).stored);
  NodeCounters counters = Counters();
  EXPECT_EQ(counters.sequence_gaps, 3u);
  EXPECT_EQ(counters.agent_dropped_batches, 2u);
  // The first batch of a new agent instance starts anywhere without a gap.
  NodeState fresh("node-2", 4, 100);
  ASSERT_THAT(fresh.Declare(Counter(64, Overflow::kWraps)), IsOk());
  fresh.AppendBatch(40, 0, kT0, {0}, {1}, {true}, kT0);
  EXPECT_EQ(fresh.GetSummary(false).counters.sequence_gaps, 0u);
}

// The timestamps of the samples of series `index`, oldest first.
std::vector<int64_t> Timestamps(const NodeState& node, uint32_t index) {
  std::vector<int64_t> out;
  node.WithSeries([&](const std::vector<Series>& all) {
    const Series& series = all[index];
    for (uint32_t i = series.count; i > 0; --i) {
      out.push_back(series.ring[(series.head + series.ring.size() - (i - 1)) % series.ring.size()]
                        .timestamp_unix_nanos);
    }
  });
  return out;
}

// The hostile clock: one batch stamped an hour ahead, then batches at the right time. Every
// batch is stored (none refused, so every acknowledged batch is kept), the values keep moving,
// both steps are counted, and the rates measure the real intervals.
TEST_F(NodeStateTest, AClockStepAheadThenBackKeepsTheNodeFlowing) {
  constexpr int64_t kHour = 3600 * kSecond;
  NodeState::AppendResult ahead =
      node_.AppendBatch(1, 0, kT0 + kHour, indices_, {10, 100, 1000}, {true, true, true}, kT0);
  EXPECT_TRUE(ahead.stored);
  EXPECT_TRUE(ahead.clock_step);
  EXPECT_EQ(ahead.samples, 3u);
  // Stored on the aggregator's clock, not an hour in its future.
  EXPECT_EQ(Timestamps(node_, indices_[0]), std::vector<int64_t>{kT0});

  NodeState::AppendResult back = node_.AppendBatch(
      2, 0, kT0 + 10 * kSecond, indices_, {20, 300, 1000}, {true, true, true}, kT0 + 10 * kSecond);
  EXPECT_TRUE(back.stored);
  EXPECT_TRUE(back.clock_step);
  EXPECT_EQ(back.timestamps_backwards, 1u);
  EXPECT_EQ(back.samples, 3u);
  EXPECT_EQ(Latest(indices_[0]), std::make_pair(uint64_t{20}, uint32_t{2}));
  EXPECT_DOUBLE_EQ(RateOf(indices_[0]).per_second, 1.0);   // 10 in 10 s
  EXPECT_DOUBLE_EQ(RateOf(indices_[1]).per_second, 20.0);  // 200 in 10 s

  // From now on the clock is right and nothing is a step.
  for (uint64_t sequence = 3; sequence <= 5; ++sequence) {
    const int64_t t = kT0 + static_cast<int64_t>(sequence - 1) * 10 * kSecond;
    NodeState::AppendResult next = node_.AppendBatch(
        sequence, 0, t, indices_, {10 * sequence, 100 * sequence, 1000}, {true, true, true}, t);
    EXPECT_TRUE(next.stored);
    EXPECT_FALSE(next.clock_step) << sequence;
    EXPECT_EQ(next.samples, 3u);
  }
  EXPECT_EQ(Latest(indices_[0]).first, 50u);
  EXPECT_DOUBLE_EQ(RateOf(indices_[0]).per_second, 1.0);
  EXPECT_EQ(Timestamps(node_, indices_[0]),
            (std::vector<int64_t>{kT0 + 10 * kSecond, kT0 + 20 * kSecond, kT0 + 30 * kSecond,
                                  kT0 + 40 * kSecond}));
  const NodeCounters counters = Counters();
  EXPECT_EQ(counters.clock_steps, 2u);
  EXPECT_EQ(counters.timestamps_backwards, 1u);
  EXPECT_EQ(counters.batches, 5u);
  EXPECT_EQ(counters.samples, 15u);
  EXPECT_EQ(node_.GetSummary(false).clock_offset_nanos, 0);
}

// A clock stepped back mid-stream: the batch goes on after the newest sample by the time the
// aggregator saw pass, and later batches keep that offset.
TEST_F(NodeStateTest, AClockStepBackIsReBasedNotRefused) {
  Append(1, kT0, {10, 100, 1000});
  Append(2, kT0 + kSecond, {20, 200, 1000});
  const int64_t minute = 60 * kSecond;
  // The agent's clock went back a minute; the aggregator saw one second pass.
  NodeState::AppendResult back =
      node_.AppendBatch(3, 0, kT0 + 2 * kSecond - minute, indices_, {30, 300, 1000},
                        {true, true, true}, kT0 + 2 * kSecond);
  EXPECT_TRUE(back.clock_step);
  EXPECT_EQ(back.samples, 3u);
  EXPECT_DOUBLE_EQ(RateOf(indices_[0]).per_second, 10.0);
  node_.AppendBatch(4, 0, kT0 + 3 * kSecond - minute, indices_, {40, 400, 1000}, {true, true, true},
                    kT0 + 3 * kSecond);
  EXPECT_EQ(Timestamps(node_, indices_[0]).back(), kT0 + 3 * kSecond);
  EXPECT_EQ(Counters().clock_steps, 1u);
  EXPECT_EQ(node_.GetSummary(false).clock_offset_nanos, minute);
}

// Replayed batches are old but in order: no step, stored at their own times. Equal timestamps
// (two collectors' cycles at one instant) are no step either.
TEST_F(NodeStateTest, ReplaysAndEqualTimestampsAreNoStep) {
  const int64_t now = kT0 + 600 * kSecond;
  for (uint64_t sequence = 1; sequence <= 3; ++sequence) {
    const int64_t t = kT0 + static_cast<int64_t>(sequence) * kSecond;
    EXPECT_FALSE(node_
                     .AppendBatch(sequence, 0, t, indices_, {sequence, sequence, sequence},
                                  {true, true, true}, now)
                     .clock_step);
  }
  EXPECT_FALSE(
      node_.AppendBatch(4, 0, kT0 + 3 * kSecond, indices_, {4, 4, 4}, {true, true, true}, now)
          .clock_step);
  EXPECT_EQ(Timestamps(node_, indices_[0]),
            (std::vector<int64_t>{kT0 + kSecond, kT0 + 2 * kSecond, kT0 + 3 * kSecond,
                                  kT0 + 3 * kSecond}));
  EXPECT_EQ(Counters().clock_steps, 0u);
}

// A counter value beyond its declared width is refused with the whole batch: nothing of it is
// stored and its sequence is not taken (the agent, not acknowledged, sends it again).
TEST_F(NodeStateTest, ACounterBeyondItsWidthRefusesTheBatch) {
  Append(1, kT0, {10, 100, 1000});
  const uint64_t too_big = uint64_t{1} << 32;  // series a and c are 32 bits wide
  NodeState::AppendResult refused = Append(2, kT0 + kSecond, {11, 101, too_big});
  EXPECT_FALSE(refused.stored);
  ASSERT_TRUE(refused.out_of_range_position.has_value());
  EXPECT_EQ(*refused.out_of_range_position, 2u);
  EXPECT_EQ(refused.out_of_range_width, 32);
  EXPECT_EQ(Latest(indices_[1]), std::make_pair(uint64_t{100}, uint32_t{1}));
  EXPECT_EQ(node_.GetSummary(false).last_stored_sequence, 1u);
  EXPECT_EQ(Counters().values_out_of_range, 1u);
  // The largest value of the width is fine, and the same sequence is stored then.
  EXPECT_TRUE(Append(2, kT0 + kSecond, {11, 101, too_big - 1}).stored);
  EXPECT_EQ(Latest(indices_[2]).first, too_big - 1);
  // A 64-bit counter takes any value.
  EXPECT_TRUE(Append(3, kT0 + 2 * kSecond, {12, ~uint64_t{0}, too_big - 1}).stored);
}

// VisitFamily(only_changing) skips a series by a count kept as samples are stored, never reading
// the series: it must visit exactly the series whose retained samples do not all read one raw
// value, through changes, runs longer and shorter than the ring, wraps, resets, absent values
// and a redeclaration with new semantics, at several ring capacities.
TEST(NodeStateChangingSeriesTest, VisitsExactlyTheSeriesWhoseRingHoldsMoreThanOneValue) {
  std::mt19937_64 rng(20261128);
  for (size_t capacity : {2, 3, 4, 7}) {
    SCOPED_TRACE(absl::StrCat("capacity ", capacity));
    NodeState node("node-1", capacity, /*max_series=*/100);
    std::vector<SeriesDesc> descs = {
        Counter(8, Overflow::kWraps, 1.0, "fabricmon_wrapping_total"),
        Counter(16, Overflow::kSaturates, 1.0, "fabricmon_saturating_total"),
        GaugeSeries("test", "fabricmon_state", "h", Unit::kNone, 1.0, {{"device", "mlx5_0"}})};
    std::vector<uint32_t> indices;
    for (const SeriesDesc& desc : descs) {
      absl::StatusOr<uint32_t> index = node.Declare(desc);
      ASSERT_THAT(index, IsOk());
      indices.push_back(*index);
    }
    std::vector<uint64_t> values(descs.size(), 0);
    for (uint64_t sequence = 1; sequence <= 3000; ++sequence) {
      std::vector<bool> present(descs.size(), true);
      for (size_t i = 0; i < descs.size(); ++i) {
        const uint64_t roll = rng() % 100;
        if (roll < 8) {
          values[i] = (values[i] + 1 + rng() % 3) & descs[i].MaxRaw();  // a change (maybe a wrap)
        } else if (roll < 10) {
          values[i] = values[i] / 2;  // down: a reset for the counters
        } else if (roll < 12) {
          present[i] = false;
        }  // else the value stands still: runs of dozens of samples
      }
      if (sequence % 997 == 0) {  // the saturating counter comes back 32 bits wide
        descs[1].width_bits = descs[1].width_bits == 16 ? 32 : 16;
        ASSERT_THAT(node.Declare(descs[1]), IsOk());
        values[1] &= descs[1].MaxRaw();
      }
      node.AppendBatch(sequence, 0, kT0 + static_cast<int64_t>(sequence) * kSecond, indices, values,
                       present, kT0 + static_cast<int64_t>(sequence) * kSecond);
      for (size_t i = 0; i < descs.size(); ++i) {
        FamilyKey family;
        family.name = descs[i].name;
        bool scanned_changing = false;
        node.WithSeries([&](const std::vector<Series>& all) {
          const Series& series = all[indices[i]];
          for (uint32_t back = 1; back < series.count; ++back) {
            const size_t at = (series.head + series.ring.size() - back) % series.ring.size();
            scanned_changing = scanned_changing || series.ring[at].raw != series.Latest()->raw;
          }
        });
        bool visited = false;
        node.VisitFamily(
            family, [&](const Series&) { visited = true; }, /*only_changing=*/true);
        ASSERT_EQ(visited, scanned_changing) << descs[i].name << " at sequence " << sequence;
        bool visited_all = false;
        node.VisitFamily(family, [&](const Series&) { visited_all = true; });
        ASSERT_TRUE(visited_all);
      }
      // All three families in one visit see the same, each under its own index.
      std::vector<FamilyKey> keys(descs.size());
      for (size_t i = 0; i < descs.size(); ++i) {
        keys[i].name = descs[i].name;
      }
      std::vector<int> changing(descs.size(), 0);
      node.VisitFamilies(
          keys, [&](size_t i, const Series&) { ++changing[i]; }, /*only_changing=*/true);
      for (size_t i = 0; i < descs.size(); ++i) {
        bool visited = false;
        node.VisitFamily(
            keys[i], [&](const Series&) { visited = true; }, /*only_changing=*/true);
        ASSERT_EQ(changing[i], visited ? 1 : 0) << descs[i].name << " at sequence " << sequence;
      }
    }
  }
}

TEST_F(NodeStateTest, ResetStartsANewBaselineAndIsCountedButAWrapIsNot) {
  Append(1, kT0, {0xFFFFFFF0u, 1000, 5});
  Append(2, kT0 + kSecond, {0x10u, 10, 6});  // a wraps, b (64-bit) was reset
  const NodeCounters counters = Counters();
  EXPECT_EQ(counters.resets, 1u);
  const Rate wrapped = RateOf(indices_[0]);
  EXPECT_EQ(wrapped.kind, Rate::Kind::kOk);
  EXPECT_DOUBLE_EQ(wrapped.per_second, 32);
  // The reset series restarted from one sample: no rate until the next one, never negative.
  EXPECT_EQ(Latest(indices_[1]), std::make_pair(uint64_t{10}, uint32_t{1}));
  EXPECT_EQ(RateOf(indices_[1]).kind, Rate::Kind::kInsufficient);
  Append(3, kT0 + 2 * kSecond, {0x20u, 30, 7});
  EXPECT_DOUBLE_EQ(RateOf(indices_[1]).per_second, 20);
  node_.ForEachSeries([&](const Series& series) {
    EXPECT_EQ(series.resets, series.desc->name == "fabricmon_b_total" ? 1u : 0u);
  });
}

TEST_F(NodeStateTest, FlagsSaturatedCounters) {
  Append(1, kT0, {1, 1, 0xFFFFFFFEu});
  node_.WithSeries(
      [&](const std::vector<Series>& all) { EXPECT_FALSE(all[indices_[2]].saturated); });
  Append(2, kT0 + kSecond, {1, 1, 0xFFFFFFFFu});
  node_.WithSeries(
      [&](const std::vector<Series>& all) { EXPECT_TRUE(all[indices_[2]].saturated); });
  EXPECT_EQ(RateOf(indices_[2]).kind, Rate::Kind::kSaturated);
  EXPECT_EQ(Counters().resets, 0u);
}

TEST_F(NodeStateTest, AbsentValuesAreSkipped) {
  node_.AppendBatch(1, 0, kT0, indices_, {1, 2, 3}, {true, false, true}, kT0);
  EXPECT_EQ(Latest(indices_[1]).second, 0u);
  EXPECT_EQ(Counters().samples, 2u);
}

TEST_F(NodeStateTest, RingKeepsTheNewestSamples) {
  for (uint64_t i = 1; i <= 10; ++i) {
    Append(i, kT0 + static_cast<int64_t>(i) * kSecond, {i, i, i});
  }
  EXPECT_EQ(Latest(indices_[0]), std::make_pair(uint64_t{10}, uint32_t{4}));
  EXPECT_DOUBLE_EQ(RateOf(indices_[0]).per_second, 1);
}

// A batch is one collector's cycle: what it lacks of that collector's series is absent now (a
// process that exited, a vanished netdev), and comes back with the next batch that carries it.
// Series of other collectors are not touched.
TEST(NodeStatePresenceTest, SeriesMissingFromTheirCollectorsLastBatchAreAbsent) {
  NodeState node("node-p", 4, 100);
  auto series_of = [](const char* collector, const char* pid) {
    return GaugeSeries(collector, "fabricmon_rdma_process_qps", "h", Unit::kNone, 1.0,
                       {{"pid", pid}});
  };
  const uint32_t p1 = *node.Declare(series_of("rdma_qp", "100"));
  const uint32_t p2 = *node.Declare(series_of("rdma_qp", "200"));
  const uint32_t other = *node.Declare(series_of("netdev", "0"));
  auto absent = [&](uint32_t index) {
    bool result = false;
    node.WithSeries([&](const std::vector<Series>& all) { result = all[index].absent; });
    return result;
  };
  node.AppendBatch(1, 0, kT0, {other}, {1}, {true}, kT0);
  node.AppendBatch(2, 0, kT0, {p1, p2}, {4, 8}, {true, true}, kT0);
  EXPECT_FALSE(absent(p1));
  EXPECT_FALSE(absent(p2));

  // pid 200 exited: the next rdma_qp cycle has only pid 100.
  node.AppendBatch(3, 0, kT0 + kSecond, {p1}, {4}, {true}, kT0);
  EXPECT_FALSE(absent(p1));
  EXPECT_TRUE(absent(p2));
  EXPECT_FALSE(absent(other));  // another collector's series

  // Listed but without a value (present bit clear) is absent too.
  node.AppendBatch(4, 0, kT0 + 2 * kSecond, {p1, p2}, {0, 9}, {false, true}, kT0);
  EXPECT_TRUE(absent(p1));
  EXPECT_FALSE(absent(p2));

  // A batch of another collector changes nothing here.
  node.AppendBatch(5, 0, kT0 + 3 * kSecond, {other}, {2}, {true}, kT0);
  EXPECT_TRUE(absent(p1));
  EXPECT_FALSE(absent(p2));
  EXPECT_FALSE(absent(other));

  // A replayed (duplicate) batch does not bring anything back.
  node.AppendBatch(2, 0, kT0, {p1, p2}, {4, 8}, {true, true}, kT0);
  EXPECT_TRUE(absent(p1));
}

// A batch that names one series twice has not carried its collector's other series: counting
// the series it carried must not count that one twice.
TEST(NodeStatePresenceTest, ASeriesNamedTwiceDoesNotStandInForAMissingOne) {
  NodeState node("node-p", 4, 100);
  auto series_of = [](const char* pid) {
    return GaugeSeries("rdma_qp", "fabricmon_rdma_process_qps", "h", Unit::kNone, 1.0,
                       {{"pid", pid}});
  };
  const uint32_t p1 = *node.Declare(series_of("100"));
  const uint32_t p2 = *node.Declare(series_of("200"));
  node.AppendBatch(1, 0, kT0, {p1, p2}, {4, 8}, {true, true}, kT0);
  node.AppendBatch(2, 0, kT0 + kSecond, {p1, p1}, {5, 6}, {true, true}, kT0);
  node.WithSeries([&](const std::vector<Series>& all) {
    EXPECT_FALSE(all[p1].absent);
    EXPECT_TRUE(all[p2].absent);
    EXPECT_EQ(all[p1].Latest()->raw, 6u);
  });
}

// A batch naming series of more than 8 collectors is not one collector's cycle: it marks what it
// carried present and leaves the rest as it was (nothing is marked absent on its account).
TEST(NodeStatePresenceTest, ABatchOfManyCollectorsMarksNothingAbsent) {
  NodeState node("node-p", 4, 100);
  std::vector<uint32_t> first;   // one series of each of 9 collectors, carried
  std::vector<uint32_t> second;  // another of each, left out of the batch
  for (int c = 0; c < 9; ++c) {
    const std::string collector = absl::StrCat("c", c);
    first.push_back(*node.Declare(GaugeSeries(collector, "fabricmon_g", "h", Unit::kNone, 1.0,
                                              {{"k", absl::StrCat(c, "a")}})));
    second.push_back(*node.Declare(GaugeSeries(collector, "fabricmon_g", "h", Unit::kNone, 1.0,
                                               {{"k", absl::StrCat(c, "b")}})));
  }
  std::vector<uint64_t> values(first.size(), 1);
  node.AppendBatch(1, 0, kT0, first, values, std::vector<bool>(first.size(), true), kT0);
  node.WithSeries([&](const std::vector<Series>& all) {
    for (size_t c = 0; c < first.size(); ++c) {
      EXPECT_FALSE(all[first[c]].absent) << c;
      EXPECT_FALSE(all[second[c]].absent) << c;
    }
  });
  // With 8 collectors it is their cycle: each one's series left out is absent.
  first.pop_back();
  values.pop_back();
  node.AppendBatch(2, 0, kT0 + kSecond, first, values, std::vector<bool>(first.size(), true), kT0);
  node.WithSeries([&](const std::vector<Series>& all) {
    for (size_t c = 0; c < first.size(); ++c) {
      EXPECT_FALSE(all[first[c]].absent) << c;
      EXPECT_TRUE(all[second[c]].absent) << c;
    }
    EXPECT_FALSE(all[second.back()].absent);  // the ninth collector was not in that batch
  });
}

// Readers visiting one family on many nodes (the detectors) look it up once in the store's table
// and find each node's list by its number: they visit what a lookup by name visits.
TEST(FamilyKeyTest, VisitsWhatTheNameVisitsOnEveryNodeOfTheStore) {
  auto descs = std::make_shared<DescTable>();
  NodeState a("a", 4, 100, {}, 0, nullptr, descs);
  NodeState b("b", 4, 100, {}, 0, nullptr, descs);
  NodeState outside("c", 4, 100);  // in no store
  auto series = [](const char* family, const char* device) {
    return CounterSeries("test", family, "h", Unit::kNone, 64, Overflow::kSaturates, 1.0,
                         {{"device", device}});
  };
  ASSERT_TRUE(a.Declare(series("fabricmon_x_total", "mlx5_0")).ok());
  ASSERT_TRUE(a.Declare(series("fabricmon_x_total", "mlx5_1")).ok());
  ASSERT_TRUE(a.Declare(series("fabricmon_y_total", "mlx5_0")).ok());
  ASSERT_TRUE(b.Declare(series("fabricmon_y_total", "mlx5_0")).ok());
  ASSERT_TRUE(outside.Declare(series("fabricmon_x_total", "mlx5_0")).ok());
  auto count = [](const NodeState& node, const FamilyKey& key) {
    int visited = 0;
    node.VisitFamily(key, [&](const Series&) { ++visited; });
    return visited;
  };
  const FamilyKey x = b.KeyOfFamily("fabricmon_x_total");
  ASSERT_TRUE(x.number.has_value());
  EXPECT_EQ(count(a, x), 2);
  EXPECT_EQ(count(b, x), 0);
  EXPECT_EQ(count(outside, x), 1) << "a node of another store looks the name up";
  const FamilyKey y = a.KeyOfFamily("fabricmon_y_total");
  EXPECT_NE(y.number, x.number);
  EXPECT_EQ(count(a, y), 1);
  EXPECT_EQ(count(b, y), 1);
  const FamilyKey z = a.KeyOfFamily("fabricmon_z_total");
  EXPECT_TRUE(z.held_nowhere);
  EXPECT_EQ(count(a, z), 0);
  const FamilyKey by_name = outside.KeyOfFamily("fabricmon_x_total");
  EXPECT_FALSE(by_name.number.has_value());
  EXPECT_FALSE(by_name.held_nowhere);
  EXPECT_EQ(count(outside, by_name), 1);
  // Several families in one visit: each node's counts, family by family, as one at a time.
  const std::vector<FamilyKey> keys = {y, z, x, by_name};
  for (const NodeState* node : {&a, &b, &outside}) {
    std::vector<int> visited(keys.size(), 0);
    std::vector<size_t> order;
    node->VisitFamilies(keys, [&](size_t i, const Series&) {
      ++visited[i];
      order.push_back(i);
    });
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(visited[i], count(*node, keys[i])) << node->name() << " family " << i;
    }
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << "family by family";
  }
}

// Family names come from agents: the table numbers a bounded count of them, and the families
// beyond it are still found, by name.
TEST(FamilyKeyTest, FamiliesBeyondTheTablesBoundAreFoundByName) {
  auto descs = std::make_shared<DescTable>();
  EXPECT_EQ(descs->NumberFamily("f0"), 0u);
  EXPECT_EQ(descs->NumberFamily("f0"), 0u);
  for (size_t i = 1; i < DescTable::kMaxFamilyNumbers; ++i) {
    ASSERT_TRUE(descs->NumberFamily(absl::StrCat("f", i)).has_value());
  }
  EXPECT_FALSE(descs->NumberFamily("fabricmon_late_total").has_value());
  EXPECT_EQ(descs->KeyOfFamily("f7").number, 7u);
  const FamilyKey late = descs->KeyOfFamily("fabricmon_late_total");
  EXPECT_FALSE(late.number.has_value());
  EXPECT_FALSE(late.held_nowhere) << "a full table cannot tell that no node holds it";

  NodeState node("a", 4, 100, {}, 0, nullptr, descs);
  ASSERT_TRUE(node.Declare(CounterSeries("test", "fabricmon_late_total", "h", Unit::kNone, 64,
                                         Overflow::kSaturates, 1.0, {}))
                  .ok());
  int visited = 0;
  node.VisitFamily(node.KeyOfFamily("fabricmon_late_total"), [&](const Series&) { ++visited; });
  EXPECT_EQ(visited, 1);
  const std::vector<FamilyKey> keys = {node.KeyOfFamily("f7"), late};
  std::vector<int> each(keys.size(), 0);
  node.VisitFamilies(keys, [&](size_t i, const Series&) { ++each[i]; });
  EXPECT_EQ(each, (std::vector<int>{0, 1}));
}

// Retirement: series without a sample for the retention are freed while the node keeps sending;
// a writer's stale slot can never write into the series that reuses it.
class NodeStateRetirementTest : public ::testing::Test {
 protected:
  static constexpr int64_t kRetention = 60 * kSecond;
  static SeriesDesc Pid(const char* pid) {
    return GaugeSeries("rdma_qp", "fabricmon_rdma_process_qps", "h", Unit::kNone, 1.0,
                       {{"pid", pid}});
  }
  // One rdma_qp cycle every 10 s (aggregator clock) carrying `slots`.
  void Cycles(int count, std::vector<SlotRef> slots) {
    for (int i = 0; i < count; ++i) {
      now_ += 10 * kSecond;
      std::vector<uint64_t> values(slots.size(), 1);
      last_ = node_.AppendBatchToSlots(++sequence_, 0, now_, slots, values,
                                       std::vector<bool>(slots.size(), true), now_);
      retired_ += last_.retired_now;
    }
  }
  std::vector<std::string> Pids() {
    std::vector<std::string> pids;
    node_.ForEachSeries(
        [&](const Series& series) { pids.emplace_back(series.desc->labels[0].second); });
    return pids;
  }

  // In a store's table, so that families are numbered as a store's node numbers them.
  std::shared_ptr<DescTable> descs_ = std::make_shared<DescTable>();
  NodeState node_{"node-r", 4, 3, {}, kRetention, nullptr, descs_};
  int64_t now_ = kT0;
  uint64_t sequence_ = 0;
  uint64_t retired_ = 0;
  NodeState::AppendResult last_;
};

TEST_F(NodeStateRetirementTest, SeriesWithoutSamplesForTheRetentionAreRetiredAndTheirSlotReused) {
  const SlotRef kept = *node_.DeclareSlot(Pid("100"), 0);
  const SlotRef gone = *node_.DeclareSlot(Pid("200"), 0);
  Cycles(1, {kept, gone});
  Cycles(6, {kept});  // 60 s without pid 200: not yet past the retention
  EXPECT_EQ(retired_, 0u);
  Cycles(3, {kept});
  EXPECT_EQ(retired_, 1u);
  EXPECT_THAT(Pids(), ::testing::ElementsAre("100"));
  NodeState::Summary summary = node_.GetSummary(false);
  EXPECT_EQ(summary.series, 1u);
  EXPECT_EQ(summary.counters.retired_series, 1u);
  int visited = 0;
  node_.VisitFamily("fabricmon_rdma_process_qps", [&](const Series&) { ++visited; });
  EXPECT_EQ(visited, 1);

  // A new process takes the freed slot, under a new generation.
  const SlotRef fresh = *node_.DeclareSlot(Pid("300"), 0);
  EXPECT_EQ(fresh.index, gone.index);
  EXPECT_NE(fresh.generation, gone.generation);
  // A writer still holding pid 200's slot is told, and pid 300 is untouched.
  Cycles(1, {kept, gone});
  EXPECT_THAT(last_.retired_positions, ::testing::ElementsAre(1u));
  EXPECT_EQ(node_.GetSummary(false).counters.retired_samples, 1u);
  node_.WithSeries([&](const std::vector<Series>& all) {
    EXPECT_EQ(all[fresh.index].count, 0u) << "a stale slot wrote into the series reusing it";
    EXPECT_EQ(all[fresh.index].desc->labels[0].second, "300");
  });
  // Declared again, pid 200 is a live series once more.
  const SlotRef back = *node_.DeclareSlot(Pid("200"), 0);
  Cycles(1, {kept, fresh, back});
  EXPECT_TRUE(last_.retired_positions.empty());
  EXPECT_THAT(Pids(), ::testing::UnorderedElementsAre("100", "300", "200"));
}

// A family whose last series retires leaves the node's numbered lists; declared again, it is found
// by its number again.
TEST_F(NodeStateRetirementTest, AFamilyRetiredWholeIsNoLongerVisitedByItsNumber) {
  EXPECT_TRUE(node_.KeyOfFamily("fabricmon_rdma_process_qps").held_nowhere);
  const SlotRef only = *node_.DeclareSlot(Pid("100"), 0);
  const FamilyKey key = node_.KeyOfFamily("fabricmon_rdma_process_qps");
  ASSERT_TRUE(key.number.has_value());
  EXPECT_FALSE(key.held_nowhere);
  auto visits = [&] {
    int visited = 0;
    node_.VisitFamily(key, [&](const Series&) { ++visited; });
    return visited;
  };
  EXPECT_EQ(visits(), 1);
  Cycles(1, {only});
  Cycles(10, {});
  EXPECT_EQ(retired_, 1u);
  EXPECT_EQ(visits(), 0);
  ASSERT_TRUE(node_.DeclareSlot(Pid("200"), 0).ok());
  EXPECT_EQ(visits(), 1);
}

// Detectors key their per-series state by Series::id: unique across nodes, and new for a series
// declared again in a retired slot (its state starts fresh, as a new series' does).
TEST_F(NodeStateRetirementTest, EverySeriesHasItsOwnIdAndASlotReusedGetsANewOne) {
  const SlotRef kept = *node_.DeclareSlot(Pid("100"), 0);
  const SlotRef gone = *node_.DeclareSlot(Pid("200"), 0);
  NodeState other("node-s", 4, 3);
  ASSERT_TRUE(other.Declare(Pid("100")).ok());  // the same fingerprint on another node
  auto id_of = [](const NodeState& node, uint32_t index) {
    uint64_t id = 0;
    node.WithSeries([&](const std::vector<Series>& all) { id = all[index].id; });
    return id;
  };
  const uint64_t kept_id = id_of(node_, kept.index);
  const uint64_t gone_id = id_of(node_, gone.index);
  EXPECT_NE(kept_id, 0u);
  EXPECT_NE(kept_id, gone_id);
  EXPECT_NE(id_of(other, 0), kept_id);

  Cycles(1, {kept, gone});
  Cycles(9, {kept});  // pid 200 retired
  ASSERT_EQ(retired_, 1u);
  EXPECT_EQ(id_of(node_, gone.index), 0u) << "a retired slot holds no series";
  const SlotRef fresh = *node_.DeclareSlot(Pid("200"), 0);
  ASSERT_EQ(fresh.index, gone.index);
  const uint64_t fresh_id = id_of(node_, fresh.index);
  EXPECT_NE(fresh_id, 0u);
  EXPECT_NE(fresh_id, gone_id);
  EXPECT_EQ(id_of(node_, kept.index), kept_id) << "a live series keeps its id";
}

TEST_F(NodeStateRetirementTest, TheSeriesCapCountsLiveSeriesOnly) {
  const SlotRef a = *node_.DeclareSlot(Pid("1"), 0);
  ASSERT_THAT(node_.DeclareSlot(Pid("2"), 0).status(), IsOk());
  ASSERT_THAT(node_.DeclareSlot(Pid("3"), 0).status(), IsOk());
  EXPECT_THAT(node_.DeclareSlot(Pid("4"), 0).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  Cycles(10, {a});  // pids 2 and 3 never report: retired once the retention has passed
  EXPECT_EQ(retired_, 2u);
  EXPECT_THAT(node_.DeclareSlot(Pid("4"), 0).status(), IsOk());
  EXPECT_THAT(node_.DeclareSlot(Pid("5"), 0).status(), IsOk());
  EXPECT_THAT(node_.DeclareSlot(Pid("6"), 0).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(NodeStateRetentionTest, ZeroRetentionAndASilentNodeRetireNothing) {
  NodeState forever("node-f", 4, 10, {}, 0);
  const uint32_t a = *forever.Declare(GaugeSeries("c", "fabricmon_a", "h", Unit::kNone, 1.0, {}));
  const uint32_t b = *forever.Declare(GaugeSeries("c", "fabricmon_b", "h", Unit::kNone, 1.0, {}));
  forever.AppendBatch(1, 0, kT0, {a, b}, {1, 1}, {true, true}, kT0);
  forever.AppendBatch(2, 0, kT0, {a}, {1}, {true}, kT0 + 3600 * kSecond);
  EXPECT_EQ(forever.GetSummary(false).series, 2u);

  // Retirement runs only on the node's own batches: a node that went quiet keeps its series
  // (its last values are what an operator looks at), however long it stays away.
  NodeState quiet("node-q", 4, 10, {}, 60 * kSecond);
  const uint32_t c = *quiet.Declare(GaugeSeries("c", "fabricmon_c", "h", Unit::kNone, 1.0, {}));
  quiet.AppendBatch(1, 0, kT0, {c}, {1}, {true}, kT0);
  EXPECT_EQ(quiet.GetSummary(false).series, 1u);
  // Its first batch after the absence refreshes its own series before the sweep looks.
  quiet.AppendBatch(2, 0, kT0, {c}, {2}, {true}, kT0 + 3600 * kSecond);
  EXPECT_EQ(quiet.GetSummary(false).series, 1u);
  EXPECT_EQ(quiet.GetSummary(false).counters.retired_series, 0u);
}

TEST(NodeStateDeclareTest, IsIdempotentCapsSeriesAndRestartsChangedSemantics) {
  NodeState node("node-1", 4, /*max_series=*/2);
  const SeriesDesc a = Counter(32, Overflow::kWraps, 1.0, "fabricmon_a_total");
  absl::StatusOr<uint32_t> first = node.Declare(a);
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<uint32_t> again = node.Declare(a);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(*first, *again);
  ASSERT_THAT(node.Declare(Counter(32, Overflow::kWraps, 1.0, "fabricmon_b_total")), IsOk());
  absl::StatusOr<uint32_t> over = node.Declare(Counter(32, Overflow::kWraps, 1.0, "fabricmon_c"));
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(over.status().message(), HasSubstr("cap of 2 series"));
  // Re-declaring a known series is fine at the cap.
  EXPECT_THAT(node.Declare(a), IsOk());

  // Same name and labels with a new width (an agent upgrade): the old samples are dropped so no
  // rate is computed across the two meanings.
  node.AppendBatch(1, 0, kT0, {*first}, {5}, {true}, kT0);
  ASSERT_THAT(node.Declare(Counter(64, Overflow::kWraps, 1.0, "fabricmon_a_total")), IsOk());
  node.WithSeries([&](const std::vector<Series>& all) {
    EXPECT_EQ(all[*first].count, 0u);
    EXPECT_EQ(all[*first].desc->width_bits, 64);
    EXPECT_EQ(all[*first].width_bits, 64);  // the copy the append path reads
  });
  EXPECT_EQ(node.GetSummary(false).series, 2u);
  // The new width is what the batch is checked against: a 33-bit value is no longer refused.
  const NodeState::AppendResult wide =
      node.AppendBatch(2, 0, kT0 + kSecond, {*first}, {uint64_t{1} << 33}, {true}, kT0);
  EXPECT_TRUE(wide.stored);
  EXPECT_EQ(wide.samples, 1u);
  // And back to 8 bits with saturation: the width's all-ones value reads as saturated.
  ASSERT_THAT(node.Declare(Counter(8, Overflow::kSaturates, 1.0, "fabricmon_a_total")), IsOk());
  EXPECT_FALSE(node.AppendBatch(3, 0, kT0 + 2 * kSecond, {*first}, {256}, {true}, kT0).stored);
  EXPECT_TRUE(node.AppendBatch(4, 0, kT0 + 3 * kSecond, {*first}, {255}, {true}, kT0).stored);
  node.WithSeries([&](const std::vector<Series>& all) { EXPECT_TRUE(all[*first].saturated); });
  // The overflow mode alone changes (the same width now wraps): a restart too, and the
  // all-ones value is an ordinary value again, not a pinned counter.
  ASSERT_THAT(node.Declare(Counter(8, Overflow::kWraps, 1.0, "fabricmon_a_total")), IsOk());
  node.WithSeries([&](const std::vector<Series>& all) {
    EXPECT_EQ(all[*first].count, 0u);
    EXPECT_EQ(all[*first].desc->overflow, Overflow::kWraps);
  });
  EXPECT_TRUE(node.AppendBatch(5, 0, kT0 + 4 * kSecond, {*first}, {255}, {true}, kT0).stored);
  node.WithSeries([&](const std::vector<Series>& all) {
    EXPECT_FALSE(all[*first].saturated);
    EXPECT_EQ(all[*first].count, 1u);
  });
  // Re-declaring it unchanged keeps its samples.
  ASSERT_THAT(node.Declare(Counter(8, Overflow::kWraps, 1.0, "fabricmon_a_total")), IsOk());
  node.WithSeries([&](const std::vector<Series>& all) { EXPECT_EQ(all[*first].count, 1u); });
  // The unit alone changes: a restart as well.
  ASSERT_THAT(node.Declare(CounterSeries("test", "fabricmon_a_total", "h", Unit::kBytes, 8,
                                         Overflow::kWraps, 1.0, {{"device", "mlx5_0"}})),
              IsOk());
  node.WithSeries([&](const std::vector<Series>& all) {
    EXPECT_EQ(all[*first].count, 0u);
    EXPECT_EQ(all[*first].desc->unit, Unit::kBytes);
  });
}

// The new-series limit, on explicit monotonic times: a series the node does not hold takes a
// token, a known one none; a refused one is not created.
TEST(NodeStateDeclareTest, LimitsHowFastTheNodeGainsSeries) {
  NodeState node("node-1", 4, /*max_series=*/100, NewSeriesLimit{/*per_second=*/2, /*burst=*/3});
  auto named = [](int i) {
    return Counter(64, Overflow::kWraps, 1.0, absl::StrCat("fabricmon_s", i, "_total"));
  };
  const int64_t t0 = kSecond;
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(node.Declare(named(i), t0), IsOk()) << i;
  }
  absl::StatusOr<uint32_t> refused = node.Declare(named(3), t0);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("declares new series faster than 2 per second after a burst of 3"));
  EXPECT_EQ(node.GetSummary(false).series, 3u);
  // Known series are free, also with the bucket empty.
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(node.Declare(named(i), t0), IsOk()) << i;
  }
  // Half a second later: one more.
  ASSERT_THAT(node.Declare(named(3), t0 + kSecond / 2), IsOk());
  EXPECT_THAT(node.Declare(named(4), t0 + kSecond / 2), StatusIs(absl::StatusCode::kUnavailable));
  // The unlimited form (tools, tests) takes no token and is not refused.
  EXPECT_THAT(node.Declare(named(5)), IsOk());
  EXPECT_EQ(node.GetSummary(false).series, 5u);
}

TEST(NodeStateDeclareTest, TheSeriesCapComesBeforeTheRate) {
  NodeState node("node-1", 4, /*max_series=*/1, NewSeriesLimit{1, 1});
  ASSERT_THAT(node.Declare(Counter(64, Overflow::kWraps, 1.0, "fabricmon_a_total"), kSecond),
              IsOk());
  EXPECT_THAT(node.Declare(Counter(64, Overflow::kWraps, 1.0, "fabricmon_b_total"), kSecond),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

// --- SeriesStore::Attach: who may speak for a node.

v1::Hello MakeHello(std::string node, std::string boot, uint64_t instance) {
  v1::Hello hello;
  hello.set_node_name(std::move(node));
  hello.set_boot_id(std::move(boot));
  hello.set_agent_instance_id(instance);
  hello.set_agent_version("test");
  hello.mutable_inventory()->add_rdma_devices()->set_name("mlx5_0");
  return hello;
}

class AttachTest : public ::testing::Test {
 protected:
  // A cancel callback that counts its calls, as the stream's TryCancel would be called.
  std::function<void()> CancelCounter(int* calls) {
    return [calls] { ++*calls; };
  }

  SeriesStore store_{StoreOptions{}};
};

TEST_F(AttachTest, FirstStreamGetsANewNodeWithNothingStored) {
  int cancels = 0;
  absl::StatusOr<SeriesStore::Attachment> attached =
      store_.Attach(MakeHello("node-1", "boot-a", 11), 1, CancelCounter(&cancels), kT0);
  ASSERT_THAT(attached, IsOk());
  EXPECT_EQ(attached->last_stored_sequence, 0u);
  ASSERT_NE(attached->node, nullptr);
  EXPECT_EQ(store_.Find("node-1"), attached->node);
  const NodeState::Summary summary = attached->node->GetSummary(true);
  EXPECT_TRUE(summary.connected);
  EXPECT_EQ(summary.boot_id, "boot-a");
  EXPECT_EQ(summary.agent_instance_id, 11u);
  EXPECT_EQ(summary.inventory.rdma_devices(0).name(), "mlx5_0");
  EXPECT_EQ(summary.counters.streams, 1u);
  EXPECT_EQ(cancels, 0);
  EXPECT_EQ(store_.Find("node-2"), nullptr);
}

TEST_F(AttachTest, AnotherInstanceOnTheSameBootIsADuplicateNode) {
  int first_cancels = 0;
  int second_cancels = 0;
  ASSERT_THAT(
      store_.Attach(MakeHello("node-1", "boot-a", 11), 1, CancelCounter(&first_cancels), kT0),
      IsOk());
  absl::StatusOr<SeriesStore::Attachment> duplicate =
      store_.Attach(MakeHello("node-1", "boot-a", 22), 2, CancelCounter(&second_cancels), kT0);
  EXPECT_THAT(duplicate, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(duplicate.status().message(), HasSubstr("node-1"));
  // The legitimate stream is untouched and still owns the node.
  EXPECT_EQ(first_cancels, 0);
  EXPECT_EQ(second_cancels, 0);
  const NodeState::Summary summary = store_.Find("node-1")->GetSummary(false);
  EXPECT_EQ(summary.agent_instance_id, 11u);
  EXPECT_TRUE(summary.connected);
  // Its later detach is still honoured (the refused stream never took the token).
  store_.Detach(*store_.Find("node-1"), 1, kT0 + kSecond);
  EXPECT_FALSE(store_.Find("node-1")->GetSummary(false).connected);
}

TEST_F(AttachTest, SameInstanceReconnectTakesOverAndKeepsItsSequence) {
  int old_cancels = 0;
  absl::StatusOr<SeriesStore::Attachment> first =
      store_.Attach(MakeHello("node-1", "boot-a", 11), 1, CancelCounter(&old_cancels), kT0);
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(first->node->Declare(Counter(64, Overflow::kWraps)), IsOk());
  first->node->AppendBatch(1, 0, kT0, {0}, {1}, {true}, kT0);
  first->node->AppendBatch(2, 0, kT0 + 1, {0}, {2}, {true}, kT0);

  // The old stream is half-open (network blip): the reconnect replaces it.
  int new_cancels = 0;
  absl::StatusOr<SeriesStore::Attachment> second =
      store_.Attach(MakeHello("node-1", "boot-a", 11), 2, CancelCounter(&new_cancels), kT0);
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(old_cancels, 1);
  EXPECT_EQ(new_cancels, 0);
  EXPECT_EQ(second->last_stored_sequence, 2u);
  EXPECT_EQ(second->node, first->node);
  // The old stream's late detach must not mark the node disconnected.
  store_.Detach(*first->node, 1, kT0);
  EXPECT_TRUE(first->node->GetSummary(false).connected);
  store_.Detach(*first->node, 2, kT0);
  EXPECT_FALSE(first->node->GetSummary(false).connected);
  EXPECT_EQ(first->node->GetSummary(false).counters.streams, 2u);
}

TEST_F(AttachTest, NewBootTakesOverAndStartsANewSequenceSpace) {
  int old_cancels = 0;
  absl::StatusOr<SeriesStore::Attachment> first =
      store_.Attach(MakeHello("node-1", "boot-a", 11), 1, CancelCounter(&old_cancels), kT0);
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(first->node->Declare(Counter(64, Overflow::kWraps)), IsOk());
  first->node->AppendBatch(7, 0, kT0, {0}, {1}, {true}, kT0);

  // The node rebooted while the old stream looked alive (half-open, silent since): the new
  // boot's agent wins once the old stream has been silent for the takeover window.
  absl::StatusOr<SeriesStore::Attachment> second =
      store_.Attach(MakeHello("node-1", "boot-b", 22), 2, nullptr, kT0 + 31 * kSecond);
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(old_cancels, 1);
  EXPECT_EQ(second->last_stored_sequence, 0u);
  const NodeState::Summary summary = second->node->GetSummary(false);
  EXPECT_EQ(summary.boot_id, "boot-b");
  EXPECT_EQ(summary.agent_instance_id, 22u);
}

TEST_F(AttachTest, RestartedAgentAfterDisconnectStartsFromZero) {
  absl::StatusOr<SeriesStore::Attachment> first =
      store_.Attach(MakeHello("node-1", "boot-a", 11), 1, nullptr, kT0);
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(first->node->Declare(Counter(64, Overflow::kWraps)), IsOk());
  first->node->AppendBatch(9, 0, kT0, {0}, {1}, {true}, kT0);
  store_.Detach(*first->node, 1, kT0);
  // Same boot, new process: not a duplicate, since the old one is gone.
  absl::StatusOr<SeriesStore::Attachment> second =
      store_.Attach(MakeHello("node-1", "boot-a", 33), 2, nullptr, kT0);
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->last_stored_sequence, 0u);
  // Its sequence 1 is stored, not taken for a duplicate of the old instance's 9.
  EXPECT_TRUE(second->node->AppendBatch(1, 0, kT0 + 1, {0}, {2}, {true}, kT0).stored);
}

// Two machines with one identity: while boot a streams, boot b is refused (a clone), counted
// and described; a boot that was replaced never comes back.
TEST_F(AttachTest, AnotherBootWhileTheOwnerStreamsIsAnIdentityConflict) {
  int owner_cancels = 0;
  absl::StatusOr<SeriesStore::Attachment> owner =
      store_.Attach(MakeHello("node-1", "boot-a", 11), 1, CancelCounter(&owner_cancels), kT0);
  ASSERT_THAT(owner, IsOk());
  ASSERT_THAT(owner->node->Declare(Counter(64, Overflow::kWraps)), IsOk());
  owner->node->AppendBatch(1, 0, kT0 + 20 * kSecond, {0}, {5}, {true}, kT0 + 20 * kSecond);

  absl::StatusOr<SeriesStore::Attachment> clone =
      store_.Attach(MakeHello("node-1", "boot-b", 22), 2, nullptr, kT0 + 25 * kSecond);
  EXPECT_THAT(clone, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(clone.status().message(), HasSubstr("identity conflict"));
  EXPECT_EQ(owner_cancels, 0);
  NodeState::Summary summary = owner->node->GetSummary(false);
  EXPECT_EQ(summary.boot_id, "boot-a");
  EXPECT_TRUE(summary.connected);
  EXPECT_EQ(summary.counters.identity_conflicts, 1u);
  EXPECT_EQ(summary.last_identity_conflict, "boot boot-a holds the node; boot boot-b refused");

  // The owner disconnects; boot b takes over (a reboot). Boot a coming back is a clone even
  // though nothing streams now.
  store_.Detach(*owner->node, 1, kT0 + 30 * kSecond);
  ASSERT_THAT(store_.Attach(MakeHello("node-1", "boot-b", 22), 3, nullptr, kT0 + 31 * kSecond),
              IsOk());
  store_.Detach(*owner->node, 3, kT0 + 32 * kSecond);
  absl::StatusOr<SeriesStore::Attachment> back =
      store_.Attach(MakeHello("node-1", "boot-a", 11), 4, nullptr, kT0 + 33 * kSecond);
  EXPECT_THAT(back, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(back.status().message(), HasSubstr("a boot never comes back"));
  summary = owner->node->GetSummary(false);
  EXPECT_EQ(summary.counters.identity_conflicts, 2u);
  EXPECT_EQ(summary.boot_id, "boot-b");
  // A new boot (a real reboot) is welcome.
  EXPECT_THAT(store_.Attach(MakeHello("node-1", "boot-c", 33), 5, nullptr, kT0 + 34 * kSecond),
              IsOk());
}

// The takeover window grows with the agent's interval: a clone of an agent that sends every
// 60 s is still a clone 59 s after the owner's last batch.
TEST_F(AttachTest, TheTakeoverWindowCoversTheOwnersInterval) {
  v1::Hello slow = MakeHello("node-1", "boot-a", 11);
  slow.set_min_interval_ms(60000);
  ASSERT_THAT(store_.Attach(slow, 1, nullptr, kT0), IsOk());
  EXPECT_THAT(store_.Attach(MakeHello("node-1", "boot-b", 22), 2, nullptr, kT0 + 59 * kSecond),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(store_.Attach(MakeHello("node-1", "boot-b", 22), 3, nullptr, kT0 + 181 * kSecond),
              IsOk());
}

TEST(StoreLimitsTest, NodesBeyondMaxNodesAreRefusedKnownNodesStillAttach) {
  StoreOptions options;
  options.max_nodes = 2;
  SeriesStore store(options);
  ASSERT_THAT(store.Attach(MakeHello("node-a", "x", 1), 1, nullptr, kT0), IsOk());
  ASSERT_THAT(store.Attach(MakeHello("node-b", "y", 2), 2, nullptr, kT0), IsOk());
  absl::StatusOr<SeriesStore::Attachment> third =
      store.Attach(MakeHello("node-c", "z", 3), 3, nullptr, kT0);
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(third.status().message(), HasSubstr("max_nodes"));
  EXPECT_EQ(store.Find("node-c"), nullptr);
  EXPECT_EQ(store.Nodes().size(), 2u);
  // A known node reconnecting is not a new node.
  EXPECT_THAT(store.Attach(MakeHello("node-a", "x", 1), 4, nullptr, kT0), IsOk());
}

TEST(StoreLimitsTest, MaxSeriesTotalCountsEveryNodesSeriesAndIsGivenBack) {
  StoreOptions options;
  options.max_series_total = 3;
  options.node_retention_nanos = 600 * kSecond;
  SeriesStore store(options);
  std::shared_ptr<NodeState> a = store.Attach(MakeHello("node-a", "x", 1), 1, nullptr, kT0)->node;
  std::shared_ptr<NodeState> b = store.Attach(MakeHello("node-b", "y", 2), 2, nullptr, kT0)->node;
  ASSERT_THAT(a->DeclareSlot(Counter(64, Overflow::kWraps, 1, "fabricmon_a_total"), 0), IsOk());
  ASSERT_THAT(a->DeclareSlot(Counter(64, Overflow::kWraps, 1, "fabricmon_b_total"), 0), IsOk());
  // Declaring a known series again takes nothing.
  ASSERT_THAT(a->DeclareSlot(Counter(64, Overflow::kWraps, 1, "fabricmon_b_total"), 0), IsOk());
  ASSERT_THAT(b->DeclareSlot(Counter(64, Overflow::kWraps, 1, "fabricmon_a_total"), 0), IsOk());
  EXPECT_EQ(store.series_held(), 3u);
  absl::StatusOr<SlotRef> refused =
      b->DeclareSlot(Counter(64, Overflow::kWraps, 1, "fabricmon_b_total"), 0);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(IsSeriesTotalLimit(refused.status()));
  EXPECT_THAT(refused.status().message(), HasSubstr("max_series_total"));
  EXPECT_EQ(b->GetSummary(false).series, 1u);
  // The node's own cap is told apart.
  NodeState capped("node-x", 4, 0);
  EXPECT_FALSE(IsSeriesTotalLimit(capped.Declare(Counter(64, Overflow::kWraps)).status()));

  // Node a goes away and is forgotten: its two series come back to the budget.
  store.Detach(*a, 1, kT0);
  EXPECT_EQ(store.ForgetSilent(kT0 + 601 * kSecond, 0), 2u);  // b never sent anything either
  EXPECT_EQ(store.series_held(), 3u) << "held until the last holder lets go";
  a.reset();
  EXPECT_EQ(store.series_held(), 1u);
  b.reset();
  EXPECT_EQ(store.series_held(), 0u);
}

TEST(StoreLimitsTest, RetiredSeriesAreGivenBackToTheTotal) {
  StoreOptions options;
  options.max_series_total = 1;
  options.series_retention_nanos = 60 * kSecond;
  SeriesStore store(options);
  std::shared_ptr<NodeState> a = store.Attach(MakeHello("node-a", "x", 1), 1, nullptr, kT0)->node;
  const uint32_t first = *a->Declare(Counter(64, Overflow::kWraps, 1, "fabricmon_a_total"));
  a->AppendBatch(1, 0, kT0, {first}, {1}, {true}, kT0);
  EXPECT_FALSE(a->Declare(Counter(64, Overflow::kWraps, 1, "fabricmon_b_total")).ok());
  // Retired after its retention while the node keeps sending (an empty batch).
  a->AppendBatch(2, 0, kT0 + 120 * kSecond, {}, {}, {}, kT0 + 120 * kSecond);
  EXPECT_EQ(a->GetSummary(false).series, 0u);
  EXPECT_EQ(store.series_held(), 0u);
  EXPECT_THAT(a->Declare(Counter(64, Overflow::kWraps, 1, "fabricmon_b_total")), IsOk());
}

// Forgetting: silent nodes leave the store; a holder of the node (a detector mid-tick) still
// reads it safely, and a stream still writing to it is refused (not acknowledged) and ended.
TEST(StoreLimitsTest, NodesSilentLongerThanTheRetentionAreForgotten) {
  StoreOptions options;
  options.node_retention_nanos = 600 * kSecond;
  SeriesStore store(options);
  std::shared_ptr<NodeState> gone =
      store.Attach(MakeHello("node-gone", "x", 1), 1, nullptr, kT0)->node;
  ASSERT_THAT(gone->Declare(Counter(64, Overflow::kWraps)), IsOk());
  gone->AppendBatch(1, 0, kT0, {0}, {7}, {true}, kT0);
  store.Detach(*gone, 1, kT0 + kSecond);
  int half_open_cancels = 0;
  std::shared_ptr<NodeState> half_open =
      store
          .Attach(
              MakeHello("node-half-open", "y", 2), 2, [&] { ++half_open_cancels; }, kT0)
          ->node;
  std::shared_ptr<NodeState> live =
      store.Attach(MakeHello("node-live", "z", 3), 3, nullptr, kT0)->node;
  ASSERT_THAT(live->Declare(Counter(64, Overflow::kWraps)), IsOk());
  live->AppendBatch(1, 0, kT0 + 500 * kSecond, {0}, {1}, {true}, kT0 + 500 * kSecond);

  EXPECT_EQ(store.ForgetSilent(kT0 + 600 * kSecond, 0), 0u) << "not yet longer than 600 s";
  EXPECT_EQ(store.ForgetSilent(kT0 + 602 * kSecond, 0), 2u);
  EXPECT_EQ(store.nodes_forgotten(), 2u);
  EXPECT_EQ(store.Find("node-gone"), nullptr);
  EXPECT_EQ(store.Find("node-half-open"), nullptr);
  ASSERT_NE(store.Find("node-live"), nullptr);
  EXPECT_EQ(store.Nodes().size(), 1u);
  EXPECT_EQ(half_open_cancels, 1);
  // The holder still reads what it had.
  gone->ForEachSeries([](const Series& series) { EXPECT_EQ(series.Latest()->raw, 7u); });
  // A late write to the forgotten node is refused, not stored.
  NodeState::AppendResult late =
      gone->AppendBatch(2, 0, kT0 + 603 * kSecond, {0}, {8}, {true}, kT0 + 603 * kSecond);
  EXPECT_FALSE(late.stored);
  EXPECT_TRUE(late.forgotten);
  // The name comes back as a new node.
  absl::StatusOr<SeriesStore::Attachment> again =
      store.Attach(MakeHello("node-gone", "x", 1), 4, nullptr, kT0 + 604 * kSecond);
  ASSERT_THAT(again, IsOk());
  EXPECT_NE(again->node, gone);
  EXPECT_EQ(again->node->GetSummary(false).series, 0u);
}

TEST(StoreLimitsTest, ZeroRetentionForgetsNothing) {
  SeriesStore store(StoreOptions{});
  std::shared_ptr<NodeState> node =
      store.Attach(MakeHello("node-a", "x", 1), 1, nullptr, kT0)->node;
  store.Detach(*node, 1, kT0);
  EXPECT_EQ(store.ForgetSilent(kT0 + 1000000 * kSecond, 0), 0u);
  EXPECT_NE(store.Find("node-a"), nullptr);
}

// A peer cycling node names spends one budget: the second name gets what the first left.
TEST(StoreLimitsTest, TheNewSeriesBudgetIsAlsoThePeers) {
  StoreOptions options;
  options.new_series = {/*per_second=*/1, /*burst=*/100};
  options.new_series_per_peer = NewSeriesLimit{/*per_second=*/1, /*burst=*/3};
  SeriesStore store(options);
  absl::StatusOr<SeriesStore::Attachment> a =
      store.Attach(MakeHello("node-a", "x", 1), 1, nullptr, kT0, "ipv4:10.0.0.1");
  ASSERT_THAT(a, IsOk());
  ASSERT_NE(a->peer, nullptr);
  for (int i = 0; i < 2; ++i) {
    ASSERT_THAT(a->node->DeclareSlot(
                    Counter(64, Overflow::kWraps, 1, absl::StrCat("fabricmon_", i, "_total")), 0,
                    a->peer.get()),
                IsOk());
  }
  absl::StatusOr<SeriesStore::Attachment> b =
      store.Attach(MakeHello("node-b", "y", 2), 2, nullptr, kT0, "ipv4:10.0.0.1");
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(b->peer, a->peer);
  ASSERT_THAT(
      b->node->DeclareSlot(Counter(64, Overflow::kWraps, 1, "fabricmon_x_total"), 0, b->peer.get()),
      IsOk());
  absl::StatusOr<SlotRef> refused =
      b->node->DeclareSlot(Counter(64, Overflow::kWraps, 1, "fabricmon_y_total"), 0, b->peer.get());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(refused.status().message(), HasSubstr("peer ipv4:10.0.0.1"));
  EXPECT_EQ(b->node->GetSummary(false).series, 1u) << "the refused series was not created";
  // Another peer has its own budget; a second later the peer may gain one more.
  absl::StatusOr<SeriesStore::Attachment> c =
      store.Attach(MakeHello("node-c", "z", 3), 3, nullptr, kT0, "ipv4:10.0.0.2");
  EXPECT_THAT(c->node->DeclareSlot(Counter(64, Overflow::kWraps), 0, c->peer.get()), IsOk());
  EXPECT_THAT(b->node->DeclareSlot(Counter(64, Overflow::kWraps, 1, "fabricmon_y_total"), kSecond,
                                   b->peer.get()),
              IsOk());
}

TEST_F(AttachTest, NodesAreListedByName) {
  ASSERT_THAT(store_.Attach(MakeHello("node-b", "x", 1), 1, nullptr, kT0), IsOk());
  ASSERT_THAT(store_.Attach(MakeHello("node-a", "y", 2), 2, nullptr, kT0), IsOk());
  std::vector<std::string> names;
  for (const auto& node : store_.Nodes()) {
    names.push_back(node->name());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("node-a", "node-b"));
}

}  // namespace
}  // namespace fabricmon::store
