#pragma once

// `fabricmon --aggregator=a,b,c`: the same question to every aggregator shard at once, under one
// deadline, and the answers merged into one as a single aggregator would give it. A shard that
// did not answer is named, never silently left out (the caller prints which and exits 1).
//
// The merges are pure functions of the answers (unit-tested); one answer is returned as it is.
// Where shards overlap, which
// happens when an agent failed over and its former shard still remembers the node:
//  - nodes: one row per node, the shard where it is up (else the most recently seen);
//  - findings: one per finding id and subject, the most recently updated;
//  - diagnose: a node is unknown only if no shard knows it; verdicts of the shards that know
//    any of the nodes, each prefixed by its shard when there are several;
//  - topology: one row per cable (its two ends), switch and host counts over the union.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "fabricmon/v1/diagnostics.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace fabricmon::cli {

// "a:1,b:2" → {"a:1", "b:2"}; InvalidArgument for an empty list or entry, or a repeated one.
absl::StatusOr<std::vector<std::string>> SplitAggregators(const std::string& flag);

// One shard's answer.
template <typename Response>
struct ShardAnswer {
  std::string shard;  // its address
  grpc::Status status;
  Response response;  // meaningful when status.ok()
};

// Asks every stub (addresses[i] ↔ stubs[i]) in parallel, one thread each, every call bounded by
// `deadline`; returns when all have answered or failed, answers in the order of the stubs.
// `call` performs the RPC: (stub, context with the deadline set, response out) → status.
template <typename Response>
std::vector<ShardAnswer<Response>> AskEveryShard(
    const std::vector<std::string>& addresses,
    const std::vector<std::unique_ptr<v1::Diagnostics::Stub>>& stubs,
    std::chrono::system_clock::time_point deadline,
    const std::function<grpc::Status(v1::Diagnostics::Stub&, grpc::ClientContext&, Response*)>&
        call) {
  std::vector<ShardAnswer<Response>> answers(stubs.size());
  std::vector<std::thread> threads;
  threads.reserve(stubs.size());
  for (size_t i = 0; i < stubs.size(); ++i) {
    answers[i].shard = addresses[i];
    threads.emplace_back([&, i] {
      grpc::ClientContext context;
      context.set_deadline(deadline);
      answers[i].status = call(*stubs[i], context, &answers[i].response);
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  return answers;
}

v1::ListNodesResponse MergeNodes(const std::vector<const v1::ListNodesResponse*>& answers);
v1::ListFindingsResponse MergeFindings(const std::vector<const v1::ListFindingsResponse*>& answers);
// `shards` names each answer's shard (parallel to `answers`).
v1::DiagnoseResponse MergeDiagnose(const std::vector<const v1::DiagnoseResponse*>& answers,
                                   const std::vector<std::string>& shards,
                                   const std::vector<std::string>& asked_nodes);
v1::GetTopologyResponse MergeTopology(const std::vector<const v1::GetTopologyResponse*>& answers);

}  // namespace fabricmon::cli
