#include "daemon/detectors/straggler.h"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/detectors/families.h"
#include "daemon/detectors/node_traffic.h"

namespace fabricmon::detectors {
namespace {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  const double upper = values[middle];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + middle);
  return (lower + upper) / 2;
}

// The worse of a node's wait (IB) and pause (RoCE) fractions; 0 when neither is measured.
double HeldBack(const NodeTrafficReading& reading) {
  return std::max({0.0, reading.wait_fraction, reading.pause_fraction});
}

std::string Rate(double bytes_per_second) {
  return absl::StrFormat("%.1f MB/s", bytes_per_second / 1e6);
}

}  // namespace

StragglerOptions StragglerOptionsFrom(const v1::DetectorThresholds& t) {
  StragglerOptions options;
  if (t.has_straggler_min_job_nodes()) options.min_job_nodes = t.straggler_min_job_nodes();
  if (t.has_straggler_ratio()) options.ratio = t.straggler_ratio();
  if (t.has_straggler_mad()) options.mad = t.straggler_mad();
  if (t.has_straggler_gpu_busy()) options.gpu_busy = t.straggler_gpu_busy();
  if (t.has_straggler_samples()) options.samples = t.straggler_samples();
  if (t.congestion_fraction() > 0) options.wait_fraction = t.congestion_fraction();
  return options;
}

absl::Status ValidateStragglerThresholds(const v1::DetectorThresholds& t) {
  if (t.has_straggler_min_job_nodes() && t.straggler_min_job_nodes() < 3) {
    return absl::InvalidArgumentError(
        "detectors.straggler_min_job_nodes must be at least 3 (a node needs two peers to be "
        "compared with)");
  }
  for (const auto& [name, has, value] :
       {std::make_tuple("straggler_ratio", t.has_straggler_ratio(), t.straggler_ratio()),
        std::make_tuple("straggler_gpu_busy", t.has_straggler_gpu_busy(),
                        t.straggler_gpu_busy())}) {
    if (has && !(value >= 0 && value <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("detectors.", name, " must lie in 0..1, not ", value));
    }
  }
  if (t.has_straggler_mad() && (!(t.straggler_mad() >= 0) || std::isinf(t.straggler_mad()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "detectors.straggler_mad must be a finite number >= 0, not ", t.straggler_mad()));
  }
  if (t.has_straggler_samples() && (t.straggler_samples() < 1 || t.straggler_samples() > 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("detectors.straggler_samples must lie in 1..30, not ", t.straggler_samples()));
  }
  return absl::OkStatus();
}

bool StragglerDetector::Votes::Observe(bool holds, int64_t sample_time) {
  if (sample_time == last_sample_) {
    return raised_;
  }
  last_sample_ = sample_time;
  if (!raised_) {
    const uint32_t window = (uint32_t{1} << (samples_ + 1)) - 1;
    recent_ = ((recent_ << 1) | (holds ? 1u : 0u)) & window;
    if (std::bitset<32>(recent_).count() >= samples_) {
      raised_ = true;
      streak_ = 0;
    }
  } else if (holds) {
    streak_ = 0;
  } else if (++streak_ >= samples_) {
    raised_ = false;
    recent_ = 0;
  }
  return raised_;
}

