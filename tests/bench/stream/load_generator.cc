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
// time (/proc/PID/stat) and memory (/proc/PID/status) are its own. Reported:
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

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/agent/replay_buffer.h"
#include "daemon/agent/series_table.h"
#include "daemon/agent/stream_client.h"
#include "daemon/common/clock.h"
#include "daemon/common/logging.h"
#include "grpcpp/grpcpp.h"
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
ABSL_FLAG(bool, grpc_default_channel_backoff, false,
          "Leave the channel's connection backoff at gRPC's defaults (1 s x1.6 up to 120 s) "
          "instead of bounding it by the StreamClient backoff as fabricmon-agent does.");
ABSL_FLAG(int64_t, replay_buffer_bytes, 16 << 20, "Replay buffer bound per simulated agent.");
ABSL_FLAG(std::string, aggregator_config, "",
          "AggregatorConfig text added to the aggregator's (e.g. a recording { ... } block).");
ABSL_FLAG(int, aggregator_cpu, -1, "If >= 0, pin the aggregator to this CPU (others: the rest).");

namespace fabricmon::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// GET http://127.0.0.1:port/path (HTTP/1.0, no compression). Empty on failure.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[1 << 16];
      for (;;) {
        const ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n <= 0) {
          break;
        }
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.compare(0, 9, "HTTP/1.1 ") != 0 && response.compare(0, 9, "HTTP/1.0 ") != 0) {
    return "";
  }
  if (response.compare(9, 3, "200") != 0 || body == std::string::npos) {
    return "";
  }
  return response.substr(body + 4);
}

// Unlabelled samples of a text exposition: name → value.
std::map<std::string, double> ParseUnlabelled(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#' || line.find('{') != absl::string_view::npos) {
      continue;
    }
    const size_t space = line.find(' ');
    double value = 0;
    if (space != absl::string_view::npos && absl::SimpleAtod(line.substr(space + 1), &value)) {
      out[std::string(line.substr(0, space))] = value;
    }
  }
  return out;
}

// The aggregator under test, as a child process that dies with us.
class AggregatorProcess {
 public:
  // `total_series`: what all simulated agents declare together. They share one peer (the
  // loopback address), and a peer's new-series bucket is one node's (new_series_burst, default
  // 50 000): unless --aggregator_config sets it, the burst is raised to hold them all, else the
  // agents past the first ~100 would be refused and the run would measure refusals.
  AggregatorProcess(std::string binary, std::string workdir, int cpu, size_t total_series)
      : binary_(std::move(binary)), workdir_(std::move(workdir)), cpu_(cpu) {
    config_path_ = workdir_ + "/aggregator.textproto";
    const std::string extra = absl::GetFlag(FLAGS_aggregator_config);
    std::ofstream config(config_path_);
    config << "tls { insecure_plaintext: true }\n" << extra << "\n";
    if (!absl::StrContains(extra, "new_series_burst")) {
      config << "new_series_burst: " << std::max<size_t>(50000, 2 * total_series) << "\n";
    }
    port_file_ = workdir_ + "/grpc.port";
  }
  ~AggregatorProcess() { Stop(); }

