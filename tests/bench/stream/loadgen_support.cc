#include "tests/bench/stream/loadgen_support.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/common/clock.h"
#include "grpcpp/grpcpp.h"

namespace fabricmon::bench {

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

namespace {

// Calls fn(labels, value) for every sample of `name` in a text exposition; `labels` is what the
// braces hold ("" for an unlabelled sample).
template <typename Fn>
void ForEachSample(const std::string& text, const std::string& name, Fn fn) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name) || line.size() <= name.size() ||
        (line[name.size()] != ' ' && line[name.size()] != '{')) {
      continue;
    }
    // The value follows the last space (label values may hold spaces, the value never does).
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) {
      continue;
    }
    absl::string_view labels;
    const size_t close = line.rfind('}', space);
    if (line[name.size()] == '{' && close != absl::string_view::npos) {
      labels = line.substr(name.size() + 1, close - name.size() - 1);
    }
    fn(labels, value);
  }
}

// The value of `label` in the braces' text (escapes kept as written), or "" when absent. Walks
// the pairs in order, so a value that holds `label="` is never taken for the label.
std::string LabelValue(absl::string_view labels, const std::string& label) {
  size_t at = 0;
  while (at < labels.size()) {
    const size_t equals = labels.find("=\"", at);
    if (equals == absl::string_view::npos) {
      break;
    }
    const absl::string_view name = labels.substr(at, equals - at);
    const size_t begin = equals + 2;
    size_t end = begin;
    while (end < labels.size() && labels[end] != '"') {
      end += labels[end] == '\\' ? 2 : 1;
    }
    end = std::min(end, labels.size());
    if (name == label) {
      return std::string(labels.substr(begin, end - begin));
    }
    at = end + 2;  // past the closing quote and the comma
  }
  return "";
}

}  // namespace

double SumOfFamily(const std::string& text, const std::string& name) {
  double sum = 0;
  ForEachSample(text, name, [&](absl::string_view, double value) { sum += value; });
  return sum;
}

std::map<std::string, double> SumOfFamilyBy(const std::string& text, const std::string& name,
                                            const std::string& label) {
  std::map<std::string, double> sums;
  ForEachSample(text, name, [&](absl::string_view labels, double value) {
    sums[LabelValue(labels, label)] += value;
  });
  return sums;
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

double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

AggregatorProcess::AggregatorProcess(std::string binary, std::string workdir, int cpu,
                                     const std::string& extra_config, size_t total_series)
    : binary_(std::move(binary)), workdir_(std::move(workdir)), cpu_(cpu) {
  config_path_ = workdir_ + "/aggregator.textproto";
  std::ofstream config(config_path_);
  config << "tls { insecure_plaintext: true }\n" << extra_config << "\n";
  if (!absl::StrContains(extra_config, "new_series_burst")) {
    config << "new_series_burst: " << std::max<size_t>(50000, 2 * total_series) << "\n";
  }
  port_file_ = workdir_ + "/grpc.port";
}

bool AggregatorProcess::Start(int grpc_port) {
  // FreePort's port can be taken before the aggregator binds it (an outgoing connection's local
  // port, or one still closing from the previous run's connections): the aggregator then exits 2
  // ("cannot listen on"), and another free port is tried.
  for (int attempt = 1;; ++attempt) {
    switch (StartOnce(grpc_port)) {
      case StartResult::kStarted:
        return true;
      case StartResult::kTimedOut:
        return false;
      case StartResult::kExited:
        if (attempt == 3) {
          return false;
        }
        std::cerr << "trying another /metrics port\n";
        metrics_port_ = 0;
        break;
    }
  }
}

AggregatorProcess::StartResult AggregatorProcess::StartOnce(int grpc_port) {
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
  // Bounded wait for the port file (written once the gRPC server listens) and /metrics.
  grpc_port_ = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  auto exited = [&] {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) {
      return false;
    }
    std::cerr << "aggregator exited during start-up; see " << log_path << "\n";
    pid_ = -1;
    return true;
  };
  while (Clock::now() < deadline) {
    if (exited()) {
      return StartResult::kExited;
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
    return StartResult::kTimedOut;
  }
  // The port file is written once gRPC listens, before /metrics binds.
  while (Clock::now() < deadline) {
    if (exited()) {
      return StartResult::kExited;
    }
    if (!HttpGet(metrics_port_, "/metrics").empty()) {
      return StartResult::kStarted;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return StartResult::kTimedOut;
}

double AggregatorProcess::Stop() {
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

void AggregatorProcess::Kill() {
  if (pid_ <= 0) {
    return;
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void AggregatorProcess::SendKill() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);  // not reaped: the pid stays ours until Kill() or Stop() waits for it
  }
}

double AggregatorProcess::CpuSeconds() const { return ProcessCpuSeconds(pid_); }

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
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

CpuSnapshot TakeCpuSnapshot(pid_t pid) {
  CpuSnapshot snapshot;
  snapshot.stat_seconds = ProcessCpuSeconds(pid);
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(tasks, error)) {
    pid_t tid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &tid)) {
      continue;
    }
    std::ifstream in(entry.path() / "schedstat");
    uint64_t run_ns = 0;
    if (in >> run_ns) {  // a thread gone between the listing and the read is skipped
      snapshot.task_ns[tid] = run_ns;
    }
  }
  return snapshot;
}

