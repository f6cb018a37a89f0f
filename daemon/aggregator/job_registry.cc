#include "daemon/aggregator/job_registry.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/exposition/text_exposition.h"
#include "daemon/wire/aggregator_families.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace fabricmon::aggregator {
namespace {

bool AllOf(absl::string_view text, absl::string_view extra) {
  return std::all_of(text.begin(), text.end(), [extra](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           extra.find(c) != absl::string_view::npos;
  });
}

// Quoted for an error message, without echoing a long or binary input back whole.
std::string Quote(absl::string_view text) {
  std::string shown;
  for (char c : text.substr(0, 64)) {
    shown += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return absl::StrCat("\"", shown, text.size() > 64 ? "...\"" : "\"");
}

}  // namespace

absl::Status ValidateJobName(absl::string_view name) {
  if (name.empty() || name.size() > 128 || !AllOf(name, "._:@+-")) {
    return absl::InvalidArgumentError(
        absl::StrCat("job name ", Quote(name), " is not 1..128 characters of [A-Za-z0-9._:@+-]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateJobNodeName(absl::string_view node) {
  if (node.empty() || node.size() > 253 || !AllOf(node, "._-")) {
    return absl::InvalidArgumentError(
        absl::StrCat("node name ", Quote(node), " is not 1..253 characters of [A-Za-z0-9._-]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobRegistry::Start(const v1::StartJobRequest& request,
                                           std::string started_by) {
  if (absl::Status status = ValidateJobName(request.name()); !status.ok()) {
    return status;
  }
  if (!request.source().empty()) {
    if (absl::Status status = ValidateJobName(request.source()); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("job source: ", status.message()));
    }
  }
  if (request.nodes().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("job ", request.name(), " has no nodes"));
  }
  // Checked before sorting: a hostile request cannot make us sort a million names.
  if (static_cast<size_t>(request.nodes_size()) > limits_.max_nodes_per_job) {
    return absl::InvalidArgumentError(absl::StrCat("job ", request.name(), " names ",
                                                   request.nodes_size(), " nodes; at most ",
                                                   limits_.max_nodes_per_job, " per job"));
  }
  std::set<std::string> nodes;
  for (const std::string& node : request.nodes()) {
    if (absl::Status status = ValidateJobNodeName(node); !status.ok()) {
      return status;
    }
    nodes.insert(node);
  }
  v1::Job job;
  job.set_name(request.name());
  job.mutable_nodes()->Add(nodes.begin(), nodes.end());
  job.set_started_unix_nanos(clock_.NowUnixNanos());
  job.set_source(request.source());
  job.set_started_by(std::move(started_by));

  absl::MutexLock lock(&mu_);
  auto existing = jobs_.find(request.name());
  const size_t replaced = existing == jobs_.end() ? 0 : existing->second.nodes_size();
  if (existing == jobs_.end() && jobs_.size() >= limits_.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("already ", jobs_.size(),
                     " jobs registered (the most the aggregator keeps); end some "
                     "(fabricmon job end) first"));
  }
  if (memberships_ - replaced + nodes.size() > limits_.max_memberships) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "registered jobs already hold ", memberships_, " nodes in all; ", request.name(),
        " would exceed the ", limits_.max_memberships, " the aggregator keeps"));
  }
  memberships_ = memberships_ - replaced + nodes.size();
  jobs_.insert_or_assign(request.name(), job);
  return job;
}

absl::StatusOr<v1::Job> JobRegistry::End(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job named ", Quote(name), " is registered"));
  }
  v1::Job job = std::move(it->second);
  memberships_ -= job.nodes_size();
  jobs_.erase(it);
  return job;
}

std::optional<v1::Job> JobRegistry::Find(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::vector<v1::Job> JobRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> jobs;
  jobs.reserve(jobs_.size());
  for (const auto& [name, job] : jobs_) {
    jobs.push_back(job);
  }
  return jobs;
}

std::vector<prometheus::MetricFamily> JobRegistry::Collect() const {
  prometheus::MetricFamily count = exposition::EmptyFamily(wire::kJobsFamily);
  prometheus::MetricFamily members = exposition::EmptyFamily(wire::kJobNodeInfoFamily);
  prometheus::MetricFamily started = exposition::EmptyFamily(wire::kJobStartTimeSecondsFamily);
  absl::MutexLock lock(&mu_);
  prometheus::ClientMetric total;
  total.gauge.value = static_cast<double>(jobs_.size());
  count.metric.push_back(std::move(total));
  for (const auto& [name, job] : jobs_) {
    for (const std::string& node : job.nodes()) {
      prometheus::ClientMetric member;
      member.label = {{"job_name", name}, {"node", node}};
      member.gauge.value = 1;
      members.metric.push_back(std::move(member));
    }
    prometheus::ClientMetric start;
    start.label = {{"job_name", name}};
    start.gauge.value = static_cast<double>(job.started_unix_nanos()) / 1e9;
    started.metric.push_back(std::move(start));
  }
  // Moved in: a braced list would copy every member (an initializer_list's elements are const).
  std::vector<prometheus::MetricFamily> families;
  families.reserve(3);
  families.push_back(std::move(count));
  families.push_back(std::move(members));
  families.push_back(std::move(started));
  return families;
}

}  // namespace fabricmon::aggregator
