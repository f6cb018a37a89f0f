// The Slurm side of `--slurm_job`: `scontrol show job` records as Slurm 22.05 and 23.11/24.05
// print them for multi-node, heterogeneous, array and pending jobs; `scontrol show hostnames`;
// and the command runner, against a stand-in scontrol script.

#include "daemon/cli/slurm.h"

#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Slurm 22.05 layout (as Debian bookworm's 22.05.8 prints it), a running 6-node batch job.
constexpr char kSlurm2205Running[] = R"(JobId=1234 JobName=train-llm
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=4294901758 Nice=0 Account=ml QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:12:05 TimeLimit=2-00:00:00 TimeMin=N/A
   SubmitTime=2024-03-01T09:58:41 EligibleTime=2024-03-01T09:58:41
   AccrueTime=2024-03-01T09:58:41
   StartTime=2024-03-01T09:58:42 EndTime=2024-03-03T09:58:42 Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2024-03-01T09:58:42 Scheduler=Main
   Partition=gpu AllocNode:Sid=login1:40213
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=gpu[001-004,010],login1
   BatchHost=gpu001
   NumNodes=6 NumCPUs=384 NumTasks=48 CPUs/Task=8 ReqB:S:C:T=0:0:*:*
   TRES=cpu=384,mem=3000G,node=6,billing=384,gres/gpu=48
   Socks/Node=* NtasksPerN:B:S:C=8:0:*:* CoreSpec=*
   MinCPUsNode=64 MinMemoryNode=500G MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null)
   Command=/home/alice/train.sh
   WorkDir=/home/alice
   StdErr=/home/alice/slurm-1234.out
   StdIn=/dev/null
   StdOut=/home/alice/slurm-1234.out
   Power=
   TresPerNode=gres:gpu:8

)";

// Slurm 23.11 / 24.05: new fields (ResvPorts, SchedNodeList for pending, MemPerTres...), the
// same NodeList line. Here the job is still CONFIGURING (what a PrologSlurmctld sees).
constexpr char kSlurm2311Configuring[] = R"(JobId=88231 JobName=allreduce-bench
   UserId=bob(1001) GroupId=bob(1001) MCS_label=N/A
   Priority=1 Nice=0 Account=(null) QOS=normal
   JobState=CONFIGURING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:00:01 TimeLimit=01:00:00 TimeMin=N/A
   SubmitTime=2025-02-11T14:02:10 EligibleTime=2025-02-11T14:02:10
   AccrueTime=2025-02-11T14:02:10
   StartTime=2025-02-11T14:02:11 EndTime=2025-02-11T15:02:11 Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2025-02-11T14:02:11 Scheduler=Main
   Partition=h100 AllocNode:Sid=login02:777
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=dgx-a[07-08],dgx-b[1-2]
   BatchHost=dgx-a07
   NumNodes=4 NumCPUs=8 NumTasks=4 CPUs/Task=2 ReqB:S:C:T=0:0:*:*
   ReqTRES=cpu=4,mem=16G,node=4,billing=4
   AllocTRES=cpu=8,mem=16G,node=4,billing=8
   Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=*
   MinCPUsNode=2 MinMemoryCPU=2G MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=(null)
   WorkDir=/home/bob
   StdErr=/home/bob/slurm-88231.out
   StdIn=/dev/null
   StdOut=/home/bob/slurm-88231.out
   ResvPorts=(null)
)";

// Captured from Debian's slurm-wlm 22.05.8 (slurmctld and two slurmd on one machine, as
// tests/integration/slurm_test.py runs them; only the working directory renamed):
// `sbatch -N2 --wrap 'sleep 60'`, trailing blank lines included.
constexpr char kCaptured2205TwoNodes[] =
    "JobId=1 JobName=wrap\n"
    "   UserId=root(0) GroupId=root(0) MCS_label=N/A\n"
    "   Priority=4294901759 Nice=0 Account=(null) QOS=(null)\n"
    "   JobState=RUNNING Reason=None Dependency=(null)\n"
    "   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
    "   RunTime=00:00:02 TimeLimit=UNLIMITED TimeMin=N/A\n"
    "   SubmitTime=2026-11-26T04:16:36 EligibleTime=2026-11-26T04:16:36\n"
    "   AccrueTime=2026-11-26T04:16:36\n"
    "   StartTime=2026-11-26T04:16:37 EndTime=Unknown Deadline=N/A\n"
    "   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-26T04:16:37 Scheduler=Main\n"
    "   Partition=debug AllocNode:Sid=localhost:10607\n"
    "   ReqNodeList=(null) ExcNodeList=(null)\n"
    "   NodeList=fm[1-2]\n"
    "   BatchHost=fm1\n"
    "   NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*\n"
    "   TRES=cpu=2,node=2,billing=2\n"
    "   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n"
    "   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0\n"
    "   Features=(null) DelayBoot=00:00:00\n"
    "   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)\n"
    "   Command=(null)\n"
    "   WorkDir=/home/alice\n"
    "   StdErr=/home/alice/job-1.out\n"
    "   StdIn=/dev/null\n"
    "   StdOut=/home/alice/job-1.out\n"
    "   Power=\n"
    "   \n"
    "\n";

