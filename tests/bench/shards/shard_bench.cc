// fabricmon_shard_bench: many simulated nodes spread over several fabricmon-aggregator shards by
// the agents' own rendezvous ranking, optionally remote-writing into one real VictoriaMetrics;
// what each shard costs, how fast a sample becomes queryable there, and how fast a dead shard's
// nodes move on.
//
// Every simulated node is the agent's streaming stack (loadgen_support.h: SeriesTable,
// CycleBuilder, ReplayBuffer, StreamClient on its own connection) given the whole shard list: the
// agent's AggregatorDirectory ranks the shards for the node's name and the StreamClient streams to
// its primary and fails over to the next in rank, exactly as fabricmon-agent does. The nodes run
// in --node_processes worker processes (NodeWorkers), as a fleet's agents are separate
// processes. The nodes' cycles are spread evenly over --interval_ms (a reduced rate: each cycle
// still carries one nominal second of counter motion). Reported, per shard and in total:
//   * ingest: samples stored per second (fabricmon_aggregator_samples_total between two
//     scrapes) against the shard process' own CPU (its threads' schedstat, read between the scrapes
//     so that the scrapes' cost is left out), as samples/s per core and ns per sample;
//   * memory per series: the shard's RSS growth from before the first node to after the window,
//     over the series it holds;
//   * with --victoria_metrics: remote_write samples sent per second and dropped; bytes per sample
//     on the wire as VictoriaMetrics counts them (HTTP bytes it read, this program's own queries
//     taken out, over the remote-write rows it inserted);
//   * batch to queryable: --probe_nodes nodes (spread over the shards) tick every second; a
//     poller asks VictoriaMetrics' /api/v1/export for one of their series every --poll_ms and
//     takes, for each sample timestamp it sees for the first time, the time of that answer minus
//     the timestamp (the batch's time, set when the node built it). An upper bound: the sample
//     became queryable at most one poll earlier;
//   * failover (--failover): SIGKILL one shard; for each node streaming to it, the time until it
//     streams to another shard (target: within 2 x --failover_after_ms).
//
//   fabricmon_shard_bench --nodes=8192 --shards=4 --interval_ms=30000 --victoria_metrics=PORT

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/agent/aggregator_ranking.h"
#include "daemon/common/logging.h"
#include "tests/bench/stream/loadgen_support.h"
#include "tests/bench/stream/node_model.h"

ABSL_FLAG(std::string, aggregator_binary, FABRICMON_AGGREGATOR_BINARY,
          "fabricmon-aggregator to start, once per shard.");
ABSL_FLAG(int, nodes, 8192, "Simulated nodes, each with its own gRPC connection.");
ABSL_FLAG(int, shards, 4, "Aggregator processes.");
ABSL_FLAG(int, interval_ms, 30000,
          "Every node sends one cycle per interval, the nodes spread evenly over it.");
ABSL_FLAG(int, probe_nodes, 8, "Nodes that send every second instead, for the delay probe.");
ABSL_FLAG(int, poll_ms, 100, "How often the delay probe asks VictoriaMetrics.");
ABSL_FLAG(std::string, profile, "mixed", "Counter motion: idle, mixed or busy.");
ABSL_FLAG(std::string, sysfs_root, FABRICMON_DEFAULT_SYSFS_ROOT,
          "sysfs tree whose ib_sysfs series each node has (default: the DGX H100 capture).");
ABSL_FLAG(int, synthetic_series, 0,
          "If > 0, use this many synthetic ib_sysfs-shaped series per node instead of the tree.");
ABSL_FLAG(int, victoria_metrics, 0,
          "Port of a VictoriaMetrics on 127.0.0.1: every shard remote-writes to it (0: off).");
ABSL_FLAG(std::string, remote_write_queue, "",
          "RemoteWriteQueueConfig text for the shards' remote_write (default: the product's).");
ABSL_FLAG(int, warmup_s, 10, "Seconds after the first full interval before the window.");
ABSL_FLAG(int, settle_timeout_s, 300,
          "With remote_write: at most this long to wait for the shards' queues to drain (the "
          "receiver creating every series) before the window.");
ABSL_FLAG(int, duration_s, 30, "Measurement window, seconds.");
ABSL_FLAG(int, held_s, 10,
          "After the window: seconds with every node connected but silent, for the shards' CPU "
          "that does not depend on the sample rate (the detectors' tick over every series).");
ABSL_FLAG(bool, failover, true, "SIGKILL shard 0 after the window and time its nodes' moves.");
ABSL_FLAG(int, failover_after_ms, 10000, "The agents' failover_after_ms (agent default 10000).");
ABSL_FLAG(int64_t, replay_buffer_bytes, 4 << 20, "Replay buffer bound per simulated node.");
ABSL_FLAG(int, connect_timeout_s, 600, "At most this long for every node to connect.");
ABSL_FLAG(int, start_wave, 256, "Nodes started at once (each wave connected before the next).");
ABSL_FLAG(int, node_processes, 0,
          "Worker processes the simulated nodes run in (0: one per 1,024 nodes, at most 64).");

