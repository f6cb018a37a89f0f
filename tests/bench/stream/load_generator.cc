// fabricmon_load_generator: N simulated agents against one fabricmon-aggregator process on
// loopback, measuring what the aggregator costs per sample.
//
// Each simulated agent is the production streaming stack, unchanged: a SeriesTable, a
// CycleBuilder, a ReplayBuffer and a StreamClient (its own gRPC channel, so its own HTTP/2
// connection), fed with one DGX node's series (the real ib_sysfs collector's output on the
// gpud-h100 sysfs capture, about 500 series) whose counters move like real ones (node_model.h).
// Only the collector is replaced: every tick each agent produces one cycle whose values advance by
// one nominal second of counter time, so the wire sees realistic deltas at any tick rate.
//
// The aggregator runs as a separate process (the real fabricmon-aggregator binary), so its CPU
// time (its threads' /proc/PID/task/TID/schedstat, nanoseconds) and memory (/proc/PID/status) are
// its own. Reported:
//   * ingest: samples stored per second and per aggregator CPU-second (its /metrics counter
//     fabricmon_aggregator_samples_total over a measurement window),
//   * wire bytes per sample: fabricmon_aggregator_received_bytes_total / samples_total over the
//     window (protobuf bytes, steady state, declarations excluded),
//   * memory per series: aggregator RSS growth from before the first agent to after every series
//     is declared and filled, divided by the series count,
//   * reconnect: the aggregator is stopped (SIGTERM) and restarted on the same port; time until
//     every agent has a new established stream.
//
// Example (about 40 s on a 2-core machine):
//   fabricmon_load_generator --agents=32 --interval_ms=100 --duration_s=15

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/common/logging.h"
#include "tests/bench/stream/loadgen_support.h"
#include "tests/bench/stream/node_model.h"

ABSL_FLAG(std::string, aggregator_binary, FABRICMON_AGGREGATOR_BINARY,
          "fabricmon-aggregator to start (a separate process).");
ABSL_FLAG(int, agents, 32, "Simulated agents (nodes), each with its own gRPC connection.");
ABSL_FLAG(int, interval_ms, 100,
          "Tick: every agent sends one cycle per tick (each cycle = 1 s of counter motion).");
ABSL_FLAG(std::string, profile, "mixed", "Counter motion: idle, mixed or busy.");
ABSL_FLAG(std::string, sysfs_root, FABRICMON_DEFAULT_SYSFS_ROOT,
          "sysfs tree whose ib_sysfs series each node has (default: the DGX H100 capture).");
ABSL_FLAG(int, synthetic_series, 0,
          "If > 0, use this many synthetic ib_sysfs-shaped series per node instead of the tree.");
ABSL_FLAG(int, warmup_s, 5, "Seconds of load before the measurement window.");
ABSL_FLAG(int, duration_s, 15, "Measurement window, seconds.");
ABSL_FLAG(bool, restart, true, "Measure reconnection after an aggregator restart.");
ABSL_FLAG(int, restart_downtime_ms, 2000, "How long the aggregator stays down.");
ABSL_FLAG(int, initial_backoff_ms, 500, "StreamClient initial reconnect backoff (agent default).");
ABSL_FLAG(int, max_backoff_ms, 30000, "StreamClient max reconnect backoff (agent default).");
ABSL_FLAG(int, coalesce_ms, 200,
          "The agents' stream_coalesce_ms (agent default 200; 0: every batch written at once).");
ABSL_FLAG(bool, grpc_default_channel_backoff, false,
          "Leave the channel's connection backoff at gRPC's defaults (1 s x1.6 up to 120 s) "
          "instead of bounding it by the StreamClient backoff as fabricmon-agent does.");
ABSL_FLAG(int64_t, replay_buffer_bytes, 16 << 20, "Replay buffer bound per simulated agent.");
ABSL_FLAG(std::string, aggregator_config, "",
          "AggregatorConfig text added to the aggregator's (e.g. a recording { ... } block).");
ABSL_FLAG(int, aggregator_cpu, -1, "If >= 0, pin the aggregator to this CPU (others: the rest).");

