// Remote-write throughput: samples per second per core that the aggregator's remote_write client
// encodes (protobuf + snappy, or a stream's repeated layout by its template: BatchTemplate) and
// sends (libcurl, keep-alive) to a local receiver, and bytes per sample on the wire. The queue
// and send parts take each node's batch as the feed does in a steady state: by template (by
// snappy when --per_send is below a node's 3,000 series). The receiver is a forked child (a minimal
// HTTP/1.1 server answering 204), so this process' CPU time is the client's alone.
//
//   fabricmon_remote_write_bench [--series=N] [--rounds=N] [--shards=N] [--per_send=N]
//   BENCH_SMOKE=1: tiny sizes (seconds, not a measurement).
//
// Prints:
//   encode only: <samples/s per core> samples/s per core, <bytes> bytes/sample
//   encode only (template): the same for a stream's repeated layout (BatchTemplate), with both
//     as ratios to snappy's
//   queued: <bytes> bytes/sample (the queue's heap per pending sample)
//   encode+send: <samples/s per core> samples/s per core (<cpu s> CPU s, <wall s> s wall, ...)

#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/clock.h"
#include "daemon/remote_write/batch_template.h"
#include "daemon/remote_write/curl_sender.h"
#include "daemon/remote_write/encoder.h"
#include "daemon/remote_write/endpoint.h"

namespace {

// The idle endpoint's: its threads never start, so nothing is sent.
class UnusedSender final : public fabricmon::remote_write::Sender {
 public:
  fabricmon::remote_write::SendResult Send(const std::string&, int64_t) override {
    return {0, "not started"};
  }
};

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// One connection: requests with Content-Length bodies, each answered 204, until EOF.
void Serve(int fd) {
  std::string buffer;
  char chunk[1 << 16];
  while (true) {
    size_t header_end;
    while ((header_end = buffer.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = read(fd, chunk, sizeof(chunk));
      if (n <= 0) {
        close(fd);
        return;
      }
      buffer.append(chunk, n);
    }
    size_t length = 0;
    const size_t at = buffer.find("Content-Length: ");
    if (at != std::string::npos && at < header_end) {
      length = std::strtoull(buffer.c_str() + at + 16, nullptr, 10);
    }
    while (buffer.size() < header_end + 4 + length) {
      const ssize_t n = read(fd, chunk, sizeof(chunk));
      if (n <= 0) {
        close(fd);
        return;
      }
      buffer.append(chunk, n);
    }
    buffer.erase(0, header_end + 4 + length);
    static const char kReply[] = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n";
    if (write(fd, kReply, sizeof(kReply) - 1) < 0) {
      close(fd);
      return;
    }
  }
}

// Forks a receiver on a loopback port; returns (pid, port).
std::pair<pid_t, int> StartReceiver() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(listener, 64) != 0) {
    std::perror("bind/listen");
    std::exit(1);
  }
  socklen_t size = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size);
  const pid_t pid = fork();
  if (pid == 0) {
    while (true) {
      const int fd = accept(listener, nullptr, nullptr);
      if (fd >= 0) {
        std::thread(Serve, fd).detach();  // the child is killed at the end
      }
    }
  }
  close(listener);
  return {pid, ntohs(address.sin_port)};
}

// Runs round(0) unmeasured, then restart() (which zeroes what the round counts), then
// round(0..rounds-1): returns their CPU seconds.
template <typename Round, typename Restart>
double MeasuredRounds(int64_t rounds, Round round, Restart restart) {
  round(0);
  restart();
  const double cpu0 = CpuSeconds();
  for (int64_t r = 0; r < rounds; ++r) {
    round(r);
  }
  return CpuSeconds() - cpu0;
}