namespace fabricmon::bench {
namespace {

// Percent-encodes everything but unreserved characters (RFC 3986).
std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// GETs to VictoriaMetrics, counting the request bytes so that they can be taken out of its
// vm_tcplistener_read_bytes_total (what remains is the remote-write requests).
class VictoriaMetrics {
 public:
  explicit VictoriaMetrics(int port) : port_(port) {}
  std::string Get(const std::string& path) {
    // As HttpGet writes it.
    request_bytes_ += absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").size();
    return HttpGet(port_, path);
  }
  uint64_t request_bytes() const { return request_bytes_.load(); }

 private:
  const int port_;
  std::atomic<uint64_t> request_bytes_{0};
};

// VictoriaMetrics' own counters: HTTP bytes read and remote-write rows inserted.
struct VmCounters {
  double read_bytes = 0;
  double rows = 0;
  uint64_t our_request_bytes = 0;
};
VmCounters ReadVm(VictoriaMetrics& vm) {
  const std::string text = vm.Get("/metrics");
  VmCounters counters;
  counters.read_bytes = SumOfFamily(text, "vm_tcplistener_read_bytes_total");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "vm_rows_inserted_total{type=\"promremotewrite\"}")) {
      absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &counters.rows);
    }
  }
  counters.our_request_bytes = vm.request_bytes();
  return counters;
}

// The timestamps (ms) in an /api/v1/export answer (JSON lines with "timestamps":[...]).
std::vector<int64_t> ExportTimestamps(const std::string& body) {
  std::vector<int64_t> out;
  static const std::string kKey = "\"timestamps\":[";
  size_t at = 0;
  while ((at = body.find(kKey, at)) != std::string::npos) {
    at += kKey.size();
    const size_t end = body.find(']', at);
    if (end == std::string::npos) {
      break;
    }
    for (absl::string_view item : absl::StrSplit(body.substr(at, end - at), ',')) {
      int64_t ts = 0;
      if (absl::SimpleAtoi(item, &ts)) {
        out.push_back(ts);
      }
    }
    at = end;
  }
  return out;
}

// Polls one series of each probe node and records, per newly seen sample timestamp, the delay
// from that timestamp to the answer that first held it.
class DelayProbe {
 public:
  DelayProbe(VictoriaMetrics& vm, std::vector<std::string> selectors, absl::Duration poll)
      : vm_(vm), selectors_(std::move(selectors)), poll_(poll) {}
  ~DelayProbe() { Stop(); }

  // Samples stamped before `since` are not counted (they may have been queryable before the
  // probe started).
  void Start(absl::Time since) {
    since_ms_ = absl::ToUnixMillis(since);
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  std::vector<double> delays_s() {
    std::lock_guard<std::mutex> lock(mu_);
    return delays_s_;
  }

 private:
  void Run() {
    std::vector<std::set<int64_t>> seen(selectors_.size());
    while (!stop_.load()) {
      const absl::Time round = absl::Now();
      for (size_t i = 0; i < selectors_.size(); ++i) {
        const std::string body = vm_.Get(absl::StrCat(
            "/api/v1/export?match[]=", UrlEncode(selectors_[i]), "&start=", since_ms_ / 1000 - 1));
        const int64_t answered_ms = absl::ToUnixMillis(absl::Now());
        for (int64_t ts : ExportTimestamps(body)) {
          if (ts >= since_ms_ && seen[i].insert(ts).second) {
            std::lock_guard<std::mutex> lock(mu_);
            delays_s_.push_back(static_cast<double>(answered_ms - ts) / 1000.0);
          }
        }
      }
      const absl::Time next = round + poll_;
      if (next > absl::Now()) {
        absl::SleepFor(next - absl::Now());
      }
    }
  }

  VictoriaMetrics& vm_;
  const std::vector<std::string> selectors_;
  const absl::Duration poll_;
  int64_t since_ms_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<double> delays_s_;
  std::thread thread_;
};

// The simulated nodes, run by worker processes forked before any gRPC object exists. One
// process holding thousands of gRPC clients serializes their reconnects inside gRPC's TCP connect
// (2,000 nodes failing over at once from one process had not moved after a minute, blocked on one
// lock there), where a fleet's agents are separate processes on separate machines. Worker w runs
// the nodes i with i % workers == w and publishes, every kPublish, each node's shard and batches
// sent into a slot of one anonymous shared mapping, where this process also posts its commands
// (start nodes up to N, tick, stop ticking, exit).
class NodeWorkers {
 public:
  NodeWorkers() = default;
  ~NodeWorkers() { Exit(); }

