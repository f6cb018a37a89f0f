#pragma once

// Diagnostics gRPC service for the `fabricmon` CLI: nodes, their inventory and findings,
// Diagnose, the fabric topology, and jobs (job_registry.h). Findings come from a FindingsProvider and the topology from a
// TopologyProvider (both the detection engine); without one, its RPCs answer UNIMPLEMENTED rather
// than an empty (and misleading) "nothing found".
//
// Only operators may call it (authorization.h): every method starts with Refuse(), which answers
// PERMISSION_DENIED naming the refused identity and the config field that grants the role.

#include "daemon/aggregator/authorization.h"
#include "daemon/aggregator/ingest_stats.h"
#include "daemon/aggregator/job_registry.h"
#include "daemon/aggregator/series_store.h"
#include "daemon/common/clock.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"

namespace fabricmon::aggregator {

// Implemented by the detection engine (daemon/detectors), which depends on this library, not
// the other way round. Thread-safe.
class FindingsProvider {
 public:
  virtual ~FindingsProvider() = default;
  // Active findings, plus recently cleared ones if `include_cleared`; filtered by kind if set.
  virtual std::vector<v1::Finding> Findings(bool include_cleared,
                                            const std::string& kind) const = 0;
  virtual v1::DiagnoseResponse Diagnose(const std::vector<std::string>& nodes) const = 0;
  // Active findings whose subject is on `node`.
  virtual std::vector<v1::Finding> FindingsOfNode(const std::string& node) const = 0;
};

// The cables the detectors work with. Implemented by the detection engine. Thread-safe.
class TopologyProvider {
 public:
  virtual ~TopologyProvider() = default;
  virtual v1::GetTopologyResponse GetTopology() const = 0;
};

// Each node's current traffic (RDMA, kernel, wait/pause, NVLink errors, GPU), for Diagnose's
// side-by-side view of a job. Implemented by the detectors. Thread-safe.
class TrafficProvider {
 public:
  virtual ~TrafficProvider() = default;
  // One entry per node of `nodes` the store knows, in the order given.
  virtual std::vector<v1::NodeTraffic> Traffic(const std::vector<std::string>& nodes) const = 0;
};

class DiagnosticsService final : public v1::Diagnostics::CallbackService {
 public:
  // Keeps references; `store`, `clock` and `stats` (refusals are counted there; may be null)
  // must outlive the service. `authorization` decides who is an operator.
  DiagnosticsService(const SeriesStore& store, const Clock& clock, int64_t stale_after_nanos,
                     std::shared_ptr<const Authorization> authorization,
                     IngestStats* stats = nullptr)
      : store_(store),
        clock_(clock),
        stale_after_nanos_(stale_after_nanos),
        authorization_(std::move(authorization)),
        stats_(stats) {}
  // Borrowed; must outlive the service. Null: no detectors.
  void SetFindingsProvider(const FindingsProvider* findings) { findings_ = findings; }
  // Borrowed; must outlive the service. Null: no topology.
  void SetTopologyProvider(const TopologyProvider* topology) { topology_ = topology; }
  // Borrowed; must outlive the service. Null: StartJob/EndJob/ListJobs answer UNIMPLEMENTED.
  void SetJobRegistry(JobRegistry* jobs) { jobs_ = jobs; }
  // Borrowed; must outlive the service. Null: Diagnose answers without traffic.
  void SetTrafficProvider(const TrafficProvider* traffic) { traffic_ = traffic; }

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
  void FillSummary(const NodeState::Summary& summary, v1::NodeSummary* out) const;
  const SeriesStore& store_;
  const Clock& clock_;
  const int64_t stale_after_nanos_;
  const FindingsProvider* findings_ = nullptr;
  const TopologyProvider* topology_ = nullptr;
  JobRegistry* jobs_ = nullptr;
  const TrafficProvider* traffic_ = nullptr;
  const std::shared_ptr<const Authorization> authorization_;
  IngestStats* const stats_;
};

}  // namespace fabricmon::aggregator