void StragglerDetector::Evaluate(const FabricView& view, std::vector<Finding>& out) {
  const std::vector<v1::Job> jobs = jobs_.Jobs();
  std::set<std::string> members;
  for (const v1::Job& job : jobs) {
    members.insert(job.nodes().begin(), job.nodes().end());
  }
  if (members.empty()) {
    state_.clear();
    return;
  }
  const std::map<std::string, NodeTrafficReading> readings = ReadNodeTraffic(view, members);

  // (job, node) of every registered job: state outlives a tick the job is not judged in (its
  // GPUs idle between steps) but not the job or the node's membership.
  std::set<std::pair<std::string, std::string>> listed;
  for (const v1::Job& job : jobs) {
    for (const std::string& node : job.nodes()) listed.insert({job.name(), node});
  }
  std::set<std::string> reported;  // a node in two jobs is reported once (its first job)
  // A job (or a node) not judged this tick reports nothing, so its finding ends; it must be
  // raised afresh (`samples` samples) when it is judged again, not resume on the hysteresis. Its
  // votes not yet raised go too: a slow sample before the spell and one after it are not two of
  // the node's last samples+1 (a whole job restarting shows one on each side: the node that stops
  // first, and the one whose first sample back holds part of the idle spell).
  auto not_judged = [this](const std::string& job, const std::string& node) {
    auto it = state_.find({job, node});
    if (it != state_.end()) it->second.debounce = Votes(options_.samples);
  };
  for (const v1::Job& job : jobs) {
    // The job's nodes with RDMA counters: the only ones whose throughput can be compared.
    std::vector<std::pair<std::string, const NodeTrafficReading*>> nodes;
    std::vector<double> gpus;
    for (const std::string& node : job.nodes()) {
      auto it = readings.find(node);
      if (it == readings.end() || !it->second.has_rdma || it->second.sampled == 0) continue;
      nodes.emplace_back(node, &it->second);
      if (it->second.gpu >= 0) gpus.push_back(it->second.gpu);
    }
    // "While the job's GPUs are busy": most of its nodes report GPUs, and the median is busy. A
    // job between steps (checkpointing, loading data) has no pace to keep.
    if (nodes.size() < options_.min_job_nodes || nodes.size() < 3 ||
        gpus.size() * 2 < nodes.size() || Median(gpus) < options_.gpu_busy) {
      for (const std::string& node : job.nodes()) not_judged(job.name(), node);
      continue;
    }

    std::vector<double> rates, kernels, held;
    for (const auto& [node, reading] : nodes) {
      rates.push_back(reading->rdma);
      kernels.push_back(std::max(0.0, reading->kernel));
      held.push_back(HeldBack(*reading));
    }
    const double job_median = Median(rates);
    std::vector<double> deviations;
    for (double rate : rates) deviations.push_back(std::fabs(rate - job_median));
    const double mad = 1.4826 * Median(deviations);  // scaled: a standard deviation for normal data

    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string& node = nodes[i].first;
      const NodeTrafficReading& reading = *nodes[i].second;
      // The peers: every other node of the job.
      std::vector<double> peer_rates = rates, peer_kernels = kernels, peer_held = held;
      peer_rates.erase(peer_rates.begin() + i);
      peer_kernels.erase(peer_kernels.begin() + i);
      peer_held.erase(peer_held.begin() + i);
      const double peers = Median(peer_rates);
      if (peers < options_.min_peer_bytes_per_second) {
        not_judged(job.name(), node);
        continue;
      }
      const double ratio = reading.rdma / peers;
      const double deviations_below = mad > 0 ? (peers - reading.rdma) / mad : HUGE_VAL;
      const bool low =
          ratio < options_.ratio && (options_.mad == 0 || deviations_below >= options_.mad);

      auto state_it = state_.try_emplace({job.name(), node}, options_.samples).first;
      NodeState& state = state_it->second;
      if (state.job_started != job.started_unix_nanos()) {
        // Registered again (requeued, other nodes): what it did before is another run's.
        state = NodeState(options_.samples);
        state.job_started = job.started_unix_nanos();
      }
      const bool new_sample = reading.sampled != state.last_sample;
      state.last_sample = reading.sampled;

      // Why it is slow (see straggler.h); a low outlier without a reason is a role.
      std::string why;
      const double own_held = HeldBack(reading);
      const double peers_held = Median(peer_held);
      const double peers_kernel = Median(peer_kernels);
      if (state.kept_pace >= options_.kept_pace_samples) {
        why = absl::StrFormat("it kept pace with them earlier in the job (%u samples)",
                              state.kept_pace);
      } else if (own_held >= options_.wait_fraction && own_held > 2 * peers_held) {
        why = absl::StrFormat("its ports are held back %.0f%% of the time (peers' median %.0f%%)",
                              own_held * 100, peers_held * 100);
      } else if (reading.kernel > reading.rdma && reading.kernel > 2 * peers_kernel &&
                 reading.kernel >= options_.min_peer_bytes_per_second) {
        why = absl::StrFormat("it moves %s through kernel networking (peers' median %s)",
                              Rate(reading.kernel), Rate(peers_kernel));
      }
      if (new_sample && !low && ratio >= options_.kept_pace_ratio) {
        ++state.kept_pace;
      }
      // Raised: it holds until the node is back at clear_ratio (straggler.h), on the reason it
      // was raised on when the current sample shows none (a low outlier by ratio, not by MAD).
      const bool holds =
          state.debounce.raised() ? ratio < options_.clear_ratio : low && !why.empty();
      if (state.debounce.raised() && why.empty()) why = state.why;
      if (!state.debounce.Observe(holds, reading.sampled)) {
        continue;
      }
      if (!reported.insert(node).second) {
        continue;
      }
      if (!holds) {
        out.push_back(state.last);  // clearing: the debounce holds it for a few samples
        continue;
      }
      Finding finding;
      finding.kind = "straggler";
      finding.severity = Severity::kWarning;
      finding.subject.node = node;
      finding.summary = absl::StrFormat(
          "%s is the straggler of job %s: it moves %s over RDMA, %.0f%% of its %d peers' median "
          "%s while the job's GPUs are busy; %s",
          node, job.name(), Rate(reading.rdma), ratio * 100, static_cast<int>(peer_rates.size()),
          Rate(peers), why);
      Evidence summary;
      summary.series = "rdma_bytes_per_second";
      summary.labels = {absl::StrCat("job=", job.name()), absl::StrCat("node=", node)};
      summary.value = peers;
      summary.rate_per_second = reading.rdma;
      summary.note = absl::StrFormat(
          "this node's RDMA bytes/s (rate) against its peers' median (value); %.1f MADs below",
          std::isinf(deviations_below) ? 0.0 : deviations_below);
      finding.evidence.push_back(std::move(summary));
      for (const Evidence& evidence : reading.rdma_evidence) {
        finding.evidence.push_back(evidence);
      }
      state.last = finding;
      state.why = why;
      out.push_back(std::move(finding));
    }
  }
  // Forget ended jobs and nodes that left theirs.
  for (auto it = state_.begin(); it != state_.end();) {
    it = listed.count(it->first) ? std::next(it) : state_.erase(it);
  }
}

}  // namespace fabricmon::detectors
