#pragma once

// A Slurm job's nodes, for `fabricmon ... --slurm_job=ID`: `scontrol show job ID` gives the
// job's NodeList (a hostlist expression such as "gpu[001-004,010],login1"), and
// `scontrol show hostnames EXPR` expands it, so that fabricmon never re-implements Slurm's
// hostlist syntax. Both outputs are untrusted text: they are parsed strictly, and every name is
// validated before it reaches the aggregator.
//
// Slurm's node names must be the names the agents report (an agent names its node by its host
// name unless configured otherwise): a NodeName that differs from the host name shows up as an
// unknown node in `fabricmon diagnose`.

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricmon::cli {

// One `scontrol show job` record (a heterogeneous job prints one per component, an array job
// one per task).
struct SlurmJobRecord {
  std::string job_id;     // JobId=
  std::string state;      // JobState= (RUNNING, PENDING, COMPLETING, ...)
  std::string node_list;  // NodeList=, empty when the job holds no nodes ("(null)")
};

// "1234", "1234_7" (array task), "1234+1" (heterogeneous component).
absl::Status ValidateSlurmJobId(absl::string_view id);

// Parses `scontrol show job` output (the multi-line format of Slurm 20.11 to 24.x). A record
// starts at a line whose first field is JobId=; JobState= and NodeList= are read only where they
// are the first field of a line, so a job name or comment containing "NodeList=" cannot inject
// nodes. InvalidArgument when no record parses, or a record has no or several NodeList lines.
absl::StatusOr<std::vector<SlurmJobRecord>> ParseScontrolShowJob(absl::string_view text);

// Parses `scontrol show hostnames` output: one host name per line. InvalidArgument naming the
// first line that is not a valid host name (1..253 characters of [A-Za-z0-9._-]).
absl::StatusOr<std::vector<std::string>> ParseHostnames(absl::string_view text);

// A hostlist expression scontrol may be handed: 1..65536 characters of [A-Za-z0-9._,[]-].
absl::Status ValidateHostlist(absl::string_view expression);

// Runs argv[0] (looked up in PATH) with `argv`, no shell, and returns its standard output.
// Fails (never truncates) when it exits non-zero (with its standard error), is killed, writes
// more than `max_output_bytes`, or runs past `timeout`.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       std::chrono::milliseconds timeout,
                                       size_t max_output_bytes = 16 << 20);

// The nodes of Slurm job `id`, distinct and sorted, through `scontrol` (the command named by
// `scontrol`, "scontrol" in PATH by default). FailedPrecondition when the job holds no nodes
// (pending, finished).
absl::StatusOr<std::vector<std::string>> ResolveSlurmJob(absl::string_view id,
                                                         const std::string& scontrol,
                                                         std::chrono::milliseconds timeout);

}  // namespace fabricmon::cli
