#include "daemon/agent/agent.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "daemon/agent/agent_families.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/common/logging.h"
#include "daemon/common/thread_name.h"
#include "google/protobuf/util/message_differencer.h"

namespace fabricmon::agent {
namespace {

// The agent's own health as samples, so it travels the same path as hardware counters and the
// aggregator can tell data lost on the node from data lost in transit.
class AgentSelfCollector final : public collectors::Collector {
 public:
  AgentSelfCollector(const ReplayBuffer& buffer, const SeriesTable& series,
                     const StreamClient* stream)
      : buffer_(buffer), series_(series), stream_(stream) {
    using collectors::SeriesFromSpec;
    buffer_bytes_ = SeriesFromSpec(kReplayBufferBytesFamily, "agent", {});
    buffer_cycles_ = SeriesFromSpec(kReplayBufferBatchesFamily, "agent", {});
    dropped_batches_ = SeriesFromSpec(kDroppedBatchesFamily, "agent", {});
    unconfirmed_ = SeriesFromSpec(kEvictedUnconfirmedFamily, "agent", {});
    dropped_samples_ = SeriesFromSpec(kDroppedSamplesFamily, "agent", {});
    connected_ = SeriesFromSpec(kStreamConnectedFamily, "agent", {});
    connects_ = SeriesFromSpec(kStreamConnectsFamily, "agent", {});
    attempts_ = SeriesFromSpec(kStreamAttemptsFamily, "agent", {});
    replayed_ = SeriesFromSpec(kReplayedBatchesFamily, "agent", {});
    series_held_ = SeriesFromSpec(kSeriesFamily, "agent", {});
    series_ids_ = SeriesFromSpec(kSeriesIdsFamily, "agent", {});
    sent_bytes_ = SeriesFromSpec(kSentBytesFamily, "agent", {});
    failovers_ = SeriesFromSpec(kAggregatorFailoversFamily, "agent", {});
    failbacks_ = SeriesFromSpec(kAggregatorFailbacksFamily, "agent", {});
  }
  absl::string_view name() const override { return "agent"; }
  absl::Status Discover(v1::Inventory&) override { return absl::OkStatus(); }
  absl::Status Collect(collectors::SampleSink& sink) override {
    sink.Add(buffer_bytes_, buffer_.bytes());
    sink.Add(buffer_cycles_, buffer_.size());
    sink.Add(dropped_batches_, buffer_.dropped_cycles());
    sink.Add(dropped_samples_, buffer_.dropped_samples());
    sink.Add(unconfirmed_, buffer_.unconfirmed_evictions());
    sink.Add(series_held_, series_.size());
    sink.Add(series_ids_, series_.id_count());
    if (stream_ != nullptr) {
      const StreamClientStats stats = stream_->stats();
      sink.Add(connected_, stats.connected ? 1 : 0);
      sink.Add(connects_, stats.connects);
      sink.Add(attempts_, stats.connect_attempts);
      sink.Add(replayed_, stats.replayed_batches);
      sink.Add(sent_bytes_, stats.bytes_sent);
      // Counters from the first cycle on (at 0), not from the first move: a series that appears
      // later is declared later, and an aggregator at its series cap refuses it.
      sink.Add(failovers_, stats.failovers);
      sink.Add(failbacks_, stats.failbacks);
      if (!stats.aggregator.empty()) {  // known from the first connection attempt on
        if (stats.aggregator != info_address_ || stats.aggregator_rank != info_rank_) {
          info_address_ = stats.aggregator;
          info_rank_ = stats.aggregator_rank;
          info_ = collectors::SeriesFromSpec(
              kAggregatorInfoFamily, "agent",
              {{"address", info_address_}, {"rank", std::to_string(info_rank_)}});
        }
        sink.Add(info_, 1);
      }
    }
    return absl::OkStatus();
  }
  int64_t interval_ms() const override { return 1000; }
  int64_t rediscover_interval_ms() const override { return 3600000; }

 private:
  const ReplayBuffer& buffer_;
  const SeriesTable& series_;
  const StreamClient* stream_;
  collectors::SeriesDesc buffer_bytes_, buffer_cycles_, dropped_batches_, dropped_samples_,
      unconfirmed_, connected_, connects_, attempts_, replayed_, sent_bytes_, series_held_,
      series_ids_, failovers_, failbacks_, info_;
  std::string info_address_;  // info_'s labels (Collect runs on one thread)
  int info_rank_ = -1;
};

}  // namespace

Agent::Agent(AgentOptions options, std::vector<std::unique_ptr<collectors::Collector>> collectors,
             Clock& clock)
    : options_(std::move(options)), clock_(clock), buffer_(options_.replay_buffer_bytes) {
  for (auto& collector : collectors) {
    runners_.push_back(std::make_unique<CollectorRunner>(std::move(collector), clock_));
  }
  absl::MutexLock lock(&mu_);
  inventories_.resize(runners_.size());
  discovery_.resize(runners_.size(), absl::UnavailableError("not discovered yet"));
  latest_.resize(runners_.size());
}

Agent::~Agent() { Stop(); }

void Agent::DiscoverAll() {
  for (size_t i = 0; i < runners_.size(); ++i) {
    v1::Inventory inventory;
    absl::Status status = runners_[i]->Discover(inventory);  // also exported as health series
    absl::MutexLock lock(&mu_);
    inventories_[i] = std::move(inventory);
    discovery_[i] = std::move(status);
  }
}

void Agent::Start() {
  runners_.push_back(std::make_unique<CollectorRunner>(
      std::make_unique<AgentSelfCollector>(buffer_, series_, stream_), clock_));
  {
    absl::MutexLock lock(&mu_);
    inventories_.resize(runners_.size());
    discovery_.resize(runners_.size(), absl::OkStatus());
    latest_.resize(runners_.size());
  }
  v1::Inventory unused;
  (void)runners_.back()->Discover(unused);  // the self collector always discovers OK
  for (size_t i = 0; i < runners_.size(); ++i) {
    threads_.emplace_back([this, i] { RunCollector(i); });
  }
}

void Agent::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) {
      thread.join();
    }
  }
  threads_.clear();
}

