#include "daemon/aggregator/diagnostics_service.h"

namespace fabricmon::aggregator {

void DiagnosticsService::FillSummary(const NodeState::Summary& summary,
                                     v1::NodeSummary* out) const {
  out->set_name(summary.name);
  out->set_up(summary.connected &&
              clock_.NowUnixNanos() - summary.last_seen_unix_nanos <= stale_after_nanos_);
  out->set_last_seen_unix_nanos(summary.last_seen_unix_nanos);
  out->set_agent_version(summary.agent_version);
  out->set_boot_id(summary.boot_id);
  out->set_series(summary.series);
}

grpc::ServerUnaryReactor* DiagnosticsService::ListNodes(grpc::CallbackServerContext* context,
                                                        const v1::ListNodesRequest*,
                                                        v1::ListNodesResponse* response) {
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
  auto* reactor = context->DefaultReactor();
  std::shared_ptr<NodeState> node = store_.Find(request->name());
  if (node == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown node " + request->name()));
    return reactor;
  }
  NodeState::Summary summary = node->GetSummary(true);
  FillSummary(summary, response->mutable_summary());
  *response->mutable_inventory() = std::move(summary.inventory);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::ListFindings(grpc::CallbackServerContext* context,
                                                           const v1::ListFindingsRequest*,
                                                           v1::ListFindingsResponse*) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                               "this aggregator has no detectors yet"));
  return reactor;
}

grpc::ServerUnaryReactor* DiagnosticsService::Diagnose(grpc::CallbackServerContext* context,
                                                       const v1::DiagnoseRequest*,
                                                       v1::DiagnoseResponse*) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                               "this aggregator has no detectors yet"));
  return reactor;
}

}  // namespace fabricmon::aggregator