  // Starts it; `grpc_port` 0 picks one (read back from --port_file). False on failure.
  bool Start(int grpc_port) {
    unlink(port_file_.c_str());
    if (metrics_port_ == 0) {
      metrics_port_ = FreePort();
    }
    std::vector<std::string> args = {binary_,
                                     "--config=" + config_path_,
                                     absl::StrCat("--grpc_listen=127.0.0.1:", grpc_port),
                                     "--port_file=" + port_file_,
                                     absl::StrCat("--metrics_listen=127.0.0.1:", metrics_port_),
                                     "--log_level=warning"};
    std::vector<char*> argv;
    for (std::string& arg : args) {
      argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    const std::string log_path = workdir_ + "/aggregator.log";
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (log_fd >= 0) {
        dup2(log_fd, 1);
        dup2(log_fd, 2);
      }
      if (cpu_ >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu_, &set);
        sched_setaffinity(0, sizeof(set), &set);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    started_ = Clock::now();
    // Bounded wait for the port file (written once the gRPC server listens) and /metrics.
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        std::cerr << "aggregator exited during start-up; see " << log_path << "\n";
        pid_ = -1;
        return false;
      }
      std::ifstream in(port_file_);
      int port = 0;
      if (in >> port && port > 0) {
        grpc_port_ = port;
        listening_ = Clock::now();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (grpc_port_ == 0) {
      return false;
    }
    while (Clock::now() < deadline) {
      if (!HttpGet(metrics_port_, "/metrics").empty()) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // SIGTERM, then SIGKILL after 10 s. Returns the time it took to exit.
  double Stop() {
    if (pid_ <= 0) {
      return 0;
    }
    const auto start = Clock::now();
    kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return SecondsSince(start);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return SecondsSince(start);
  }

  // User + system CPU seconds of the whole process (all threads, exited ones included).
  double CpuSeconds() const {
    std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) {
      return 0;
    }
    std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
    // After "pid (comm) ": state is field 3, so utime (14) and stime (15) are at 11 and 12.
    uint64_t utime = 0, stime = 0;
    if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
        !absl::SimpleAtoi(fields[12], &stime)) {
      return 0;
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

  // Resident set size in bytes (VmRSS), and its peak (VmHWM).
  uint64_t StatusBytes(const char* key) const {
    std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(key, 0) == 0) {
        uint64_t kb = 0;
        std::istringstream(line.substr(strlen(key))) >> kb;
        return kb * 1024;
      }
    }
    return 0;
  }

  std::map<std::string, double> Scrape() const {
    return ParseUnlabelled(HttpGet(metrics_port_, "/metrics"));
  }

  int grpc_port() const { return grpc_port_; }
  Clock::time_point listening_since() const { return listening_; }

 private:
  const std::string binary_;
  const std::string workdir_;
  const int cpu_;
  std::string config_path_;
  std::string port_file_;
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  Clock::time_point started_;
  Clock::time_point listening_;
};

// One simulated node: the agent's streaming stack with a value model instead of collectors.
class SimAgent {
 public:
  SimAgent(int index, const std::vector<NodeSeries>& series, Profile profile,
           const std::string& target)
      : name_(absl::StrFormat("loadgen-%04d", index)),
        series_(series),
        model_(series, profile, static_cast<uint64_t>(index) + 1),
        buffer_(static_cast<size_t>(absl::GetFlag(FLAGS_replay_buffer_bytes))),
        builder_(table_) {
    grpc::ChannelArguments args;
    // As fabricmon-agent configures its channel.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // One connection per simulated node, as N separate agent processes would have.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    if (!absl::GetFlag(FLAGS_grpc_default_channel_backoff)) {
      // As fabricmon-agent (agent_main.cc) bounds the channel's own connection backoff.
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, absl::GetFlag(FLAGS_initial_backoff_ms));
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, absl::GetFlag(FLAGS_max_backoff_ms));
    }
    agent::StreamClientOptions options;
    options.channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    options.node_name = name_;
    options.boot_id = absl::StrCat("boot-", name_);
    options.agent_version = "loadgen";
    options.agent_instance_id = 0x10000000ull + static_cast<uint64_t>(index);
    options.initial_backoff = absl::Milliseconds(absl::GetFlag(FLAGS_initial_backoff_ms));
    options.max_backoff = absl::Milliseconds(absl::GetFlag(FLAGS_max_backoff_ms));
    options.jitter_seed = static_cast<uint64_t>(index) * 7919 + 1;
    const uint64_t instance = options.agent_instance_id;
    const std::string boot = options.boot_id;
    const std::string name = name_;
    client_ =
        std::make_unique<agent::StreamClient>(options, buffer_, table_, [name, boot, instance] {
          v1::Hello hello;
          hello.set_node_name(name);
          hello.set_boot_id(boot);
          hello.set_agent_version("loadgen");
          hello.set_protocol_revision(v1::PROTOCOL_REVISION_1);
          hello.set_agent_instance_id(instance);
          hello.set_min_interval_ms(1000);
          v1::CollectorStatus* collector = hello.add_collectors();
          collector->set_name("ib_sysfs");
          collector->set_state("OK");
          collector->set_interval_ms(1000);
          return hello;
        });
  }

  void Start() { client_->Start(); }
  void Stop() { client_->Stop(absl::ZeroDuration()); }

  // One collection cycle: the model advances one nominal second; the cycle goes to the buffer
  // and the stream, exactly as Agent::RunCollector does.
  void Tick() {
    const std::vector<uint64_t>& values = model_.Next();
    for (size_t i = 0; i < series_.size(); ++i) {
      builder_.Add(series_[i].desc, values[i]);
    }
    buffer_.Push(builder_.Finish(RealClock::Get().NowUnixNanos(), 100));
    client_->Notify();
  }

  agent::StreamClientStats stats() const { return client_->stats(); }
  const agent::ReplayBuffer& buffer() const { return buffer_; }

 private:
  const std::string name_;
  const std::vector<NodeSeries>& series_;
  ValueModel model_;
  agent::SeriesTable table_;
  agent::ReplayBuffer buffer_;
  agent::CycleBuilder builder_;
  std::unique_ptr<agent::StreamClient> client_;
};

