#include "daemon/remote_write/shard.h"

#include <deque>
#include <functional>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/remote_write/endpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace fabricmon::remote_write {
namespace {

constexpr int64_t kMs = 1000000;

// Answers with the scripted codes in turn (200 once the script is used up) and keeps every
// request body it was given; each send takes `latency` of fake time.
class ScriptedSender final : public Sender {
 public:
  explicit ScriptedSender(testing::FakeClock& clock) : clock_(clock) {}
  SendResult Send(const std::string& body, int64_t timeout_nanos) override {
    timeouts.push_back(timeout_nanos);
    clock_.AdvanceNanos(latency);
    SendResult result;
    result.http_status = codes.empty() ? 200 : codes.front();
    if (!codes.empty()) {
      codes.pop_front();
    } else if (answer) {
      result.http_status = answer(body);
    }
    bodies.push_back(body);
    statuses.push_back(result.http_status);
    return result;
  }
  std::deque<int> codes;
  std::function<int(const std::string& body)> answer;  // once `codes` is used up, if set
  std::vector<std::string> bodies;
  std::vector<int> statuses;
  std::vector<int64_t> timeouts;
  int64_t latency = 0;

 private:
  testing::FakeClock& clock_;
};

// The (series name, value) pairs of a request body, in order.
std::vector<std::pair<std::string, double>> Contents(const std::string& body) {
  std::vector<std::pair<std::string, double>> out;
  absl::StatusOr<v1::prompb::WriteRequest> request = DecodeWriteRequest(body);
  EXPECT_TRUE(request.ok()) << request.status();
  if (!request.ok()) {
    return out;
  }
  for (const auto& series : request->timeseries()) {
    for (const auto& sample : series.samples()) {
      out.emplace_back(series.labels(0).value(), sample.value());
    }
  }
  return out;
}

class ShardTest : public ::testing::Test {
 protected:
  ShardTest() : sender_(clock_) {
    options_.max_samples_per_send = 3;
    options_.batch_send_deadline_nanos = 1000 * kMs;
    options_.min_backoff_nanos = 100 * kMs;
    options_.max_backoff_nanos = 800 * kMs;
    options_.request_timeout_nanos = 5000 * kMs;
  }
  Shard MakeShard(uint64_t capacity) {
    return Shard(options_, capacity, external_, {}, sender_, stats_, clock_, 42, "test");
  }
  PendingSample Sample(const std::string& name, double value) {
    return {MakeLabelSet(name, {}), 1000, value, clock_.MonotonicNanos()};
  }