  // Forks `workers` processes. In each, the nodes are created (not started) with `options`;
  // `is_probe` nodes tick every second, the others once per `interval` spread over it. false
  // (with errno set) when the mapping or a fork failed.
  bool Fork(int workers, int nodes, const std::vector<NodeSeries>& series, Profile profile,
            const SimAgentOptions& options, const std::vector<bool>& is_probe,
            absl::Duration interval) {
    nodes_ = nodes;
    bytes_ = sizeof(Shared) + sizeof(Slot) * static_cast<size_t>(nodes);
    void* memory = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      return false;
    }
    shared_ = new (memory) Shared();
    slots_ = new (static_cast<char*>(memory) + sizeof(Shared)) Slot[nodes];
    std::fflush(nullptr);  // a child's exit must not write this process' buffers again
    for (int w = 0; w < std::min(workers, kMaxWorkers); ++w) {
      const pid_t pid = fork();
      if (pid < 0) {
        return false;
      }
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the bench
        Work(w, std::min(workers, kMaxWorkers), series, profile, options, is_probe, interval);
        std::_Exit(0);
      }
      pids_.push_back(pid);
    }
    return true;
  }

  void StartUpTo(int nodes) { shared_->start_up_to.store(nodes); }
  void StartTicking() { shared_->ticking.store(1); }
  void StopTicking() {
    shared_->ticking.store(2);
    // Published once the generators have stopped: the caller measures a silent fleet after this.
    WaitUntil([&] { return Sum(shared_->stopped) == pids_.size(); }, 30, 10);
  }

  // The shard node `i` streams to (an index into the addresses given), -1 when none.
  int shard(int i) const { return slots_[i].shard.load(); }
  uint64_t batches_sent(int i) const { return slots_[i].batches_sent.load(); }
  size_t connected() const {
    size_t n = 0;
    for (int i = 0; i < nodes_; ++i) {
      n += slots_[i].shard.load() >= 0 ? 1 : 0;
    }
    return n;
  }
  uint64_t cycles() const { return Sum(shared_->cycles); }
  uint64_t overruns() const { return Sum(shared_->overruns); }
  double CpuSeconds() const {
    double total = 0;
    for (pid_t pid : pids_) {
      total += ProcessCpuSeconds(pid);
    }
    return total;
  }
  size_t workers() const { return pids_.size(); }

  // Ends the workers without tearing their stacks down one by one, and reaps them.
  void Exit() {
    if (shared_ == nullptr) {
      return;
    }
    shared_->exit.store(1);
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pids_.clear();
    munmap(shared_, bytes_);
    shared_ = nullptr;
  }

 private:
  static constexpr int kMaxWorkers = 64;
  static constexpr auto kPublish = std::chrono::milliseconds(50);
  struct Slot {
    std::atomic<int32_t> shard{-1};
    std::atomic<uint64_t> batches_sent{0};
  };
  struct Shared {
    std::atomic<int32_t> start_up_to{0};
    std::atomic<int32_t> ticking{0};  // 0: not yet, 1: ticking, 2: stopped
    std::atomic<int32_t> exit{0};
    std::atomic<uint64_t> cycles[kMaxWorkers] = {};
    std::atomic<uint64_t> overruns[kMaxWorkers] = {};
    std::atomic<uint64_t> stopped[kMaxWorkers] = {};  // 1 once the worker's generators stopped
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared between processes");

  template <typename Counters>
  static uint64_t Sum(const Counters& counters) {
    uint64_t total = 0;
    for (const auto& counter : counters) {
      total += counter.load();
    }
    return total;
  }

  // A worker's life: its nodes, started as told, their ticks, and their state published.
  void Work(int w, int workers, const std::vector<NodeSeries>& series, Profile profile,
            const SimAgentOptions& options, const std::vector<bool>& is_probe,
            absl::Duration interval) {
    std::vector<std::unique_ptr<SimAgent>> agents;
    std::vector<int> index;
    std::vector<SimAgent*> bulk, probes;
    for (int i = w; i < nodes_; i += workers) {
      agents.push_back(std::make_unique<SimAgent>(i, series, profile, options));
      index.push_back(i);
      (is_probe[i] ? probes : bulk).push_back(agents.back().get());
    }
    Generator bulk_generator(bulk, interval, /*spread=*/true);
    Generator probe_generator(probes, absl::Seconds(1));
    size_t started = 0;
    int ticking = 0;
    while (shared_->exit.load() == 0) {
      const int up_to = shared_->start_up_to.load();
      while (started < agents.size() && index[started] < up_to) {
        agents[started++]->Start();
      }
      // Ticking starts once every client is started (StreamClient::Start and Notify are not
      // meant to race).
      const int told = shared_->ticking.load();
      if (told == 1 && ticking == 0 && started == agents.size()) {
        bulk_generator.Start();
        probe_generator.Start();
        ticking = 1;
      } else if (told == 2 && ticking != 2) {
        bulk_generator.Stop();
        probe_generator.Stop();
        ticking = 2;
        shared_->stopped[w].store(1);
      }
      shared_->cycles[w].store(bulk_generator.cycles() + probe_generator.cycles());
      shared_->overruns[w].store(bulk_generator.overruns());
      for (size_t k = 0; k < started; ++k) {
        const agent::StreamClientStats stats = agents[k]->stats();
        int shard = -1;
        if (stats.connected) {
          for (size_t s = 0; s < options.aggregators.size(); ++s) {
            if (options.aggregators[s] == stats.aggregator) {
              shard = static_cast<int>(s);
            }
          }
        }
        slots_[index[k]].shard.store(shard);
        slots_[index[k]].batches_sent.store(stats.batches_sent);
      }
      std::this_thread::sleep_for(kPublish);
    }
  }

  int nodes_ = 0;
  size_t bytes_ = 0;
  Shared* shared_ = nullptr;
  Slot* slots_ = nullptr;
  std::vector<pid_t> pids_;
};

