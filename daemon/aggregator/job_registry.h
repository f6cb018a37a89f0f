#pragma once

// Jobs: a name and a node set, registered by an operator through the Diagnostics service (a Slurm
// prolog, `fabricmon job start`) so that Diagnose and the straggler detector can treat a job's
// nodes as peers. In memory only: an aggregator restart forgets every job (the next prolog
// registers its job again; a running job can be registered again by hand).
//
// Bounded, because an operator's script can loop: at most `max_jobs` jobs, `max_nodes_per_job`
// nodes in one, `max_memberships` (job, node) pairs in all, each exported as one
// fabricmon_job_node_info series. Names are validated, never truncated.
//
// Thread-safe.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/clock.h"
#include "daemon/detectors/providers.h"
#include "fabricmon/v1/diagnostics.pb.h"
#include "prometheus/collectable.h"

namespace fabricmon::aggregator {

struct JobLimits {
  size_t max_jobs = 1024;
  size_t max_nodes_per_job = 10000;
  size_t max_memberships = 100000;  // sum of every job's nodes
};

// 1..128 characters of [A-Za-z0-9._:@+-]: a Slurm job id ("1234", "1234_7", "1234+0"), a name.
absl::Status ValidateJobName(absl::string_view name);
// 1..253 characters of [A-Za-z0-9._-] (host names, as agents name their nodes).
absl::Status ValidateJobNodeName(absl::string_view node);

class JobRegistry final : public prometheus::Collectable, public detectors::JobsProvider {
 public:
  // Keeps a reference to `clock` (start times).
  explicit JobRegistry(const Clock& clock, JobLimits limits = {})
      : clock_(clock), limits_(limits) {}

  // Registers `request`'s job (its nodes sorted and made distinct), or replaces the node set of
  // the job of that name (a requeued job runs elsewhere). `started_by` names the caller.
  // InvalidArgument: a bad name, source or node, no nodes, more than max_nodes_per_job.
  // ResourceExhausted: max_jobs or max_memberships would be exceeded.
  absl::StatusOr<v1::Job> Start(const v1::StartJobRequest& request, std::string started_by)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the job; NotFound when none has that name.
  absl::StatusOr<v1::Job> End(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<v1::Job> Find(absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);
  // Every job, by name.
  std::vector<v1::Job> List() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::Job> Jobs() const override { return List(); }

  // fabricmon_jobs, fabricmon_job_node_info{job_name,node}, fabricmon_job_start_time_seconds
  // {job_name}. Not `job`: Prometheus owns that label (its scrape job) and would rename ours.
  std::vector<prometheus::MetricFamily> Collect() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Clock& clock_;
  const JobLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, v1::Job, std::less<>> jobs_ ABSL_GUARDED_BY(mu_);
  size_t memberships_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fabricmon::aggregator