namespace fabricmon::bench {
namespace {

size_t ConnectedCount(const std::vector<std::unique_ptr<SimAgent>>& agents) {
  size_t n = 0;
  for (const auto& agent : agents) {
    n += agent->stats().connected ? 1 : 0;
  }
  return n;
}

int Run() {
  absl::StatusOr<NodeShape> shape =
      NodeShapeFromFlags(absl::GetFlag(FLAGS_profile), absl::GetFlag(FLAGS_synthetic_series),
                         absl::GetFlag(FLAGS_sysfs_root));
  if (!shape.ok()) {
    std::cerr << shape.status().message() << "\n";
    return 2;
  }
  const Profile profile = shape->profile;
  std::vector<NodeSeries> series = std::move(shape->series);
  const int agent_count = absl::GetFlag(FLAGS_agents);
  const int interval_ms = absl::GetFlag(FLAGS_interval_ms);
  const size_t total_series = series.size() * static_cast<size_t>(agent_count);

  char workdir_template[] = "/tmp/fabricmon-loadgen-XXXXXX";
  if (mkdtemp(workdir_template) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::string workdir = workdir_template;
  const int aggregator_cpu = absl::GetFlag(FLAGS_aggregator_cpu);
  if (aggregator_cpu >= 0) {
    // The generator (and its gRPC threads) on every other CPU.
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu = 0; cpu < CPU_SETSIZE && cpu < static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
         ++cpu) {
      if (cpu != aggregator_cpu) {
        CPU_SET(cpu, &set);
      }
    }
    sched_setaffinity(0, sizeof(set), &set);
  }
  AggregatorProcess aggregator(absl::GetFlag(FLAGS_aggregator_binary), workdir, aggregator_cpu,
                               absl::GetFlag(FLAGS_aggregator_config), total_series);
  if (!aggregator.Start(0)) {
    std::cerr << "aggregator did not start (binary " << absl::GetFlag(FLAGS_aggregator_binary)
              << ")\n";
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const uint64_t rss_before = aggregator.StatusBytes("VmRSS:");
  const std::string target = absl::StrCat("127.0.0.1:", aggregator.grpc_port());

  std::printf("machine: %ld online CPUs; aggregator pid CPU pinning: %s\n",
              sysconf(_SC_NPROCESSORS_ONLN),
              aggregator_cpu >= 0 ? absl::StrCat("cpu ", aggregator_cpu).c_str() : "none");
  std::printf(
      "load: %d agents x %zu series (%s profile), one cycle per agent every %d ms = %.0f "
      "samples/s offered\n",
      agent_count, series.size(), absl::GetFlag(FLAGS_profile).c_str(), interval_ms,
      static_cast<double>(total_series) * 1000.0 / interval_ms);

  SimAgentOptions sim;
  sim.target = target;
  sim.replay_buffer_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_replay_buffer_bytes));
  sim.initial_backoff = absl::Milliseconds(absl::GetFlag(FLAGS_initial_backoff_ms));
  sim.max_backoff = absl::Milliseconds(absl::GetFlag(FLAGS_max_backoff_ms));
  sim.coalesce = absl::Milliseconds(absl::GetFlag(FLAGS_coalesce_ms));
  sim.interval = absl::Milliseconds(absl::GetFlag(FLAGS_interval_ms));
  sim.grpc_default_channel_backoff = absl::GetFlag(FLAGS_grpc_default_channel_backoff);
  std::vector<std::unique_ptr<SimAgent>> agents;
  std::vector<SimAgent*> ticked;
  for (int i = 0; i < agent_count; ++i) {
    agents.push_back(std::make_unique<SimAgent>(i, series, profile, sim));
    ticked.push_back(agents.back().get());
  }
  for (auto& agent : agents) {
    agent->Start();
  }
  if (!WaitUntil([&] { return ConnectedCount(agents) == agents.size(); }, 30)) {
    std::cerr << "only " << ConnectedCount(agents) << " of " << agents.size()
              << " agents connected within 30 s\n";
    return 1;
  }
  Generator generator(ticked, absl::Milliseconds(interval_ms));
  generator.Start();
  std::this_thread::sleep_for(std::chrono::seconds(absl::GetFlag(FLAGS_warmup_s)));