double CpuSecondsBetween(const CpuSnapshot& before, const CpuSnapshot& after) {
  uint64_t live_ns = 0;
  for (const auto& [tid, ns] : after.task_ns) {
    const auto earlier = before.task_ns.find(tid);
    live_ns += ns - (earlier == before.task_ns.end() ? 0 : std::min(ns, earlier->second));
  }
  const double live = static_cast<double>(live_ns) / 1e9;
  const bool one_exited =
      std::any_of(before.task_ns.begin(), before.task_ns.end(),
                  [&](const auto& task) { return after.task_ns.count(task.first) == 0; });
  if (!after.task_ns.empty() && !one_exited) {
    return live;
  }
  return std::max(after.stat_seconds - before.stat_seconds, live);
}

uint64_t AggregatorProcess::StatusBytes(const char* key) const {
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

std::string AggregatorProcess::MetricsText() const { return HttpGet(metrics_port_, "/metrics"); }

std::string SimNodeName(int index) { return absl::StrFormat("loadgen-%04d", index); }

SimAgent::SimAgent(int index, const std::vector<NodeSeries>& series, Profile profile,
                   const SimAgentOptions& sim)
    : name_(SimNodeName(index)),
      series_(series),
      model_(series, profile, static_cast<uint64_t>(index) + 1),
      buffer_(sim.replay_buffer_bytes),
      builder_(table_) {
  // As fabricmon-agent configures its channel, with its own connection per simulated node, as N
  // separate agent processes would have.
  grpc::ChannelArguments args =
      sim.grpc_default_channel_backoff
          ? agent::AgentChannelArguments(std::nullopt, std::nullopt)
          : agent::AgentChannelArguments(sim.initial_backoff, sim.max_backoff);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  agent::StreamClientOptions options;
  if (sim.aggregators.empty()) {
    options.channel =
        grpc::CreateCustomChannel(sim.target, grpc::InsecureChannelCredentials(), args);
  } else {
    // The agent's own directory: the rendezvous ranking of this node's name, one channel each.
    auto directory = agent::AggregatorDirectory::Create(
        sim.aggregators, name_, [args](const std::string& address, const std::string&) {
          return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
        });
    if (!directory.ok()) {
      // The bench builds the list itself from the shards' ports: a bad one is a bug here.
      std::cerr << "aggregator list: " << directory.status() << "\n";
      std::abort();
    }
    directory_ = *std::move(directory);
    options.directory = directory_.get();
    options.failover_after = sim.failover_after;
    options.failback_after = sim.failback_after;
  }
  options.node_name = name_;
  options.boot_id = absl::StrCat("boot-", name_);
  options.agent_version = "loadgen";
  options.agent_instance_id = 0x10000000ull + static_cast<uint64_t>(index);
  options.coalesce = sim.coalesce;
  options.initial_backoff = sim.initial_backoff;
  options.max_backoff = sim.max_backoff;
  options.jitter_seed = static_cast<uint64_t>(index) * 7919 + 1;
  const uint64_t instance = options.agent_instance_id;
  const std::string boot = options.boot_id;
  const std::string name = name_;
  const uint32_t interval_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(sim.interval));
  client_ = std::make_unique<agent::StreamClient>(
      options, buffer_, table_, [name, boot, instance, interval_ms] {
        v1::Hello hello;
        hello.set_node_name(name);
        hello.set_boot_id(boot);
        hello.set_agent_version("loadgen");
        hello.set_protocol_revision(v1::PROTOCOL_REVISION_1);
        hello.set_agent_instance_id(instance);
        hello.set_min_interval_ms(interval_ms);
        v1::CollectorStatus* collector = hello.add_collectors();
        collector->set_name("ib_sysfs");
        collector->set_state("OK");
        collector->set_interval_ms(interval_ms);
        return hello;
      });
}

void SimAgent::Tick() {
  const std::vector<uint64_t>& values = model_.Next();
  for (size_t i = 0; i < series_.size(); ++i) {
    builder_.Add(series_[i].desc, values[i]);
  }
  buffer_.Push(builder_.Finish(RealClock::Get().NowUnixNanos(), 100));
  client_->Notify();
}

void Generator::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Generator::Stop() {
  stop_ = true;
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Generator::Run() {
  // Spread: ticks in groups, each group at its share of the interval (a sleep per agent would
  // cost more than the tick at thousands of agents).
  constexpr size_t kGroup = 16;
  absl::Time next = absl::Now();
  while (!stop_.load()) {
    const absl::Time round_start = next;
    for (size_t i = 0; i < agents_.size() && !stop_.load(); ++i) {
      if (spread_ && i % kGroup == 0 && i > 0) {
        const absl::Time slot = round_start + interval_ * (static_cast<double>(i) /
                                                           static_cast<double>(agents_.size()));
        const absl::Time now = absl::Now();
        if (slot > now) {
          absl::SleepFor(slot - now);
        }
      }
      agents_[i]->Tick();
      // Counted per tick, not per round: a window shorter than a round (a 60 s window at one
      // cycle per 120 s) would otherwise see whole rounds or none.
      cycles_.fetch_add(1, std::memory_order_relaxed);
    }
    next += interval_;
    const absl::Time now = absl::Now();
    if (next < now) {
      ++overruns_;  // the generator itself cannot keep the rate: skip ahead
      next = now;
    }
    absl::SleepFor(next - now);
  }
}

}  // namespace fabricmon::bench
