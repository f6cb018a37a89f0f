#include "daemon/aggregator/diagnostics_service.h"

#include "daemon/common/logging.h"

namespace fabricmon::aggregator {

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
  reactor->Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, std::string(allowed.message())));
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
  if (grpc::ServerUnaryReactor* refused = Refuse(context)) {
    return refused;
  }
  auto* reactor = context->DefaultReactor();
  if (findings_ == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "this aggregator runs without detectors"));
    return reactor;
  }
  for (v1::Finding& finding : findings_->Findings(request->include_cleared(), request->kind())) {
    *response->add_findings() = std::move(finding);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::Diagnose(grpc::CallbackServerContext* context,
                                                       const v1::DiagnoseRequest* request,
                                                       v1::DiagnoseResponse* response) {
  if (grpc::ServerUnaryReactor* refused = Refuse(context)) {
    return refused;
  }
  auto* reactor = context->DefaultReactor();
  if (findings_ == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "this aggregator runs without detectors"));
    return reactor;
  }
  if (request->nodes().empty() || request->nodes_size() > 100000) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "give 1..100000 node names"));
    return reactor;
  }
  *response = findings_->Diagnose({request->nodes().begin(), request->nodes().end()});
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::GetTopology(grpc::CallbackServerContext* context,
                                                          const v1::GetTopologyRequest*,
                                                          v1::GetTopologyResponse* response) {
  if (grpc::ServerUnaryReactor* refused = Refuse(context)) {
    return refused;
  }
  auto* reactor = context->DefaultReactor();
  if (topology_ == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "this aggregator runs without detectors (no topology)"));
    return reactor;
  }
  *response = topology_->GetTopology();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace fabricmon::aggregator
