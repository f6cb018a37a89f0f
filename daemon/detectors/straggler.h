#pragma once

// Straggler: within a registered job (a JobsProvider: the aggregator's JobRegistry) whose GPUs
// are busy, the node that moves markedly less RDMA traffic than its peers and is the slow one —
// one slow rail, one node on TCP sockets, one node held back by its port, slows a synchronous
// collective to its pace.
//
// A node is judged against the median of its job's other nodes (robust: one slow node cannot
// drag the reference down) and the job's median absolute deviation (a job with two legitimate
// traffic levels, e.g. pipeline stages, has a large MAD and no outlier). Only a low outlier can be
// a straggler (a parameter-server rank moves more, never less). And since a pipeline stage or an
// embedding shard may move less by design, a low outlier must also show why it is slow, one of:
//   - it kept pace with its peers earlier in this job (a drop, not a role);
//   - its own ports wait for credits (IB XmitWait) or are paused (RoCE PFC) at least
//     wait_fraction of the time, more than its peers' median;
//   - it moves more through kernel networking than over RDMA, where its peers do not (a node
//     on sockets).
// Raised when `samples` of the node's last `samples`+1 samples hold (one sample that reads at pace
// between slow ones — a node's 0.5 s rate is noisy — does not restart the count; a tick the job
// or node is not judged in does, so slow samples either side of an idle spell are not counted
// together). Once raised it holds while the node stays below clear_ratio of its peers' median
// (hysteresis: a node slowed to about `ratio` would otherwise be raised and cleared again with its
// samples' noise, one incident reported many times), and is cleared after `samples` samples at or
// above it.

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "daemon/detectors/detector.h"
#include "daemon/detectors/providers.h"

namespace fabricmon::detectors {

struct StragglerOptions {
  uint32_t min_job_nodes = 4;  // nodes with RDMA counters a job needs to be judged
  double ratio = 0.7;          // below this fraction of the peers' median
  // and this many MADs (×1.4826) below it; 0: ratio alone. Not 3.5 (the textbook outlier
  // cut-off for large samples): the MAD of a 4-8 node job's noisy 0.5 s rates is itself noisy,
  // and at 3.5 a half-rate node was missed in ~1 sample of 4; the MAD's purpose, a job with two
  // traffic levels, puts its low level ~1.4 MADs below the peers' median.
  double mad = 2.5;
  double gpu_busy = 0.5;  // median of the job nodes' busiest GPU
  uint32_t samples = 2;   // debounce, in samples (at most 30)
  // Corroborations (fixed; README "Findings").
  double clear_ratio = 0.85;       // a raised straggler clears at this ratio or better
  double kept_pace_ratio = 0.9;    // a sample at this ratio or better counts as keeping pace
  uint32_t kept_pace_samples = 3;  // samples at pace before a drop counts as one
  double wait_fraction = 0.05;     // own wait/pause fraction (detectors.congestion_fraction)
  double min_peer_bytes_per_second = 1e6;  // peers moving less than this: nothing to compare
};

StragglerOptions StragglerOptionsFrom(const v1::DetectorThresholds& thresholds);
// The straggler_* fields' ranges (config.proto); InvalidArgument naming the field.
absl::Status ValidateStragglerThresholds(const v1::DetectorThresholds& thresholds);

class StragglerDetector final : public Detector {
 public:
  // Keeps a reference to `jobs`, which must outlive the detector.
  StragglerDetector(StragglerOptions options, const JobsProvider& jobs)
      : options_(options), jobs_(jobs) {}
  absl::string_view name() const override { return "straggler"; }
  void Evaluate(const FabricView& view, std::vector<Finding>& out) override;

 private:
  // Raised when `samples` of the last samples+1 samples hold, cleared after `samples` in a row
  // that do not; a sample is counted once however many ticks see it.
  class Votes {
   public:
    // `samples` beyond 1..30 (the thresholds' range, ValidateStragglerThresholds) is clamped.
    explicit Votes(uint32_t samples) : samples_(std::clamp<uint32_t>(samples, 1, 30)) {}
    bool Observe(bool holds, int64_t sample_time);
    bool raised() const { return raised_; }

   private:
    uint32_t samples_;
    int64_t last_sample_ = 0;
    uint32_t recent_ = 0;  // while not raised: bit i set when the sample i samples back held
    uint32_t streak_ = 0;  // while raised: samples in a row that did not hold
    bool raised_ = false;
  };
  struct NodeState {
    explicit NodeState(uint32_t samples) : debounce(samples) {}
    Votes debounce;
    int64_t last_sample = 0;  // the last sample counted below
    uint32_t kept_pace = 0;   // samples at kept_pace_ratio or better in this job
    int64_t job_started = 0;  // the job registration these counts belong to
    std::string why;          // the corroboration it was raised on
    Finding last;             // the raised finding, repeated while it clears
  };
  const StragglerOptions options_;
  const JobsProvider& jobs_;
  std::map<std::pair<std::string, std::string>, NodeState> state_;  // (job, node)
};

}  // namespace fabricmon::detectors