struct ShardWindow {
  double samples = 0;     // stored between the scrapes' starts
  double wall = 0;        // between the scrapes' starts
  double cpu = 0;         // CPU seconds between the scrapes (their own cost left out)
  double cpu_wall = 0;    // wall seconds the CPU was read over
  double rw_sent = 0;     // remote_write samples accepted
  double rw_dropped = 0;  // over the whole run, at the window's end
  double rw_failed = 0;
  double rw_pending = 0;
  double series = 0;  // fabricmon_aggregator_series at the window's end
};

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
  const int node_count = absl::GetFlag(FLAGS_nodes);
  const int shard_count = absl::GetFlag(FLAGS_shards);
  const int interval_ms = absl::GetFlag(FLAGS_interval_ms);
  const int vm_port = absl::GetFlag(FLAGS_victoria_metrics);
  const int probe_count = std::min(absl::GetFlag(FLAGS_probe_nodes), node_count);
  if (node_count < 1 || shard_count < 1 || interval_ms < 1) {
    std::cerr << "--nodes, --shards and --interval_ms must be positive\n";
    return 2;
  }
  const size_t total_series = series.size() * static_cast<size_t>(node_count);

  char workdir_template[] = "/tmp/fabricmon-shard-bench-XXXXXX";
  if (mkdtemp(workdir_template) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::string workdir = workdir_template;

  // The shards. Each holds about 1/shards of the series, and a failover brings it more: its
  // new-series burst (one loopback peer for every node) is sized for all of them.
  std::vector<std::unique_ptr<AggregatorProcess>> shards;
  std::vector<std::string> addresses;
  for (int s = 0; s < shard_count; ++s) {
    const std::string dir = absl::StrCat(workdir, "/shard-", s);
    if (mkdir(dir.c_str(), 0755) != 0) {
      std::perror("mkdir");
      return 2;
    }
    std::string config = absl::StrCat("shard: \"shard-", s, "\"\n");
    if (vm_port > 0) {
      absl::StrAppend(&config, "remote_write { url: \"http://127.0.0.1:", vm_port,
                      "/api/v1/write\" ", absl::GetFlag(FLAGS_remote_write_queue), " }\n");
    }
    shards.push_back(std::make_unique<AggregatorProcess>(absl::GetFlag(FLAGS_aggregator_binary),
                                                         dir, -1, config, total_series));
    if (!shards.back()->Start(0)) {
      std::cerr << "shard " << s << " did not start (see " << dir << "/aggregator.log)\n";
      return 1;
    }
    addresses.push_back(absl::StrCat("127.0.0.1:", shards.back()->grpc_port()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<uint64_t> rss_before;
  for (const auto& shard : shards) {
    rss_before.push_back(shard->StatusBytes("VmRSS:"));
  }
  auto shard_of = [&](const std::string& address) {
    for (int s = 0; s < shard_count; ++s) {
      if (addresses[s] == address) {
        return s;
      }
    }
    return -1;
  };

  // Each node's primary, by the agents' ranking code; the probe nodes spread over the shards.
  std::vector<int> primary(node_count);
  std::vector<int> primaries(shard_count, 0);
  for (int i = 0; i < node_count; ++i) {
    primary[i] = shard_of(agent::RankAggregators(SimNodeName(i), addresses).front());
    ++primaries[primary[i]];
  }
  std::vector<bool> is_probe(node_count, false);
  std::vector<int> probes;
  for (int i = 0; i < node_count && static_cast<int>(probes.size()) < probe_count; ++i) {
    // Round-robin over the shards: the probe k goes to a node whose primary is shard k % shards.
    if (primary[i] == static_cast<int>(probes.size()) % shard_count) {
      is_probe[i] = true;
      probes.push_back(i);
    }
  }

  std::printf("machine: %ld online CPUs, load average %s\n", sysconf(_SC_NPROCESSORS_ONLN), [] {
    FILE* f = fopen("/proc/loadavg", "r");
    static char text[64] = "?";
    if (f != nullptr) {
      if (fgets(text, sizeof(text), f) == nullptr) {
        text[0] = '\0';
      }
      fclose(f);
    }
    text[strcspn(text, "\n")] = '\0';
    return text;
  }());
  std::printf(
      "load: %d nodes x %zu series (%s profile) over %d shards, one cycle per node every %d ms "
      "(%zu probe nodes every 1000 ms) = %.0f samples/s offered; remote_write %s; "
      "failover_after_ms %d\n",
      node_count, series.size(), absl::GetFlag(FLAGS_profile).c_str(), shard_count, interval_ms,
      probes.size(),
      static_cast<double>(series.size()) *
          (static_cast<double>(node_count - static_cast<int>(probes.size())) * 1000.0 /
               interval_ms +
           static_cast<double>(probes.size())),
      vm_port > 0 ? absl::StrCat("on (VictoriaMetrics 127.0.0.1:", vm_port, ")").c_str() : "off",
      absl::GetFlag(FLAGS_failover_after_ms));
  std::fflush(stdout);

  SimAgentOptions sim;
  sim.aggregators = addresses;
  sim.failover_after = absl::Milliseconds(absl::GetFlag(FLAGS_failover_after_ms));
  sim.replay_buffer_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_replay_buffer_bytes));
  const int worker_count = absl::GetFlag(FLAGS_node_processes) > 0
                               ? absl::GetFlag(FLAGS_node_processes)
                               : std::max(1, (node_count + 1023) / 1024);
  NodeWorkers nodes;
  if (!nodes.Fork(worker_count, node_count, series, profile, sim, is_probe,
                  absl::Milliseconds(interval_ms))) {
    std::perror("node worker processes");
    return 2;
  }
  // Nodes start in waves, each connected before the next starts: thousands of streams opened at
  // once on a small machine starve their own handshakes past failover_after and churn between
  // shards (a fleet's agents start over minutes, not in one instant). The window measures the
  // steady state.
  const auto connect_start = Clock::now();
  const int wave = std::max(1, absl::GetFlag(FLAGS_start_wave));
  for (int first = 0; first < node_count; first += wave) {
    const int end = std::min(node_count, first + wave);
    nodes.StartUpTo(end);
    WaitUntil([&] { return nodes.connected() >= static_cast<size_t>(end); },
              std::max(0.0, absl::GetFlag(FLAGS_connect_timeout_s) - SecondsSince(connect_start)),
              50);
  }
  if (!WaitUntil(
          [&] { return nodes.connected() == static_cast<size_t>(node_count); },
          std::max(0.0, absl::GetFlag(FLAGS_connect_timeout_s) - SecondsSince(connect_start)),
          50)) {
    std::cerr << "only " << nodes.connected() << " of " << node_count << " nodes connected within "
              << absl::GetFlag(FLAGS_connect_timeout_s) << " s\n";
    return 1;
  }
  std::printf("connected: all %d nodes in %.1f s (%zu node worker processes)\n", node_count,
              SecondsSince(connect_start), nodes.workers());
  std::fflush(stdout);

  // Until ticking starts a connected node is silent: its keepalive pings may end in the
  // aggregator's GOAWAY "too_many_pings" and a reconnect, which the waves outlast.
  nodes.StartTicking();

  // One full interval after the last connect declares every node's series; then the warm-up.
  std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms) +
                              std::chrono::seconds(absl::GetFlag(FLAGS_warmup_s)));

  // Every node has sent a cycle (declaring its series) before the window: on a starved machine
  // one interval may not be enough.
  {
    const auto declare_start = Clock::now();
    const bool all_sent = WaitUntil(
        [&] {
          for (int i = 0; i < node_count; ++i) {
            if (nodes.batches_sent(i) == 0) {
              return false;
            }
          }
          return true;
        },
        absl::GetFlag(FLAGS_settle_timeout_s), 500);
    std::printf("every node sent a cycle: %s after %.1f s more\n", all_sent ? "yes" : "NO",
                SecondsSince(declare_start));
    std::fflush(stdout);
  }
  std::unique_ptr<VictoriaMetrics> vm;
  if (vm_port > 0) {
    vm = std::make_unique<VictoriaMetrics>(vm_port);
    // The receiver creates every series on first sight (millions here): wait, bounded, until
    // each shard's queue holds no more than a few seconds of its rate, so that the window
    // measures the steady state.
    const double per_shard_per_s =
        static_cast<double>(total_series) * 1000.0 / interval_ms / shard_count;
    const auto settle_start = Clock::now();
    const bool settled = WaitUntil(
        [&] {
          for (const auto& shard : shards) {
            if (SumOfFamily(shard->MetricsText(), "fabricmon_remote_write_samples_pending") >
                std::max(10000.0, 5 * per_shard_per_s)) {
              return false;
            }
          }
          return true;
        },
        absl::GetFlag(FLAGS_settle_timeout_s), 2000);
    std::printf("remote_write queues %s after %.1f s more\n",
                settled ? "drained" : "still NOT drained", SecondsSince(settle_start));
    std::fflush(stdout);
  }

  // Measurement window. Per shard: the scrape first, then its CPU; at the end its CPU, then the
  // scrape (scrapes of a million series cost the shard seconds of CPU: left out).
  std::unique_ptr<DelayProbe> probe;
  if (vm != nullptr && !probes.empty()) {
    std::vector<std::string> selectors;
    for (int i : probes) {
      selectors.push_back(absl::StrCat("{__name__=\"", series.front().desc.name, "\",node=\"",
                                       SimNodeName(i), "\"}"));
    }
    probe = std::make_unique<DelayProbe>(*vm, selectors,
                                         absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms)));
    probe->Start(absl::Now());
  }
  VmCounters vm0, vm1;
  if (vm != nullptr) {
    vm0 = ReadVm(*vm);
  }
  std::vector<std::string> text0(shard_count);
  std::vector<Clock::time_point> scrape0(shard_count), cpu_t0(shard_count);
  std::vector<CpuSnapshot> cpu0(shard_count);
  for (int s = 0; s < shard_count; ++s) {
    scrape0[s] = Clock::now();
    text0[s] = shards[s]->MetricsText();
    cpu0[s] = shards[s]->Cpu();
    cpu_t0[s] = Clock::now();
  }
  const double self0 = nodes.CpuSeconds();
  const uint64_t cycles0 = nodes.cycles();
  const uint64_t overruns0 = nodes.overruns();
  const auto window_start = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(absl::GetFlag(FLAGS_duration_s)));
  const double self_cpu = nodes.CpuSeconds() - self0;
  const double window = SecondsSince(window_start);
  const double offered_in_window =
      static_cast<double>(nodes.cycles() - cycles0) * static_cast<double>(series.size()) / window;
  const uint64_t overruns = nodes.overruns() - overruns0;
  std::vector<ShardWindow> w(shard_count);
  std::vector<CpuSnapshot> cpu1(shard_count);
  std::vector<Clock::time_point> cpu_t1(shard_count);
  for (int s = 0; s < shard_count; ++s) {
    cpu1[s] = shards[s]->Cpu();
    cpu_t1[s] = Clock::now();
  }
  std::vector<uint64_t> rss_after(shard_count);
  for (int s = 0; s < shard_count; ++s) {
    const double between = SecondsSince(scrape0[s]);
    const std::string text1 = shards[s]->MetricsText();
    rss_after[s] = shards[s]->StatusBytes("VmRSS:");
    auto delta = [&](const char* name) {
      return SumOfFamily(text1, name) - SumOfFamily(text0[s], name);
    };
    w[s].samples = delta("fabricmon_aggregator_samples_total");
    w[s].wall = between;
    w[s].cpu = CpuSecondsBetween(cpu0[s], cpu1[s]);
    w[s].cpu_wall = std::chrono::duration<double>(cpu_t1[s] - cpu_t0[s]).count();
    w[s].rw_sent = delta("fabricmon_remote_write_samples_sent_total");
    w[s].rw_dropped = SumOfFamily(text1, "fabricmon_remote_write_samples_dropped_total");
    w[s].rw_failed = SumOfFamily(text1, "fabricmon_remote_write_samples_failed_total");
    w[s].rw_pending = SumOfFamily(text1, "fabricmon_remote_write_samples_pending");
    w[s].series = SumOfFamily(text1, "fabricmon_aggregator_series");
  }
  if (vm != nullptr) {
    vm1 = ReadVm(*vm);
  }
  if (probe != nullptr) {
    probe->Stop();
  }

  // Where each node streams now.
  std::vector<int> streaming(shard_count, 0);
  for (int i = 0; i < node_count; ++i) {
    const int s = nodes.shard(i);
    if (s >= 0) {
      ++streaming[s];
    }
  }
  std::printf(
      "\n== per shard (%.1f s window; stored samples/s over the scrapes' interval, CPU of "
      "the shard process between them)\n",
      window);
  std::printf("%-7s %6s %6s %9s %11s %6s %12s %7s %8s %9s %10s %9s %8s\n", "shard", "nodes",
              "ranked", "series", "stored/s", "cores", "per-core/s", "ns/smpl", "RSS MiB",
              "B/series", "rw sent/s", "rw drop", "rw pend");
  double total_samples_rate = 0, total_cpu_rate = 0, total_rw_rate = 0, total_dropped = 0;
  double total_rss_growth = 0;
  size_t total_held = 0;
  for (int s = 0; s < shard_count; ++s) {
    const double rate = w[s].wall > 0 ? w[s].samples / w[s].wall : 0;
    const double cores = w[s].cpu_wall > 0 ? w[s].cpu / w[s].cpu_wall : 0;
    const size_t shard_series = static_cast<size_t>(w[s].series);
    const double growth = static_cast<double>(rss_after[s]) - static_cast<double>(rss_before[s]);
    total_samples_rate += rate;
    total_cpu_rate += cores;
    total_rw_rate += w[s].wall > 0 ? w[s].rw_sent / w[s].wall : 0;
    total_dropped += w[s].rw_dropped;
    total_rss_growth += growth;
    total_held += shard_series;
    std::printf(
        "shard-%-1d %6d %6d %9zu %11.0f %6.3f %12.0f %7.0f %8.1f %9.0f %10.0f %9.0f %8.0f\n", s,
        streaming[s], primaries[s], shard_series, rate, cores, cores > 0 ? rate / cores : 0,
        rate > 0 ? cores * 1e9 / rate : 0, rss_after[s] / 1048576.0,
        shard_series > 0 ? growth / shard_series : 0, w[s].wall > 0 ? w[s].rw_sent / w[s].wall : 0,
        w[s].rw_dropped, w[s].rw_pending);
  }
  std::printf("total   %6zu %6d %9zu %11.0f %6.3f %12.0f %7.0f %8s %9.0f %10.0f %9.0f\n",
              nodes.connected(), node_count, total_held, total_samples_rate, total_cpu_rate,
              total_cpu_rate > 0 ? total_samples_rate / total_cpu_rate : 0,
              total_samples_rate > 0 ? total_cpu_rate * 1e9 / total_samples_rate : 0, "",
              total_held > 0 ? total_rss_growth / static_cast<double>(total_held) : 0,
              total_rw_rate, total_dropped);
  std::printf("offered %.0f samples/s in the window (generator behind its interval %llu times)%s\n",
              offered_in_window, static_cast<unsigned long long>(overruns),
              total_samples_rate < 0.9 * offered_in_window
                  ? "  ** stored < offered: shards or streams starved **"
                  : "");
  std::printf("generator CPU %.3f cores (%zu worker processes: %d node stacks)\n",
              self_cpu / window, nodes.workers(), node_count);
  std::printf(
      "(nodes: streaming to the shard at the window's end; ranked: nodes whose primary "
      "it is by the agents' rendezvous ranking; B/series: RSS growth since before the "
      "first node / series held, the shard's fabricmon_aggregator_series)\n");

  // The reduced rate distorts CPU per sample: the detectors evaluate every series each second
  // whatever the rate, so at one cycle per 30 s that fixed cost is spread over 30 times fewer
  // samples. Measure it alone (every node connected, none sending) and split the window's CPU
  // into that and a per-sample part, which gives each shard's cores at the real 1 Hz.
  nodes.StopTicking();
  std::this_thread::sleep_for(std::chrono::seconds(3));  // in-flight batches and sends finish
  std::vector<CpuSnapshot> held0(shard_count), held1(shard_count);
  const auto held_start = Clock::now();
  for (int s = 0; s < shard_count; ++s) {
    held0[s] = shards[s]->Cpu();
  }
  std::this_thread::sleep_for(std::chrono::seconds(absl::GetFlag(FLAGS_held_s)));
  for (int s = 0; s < shard_count; ++s) {
    held1[s] = shards[s]->Cpu();
  }
  const double held_wall = SecondsSince(held_start);
  std::printf(
      "\n== at 1 Hz, derived: held = cores with every node connected and silent "
      "(%.1f s; the detectors' tick over every series); net = the window's cores minus "
      "held, per stored sample; at 1 Hz = held + series x net\n",
      held_wall);
  std::printf("%-9s %9s %11s %12s %14s\n", "shard", "held", "net ns/smpl", "cores@1Hz",
              "per-core/s@1Hz");
  // The per-sample rest is what the window used beyond the held cores. When it is within a tenth
  // of the held figure, it is the two measurements' noise, not a cost: the row says so, and no
  // total is derived from it (it would read as a per-sample cost of 0).
  constexpr double kResolvable = 0.1;
  double total_1hz_cores = 0;
  size_t held_series_total = 0;
  bool all_resolved = true;
  for (int s = 0; s < shard_count; ++s) {
    const double rate = w[s].wall > 0 ? w[s].samples / w[s].wall : 0;
    const double cores = w[s].cpu_wall > 0 ? w[s].cpu / w[s].cpu_wall : 0;
    const double held = held_wall > 0 ? CpuSecondsBetween(held0[s], held1[s]) / held_wall : 0;
    const bool resolved = rate > 0 && cores - held > kResolvable * held;
    all_resolved = all_resolved && resolved;
    if (!resolved) {
      std::printf(
          "shard-%-3d %9.3f %11s %12s %14s   (window %.3f cores: the rest is within the "
          "held figure's noise; raise the rate)\n",
          s, held, "noise", "-", "-", cores);
      continue;
    }
    const double net_ns = (cores - held) * 1e9 / rate;
    const size_t shard_series = static_cast<size_t>(w[s].series);
    const double cores_1hz = held + static_cast<double>(shard_series) * net_ns * 1e-9;
    total_1hz_cores += cores_1hz;
    held_series_total += shard_series;
    std::printf("shard-%-3d %9.3f %11.0f %12.3f %14.0f\n", s, held, net_ns, cores_1hz,
                cores_1hz > 0 ? static_cast<double>(shard_series) / cores_1hz : 0);
  }
  if (all_resolved) {
    std::printf("total@1Hz %9s %11s %12.3f %14.0f   (%.0f ns CPU per sample at 1 Hz)\n", "", "",
                total_1hz_cores,
                total_1hz_cores > 0 ? static_cast<double>(held_series_total) / total_1hz_cores : 0,
                held_series_total > 0 ? total_1hz_cores * 1e9 / held_series_total : 0);
  } else {
    std::printf("total@1Hz not derived: a shard's per-sample rest is within its noise\n");
  }

  int status = 0;
  if (vm != nullptr) {
    const double rows = vm1.rows - vm0.rows;
    const double bytes = (vm1.read_bytes - vm0.read_bytes) -
                         static_cast<double>(vm1.our_request_bytes - vm0.our_request_bytes);
    std::printf("\n== remote_write into VictoriaMetrics\n");
    std::printf(
        "remote_write bytes per sample: %.2f (HTTP bytes VictoriaMetrics read, our "
        "queries excluded, %.1f MB over %.0f rows it inserted; %.0f KB/s)\n",
        rows > 0 ? bytes / rows : 0, bytes / 1e6, rows, bytes / window / 1e3);
    if (probe != nullptr) {
      const std::vector<double> delays = probe->delays_s();
      std::printf(
          "batch to queryable: p50 %.3f s, p99 %.3f s, max %.3f s (%zu samples of %zu "
          "probe nodes, polled every %d ms; target p99 <= 2 s)\n",
          Percentile(delays, 0.5), Percentile(delays, 0.99), Percentile(delays, 1.0), delays.size(),
          probes.size(), absl::GetFlag(FLAGS_poll_ms));
      if (delays.empty()) {
        std::printf("  ** no probe sample became queryable **\n");
        status = 1;
      }
    }
  }

  if (absl::GetFlag(FLAGS_failover) && shard_count > 1) {
    const int victim = 0;
    std::vector<size_t> moving;
    for (int i = 0; i < node_count; ++i) {
      if (nodes.shard(i) == victim) {
        moving.push_back(i);
      }
    }
    const double failover_after_s = absl::GetFlag(FLAGS_failover_after_ms) / 1000.0;
    std::vector<double> moved_after(moving.size(), -1);
    std::vector<int> moved_to(shard_count, 0);
    const auto kill_time = Clock::now();
    // Not reaped here: waiting for the killed shard's exit (seconds for a process of a GB on a
    // busy machine) delayed the first look at the nodes, and every move then read as that long.
    shards[victim]->SendKill();
    const bool all = WaitUntil(
        [&] {
          bool done = true;
          for (size_t k = 0; k < moving.size(); ++k) {
            if (moved_after[k] >= 0) {
              continue;
            }
            const int s = nodes.shard(moving[k]);
            if (s >= 0 && s != victim) {
              moved_after[k] = SecondsSince(kill_time);
              ++moved_to[s];
            } else {
              done = false;
            }
          }
          return done;
        },
        std::max(60.0, 6 * failover_after_s), 10);
    std::vector<double> got;
    for (double t : moved_after) {
      if (t >= 0) {
        got.push_back(t);
      }
    }
    std::string spread;
    for (int s = 0; s < shard_count; ++s) {
      if (s != victim) {
        absl::StrAppend(&spread, spread.empty() ? "" : ", ", "shard-", s, " ", moved_to[s]);
      }
    }
    std::printf("\n== failover (SIGKILL shard-%d, %zu nodes streaming to it)\n", victim,
                moving.size());
    std::printf(
        "failover: %zu of %zu nodes moved, p50 %.2f s, p99 %.2f s, max %.2f s after the "
        "kill (failover_after_ms %d; target <= 2x = %.1f s); to %s%s\n",
        got.size(), moving.size(), Percentile(got, 0.5), Percentile(got, 0.99),
        Percentile(got, 1.0), absl::GetFlag(FLAGS_failover_after_ms), 2 * failover_after_s,
        spread.c_str(), all ? "" : "  ** NOT ALL **");
    if (!all) {
      status = 1;
    }
  }

  // The figures are out. The node workers end without stopping their nodes one by one (tearing
  // down 8,192 gRPC stacks took more than half an hour of both cores, skewing whatever ran next).
  nodes.Exit();
  for (auto& shard : shards) {
    shard->Stop();
  }
  const std::string rm = "rm -rf '" + workdir + "'";
  (void)std::system(rm.c_str());  // best effort: only our own temp dir
  return status;
}

}  // namespace
}  // namespace fabricmon::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Simulated nodes (real StreamClient stacks) over several fabricmon-aggregator shards by "
      "the agents' rendezvous ranking, optionally remote-writing to VictoriaMetrics: per-shard "
      "ingest per core and memory per series, remote-write bytes per sample, batch-to-queryable "
      "delay, failover time.");
  // As fabricmon-agent does: simulated agents cost what real ones cost. With absl's deadlock
  // detection on, a worker's thousand agent stacks made its lock graph the largest part of its
  // CPU (GraphCycles::GetId 21 % in perf) and an 8,192-node run stalled before every node sent.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::ParseCommandLine(argc, argv);
  setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes: a long run is read while it runs
  fabricmon::SetMinLogLevel(fabricmon::LogLevel::kError);
  signal(SIGPIPE, SIG_IGN);
  return fabricmon::bench::Run();
}