TEST(ScontrolShowJobTest, ReadsARealTwoNodeJob) {
  auto records = ParseScontrolShowJob(kCaptured2205TwoNodes);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].job_id, "1");
  EXPECT_EQ((*records)[0].state, "RUNNING");
  EXPECT_EQ((*records)[0].node_list, "fm[1-2]");
}

TEST(ScontrolShowJobTest, ReadsTheNodeListOfARunning2205Job) {
  auto records = ParseScontrolShowJob(kSlurm2205Running);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].job_id, "1234");
  EXPECT_EQ((*records)[0].state, "RUNNING");
  EXPECT_EQ((*records)[0].node_list, "gpu[001-004,010],login1");
}

TEST(ScontrolShowJobTest, ReadsA2311JobInItsPrologState) {
  auto records = ParseScontrolShowJob(kSlurm2311Configuring);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].state, "CONFIGURING");
  EXPECT_EQ((*records)[0].node_list, "dgx-a[07-08],dgx-b[1-2]");
}

// A heterogeneous job prints one record per component; every component's nodes count.
TEST(ScontrolShowJobTest, HeterogeneousJobHasOneRecordPerComponent) {
  const std::string text = R"(JobId=500 HetJobId=500 HetJobOffset=0 JobName=het
   JobState=RUNNING Reason=None Dependency=(null)
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=cpu[01-02]
   NumNodes=2 NumCPUs=2

JobId=501 HetJobId=500 HetJobOffset=1 JobName=het
   JobState=RUNNING Reason=None Dependency=(null)
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=gpu[005-006]
   NumNodes=2 NumCPUs=2
)";
  auto records = ParseScontrolShowJob(text);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].node_list, "cpu[01-02]");
  EXPECT_EQ((*records)[1].job_id, "501");
  EXPECT_EQ((*records)[1].node_list, "gpu[005-006]");
}

TEST(ScontrolShowJobTest, PendingJobHoldsNoNodes) {
  const std::string text = R"(JobId=77 JobName=wait
   JobState=PENDING Reason=Resources Dependency=(null)
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=(null)
   SchedNodeList=gpu[001-002]
)";
  auto records = ParseScontrolShowJob(text);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ((*records)[0].state, "PENDING");
  EXPECT_EQ((*records)[0].node_list, "");
}

// A user names the job "x NodeList=evil[1-9]" (or puts it in a comment): the parser reads
// NodeList only as the first field of a line, so the name cannot add nodes.
TEST(ScontrolShowJobTest, AJobNameCannotInjectNodes) {
  const std::string text = R"(JobId=9 JobName=x NodeList=evil[1-9]
   JobState=RUNNING Reason=None Dependency=(null)
   Comment=NodeList=evil2
   NodeList=gpu001
)";
  auto records = ParseScontrolShowJob(text);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ((*records)[0].node_list, "gpu001");
}

