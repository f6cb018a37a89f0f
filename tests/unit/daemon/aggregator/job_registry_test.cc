// Jobs: the registry's validation and bounds, its metrics, and the Diagnostics RPCs over a real
// (in-process) gRPC server: StartJob, ListJobs, Diagnose by job, EndJob.

#include "daemon/aggregator/job_registry.h"

#include <memory>

#include "daemon/aggregator/diagnostics_service.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "tests/testing/fake_clock.h"

namespace fabricmon::aggregator {
namespace {

using detectors::FindingsProvider;
using detectors::TrafficProvider;
using store::SeriesStore;
using store::StoreOptions;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::StartJobRequest Request(const std::string& name, std::vector<std::string> nodes) {
  v1::StartJobRequest request;
  request.set_name(name);
  for (std::string& node : nodes) request.add_nodes(std::move(node));
  return request;
}

std::vector<std::string> Nodes(const v1::Job& job) {
  return {job.nodes().begin(), job.nodes().end()};
}

TEST(JobRegistryTest, StartsListsFindsAndEndsJobs) {
  fabricmon::testing::FakeClock clock;
  JobRegistry jobs(clock);
  auto started = jobs.Start(Request("1234", {"gpu002", "gpu001", "gpu002"}), "CN=ops");
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_THAT(Nodes(*started), ElementsAre("gpu001", "gpu002")) << "sorted and distinct";
  EXPECT_EQ(started->started_unix_nanos(), clock.NowUnixNanos());
  EXPECT_EQ(started->started_by(), "CN=ops");
  ASSERT_TRUE(jobs.Start(Request("train-7", {"gpu003"}), "cli").ok());
  ASSERT_EQ(jobs.List().size(), 2u);
  EXPECT_EQ(jobs.List()[0].name(), "1234");
  ASSERT_TRUE(jobs.Find("train-7").has_value());
  EXPECT_FALSE(jobs.Find("nope").has_value());

  // Started again (requeued): the node set is replaced, not merged.
  clock.AdvanceMillis(5000);
  auto again = jobs.Start(Request("1234", {"gpu009"}), "CN=ops");
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(Nodes(*jobs.Find("1234")), ElementsAre("gpu009"));
  EXPECT_EQ(jobs.Find("1234")->started_unix_nanos(), clock.NowUnixNanos());

  auto ended = jobs.End("1234");
  ASSERT_TRUE(ended.ok());
  EXPECT_THAT(Nodes(*ended), ElementsAre("gpu009"));
  EXPECT_EQ(jobs.End("1234").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(jobs.List().size(), 1u);
}

TEST(JobRegistryTest, RefusesBadNamesAndNodes) {
  fabricmon::testing::FakeClock clock;
  JobRegistry jobs(clock);
  for (const std::string& name : {std::string(), std::string(129, 'a'), std::string("a b"),
                                  std::string("a/b"), std::string("job\n"), std::string("é")}) {
    EXPECT_EQ(jobs.Start(Request(name, {"n1"}), "").status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_TRUE(jobs.Start(Request("1234_7+0:a@b.c-d", {"n1"}), "").ok());
  EXPECT_EQ(jobs.Start(Request("j", {}), "").status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& node : {std::string(), std::string(254, 'a'), std::string("gpu[1-2]"),
                                  std::string("n1,n2"), std::string("n 1")}) {
    EXPECT_EQ(jobs.Start(Request("j", {"ok1", node}), "").status().code(),
              absl::StatusCode::kInvalidArgument)
        << node;
  }
  v1::StartJobRequest bad_source = Request("j", {"n1"});
  bad_source.set_source("slurm prolog");
  EXPECT_EQ(jobs.Start(bad_source, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(jobs.List().size(), 1u) << "nothing refused was registered";
}

TEST(JobRegistryTest, StaysWithinItsBounds) {
  fabricmon::testing::FakeClock clock;
  JobRegistry jobs(clock, JobLimits{/*max_jobs=*/2, /*max_nodes_per_job=*/3,
                                    /*max_memberships=*/5});
  EXPECT_EQ(jobs.Start(Request("big", {"a", "b", "c", "d"}), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(jobs.Start(Request("j1", {"a", "b", "c"}), "").ok());
  ASSERT_TRUE(jobs.Start(Request("j2", {"a", "b"}), "").ok());
  auto third = jobs.Start(Request("j3", {"a"}), "");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("fabricmon job end"));
  // Replacing j2 by 3 nodes would hold 6 memberships: refused, j2 unchanged.
  EXPECT_EQ(jobs.Start(Request("j2", {"x", "y", "z"}), "").status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Nodes(*jobs.Find("j2")), ElementsAre("a", "b"));
  // Ending one makes room again.
  ASSERT_TRUE(jobs.End("j1").ok());
  EXPECT_TRUE(jobs.Start(Request("j3", {"a", "b", "c"}), "").ok());
}

TEST(JobRegistryTest, ExportsMembershipForQueries) {
  fabricmon::testing::FakeClock clock;
  JobRegistry jobs(clock);
  ASSERT_TRUE(jobs.Start(Request("j1", {"gpu001", "gpu002"}), "").ok());
  std::map<std::string, prometheus::MetricFamily> families;
  for (auto& family : jobs.Collect()) families[family.name] = family;
  ASSERT_EQ(families.count("fabricmon_jobs"), 1u);
  EXPECT_EQ(families["fabricmon_jobs"].metric[0].gauge.value, 1);
  const auto& members = families["fabricmon_job_node_info"].metric;
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[1].label[0].name, "job_name");
  EXPECT_EQ(members[1].label[0].value, "j1");
  EXPECT_EQ(members[1].label[1].value, "gpu002");
  EXPECT_EQ(members[1].gauge.value, 1);
  EXPECT_DOUBLE_EQ(families["fabricmon_job_start_time_seconds"].metric[0].gauge.value,
                   static_cast<double>(clock.NowUnixNanos()) / 1e9);
  ASSERT_TRUE(jobs.End("j1").ok());
  for (auto& family : jobs.Collect()) {
    if (family.name == "fabricmon_job_node_info") {
      EXPECT_TRUE(family.metric.empty());
    }
  }
}

// Diagnose answers with what it was given: the nodes it was asked about (recorded).
class RecordingFindings final : public FindingsProvider {
 public:
  std::vector<v1::Finding> Findings(bool, const std::string&) const override { return {}; }
  v1::DiagnoseResponse Diagnose(const std::vector<std::string>& nodes) const override {
    asked = nodes;
    v1::DiagnoseResponse response;
    response.set_verdict("fine");
    return response;
  }
  std::vector<v1::Finding> FindingsOfNode(const std::string&) const override { return {}; }
  mutable std::vector<std::string> asked;
};

class FixedTraffic final : public TrafficProvider {
 public:
  std::vector<v1::NodeTraffic> Traffic(const std::vector<std::string>& nodes) const override {
    std::vector<v1::NodeTraffic> out;
    for (const std::string& node : nodes) {
      out.emplace_back().set_node(node);
      out.back().set_rdma_bytes_per_second(1e9);
    }
    return out;
  }
};

TEST(JobServiceTest, JobsOverTheDiagnosticsService) {
  fabricmon::testing::FakeClock clock;
  SeriesStore store{StoreOptions{}};
  JobRegistry jobs(clock);
  RecordingFindings findings;
  FixedTraffic traffic;
  DiagnosticsService service(store, clock, 30'000'000'000, Authorization::Empty(true));
  service.SetFindingsProvider(&findings);
  service.SetJobRegistry(&jobs);
  service.SetTrafficProvider(&traffic);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::Diagnostics::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  auto call = [](auto method) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return method(&context);
  };

  v1::Job job;
  grpc::Status status = call([&](grpc::ClientContext* c) {
    return stub->StartJob(c, Request("train", {"n2", "n1"}), &job);
  });
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(job.started_by(), "plaintext caller");
  status = call(
      [&](grpc::ClientContext* c) { return stub->StartJob(c, Request("bad name", {"n1"}), &job); });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::ListJobsResponse listed;
  ASSERT_TRUE(call([&](grpc::ClientContext* c) { return stub->ListJobs(c, {}, &listed); }).ok());
  ASSERT_EQ(listed.jobs_size(), 1);

  v1::DiagnoseRequest by_job;
  by_job.set_job("train");
  v1::DiagnoseResponse diagnosed;
  status = call([&](grpc::ClientContext* c) { return stub->Diagnose(c, by_job, &diagnosed); });
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(findings.asked, ElementsAre("n1", "n2"));
  EXPECT_EQ(diagnosed.job().name(), "train");
  ASSERT_EQ(diagnosed.traffic_size(), 2);
  EXPECT_EQ(diagnosed.traffic(1).node(), "n2");

  by_job.set_job("unknown");
  status = call([&](grpc::ClientContext* c) { return stub->Diagnose(c, by_job, &diagnosed); });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  by_job.set_job("train");
  by_job.add_nodes("n3");
  status = call([&](grpc::ClientContext* c) { return stub->Diagnose(c, by_job, &diagnosed); });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "nodes or a job";

  v1::EndJobRequest end;
  end.set_name("train");
  ASSERT_TRUE(call([&](grpc::ClientContext* c) { return stub->EndJob(c, end, &job); }).ok());
  EXPECT_EQ(call([&](grpc::ClientContext* c) { return stub->EndJob(c, end, &job); }).error_code(),
            grpc::StatusCode::NOT_FOUND);
  server->Shutdown();
}

TEST(JobServiceTest, WithoutARegistryJobsAreUnimplemented) {
  fabricmon::testing::FakeClock clock;
  SeriesStore store{StoreOptions{}};
  DiagnosticsService service(store, clock, 30'000'000'000, Authorization::Empty(true));
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::Diagnostics::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  grpc::ClientContext context;
  v1::ListJobsResponse listed;
  EXPECT_EQ(stub->ListJobs(&context, {}, &listed).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  server->Shutdown();
}

}  // namespace
}  // namespace fabricmon::aggregator
