#pragma once

// Diagnostics gRPC service for the `fabricmon` CLI: nodes and their inventory. Findings and
// Diagnose answer UNIMPLEMENTED until the detectors exist, rather than an empty (and misleading)
// "nothing found".

#include "daemon/aggregator/series_store.h"
#include "daemon/common/clock.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"

namespace fabricmon::aggregator {

class DiagnosticsService final : public v1::Diagnostics::CallbackService {
 public:
  // Keeps references; both must outlive the service.
  DiagnosticsService(const SeriesStore& store, const Clock& clock, int64_t stale_after_nanos)
      : store_(store), clock_(clock), stale_after_nanos_(stale_after_nanos) {}

  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* context,
                                      const v1::ListNodesRequest* request,
                                      v1::ListNodesResponse* response) override;
  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* context,
                                    const v1::GetNodeRequest* request,
                                    v1::NodeView* response) override;
  grpc::ServerUnaryReactor* ListFindings(grpc::CallbackServerContext* context,
                                         const v1::ListFindingsRequest* request,
                                         v1::ListFindingsResponse* response) override;
  grpc::ServerUnaryReactor* Diagnose(grpc::CallbackServerContext* context,
                                     const v1::DiagnoseRequest* request,
                                     v1::DiagnoseResponse* response) override;

 private:
  void FillSummary(const NodeState::Summary& summary, v1::NodeSummary* out) const;
  const SeriesStore& store_;
  const Clock& clock_;
  const int64_t stale_after_nanos_;
};

}  // namespace fabricmon::aggregator