TEST(ScontrolShowJobTest, RefusesWhatIsNotARecord) {
  EXPECT_FALSE(ParseScontrolShowJob("").ok());
  EXPECT_FALSE(ParseScontrolShowJob("slurm_load_jobs error: Invalid job id specified\n").ok());
  // --oneliner output has NodeList mid-line: refused, not guessed.
  EXPECT_FALSE(
      ParseScontrolShowJob("JobId=1 JobName=a JobState=RUNNING NodeList=gpu1 BatchHost=gpu1\n")
          .ok());
  // Two NodeList lines in one record: ambiguous.
  EXPECT_FALSE(ParseScontrolShowJob("JobId=1\n   NodeList=a1\n   NodeList=a2\n").ok());
  // A NodeList with characters no hostlist has (a shell metacharacter).
  auto bad = ParseScontrolShowJob("JobId=1\n   NodeList=a1;rm\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("line 2"));
  EXPECT_FALSE(ParseScontrolShowJob("JobId=1x\n   NodeList=a1\n").ok());
}

TEST(SlurmJobIdTest, AcceptsPlainArrayAndHetIds) {
  EXPECT_TRUE(ValidateSlurmJobId("1234").ok());
  EXPECT_TRUE(ValidateSlurmJobId("1234_7").ok());
  EXPECT_TRUE(ValidateSlurmJobId("1234+1").ok());
  for (const char* bad :
       {"", "abc", "12 34", "1234_", "_7", "1;id", "-1", "1234_7_8", "123456789012345678901"}) {
    EXPECT_FALSE(ValidateSlurmJobId(bad).ok()) << bad;
  }
}

TEST(ScontrolShowHostnamesTest, OneNamePerLine) {
  auto hosts = ParseHostnames("gpu001\ngpu002\ngpu003\ngpu004\ngpu010\nlogin1\n");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre("gpu001", "gpu002", "gpu003", "gpu004", "gpu010", "login1"));
  EXPECT_FALSE(ParseHostnames("gpu001\ngpu 002\n").ok());
  EXPECT_FALSE(ParseHostnames("gpu001\n$(reboot)\n").ok());
  EXPECT_FALSE(ParseHostnames(std::string(254, 'a')).ok());
}

TEST(RunCommandTest, ReturnsStdoutAndFailsLoudly) {
  auto out = RunCommand({"sh", "-c", "echo hello; echo noise >&2"}, std::chrono::seconds(10));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "hello\n");
  auto failed =
      RunCommand({"sh", "-c", "echo 'Invalid job id' >&2; exit 1"}, std::chrono::seconds(10));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("Invalid job id"));
  EXPECT_FALSE(RunCommand({"/nonexistent/scontrol"}, std::chrono::seconds(10)).ok());
  // More output than allowed: an error, not a truncated answer.
  auto flood = RunCommand({"sh", "-c", "head -c 100000 /dev/zero"}, std::chrono::seconds(10), 1000);
  ASSERT_FALSE(flood.ok());
  EXPECT_THAT(std::string(flood.status().message()), HasSubstr("more than 1000 bytes"));
  auto hung = RunCommand({"sleep", "30"}, std::chrono::milliseconds(200));
  ASSERT_FALSE(hung.ok());
  EXPECT_EQ(hung.status().code(), absl::StatusCode::kDeadlineExceeded);
}

// ResolveSlurmJob end to end against a stand-in scontrol that answers as Slurm 22.05 does and
// expands the hostlist; it also records its arguments (no shell in between).
TEST(ResolveSlurmJobTest, AsksScontrolForTheJobThenItsHostnames) {
  fabricmon::testing::TempTree tree;
  tree.WriteFile("job.txt", kSlurm2205Running);
  const std::string job_file = tree.root() + "/job.txt";
  const std::string scontrol = tree.root() + "/scontrol";
  tree.WriteFile(
      "scontrol",
      absl::StrCat(
          "#!/bin/sh\n"
          "echo \"$@\" >> ",
          tree.root(),
          "/calls\n"
          "if [ \"$1 $2\" = \"show job\" ]; then [ \"$3\" = 1234 ] || { echo 'slurm_load_jobs "
          "error: "
          "Invalid job id specified' >&2; exit 1; }; cat ",
          job_file,
          "; exit 0; fi\n"
          "if [ \"$1 $2\" = \"show hostnames\" ] && [ \"$3\" = 'gpu[001-004,010],login1' ]; then\n"
          "  printf 'gpu001\\ngpu002\\ngpu003\\ngpu004\\ngpu010\\nlogin1\\n'; exit 0; fi\n"
          "exit 2\n"));
  ASSERT_EQ(chmod(scontrol.c_str(), 0755), 0);
  auto nodes = ResolveSlurmJob("1234", scontrol, std::chrono::seconds(10));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_THAT(*nodes, ElementsAre("gpu001", "gpu002", "gpu003", "gpu004", "gpu010", "login1"));
  std::ifstream calls(tree.root() + "/calls");
  const std::string called((std::istreambuf_iterator<char>(calls)),
                           std::istreambuf_iterator<char>());
  EXPECT_EQ(called, "show job 1234\nshow hostnames gpu[001-004,010],login1\n");
  auto unknown = ResolveSlurmJob("999", scontrol, std::chrono::seconds(10));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("Invalid job id"));
  EXPECT_FALSE(ResolveSlurmJob("1234;reboot", scontrol, std::chrono::seconds(10)).ok());
}

}  // namespace
}  // namespace fabricmon::cli