  // Measurement window. Scrapes cost aggregator CPU: read its CPU time after the first scrape
  // and before the last one, so the window holds ingest only. The counters are read early in
  // each scrape, so the samples stored between the two reads span the time between the two
  // scrapes' starts, not the window (at 1,000 agents a scrape lasts seconds: dividing by the
  // window counted the first scrape's samples without its time or CPU). The stored rate is
  // taken over the scrapes' starts; the CPU per sample is that rate against the window's CPU.
  const auto s0 = Clock::now();
  const auto m0 = aggregator.Scrape();
  const CpuSnapshot cpu0 = aggregator.Cpu();
  const double self0 = SelfCpuSeconds();
  const uint64_t cycles0 = generator.cycles();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(absl::GetFlag(FLAGS_duration_s)));
  const double wall = SecondsSince(t0);
  const CpuSnapshot cpu1 = aggregator.Cpu();
  const double self1 = SelfCpuSeconds();
  const uint64_t cycles1 = generator.cycles();
  const double between_scrapes = SecondsSince(s0);
  const std::string text1 = aggregator.MetricsText();
  const auto m1 = ParseUnlabelled(text1);
  const uint64_t rss_after = aggregator.StatusBytes("VmRSS:");

  auto delta = [&](const char* name) {
    auto a = m0.find(name), b = m1.find(name);
    return (a == m0.end() || b == m1.end()) ? 0.0 : b->second - a->second;
  };
  // Stored over the window: the rate between the scrapes, times the window.
  const double scale = wall / std::max(wall, between_scrapes);
  const double samples = delta("fabricmon_aggregator_samples_total") * scale;
  const double bytes = delta("fabricmon_aggregator_received_bytes_total") * scale;
  const double batches = delta("fabricmon_aggregator_batches_total") * scale;
  const double agg_cpu = CpuSecondsBetween(cpu0, cpu1);
  const double offered =
      static_cast<double>(cycles1 - cycles0) * static_cast<double>(series.size());
  std::printf("\n== ingest (%.1f s window)\n", wall);
  std::printf("offered            %12.0f samples/s (generator overran its tick %llu times)\n",
              offered / wall, static_cast<unsigned long long>(generator.overruns()));
  std::printf("stored             %12.0f samples/s, %.0f batches/s\n", samples / wall,
              batches / wall);
  std::printf("aggregator CPU     %12.3f cores busy (%.2f CPU-s)\n", agg_cpu / wall, agg_cpu);
  if (agg_cpu > 0) {
    std::printf("per aggregator core %11.0f samples/s  (%.0f ns CPU per sample)\n",
                samples / agg_cpu, agg_cpu * 1e9 / std::max(1.0, samples));
  }
  std::printf("generator CPU      %12.3f cores busy (this process: %d agent stacks)\n",
              (self1 - self0) / wall, agent_count);
  // Every active finding costs each detector tick work of its own, so a figure is that of the
  // fabric it was measured on, which this line states (the mixed profile: a few bad links,
  // node_model.h).
  std::string by_kind;
  for (const auto& [kind, count] : SumOfFamilyBy(text1, "fabricmon_finding_active", "kind")) {
    absl::StrAppendFormat(&by_kind, "%s%s %.0f", by_kind.empty() ? "" : ", ", kind, count);
  }
  std::printf(
      "findings active    %12.0f at the window's end (sum of fabricmon_finding_active%s%s)\n",
      SumOfFamily(text1, "fabricmon_finding_active"), by_kind.empty() ? "" : ": ", by_kind.c_str());
  std::printf("\n== wire\n");
  std::printf("bytes per sample   %12.3f (received_bytes_total / samples_total, protobuf)\n",
              samples > 0 ? bytes / samples : 0.0);
  std::printf("bytes per batch    %12.1f (%zu samples per batch)\n",
              batches > 0 ? bytes / batches : 0.0, series.size());
  uint64_t agent_bytes = 0;
  uint64_t agent_batches = 0;
  uint64_t agent_coalesced = 0;
  for (const auto& agent : agents) {
    agent_bytes += agent->stats().bytes_sent;
    agent_batches += agent->stats().batches_sent;
    agent_coalesced += agent->stats().coalesced_batches;
  }
  std::printf("\n== memory\n");
  std::printf("aggregator RSS     %12.1f MiB before agents, %.1f MiB with %zu series\n",
              rss_before / 1048576.0, rss_after / 1048576.0, total_series);
  std::printf("per series         %12.0f bytes (RSS delta / series)\n",
              static_cast<double>(rss_after - rss_before) / static_cast<double>(total_series));