int64_t Flag(int argc, char** argv, const char* name, int64_t fallback) {
  const std::string prefix = absl::StrCat("--", name, "=");
  for (int i = 1; i < argc; ++i) {
    int64_t value;
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0 &&
        absl::SimpleAtoi(argv[i] + prefix.size(), &value)) {
      return value;
    }
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  namespace rw = fabricmon::remote_write;
  const bool smoke = std::getenv("BENCH_SMOKE") != nullptr;
  // Defaults: ~ one DGX node's 3,000 series × 32 nodes, 1 Hz for 10 s.
  const int64_t series_count = Flag(argc, argv, "series", smoke ? 2000 : 100000);
  const int64_t rounds = Flag(argc, argv, "rounds", smoke ? 3 : 10);
  const int64_t shards = Flag(argc, argv, "shards", 4);
  const int64_t per_send = Flag(argc, argv, "per_send", rw::kDefaultMaxSamplesPerSend);

  // Label sets shaped like an ib_sysfs series: name, node, device, port; an agent's series, so
  // it gets the external labels and not the shard label, as in the aggregator. A node's series are
  // consecutive (3,000 per node), as an agent's batch carries them.
  constexpr int64_t kSeriesPerNode = 3000;
  // The labels an aggregator adds: an operator's external label, and its shard name (which an
  // agent's series does not get). Each series' labels merged once, as the aggregator's feed keeps
  // them per stream.
  const rw::LabelPairs external = {{"cluster", "bench"}};
  const rw::LabelPairs aggregator_labels = {{"shard", "bench-0"}};
  const rw::LabelMerger merger(external, aggregator_labels);
  std::vector<std::string> merged;
  merged.reserve(series_count);
  for (int64_t i = 0; i < series_count; ++i) {
    merger.Append(*rw::MakeLabelSet(absl::StrCat("fabricmon_ib_port_counter_", i % 40, "_total"),
                                    {{"node", absl::StrCat("gpu-node-", i / kSeriesPerNode)},
                                     {"device", absl::StrCat("mlx5_", (i / 40) % 18)},
                                     {"port", "1"}},
                                    rw::SeriesOrigin::kAgent),
                  merged.emplace_back());
  }
  const int64_t base_ms = 1700000000000;
  // One round of every node's batch, each as the feed encodes it, handed to `take`.
  rw::EncodedSamples run;
  auto each_batch = [&](int64_t round, auto take) {
    for (int64_t first = 0; first < series_count; first += kSeriesPerNode) {
      run.Clear();
      for (int64_t i = first; i < std::min(series_count, first + kSeriesPerNode); ++i) {
        // Counter-like values: growing, different per series.
        run.Add(merged[i], base_ms + round * 1000, static_cast<double>(i * 1000003 + round * 4096));
      }
      take(static_cast<uint64_t>(first / kSeriesPerNode), run);
    }
  };

  // One round of every node's batch as the feed writes it once the node's layout repeated: the
  // samples named by key, checked against the node's template (built the first time) and
  // written by it, handed to `take`. A node's batch larger than a request is written the other
  // way by the feed (each_batch): false when that is the case.
  const bool templated = kSeriesPerNode <= per_send;
  std::vector<rw::BatchTemplate> templates(
      static_cast<size_t>((series_count + kSeriesPerNode - 1) / kSeriesPerNode));
  std::vector<rw::KeyedSample> keyed;
  rw::CompressedSamples templated_run;
  auto each_templated_batch = [&](int64_t round, auto take) {
    for (int64_t first = 0; first < series_count; first += kSeriesPerNode) {
      const int64_t last = std::min(series_count, first + kSeriesPerNode);
      keyed.clear();
      for (int64_t i = first; i < last; ++i) {
        keyed.push_back({static_cast<uint32_t>(i - first), base_ms + round * 1000,
                         static_cast<double>(i * 1000003 + round * 4096)});
      }
      rw::BatchTemplate& layout = templates[static_cast<size_t>(first / kSeriesPerNode)];
      if (!layout.Matches(0, keyed) &&
          !layout.Build(0, keyed, [&](uint32_t key) -> absl::string_view {
            return merged[static_cast<size_t>(first) + key];
          })) {
        std::fprintf(stderr, "no template for a batch of %zu samples\n", keyed.size());
        std::exit(1);
      }
      layout.Compress(keyed, templated_run);
      take(static_cast<uint64_t>(first / kSeriesPerNode), templated_run);
    }
  };

  double snappy_rate = 0;   // samples/s per core
  double snappy_bytes = 0;  // per sample
  // 1. Encoding alone, as the aggregator does: every sample written with its series' merged labels
  // into its node's batch, the batch compressed in runs of a request's size (what a shard queues),
  // and the runs joined into request bodies (what a shard sends).
  {
    std::string scratch;
    std::string body;
    std::vector<rw::CompressedSamples> runs;
    size_t bytes = 0;
    int64_t encoded = 0;
    auto encode = [&](uint64_t, const rw::EncodedSamples& batch) {
      for (size_t begin = 0; begin < batch.size(); begin += per_send) {
        const size_t end = std::min<size_t>(batch.size(), begin + per_send);
        runs.clear();
        runs.push_back(rw::CompressSamples(batch, begin, end, scratch));
        rw::JoinRequest(runs, body);
        bytes += body.size();
        encoded += static_cast<int64_t>(end - begin);
      }
    };
    // Unmeasured first: the heap grows to its working size (page faults).
    const double cpu = MeasuredRounds(
        rounds, [&](int64_t r) { each_batch(r, encode); },
        [&] {
          bytes = 0;
          encoded = 0;
        });
    snappy_rate = encoded / cpu;
    snappy_bytes = static_cast<double>(bytes) / encoded;
    std::printf(
        "encode only: %.0f samples/s per core, %.2f bytes/sample (snappy, %lld per "
        "request)\n",
        snappy_rate, snappy_bytes, static_cast<long long>(per_send));
  }

  // 1b. The same batches as the feed writes a stream's batch once its layout repeated (the
  // templates built in an unmeasured first round), the runs joined into request bodies.
  if (templated) {
    std::string body;
    size_t bytes = 0;
    int64_t encoded = 0;
    auto encode = [&](uint64_t, const rw::CompressedSamples& run) {
      rw::JoinRequest(absl::MakeConstSpan(&run, 1), body);  // no copy of the run
      bytes += body.size();
      encoded += static_cast<int64_t>(run.samples);
    };
    // Unmeasured first: the templates are built.
    const double cpu = MeasuredRounds(
        rounds, [&](int64_t r) { each_templated_batch(r, encode); },
        [&] {
          bytes = 0;
          encoded = 0;
        });
    const double rate = encoded / cpu;
    const double per_sample = static_cast<double>(bytes) / encoded;
    std::printf(
        "encode only (template): %.0f samples/s per core, %.2f bytes/sample (%.2fx snappy's "
        "speed, %.2fx its bytes)\n",
        rate, per_sample, rate / snappy_rate, per_sample / snappy_bytes);
  }

  // Queues a round on `endpoint` as the feed does: by template when a node's batch fits in a
  // request, else encoded.
  auto append = [&](rw::Endpoint& endpoint, int64_t round) {
    if (templated) {
      each_templated_batch(round, [&](uint64_t node, rw::CompressedSamples& run) {
        if (!endpoint.AppendCompressed(node, run)) {
          std::fprintf(stderr, "queue full\n");
          std::exit(1);
        }
      });
    } else {
      each_batch(round, [&](uint64_t node, const rw::EncodedSamples& batch) {
        endpoint.AppendEncoded(node, batch);
      });
    }
  };

  // Queue memory: every round queued on an endpoint whose threads never start (nothing leaves),
  // the heap in use before and after.
  {
    rw::QueueOptions queue;
    queue.shards = static_cast<uint32_t>(shards);
    queue.max_samples_per_send = static_cast<uint32_t>(per_send);
    queue.capacity_samples = static_cast<uint64_t>(series_count) * rounds * shards + 1;
    auto idle = rw::Endpoint::Create(
        {"idle", external, queue, aggregator_labels},
        []() -> absl::StatusOr<std::unique_ptr<rw::Sender>> {
          return std::unique_ptr<rw::Sender>(std::make_unique<UnusedSender>());
        },
        fabricmon::RealClock::Get());
    if (!idle.ok()) {
      std::fprintf(stderr, "%s\n", idle.status().ToString().c_str());
      return 1;
    }
    const size_t heap0 = mallinfo2().uordblks;
    for (int64_t r = 0; r < rounds; ++r) {
      append(**idle, r);
    }
    const size_t heap = mallinfo2().uordblks - heap0;
    std::printf("queued: %.1f bytes/sample (%zu samples pending)\n",
                static_cast<double>(heap) / (*idle)->Pending(), (*idle)->Pending());
    (*idle)->Shutdown(0);
  }

  // 2. Encode and send through an Endpoint to the local receiver.
  auto [pid, port] = StartReceiver();
  rw::HttpOptions http;
  http.url = absl::StrCat("http://127.0.0.1:", port, "/api/v1/write");
  rw::QueueOptions queue;
  queue.shards = static_cast<uint32_t>(shards);
  queue.max_samples_per_send = static_cast<uint32_t>(per_send);
  // Room for every sample on every shard: series do not spread evenly over the shards, and the
  // rounds are appended faster than the shards drain them (drops would measure nothing).
  queue.capacity_samples = static_cast<uint64_t>(series_count) * rounds * shards + 1;
  queue.batch_send_deadline_nanos = 5'000'000;
  auto endpoint = rw::Endpoint::Create(
      {"bench", external, queue, aggregator_labels},
      [&http]() -> absl::StatusOr<std::unique_ptr<rw::Sender>> {
        auto sender = rw::CurlSender::Create(http);
        if (!sender.ok()) {
          return sender.status();
        }
        return std::unique_ptr<rw::Sender>(*std::move(sender));
      },
      fabricmon::RealClock::Get());
  if (!endpoint.ok()) {
    std::fprintf(stderr, "%s\n", endpoint.status().ToString().c_str());
    kill(pid, SIGKILL);
    return 1;
  }
  const double cpu0 = CpuSeconds();
  const auto wall0 = std::chrono::steady_clock::now();
  (*endpoint)->Start();
  for (int64_t r = 0; r < rounds; ++r) {
    append(**endpoint, r);
  }
  while ((*endpoint)->Pending() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const double cpu = CpuSeconds() - cpu0;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  (*endpoint)->Shutdown(0);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const uint64_t sent = (*endpoint)->stats().samples_sent.load();
  const uint64_t total = static_cast<uint64_t>(series_count) * rounds;
  std::printf(
      "encode+send: %.0f samples/s per core (%.2f CPU s, %.2f s wall, %lld series x %lld "
      "rounds, %lld shards, %lld per request)\n",
      sent / cpu, cpu, wall, static_cast<long long>(series_count), static_cast<long long>(rounds),
      static_cast<long long>(shards), static_cast<long long>(per_send));
  if (sent != total) {
    std::fprintf(
        stderr, "sent %llu of %llu samples (%llu dropped: queue full)\n",
        static_cast<unsigned long long>(sent), static_cast<unsigned long long>(total),
        static_cast<unsigned long long>((*endpoint)->stats().samples_dropped_queue_full.load()));
    return 1;
  }
  return 0;
}
