#pragma once

// Diagnostics gRPC service for the `fabricmon` CLI: nodes, their inventory and findings,
// Diagnose, the fabric topology, and jobs (job_registry.h). Findings come from a FindingsProvider,
// the topology from a TopologyProvider and a job's traffic from a TrafficProvider (the detection
// engine and its readers, daemon/detectors/providers.h); without one, its RPCs answer
// UNIMPLEMENTED rather than an empty (and misleading) "nothing found".
//
// Only operators may call it (authorization.h): every method starts with Refuse(), which answers
// PERMISSION_DENIED naming the refused identity and the config field that grants the role.

#include "daemon/aggregator/authorization.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/job_registry.h"
#include "daemon/common/clock.h"
#include "daemon/detectors/providers.h"
#include "daemon/store/series_store.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"

namespace fabricmon::aggregator {

class DiagnosticsService final : public v1::Diagnostics::CallbackService {
 public:
  // Keeps references; `store`, `clock` and `stats` (refusals are counted there; may be null)
  // must outlive the service. `authorization` decides who is an operator.
  DiagnosticsService(const store::SeriesStore& store, const Clock& clock, int64_t stale_after_nanos,
                     std::shared_ptr<const Authorization> authorization,
                     IngestStats* stats = nullptr)
      : store_(store),
        clock_(clock),
        stale_after_nanos_(stale_after_nanos),
        authorization_(std::move(authorization)),
        stats_(stats) {}
  // Borrowed; must outlive the service. Null: no detectors.
  void SetFindingsProvider(const detectors::FindingsProvider* findings) { findings_ = findings; }
  // Borrowed; must outlive the service. Null: no topology.
  void SetTopologyProvider(const detectors::TopologyProvider* topology) { topology_ = topology; }
  // Borrowed; must outlive the service. Null: StartJob/EndJob/ListJobs answer UNIMPLEMENTED.
  void SetJobRegistry(JobRegistry* jobs) { jobs_ = jobs; }
  // Borrowed; must outlive the service. Null: Diagnose answers without traffic.
  void SetTrafficProvider(const detectors::TrafficProvider* traffic) { traffic_ = traffic; }

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
  grpc::ServerUnaryReactor* GetTopology(grpc::CallbackServerContext* context,
                                        const v1::GetTopologyRequest* request,
                                        v1::GetTopologyResponse* response) override;
  grpc::ServerUnaryReactor* StartJob(grpc::CallbackServerContext* context,
                                     const v1::StartJobRequest* request,
                                     v1::Job* response) override;
  grpc::ServerUnaryReactor* EndJob(grpc::CallbackServerContext* context,
                                   const v1::EndJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;

 private:
  // The one authorization check, first thing in every method: null when the caller is an
  // operator (or the transport is plaintext), else a reactor already finished with
  // PERMISSION_DENIED, which the method returns.
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context) const;
  // Refuse(), then UNIMPLEMENTED with `missing` when the call's provider is not set (an empty
  // answer would read as "nothing found"); null when the call may go on.
  grpc::ServerUnaryReactor* RefuseOrLacking(grpc::CallbackServerContext* context, bool has_provider,
                                            const char* missing) const;
  void FillSummary(const store::NodeState::Summary& summary, v1::NodeSummary* out) const;
  const store::SeriesStore& store_;
  const Clock& clock_;
  const int64_t stale_after_nanos_;
  const detectors::FindingsProvider* findings_ = nullptr;
  const detectors::TopologyProvider* topology_ = nullptr;
  JobRegistry* jobs_ = nullptr;
  const detectors::TrafficProvider* traffic_ = nullptr;
  const std::shared_ptr<const Authorization> authorization_;
  IngestStats* const stats_;
};

}  // namespace fabricmon::aggregator