  int status = 0;
  if (absl::GetFlag(FLAGS_restart)) {
    std::vector<uint64_t> connects_before;
    for (const auto& agent : agents) {
      connects_before.push_back(agent->stats().connects);
    }
    const int port = aggregator.grpc_port();
    const auto kill_time = Clock::now();
    const double stop_s = aggregator.Stop();
    std::this_thread::sleep_for(
        std::chrono::milliseconds(absl::GetFlag(FLAGS_restart_downtime_ms)));
    if (!aggregator.Start(port)) {
      std::cerr << "aggregator did not restart on port " << port << "\n";
      return 1;
    }
    const auto listening = aggregator.listening_since();
    std::vector<double> reconnect(agents.size(), -1);
    const bool all = WaitUntil(
        [&] {
          bool done = true;
          for (size_t i = 0; i < agents.size(); ++i) {
            if (reconnect[i] < 0) {
              if (agents[i]->stats().connects > connects_before[i]) {
                reconnect[i] = std::chrono::duration<double>(Clock::now() - listening).count();
              } else {
                done = false;
              }
            }
          }
          return done;
        },
        180, 2);
    std::vector<double> got;
    for (double r : reconnect) {
      if (r >= 0) {
        got.push_back(r);
      }
    }
    std::printf("\n== restart (SIGTERM, %.2f s to exit, %d ms down, same port)\n", stop_s,
                absl::GetFlag(FLAGS_restart_downtime_ms));
    std::printf("reconnected        %zu of %zu agents%s\n", got.size(), agents.size(),
                all ? "" : " within 180 s  ** NOT ALL **");
    std::printf("after listening    p50 %.3f s, p90 %.3f s, max %.3f s\n", Percentile(got, 0.5),
                Percentile(got, 0.9), Percentile(got, 1.0));
    std::printf(
        "after stop signal  all within %.3f s\n",
        std::chrono::duration<double>(listening - kill_time).count() + Percentile(got, 1.0));
    status = all ? 0 : 1;
    // Data after the restart: everything unacknowledged was replayed.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const auto m2 = aggregator.Scrape();
    uint64_t replayed = 0, dropped = 0;
    for (const auto& agent : agents) {
      replayed += agent->stats().replayed_batches;
      dropped += agent->buffer().dropped_cycles();
    }
    auto value = [&](const char* name) {
      auto it = m2.find(name);
      return it == m2.end() ? 0.0 : it->second;
    };
    std::printf(
        "after restart      %.0f samples stored by the new process; agents replayed %llu "
        "batches, dropped %llu\n",
        value("fabricmon_aggregator_samples_total"), static_cast<unsigned long long>(replayed),
        static_cast<unsigned long long>(dropped));
  }
  std::printf("\nagent-side bytes sent (all streams, incl. declarations and hellos): %.1f MiB\n",
              agent_bytes / 1048576.0);
  std::printf(
      "agent batches held to go out in one message with the next (coalesce_ms %d): %llu of %llu\n",
      absl::GetFlag(FLAGS_coalesce_ms), static_cast<unsigned long long>(agent_coalesced),
      static_cast<unsigned long long>(agent_batches));

  generator.Stop();
  for (auto& agent : agents) {
    agent->Stop();
  }
  aggregator.Stop();
  std::string rm = "rm -rf '" + workdir + "'";
  (void)std::system(rm.c_str());  // best effort: only our own temp dir
  return status;
}

}  // namespace
}  // namespace fabricmon::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "N simulated agents (real StreamClient stacks) against a fabricmon-aggregator process; "
      "reports samples/s per aggregator core, wire bytes per sample, memory per series and "
      "reconnect time after an aggregator restart.");
  // As fabricmon-agent does: simulated agents cost what real ones cost. With absl's deadlock
  // detection on, a worker's thousand agent stacks made its lock graph the largest part of its
  // CPU (GraphCycles::GetId 21 % in perf) and an 8,192-node run stalled before every node sent.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::ParseCommandLine(argc, argv);
  fabricmon::SetMinLogLevel(fabricmon::LogLevel::kError);
  signal(SIGPIPE, SIG_IGN);
  return fabricmon::bench::Run();
}