// Ticks every agent at a fixed rate on one thread.
class Generator {
 public:
  Generator(std::vector<std::unique_ptr<SimAgent>>& agents, absl::Duration interval)
      : agents_(agents), interval_(interval) {}
  ~Generator() { Stop(); }

  void Start() {
    thread_ = std::thread([this] {
      absl::Time next = absl::Now();
      while (!stop_.load()) {
        for (auto& agent : agents_) {
          agent->Tick();
        }
        cycles_ += agents_.size();
        next += interval_;
        const absl::Time now = absl::Now();
        if (next < now) {
          ++overruns_;  // the generator itself cannot keep the rate: skip ahead
          next = now;
        }
        absl::SleepFor(next - now);
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  uint64_t cycles() const { return cycles_.load(); }
  uint64_t overruns() const { return overruns_.load(); }

 private:
  std::vector<std::unique_ptr<SimAgent>>& agents_;
  const absl::Duration interval_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> cycles_{0};
  std::atomic<uint64_t> overruns_{0};
  std::thread thread_;
};

double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

size_t ConnectedCount(const std::vector<std::unique_ptr<SimAgent>>& agents) {
  size_t n = 0;
  for (const auto& agent : agents) {
    n += agent->stats().connected ? 1 : 0;
  }
  return n;
}

// Waits (bounded) until `done` holds; false on timeout.
template <typename Predicate>
bool WaitUntil(Predicate done, double timeout_s, int poll_ms = 5) {
  const auto start = Clock::now();
  while (SecondsSince(start) < timeout_s) {
    if (done()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return done();
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) {
    return 0;
  }
  std::sort(values.begin(), values.end());
  const size_t index =
      std::min(values.size() - 1, static_cast<size_t>(p * (values.size() - 1) + 0.5));
  return values[index];
}

int Run() {
  Profile profile;
  if (!ParseProfile(absl::GetFlag(FLAGS_profile), &profile)) {
    std::cerr << "--profile must be idle, mixed or busy\n";
    return 2;
  }
  std::vector<NodeSeries> series;
  if (absl::GetFlag(FLAGS_synthetic_series) > 0) {
    series = SyntheticNodeSeries(static_cast<size_t>(absl::GetFlag(FLAGS_synthetic_series)));
  } else {
    auto loaded = LoadNodeSeries(absl::GetFlag(FLAGS_sysfs_root));
    if (!loaded.ok()) {
      std::cerr << "cannot load the node's series from " << absl::GetFlag(FLAGS_sysfs_root) << ": "
                << loaded.status() << " (use --synthetic_series=500)\n";
      return 2;
    }
    series = *std::move(loaded);
  }
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
                               total_series);
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

  std::vector<std::unique_ptr<SimAgent>> agents;
  for (int i = 0; i < agent_count; ++i) {
    agents.push_back(std::make_unique<SimAgent>(i, series, profile, target));
  }
  for (auto& agent : agents) {
    agent->Start();
  }
  if (!WaitUntil([&] { return ConnectedCount(agents) == agents.size(); }, 30)) {
    std::cerr << "only " << ConnectedCount(agents) << " of " << agents.size()
              << " agents connected within 30 s\n";
    return 1;
  }
  Generator generator(agents, absl::Milliseconds(interval_ms));
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
  const double cpu0 = aggregator.CpuSeconds();
  const double self0 = SelfCpuSeconds();
  const uint64_t cycles0 = generator.cycles();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(absl::GetFlag(FLAGS_duration_s)));
  const double wall = SecondsSince(t0);
  const double cpu1 = aggregator.CpuSeconds();
  const double self1 = SelfCpuSeconds();
  const uint64_t cycles1 = generator.cycles();
  const double between_scrapes = SecondsSince(s0);
  const auto m1 = aggregator.Scrape();
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
  const double agg_cpu = cpu1 - cpu0;
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
  std::printf("\n== wire\n");
  std::printf("bytes per sample   %12.3f (received_bytes_total / samples_total, protobuf)\n",
              samples > 0 ? bytes / samples : 0.0);
  std::printf("bytes per batch    %12.1f (%zu samples per batch)\n",
              batches > 0 ? bytes / batches : 0.0, series.size());
  uint64_t agent_bytes = 0;
  for (const auto& agent : agents) {
    agent_bytes += agent->stats().bytes_sent;
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
  absl::ParseCommandLine(argc, argv);
  fabricmon::SetMinLogLevel(fabricmon::LogLevel::kError);
  signal(SIGPIPE, SIG_IGN);
  return fabricmon::bench::Run();
}
