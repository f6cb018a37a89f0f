#include "daemon/aggregator/diagnostics_service.h"

#include <optional>

#include "daemon/common/logging.h"

namespace fabricmon::aggregator {
namespace {

// absl and gRPC share the canonical status codes, value for value.
grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace

grpc::ServerUnaryReactor* DiagnosticsService::Refuse(grpc::CallbackServerContext* context) const {
  const PeerIdentity identity = PeerIdentityFromAuthContext(context->auth_context());
  absl::Status allowed = authorization_ != nullptr
                             ? authorization_->CheckOperator(identity)
                             : absl::PermissionDeniedError("no authorization configured");
  if (allowed.ok()) {
    return nullptr;
  }
  if (stats_ != nullptr) {
    ++stats_->diagnostics_not_operator;
  }
  FABRICMON_LOG_EVERY_MINUTE(Warning)
      << "refusing a Diagnostics call from " << context->peer() << ": " << allowed.message();
  auto* reactor = context->DefaultReactor();
  reactor->Finish(
      grpc::Status(grpc::StatusCode::PERMISSION_DENIED, std::string(allowed.message())));
  return reactor;
}

void DiagnosticsService::FillSummary(const store::NodeState::Summary& summary,
                                     v1::NodeSummary* out) const {
  out->set_name(summary.name);
  out->set_up(summary.connected &&
              clock_.NowUnixNanos() - summary.last_seen_unix_nanos <= stale_after_nanos_);
  out->set_last_seen_unix_nanos(summary.last_seen_unix_nanos);
  out->set_agent_version(summary.agent_version);
  out->set_boot_id(summary.boot_id);
  out->set_series(summary.series);
  out->set_identity_conflicts(summary.counters.identity_conflicts);
  out->set_last_identity_conflict(summary.last_identity_conflict);
  out->set_clock_steps(summary.counters.clock_steps);
}

grpc::ServerUnaryReactor* DiagnosticsService::RefuseOrLacking(grpc::CallbackServerContext* context,
                                                              bool has_provider,
                                                              const char* missing) const {
  if (grpc::ServerUnaryReactor* refused = Refuse(context)) {
    return refused;
  }
  if (has_provider) {
    return nullptr;
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, missing));
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::ListNodes(grpc::CallbackServerContext* context,
                                                        const v1::ListNodesRequest*,
                                                        v1::ListNodesResponse* response) {
  if (grpc::ServerUnaryReactor* refused = Refuse(context)) {
    return refused;
  }
  for (const auto& node : store_.Nodes()) {
    FillSummary(node->GetSummary(false), response->add_nodes());
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::GetNode(grpc::CallbackServerContext* context,
                                                      const v1::GetNodeRequest* request,
                                                      v1::NodeView* response) {
  if (grpc::ServerUnaryReactor* refused = Refuse(context)) {
    return refused;
  }
  auto* reactor = context->DefaultReactor();
  std::shared_ptr<store::NodeState> node = store_.Find(request->name());
  if (node == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown node " + request->name()));
    return reactor;
  }
  store::NodeState::Summary summary = node->GetSummary(true);
  FillSummary(summary, response->mutable_summary());
  *response->mutable_inventory() = std::move(summary.inventory);
  if (findings_ != nullptr) {
    for (v1::Finding& finding : findings_->FindingsOfNode(request->name())) {
      *response->add_findings() = std::move(finding);
    }
    response->mutable_summary()->set_active_findings(response->findings_size());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::ListFindings(grpc::CallbackServerContext* context,
                                                           const v1::ListFindingsRequest* request,
                                                           v1::ListFindingsResponse* response) {
  if (grpc::ServerUnaryReactor* done = RefuseOrLacking(context, findings_ != nullptr,
                                                       "this aggregator runs without detectors")) {
    return done;
  }
  auto* reactor = context->DefaultReactor();
  for (v1::Finding& finding : findings_->Findings(request->include_cleared(), request->kind())) {
    *response->add_findings() = std::move(finding);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::Diagnose(grpc::CallbackServerContext* context,
                                                       const v1::DiagnoseRequest* request,
                                                       v1::DiagnoseResponse* response) {
  if (grpc::ServerUnaryReactor* done = RefuseOrLacking(context, findings_ != nullptr,
                                                       "this aggregator runs without detectors")) {
    return done;
  }
  auto* reactor = context->DefaultReactor();
  std::vector<std::string> nodes(request->nodes().begin(), request->nodes().end());
  std::optional<v1::Job> job;
  if (!request->job().empty()) {
    if (!nodes.empty()) {
      reactor->Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "give node names or a job, not both"));
      return reactor;
    }
    job = jobs_ != nullptr ? jobs_->Find(request->job()) : std::nullopt;
    if (!job.has_value()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                   "no job named " + request->job().substr(0, 128) +
                                       " is registered (fabricmon jobs lists them)"));
      return reactor;
    }
    nodes.assign(job->nodes().begin(), job->nodes().end());
  }
  if (nodes.empty() || nodes.size() > 100000) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "give 1..100000 node names"));
    return reactor;
  }
  *response = findings_->Diagnose(nodes);
  if (traffic_ != nullptr) {
    for (v1::NodeTraffic& traffic : traffic_->Traffic(nodes)) {
      *response->add_traffic() = std::move(traffic);
    }
  }
  if (job.has_value()) {
    *response->mutable_job() = std::move(*job);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::GetTopology(grpc::CallbackServerContext* context,
                                                          const v1::GetTopologyRequest*,
                                                          v1::GetTopologyResponse* response) {
  if (grpc::ServerUnaryReactor* done = RefuseOrLacking(
          context, topology_ != nullptr, "this aggregator runs without detectors (no topology)")) {
    return done;
  }
  auto* reactor = context->DefaultReactor();
  *response = topology_->GetTopology();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::StartJob(grpc::CallbackServerContext* context,
                                                       const v1::StartJobRequest* request,
                                                       v1::Job* response) {
  if (grpc::ServerUnaryReactor* done =
          RefuseOrLacking(context, jobs_ != nullptr, "this aggregator keeps no jobs")) {
    return done;
  }
  auto* reactor = context->DefaultReactor();
  const PeerIdentity identity = PeerIdentityFromAuthContext(context->auth_context());
  absl::StatusOr<v1::Job> job = jobs_->Start(
      *request, identity.authenticated ? identity.Describe() : std::string("plaintext caller"));
  if (!job.ok()) {
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }
  FABRICMON_LOG(Info) << "job " << job->name() << " started by " << job->started_by() << " on "
                      << job->nodes_size() << " nodes";
  *response = std::move(*job);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::EndJob(grpc::CallbackServerContext* context,
                                                     const v1::EndJobRequest* request,
                                                     v1::Job* response) {
  if (grpc::ServerUnaryReactor* done =
          RefuseOrLacking(context, jobs_ != nullptr, "this aggregator keeps no jobs")) {
    return done;
  }
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<v1::Job> job = jobs_->End(request->name());
  if (!job.ok()) {
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }
  *response = std::move(*job);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::ListJobs(grpc::CallbackServerContext* context,
                                                       const v1::ListJobsRequest*,
                                                       v1::ListJobsResponse* response) {
  if (grpc::ServerUnaryReactor* done =
          RefuseOrLacking(context, jobs_ != nullptr, "this aggregator keeps no jobs")) {
    return done;
  }
  auto* reactor = context->DefaultReactor();
  for (v1::Job& job : jobs_->List()) {
    *response->add_jobs() = std::move(job);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace fabricmon::aggregator