void Agent::ReclaimSeriesIds() {
  // Without a stream nothing will encode a buffered cycle again.
  const uint64_t acked =
      stream_ != nullptr ? buffer_.acked_sequence() : std::numeric_limits<uint64_t>::max();
  std::vector<uint32_t> ids = series_.Reclaimable(acked);
  if (ids.empty()) {
    return;
  }
  if (stream_ != nullptr) {
    stream_->ForgetSeries(ids);  // before any of them can mean another series
  }
  series_.MakeReusable(ids);
}

void Agent::RunCollector(size_t index) {
  CollectorRunner& runner = *runners_[index];
  NameThisThread(absl::StrCat("col_", runner.collector().name()));
  CycleBuilder builder(series_);
  const int64_t interval_ns = runner.collector().interval_ms() * 1000000;
  int64_t next = clock_.MonotonicNanos();
  bool first = true;
  for (;;) {
    v1::Inventory discovered;
    if (!first && runner.MaybeDiscover(discovered)) {
      absl::MutexLock lock(&mu_);
      discovery_[index] = runner.discovery_status();
      if (!google::protobuf::util::MessageDifferencer::Equals(discovered, inventories_[index])) {
        inventories_[index] = std::move(discovered);
        PublishInventoryLocked();
      }
    }
    const int64_t timestamp = clock_.NowUnixNanos();
    (void)runner.Collect(builder);  // status is exported as fabricmon_collector_success
    Cycle cycle =
        builder.Finish(timestamp, static_cast<uint32_t>(runner.last_duration_ns() / 1000));
    std::shared_ptr<const Cycle> latest;  // the buffered cycle itself, for LatestSamples()
    const uint64_t sequence = buffer_.Push(std::move(cycle), &latest);
    if (std::vector<uint32_t> released = builder.TakeReleased(); !released.empty()) {
      series_.Release(released, sequence);
    }
    ReclaimSeriesIds();
    if (stream_ != nullptr) {
      stream_->Notify();
    }
    if (first) {
      completed_first_cycle_.fetch_add(1);
      first = false;
    }

    // Fixed-rate schedule; if a run overran, skip the missed ticks instead of bursting.
    next += interval_ns;
    const int64_t now = clock_.MonotonicNanos();
    if (next < now) {
      next = now + interval_ns - (now - next) % interval_ns;
    }
    absl::MutexLock lock(&mu_);
    latest_[index] = std::move(latest);
    const absl::Duration wait = absl::Nanoseconds(next - clock_.MonotonicNanos());
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
    if (stopping_) {
      return;
    }
  }
}

void Agent::PublishInventoryLocked() {
  if (stream_ == nullptr) {
    return;
  }
  v1::Inventory merged;
  for (const v1::Inventory& part : inventories_) {
    merged.MergeFrom(part);
  }
  stream_->SendInventory(merged);
}

v1::Inventory Agent::inventory() const {
  absl::MutexLock lock(&mu_);
  v1::Inventory merged;
  for (const v1::Inventory& part : inventories_) {
    merged.MergeFrom(part);
  }
  return merged;
}

v1::Hello Agent::MakeHello(const std::string& boot_id, const std::string& version,
                           uint64_t instance_id) const {
  v1::Hello hello;
  hello.set_node_name(options_.node_name);
  hello.set_boot_id(boot_id);
  hello.set_agent_version(version);
  hello.set_protocol_revision(v1::PROTOCOL_REVISION_2);
  hello.set_agent_instance_id(instance_id);
  uint32_t min_interval = 0;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < runners_.size(); ++i) {
    const auto& runner = runners_[i];
    v1::CollectorStatus* status = hello.add_collectors();
    status->set_name(std::string(runner->collector().name()));
    const absl::Status& discovery = discovery_[i];
    status->set_state(discovery.ok() ? "OK"
                      : collectors::IsTurnedOff(discovery)
                          ? "TURNED_OFF"
                          : absl::StatusCodeToString(discovery.code()));
    status->set_message(std::string(discovery.message()));
    const auto interval = static_cast<uint32_t>(runner->collector().interval_ms());
    status->set_interval_ms(interval);
    if (min_interval == 0 || interval < min_interval) {
      min_interval = interval;
    }
  }
  hello.set_min_interval_ms(min_interval);
  for (const v1::Inventory& part : inventories_) {
    hello.mutable_inventory()->MergeFrom(part);
  }
  return hello;
}

std::vector<exposition::SampleRef> Agent::LatestSamples() const {
  std::vector<std::shared_ptr<const Cycle>> cycles;
  {
    absl::MutexLock lock(&mu_);
    cycles = latest_;
  }
  std::vector<exposition::SampleRef> samples;
  for (const auto& cycle : cycles) {
    if (cycle == nullptr) {
      continue;
    }
    for (size_t i = 0; i < cycle->values.size(); ++i) {
      const collectors::SeriesDesc* desc = series_.Find((*cycle->layout)[i]);
      if (desc != nullptr) {
        samples.push_back({desc, cycle->values[i]});
      }
    }
  }
  return samples;
}

}  // namespace fabricmon::agent