  testing::FakeClock clock_;
  QueueOptions options_;
  LabelPairs external_;
  ScriptedSender sender_;
  EndpointStats stats_;
};

TEST_F(ShardTest, SendsAFullBatchAtOnceAndAShortOneAtItsDeadline) {
  Shard shard = MakeShard(100);
  EXPECT_EQ(shard.Step(false), Shard::kNever);  // nothing queued
  shard.Push({Sample("a", 1), Sample("b", 2)});
  const int64_t due = shard.Step(false);
  EXPECT_EQ(due, clock_.MonotonicNanos() + 1000 * kMs);  // short batch: waits for its deadline
  EXPECT_TRUE(sender_.bodies.empty());
  EXPECT_EQ(shard.Pending(), 2u);
  shard.Push({Sample("c", 3), Sample("d", 4)});
  // 4 queued ≥ 3: a batch goes now, of whole runs as pushed (a request never splits one): a
  // and b, since c and d would make 4.
  shard.Step(false);
  ASSERT_EQ(sender_.bodies.size(), 1u);
  EXPECT_THAT(Contents(sender_.bodies[0]),
              ::testing::ElementsAre(::testing::Pair("a", 1), ::testing::Pair("b", 2)));
  EXPECT_EQ(shard.Step(false), due);  // c and d wait for the deadline of the oldest queued
  clock_.AdvanceMillis(999);
  shard.Step(false);
  EXPECT_EQ(sender_.bodies.size(), 1u);
  clock_.AdvanceMillis(1);
  shard.Step(false);
  ASSERT_EQ(sender_.bodies.size(), 2u);
  EXPECT_THAT(Contents(sender_.bodies[1]),
              ::testing::ElementsAre(::testing::Pair("c", 3), ::testing::Pair("d", 4)));
  EXPECT_EQ(stats_.samples_sent.load(), 4u);
  EXPECT_EQ(shard.Pending(), 0u);
  EXPECT_EQ(shard.OldestEnqueued(), Shard::kNever);
}

// First in, first out whatever the queue holds when a batch is taken: all of it, a batch's worth
// of a long queue (the rest stays behind), pushes longer than a request (split into runs of at
// most max_samples_per_send), with samples pushed between the sends.
TEST_F(ShardTest, SendsInQueueOrderThroughEveryWayOfTakingABatch) {
  Shard shard = MakeShard(100);
  int pushed = 0;
  auto push = [&](int n) {
    std::vector<PendingSample> samples;
    for (int i = 0; i < n; ++i, ++pushed) {
      samples.push_back(Sample(absl::StrCat("s", pushed), pushed));
    }
    EXPECT_EQ(shard.Push(samples), 0u);
  };
  for (const int n : {1, 10, 0, 4, 2, 0, 7, 3, 0, 0, 5, 0, 0, 0}) {
    push(n);
    clock_.AdvanceMillis(1000);  // every queued sample is due
    shard.Step(false);
  }
  while (shard.Pending() > 0) {
    shard.Step(true);
  }
  std::vector<double> sent;
  for (const std::string& body : sender_.bodies) {
    const auto contents = Contents(body);
    EXPECT_LE(contents.size(), 3u);
    for (const auto& [name, value] : contents) {
      EXPECT_EQ(name, absl::StrCat("s", value));
      sent.push_back(value);
    }
  }
  ASSERT_EQ(sent.size(), static_cast<size_t>(pushed));
  for (int i = 0; i < pushed; ++i) {
    EXPECT_EQ(sent[i], i);
  }
  EXPECT_EQ(stats_.samples_sent.load(), static_cast<uint64_t>(pushed));
  EXPECT_EQ(shard.OldestEnqueued(), Shard::kNever);
}

TEST_F(ShardTest, RetriesServerErrorsAndTooManyRequestsWithGrowingJitteredBackoff) {
  Shard shard = MakeShard(100);
  sender_.codes = {500, 429, 503, 0, 200};  // 0: no response (connection refused)
  shard.Push({Sample("a", 1), Sample("b", 2), Sample("c", 3)});
  std::vector<int64_t> waits;
  for (int i = 0; i < 5; ++i) {
    const int64_t now = clock_.MonotonicNanos();
    const int64_t next = shard.Step(false);
    if (i < 4) {
      ASSERT_GT(next, now);
      waits.push_back(next - now);
      EXPECT_EQ(shard.Step(false), next);  // not before its time
      clock_.AdvanceNanos(next - now);
    }
  }
  ASSERT_EQ(sender_.bodies.size(), 5u);
  for (const std::string& body : sender_.bodies) {
    EXPECT_EQ(body, sender_.bodies[0]);  // the same batch each time: nothing lost or reordered
  }
  // Attempt n waits within [d/2, d], d = min(800 ms, 100 ms × 2^n).
  const int64_t limits[] = {100 * kMs, 200 * kMs, 400 * kMs, 800 * kMs};
  for (size_t i = 0; i < waits.size(); ++i) {
    EXPECT_GE(waits[i], limits[i] / 2) << i;
    EXPECT_LE(waits[i], limits[i]) << i;
  }
  EXPECT_EQ(stats_.samples_sent.load(), 3u);
  EXPECT_EQ(stats_.samples_failed.load(), 0u);
  EXPECT_EQ(stats_.retries.load(), 4u);
  EXPECT_THAT(stats_.Requests(),
              ::testing::ElementsAre(::testing::Pair("200", 1), ::testing::Pair("429", 1),
                                     ::testing::Pair("500", 1), ::testing::Pair("503", 1),
                                     ::testing::Pair("error", 1)));
}

TEST_F(ShardTest, NeverRetriesOtherClientErrors) {
  for (int code : {400, 401, 403, 404, 413, 302}) {
    EndpointStats stats;
    ScriptedSender sender(clock_);
    Shard shard(options_, 100, external_, {}, sender, stats, clock_, 1, "test");
    sender.codes = {code};
    shard.Push({Sample("a", 1), Sample("b", 2), Sample("c", 3), Sample("d", 4)});
    shard.Step(false);  // refused: dropped and counted
    EXPECT_EQ(stats.samples_failed.load(), 3u) << code;
    EXPECT_EQ(stats.retries.load(), 0u) << code;
    clock_.AdvanceMillis(1000);
    shard.Step(false);  // the next batch, not the refused one again
    ASSERT_EQ(sender.bodies.size(), 2u) << code;
    EXPECT_THAT(Contents(sender.bodies[1]), ::testing::ElementsAre(::testing::Pair("d", 4)));
    EXPECT_EQ(stats.samples_sent.load(), 1u);
  }
}

TEST_F(ShardTest, ABoundedBufferCountsWhatItDrops) {
  Shard shard = MakeShard(4);
  EXPECT_EQ(shard.Push({Sample("a", 1), Sample("b", 2), Sample("c", 3)}), 0u);
  EXPECT_EQ(shard.Push({Sample("d", 4), Sample("e", 5), Sample("f", 6)}), 2u);
  EXPECT_EQ(stats_.samples_dropped_queue_full.load(), 2u);
  sender_.codes = {500};
  shard.Step(false);  // a batch of 3 in flight, retrying: the queue has room for 3 more
  EXPECT_EQ(shard.Pending(), 4u);
  EXPECT_EQ(shard.Push({Sample("g", 7), Sample("h", 8), Sample("i", 9), Sample("j", 10)}), 1u);
  EXPECT_EQ(stats_.samples_dropped_queue_full.load(), 3u);
  EXPECT_EQ(shard.Pending(), 7u);
}

// Samples pushed already encoded (an agent's batch): what does not fit is cut from the end of
// the run and counted, the rest is sent in order, a request ending inside the run.
TEST_F(ShardTest, AnEncodedRunIsCutToWhatFitsAndSentAcrossRequests) {
  Shard shard = MakeShard(4);
  const LabelMerger labels(external_);
  EncodedSamples run;
  run.enqueued_monotonic_nanos = clock_.MonotonicNanos();
  std::string merged;
  for (int i = 0; i < 5; ++i) {
    merged.clear();
    labels.Append(*MakeLabelSet(absl::StrCat("s", i), {}), merged);
    run.Add(merged, 1000, i);
  }
  EXPECT_EQ(shard.Push(run), 1u);
  EXPECT_EQ(stats_.samples_dropped_queue_full.load(), 1u);
  EXPECT_EQ(shard.Pending(), 4u);
  shard.Step(false);  // 4 queued ≥ 3: a request of 3, ending inside the run
  clock_.AdvanceMillis(1000);
  shard.Step(false);  // the last one at its deadline
  ASSERT_EQ(sender_.bodies.size(), 2u);
  EXPECT_THAT(Contents(sender_.bodies[0]),
              ::testing::ElementsAre(::testing::Pair("s0", 0), ::testing::Pair("s1", 1),
                                     ::testing::Pair("s2", 2)));
  EXPECT_THAT(Contents(sender_.bodies[1]), ::testing::ElementsAre(::testing::Pair("s3", 3)));
  EXPECT_EQ(stats_.samples_sent.load(), 4u);
  EXPECT_EQ(shard.Pending(), 0u);
}

TEST_F(ShardTest, OldestPendingCountsTheBatchInFlight) {
  Shard shard = MakeShard(100);
  const int64_t first = clock_.MonotonicNanos();
  shard.Push({Sample("a", 1), Sample("b", 2), Sample("c", 3)});
  clock_.AdvanceMillis(10);
  shard.Push({Sample("d", 4)});
  sender_.codes = {500};
  shard.Step(false);
  EXPECT_EQ(shard.OldestEnqueued(), first);
}

TEST_F(ShardTest, FlushSendsShortBatchesAndNoRequestOutlastsTheDeadline) {
  Shard shard = MakeShard(100);
  shard.Push({Sample("a", 1)});
  const int64_t deadline = clock_.MonotonicNanos() + 300 * kMs;
  shard.Step(true, deadline);  // no waiting for the batch deadline when flushing
  ASSERT_EQ(sender_.timeouts.size(), 1u);
  EXPECT_EQ(sender_.timeouts[0], 300 * kMs);  // capped by the flush deadline
  sender_.codes = {500};
  shard.Push({Sample("b", 2)});
  shard.Step(true, deadline);
  clock_.AdvanceMillis(400);
  EXPECT_EQ(shard.Step(true, deadline), Shard::kNever);  // past the deadline: no more tries
  EXPECT_EQ(sender_.bodies.size(), 2u);
  EXPECT_EQ(shard.DropAll(), 1u);
  EXPECT_EQ(stats_.samples_dropped_shutdown.load(), 1u);
}

// A hold that records when the shard let go of it.
struct Released {
  bool released = false;
  Hold Make() {
    return Hold(static_cast<const void*>(this), [this](const void*) { released = true; });
  }
};

// The series names of a request body, in order.
std::vector<std::string> Names(const std::string& body) {
  std::vector<std::string> names;
  for (const auto& [name, value] : Contents(body)) {
    names.push_back(name);
  }
  return names;
}

// A receiver that refuses a whole request for one sample it will not take (Prometheus and an
// out-of-order sample): the request is split, in order, until the refused run stands alone, and
// only that run is lost. Refusals every part would get alike are not split.
TEST_F(ShardTest, ARefusalOfPartOfARequestCostsOnlyTheRefusedRun) {
  using ::testing::ElementsAre;
  options_.max_samples_per_send = 6;
  for (int code : {400, 409, 413, 401, 403, 404, 422}) {
    const bool splits = code == 400 || code == 409 || code == 413;
    EndpointStats stats;
    ScriptedSender sender(clock_);
    sender.answer = [code](const std::string& body) {
      for (const std::string& name : Names(body)) {
        if (name == "c") {
          return code;
        }
      }
      return 200;
    };
    Shard shard(options_, 100, external_, {}, sender, stats, clock_, 1, "test");
    // Four runs (one per push, as an agent's batches are), one request of five samples.
    std::vector<Released> holds(4);
    shard.Push({Sample("a", 1)}, holds[0].Make());
    shard.Push({Sample("b", 2), Sample("c", 3)}, holds[1].Make());
    shard.Push({Sample("d", 4)}, holds[2].Make());
    shard.Push({Sample("e", 5)}, holds[3].Make());
    EXPECT_EQ(shard.Pending(), 5u);
    clock_.AdvanceMillis(1000);
    for (int step = 0; step < 10 && shard.Pending() > 0; ++step) {
      const int64_t next = shard.Step(false);
      if (step == 1 && splits) {
        EXPECT_EQ(shard.Pending(), 5u) << "nothing is lost before a run is refused on its own";
        EXPECT_FALSE(holds[0].released);
      }
      EXPECT_LE(next, clock_.MonotonicNanos()) << "the parts go at once, no backoff";
    }
    for (const Released& hold : holds) {
      EXPECT_TRUE(hold.released) << code;
    }
    EXPECT_EQ(shard.Pending(), 0u);
    if (!splits) {
      ASSERT_EQ(sender.bodies.size(), 1u) << code;
      EXPECT_EQ(stats.samples_failed.load(), 5u);
      EXPECT_EQ(stats.samples_sent.load(), 0u);
      EXPECT_EQ(stats.bytes_sent.load(), 0u) << "a refused body is not sent bytes";
      continue;
    }
    std::vector<std::vector<std::string>> requests;
    for (const std::string& body : sender.bodies) {
      requests.push_back(Names(body));
    }
    // a b c d e refused: a, b c (refused); then d e.
    EXPECT_THAT(requests,
                ElementsAre(ElementsAre("a", "b", "c", "d", "e"), ElementsAre("a", "b", "c"),
                            ElementsAre("a"), ElementsAre("b", "c"), ElementsAre("d", "e")))
        << code;
    EXPECT_EQ(stats.samples_sent.load(), 3u) << code;
    EXPECT_EQ(stats.samples_failed.load(), 2u) << code;
    // Only the accepted parts' bodies: b c was refused, a and d e were taken.
    EXPECT_EQ(stats.bytes_sent.load(), sender.bodies[2].size() + sender.bodies[4].size()) << code;
    EXPECT_EQ(stats.retries.load(), 0u) << code;
    EXPECT_EQ(stats.Requests(),
              (std::map<std::string, uint64_t>{{"200", 2}, {absl::StrCat(code), 3}}));
  }
}

// A part that meets a 5xx is retried as that part, with backoff, and the split goes on after it.
TEST_F(ShardTest, APartOfASplitRequestIsRetriedAsItself) {
  options_.max_samples_per_send = 6;
  Shard shard = MakeShard(100);
  sender_.codes = {400, 503};  // the whole request, then its first half
  shard.Push({Sample("a", 1), Sample("b", 2)});
  shard.Push({Sample("c", 3)});
  shard.Push({Sample("d", 4)});
  clock_.AdvanceMillis(1000);
  shard.Step(false);                           // a b c d: 400
  const int64_t retry_at = shard.Step(false);  // a b: 503
  EXPECT_GT(retry_at, clock_.MonotonicNanos());
  EXPECT_EQ(shard.Pending(), 4u);
  clock_.AdvanceNanos(retry_at - clock_.MonotonicNanos());
  shard.Step(false);  // a b again: 200
  shard.Step(false);  // c d: 200
  ASSERT_EQ(sender_.bodies.size(), 4u);
  EXPECT_THAT(Names(sender_.bodies[2]), ::testing::ElementsAre("a", "b"));
  EXPECT_THAT(Names(sender_.bodies[3]), ::testing::ElementsAre("c", "d"));
  EXPECT_EQ(stats_.samples_sent.load(), 4u);
  EXPECT_EQ(stats_.samples_failed.load(), 0u);
  EXPECT_EQ(stats_.retries.load(), 1u);
  EXPECT_EQ(shard.Pending(), 0u);
  EXPECT_EQ(shard.OldestEnqueued(), Shard::kNever);
}

TEST_F(ShardTest, KeepsAHoldUntilItsSamplesAreDeliveredAcrossRetries) {
  Shard shard = MakeShard(100);
  sender_.codes = {503, 200, 200};
  Released first;
  Released second;
  shard.Push({Sample("a", 1), Sample("b", 2)}, first.Make());
  shard.Push({Sample("c", 3), Sample("d", 4)}, second.Make());
  const int64_t retry_at = shard.Step(false);  // a, b: 503
  EXPECT_FALSE(first.released) << "a 503 is retried: the samples are still the shard's";
  clock_.AdvanceNanos(retry_at - clock_.MonotonicNanos());
  shard.Step(false);  // a, b delivered
  EXPECT_TRUE(first.released);
  EXPECT_FALSE(second.released) << "c and d are still queued";
  clock_.AdvanceMillis(1000);
  shard.Step(false);  // c, d at their deadline
  EXPECT_TRUE(second.released);
  EXPECT_EQ(stats_.samples_sent.load(), 4u);
}

TEST_F(ShardTest, ReleasesAHoldWhenItsSamplesAreRefusedDroppedOrNeverQueued) {
  Shard shard = MakeShard(4);
  sender_.codes = {400};
  Released refused;
  shard.Push({Sample("a", 1), Sample("b", 2), Sample("c", 3)}, refused.Make());
  Released queued;
  EXPECT_EQ(shard.Push({Sample("d", 4)}, queued.Make()), 0u);
  Released none_fit;
  EXPECT_EQ(shard.Push({Sample("e", 5), Sample("f", 6), Sample("g", 7)}, none_fit.Make()), 3u);
  EXPECT_TRUE(none_fit.released) << "nothing queued: the drop is counted, nothing is owed";
  shard.Step(false);  // a, b, c refused (400, not retried)
  EXPECT_TRUE(refused.released);
  EXPECT_EQ(stats_.samples_failed.load(), 3u);
  EXPECT_FALSE(queued.released);
  shard.DropAll();
  EXPECT_TRUE(queued.released);
  EXPECT_EQ(stats_.samples_dropped_shutdown.load(), 1u);
}

TEST(EndpointTest, KeepsEachSeriesOnOneShardInOrder) {
  testing::FakeClock clock;
  QueueOptions queue;
  queue.shards = 4;
  queue.max_samples_per_send = 1000;
  queue.capacity_samples = 100000;
  std::vector<ScriptedSender*> senders;
  auto endpoint = Endpoint::Create(
      {"test", {}, queue, {}},
      [&]() -> absl::StatusOr<std::unique_ptr<Sender>> {
        auto sender = std::make_unique<ScriptedSender>(clock);
        senders.push_back(sender.get());
        return std::unique_ptr<Sender>(std::move(sender));
      },
      clock);
  ASSERT_TRUE(endpoint.ok());
  std::vector<std::shared_ptr<const LabelSet>> series;
  for (int i = 0; i < 64; ++i) {
    series.push_back(MakeLabelSet("s" + std::to_string(i), {}));
  }
  for (int t = 0; t < 5; ++t) {
    std::vector<PendingSample> batch;
    for (const auto& s : series) {
      batch.push_back({s, t, static_cast<double>(t), clock.MonotonicNanos()});
    }
    (*endpoint)->Append(batch);
  }
  EXPECT_EQ((*endpoint)->Pending(), 64u * 5);
  // The short batches wait for their deadline; Shutdown sends them at once.
  (*endpoint)->Start();
  (*endpoint)->Shutdown(1000 * kMs);
  std::map<std::string, std::set<ScriptedSender*>> shard_of;
  std::map<std::string, std::vector<double>> values;
  for (ScriptedSender* sender : senders) {
    for (const std::string& body : sender->bodies) {
      for (const auto& [name, value] : Contents(body)) {
        shard_of[name].insert(sender);
        values[name].push_back(value);
      }
    }
  }
  ASSERT_EQ(shard_of.size(), 64u);
  std::set<ScriptedSender*> used;
  for (const auto& [name, shards] : shard_of) {
    EXPECT_EQ(shards.size(), 1u) << name;
    used.insert(*shards.begin());
    EXPECT_THAT(values[name], ::testing::ElementsAre(0, 1, 2, 3, 4)) << name;
  }
  EXPECT_GT(used.size(), 1u);  // 64 series spread over more than one of 4 shards
  EXPECT_EQ((*endpoint)->stats().samples_sent.load(), 64u * 5);
  EXPECT_EQ((*endpoint)->Pending(), 0u);
}

TEST(EndpointTest, AppendAfterShutdownIsCountedNotQueued) {
  testing::FakeClock clock;
  auto endpoint = Endpoint::Create(
      {"test", {}, QueueOptions{}, {}},
      [&]() -> absl::StatusOr<std::unique_ptr<Sender>> {
        return std::unique_ptr<Sender>(std::make_unique<ScriptedSender>(clock));
      },
      clock);
  ASSERT_TRUE(endpoint.ok());
  (*endpoint)->Shutdown(0);
  (*endpoint)->Append({{MakeLabelSet("a", {}), 1, 1, 0}});
  EXPECT_EQ((*endpoint)->stats().samples_dropped_shutdown.load(), 1u);
  EXPECT_EQ((*endpoint)->Pending(), 0u);
}

}  // namespace
}  // namespace fabricmon::remote_write
