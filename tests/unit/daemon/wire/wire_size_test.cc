// Wire size of the sample stream for a realistic node: the real ib_sysfs collector on the captured
// 8×H100 tree (8 ConnectX-7 NDR HCAs + a BlueField-3 RoCE bond), with counters advanced between
// cycles the way a busy training node's do in one second (the default interval). This is a size
// property of the encoding, so it is asserted; nothing here depends on timing.

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "daemon/agent/collector_runner.h"
#include "daemon/agent/cycle_builder.h"
#include "daemon/agent/series_table.h"
#include "daemon/common/file_reader.h"
#include "daemon/wire/batch_codec.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fixture_path.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon::wire {
namespace {

constexpr int kCycles = 60;  // one minute at the default 1 s interval
constexpr double kNdrBytesPerSecond = 400e9 / 8;

// How a counter file moves in one second.
enum class Motion { kData, kPackets, kWait, kRdmaRequests, kRare, kStill };

Motion MotionOf(absl::string_view file) {
  if (file == "port_xmit_data" || file == "port_rcv_data") {
    return Motion::kData;  // 4-byte words
  }
  if (file == "port_xmit_packets" || file == "port_rcv_packets" || file == "unicast_xmit_packets" ||
      file == "unicast_rcv_packets") {
    return Motion::kPackets;
  }
  if (file == "port_xmit_wait") {
    return Motion::kWait;
  }
  if (file == "rx_write_requests" || file == "rx_read_requests" || file == "rx_dct_connect") {
    return Motion::kRdmaRequests;
  }
  if (file == "lifespan") {
    return Motion::kStill;
  }
  return Motion::kRare;  // error and congestion-event counters
}

// Rewrites a counter file as the kernel would: same inode (the collector keeps it open) and no
// truncation (slow on this ext4, and unnecessary: counters only grow, so the text only lengthens).
void WriteInPlace(const std::string& path, uint64_t value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  const std::string text = absl::StrCat(value);
  EXPECT_EQ(pwrite(fd, text.data(), text.size(), 0), static_cast<ssize_t>(text.size())) << path;
  close(fd);
}

struct CounterFile {
  std::string relative;  // under the tree root
  Motion motion;
  bool management;  // the RoCE bond carries little traffic
  uint64_t value;
};

struct WireSize {
  size_t samples = 0;            // values in the steady-state batches
  size_t batch_bytes = 0;        // protobuf bytes of those AgentMessages
  size_t first_cycle_bytes = 0;  // declarations + layout + first batch
  size_t series = 0;
  double BytesPerSample() const { return static_cast<double>(batch_bytes) / samples; }
  // With gRPC's 5-byte message prefix, i.e. what the HTTP/2 DATA frames carry.
  double GrpcBytesPerSample(int cycles) const {
    return static_cast<double>(batch_bytes + 5 * cycles) / samples;
  }
  // Over a stream that lives `cycles` cycles: the declarations are sent once per stream.
  double AmortizedBytesPerSample(int cycles) const {
    const double per_cycle = static_cast<double>(batch_bytes) / (kCycles - 1);
    return (per_cycle * (cycles - 1) + first_cycle_bytes) / (static_cast<double>(series) * cycles);
  }
};

// Runs the collector for kCycles cycles over a fresh copy of the tree, advancing counters by
// `load` (fraction of line rate on the compute HCAs) and encoding each cycle on one stream.
WireSize Measure(double load, uint64_t seed) {
  // The tree is ~500 files: in memory when the machine has /dev/shm (and the runner chose no
  // TMPDIR), since creating them on the build disk takes seconds.
  if (std::getenv("TMPDIR") == nullptr && access("/dev/shm", W_OK | X_OK) == 0) {
    setenv("TMPDIR", "/dev/shm", /*overwrite=*/0);
  }
  testing::TempTree tree;
  tree.CopyTree(testing::SharedFixture("sysfs/gpud-h100/sys"), "sys");
  std::vector<CounterFile> files;
  const std::string class_dir = tree.root() + "/sys/class/infiniband";
  absl::StatusOr<std::vector<std::string>> devices = ListDirectory(class_dir);
  EXPECT_TRUE(devices.ok() && !devices->empty());
  for (const std::string& device : *devices) {
    for (const char* group : {"counters", "hw_counters"}) {
      const std::string relative =
          absl::StrCat("sys/class/infiniband/", device, "/ports/1/", group);
      absl::StatusOr<std::vector<std::string>> names = ListDirectory(tree.root() + "/" + relative);
      if (!names.ok()) {
        continue;
      }
      for (const std::string& name : *names) {
        absl::StatusOr<std::string> text = ReadTrimmed(tree.root() + "/" + relative + "/" + name);
        uint64_t value = 0;
        if (text.ok() && absl::SimpleAtoi(*text, &value)) {
          files.push_back({relative + "/" + name, MotionOf(name),
                           absl::StartsWith(device, "mlx5_bond"), value});
        }
      }
    }
  }

  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(tree.root() + "/sys");
  absl::StatusOr<std::unique_ptr<collectors::IbSysfsCollector>> collector =
      collectors::IbSysfsCollector::Create(config);
  EXPECT_TRUE(collector.ok());
  // A fake clock: collection durations are then constant, as they nearly are in production
  // (a wall-clock duration would add noise that is not part of the encoding's cost).
  testing::FakeClock clock;
  agent::CollectorRunner runner(*std::move(collector), clock);
  v1::Inventory inventory;
  EXPECT_TRUE(runner.Discover(inventory).ok());

  agent::SeriesTable table;
  agent::CycleBuilder builder(table);
  StreamEncoder encoder(table);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  std::bernoulli_distribution rare_event(0.005);

  WireSize size;
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    if (cycle > 0) {
      // Per-port load varies from second to second around the nominal one.
      std::map<std::string, double> port_bytes;
      for (CounterFile& file : files) {
        const std::string port = file.relative.substr(0, file.relative.rfind("/ports/"));
        if (!port_bytes.count(port)) {
          port_bytes[port] = (file.management ? 0.001 : load) * kNdrBytesPerSecond * jitter(rng);
        }
        const double bytes = port_bytes[port];
        const uint64_t before = file.value;
        switch (file.motion) {
          case Motion::kData:
            file.value += static_cast<uint64_t>(bytes / 4);
            break;
          case Motion::kPackets:
            file.value += static_cast<uint64_t>(bytes / 4096);  // 4 KiB MTU
            break;
          case Motion::kWait:
            file.value += static_cast<uint64_t>(bytes / 1e6 * jitter(rng));  // mild congestion
            break;
          case Motion::kRdmaRequests:
            file.value += static_cast<uint64_t>(bytes / (1 << 20));  // 1 MiB messages
            break;
          case Motion::kRare:
            file.value += rare_event(rng) ? 1 : 0;
            break;
          case Motion::kStill:
            break;
        }
        if (file.value != before) {
          WriteInPlace(tree.root() + "/" + file.relative, file.value);
        }
      }
      clock.AdvanceMillis(1000);
    }
    EXPECT_TRUE(runner.Collect(builder).ok());
    agent::Cycle collected = builder.Finish(clock.NowUnixNanos(), 850);
    std::vector<v1::AgentMessage> messages;
    encoder.Encode(cycle + 1, collected.timestamp_unix_nanos, collected.collect_duration_us, 0,
                   collected.layout, collected.values, &messages);
    size_t bytes = 0;
    for (const v1::AgentMessage& message : messages) {
      bytes += message.ByteSizeLong();
    }
    if (cycle == 0) {
      size.first_cycle_bytes = bytes;
      size.series = collected.values.size();
    } else {
      EXPECT_EQ(messages.size(), 1u) << "only the batch after the first cycle";
      size.batch_bytes += bytes;
      size.samples += collected.values.size();
    }
  }
  return size;
}

void Report(const char* scenario, const WireSize& size) {
  const std::string line = absl::StrFormat(
      "%s: %d series; steady state %.3f B/sample (%.3f with gRPC framing); "
      "first cycle %d B (declarations + layout); with it, over a 1 min stream %.3f B/sample, "
      "over a 1 h stream %.3f B/sample",
      scenario, size.series, size.BytesPerSample(), size.GrpcBytesPerSample(kCycles - 1),
      size.first_cycle_bytes, size.AmortizedBytesPerSample(60), size.AmortizedBytesPerSample(3600));
  std::cout << line << "\n";
  ::testing::Test::RecordProperty(std::string(scenario) + "_bytes_per_sample",
                                  absl::StrFormat("%.3f", size.BytesPerSample()));
}

TEST(WireSizeTest, BusyDgxNodeCostsAtMostTwoBytesPerSample) {
  // 40% of NDR line rate on every compute HCA: data deltas need 5 bytes, packets 4, but most of
  // a node's series are error and state counters that do not move.
  const WireSize size = Measure(/*load=*/0.4, /*seed=*/1);
  Report("busy", size);
  ASSERT_GT(size.series, 400u) << "expected the whole 9-device series set";
  EXPECT_LE(size.BytesPerSample(), 2.0);
  EXPECT_LE(size.GrpcBytesPerSample(kCycles - 1), 2.0);
}

TEST(WireSizeTest, IdleNodeCostsAboutOneBytePerSample) {
  const WireSize size = Measure(/*load=*/0.0, /*seed=*/2);
  Report("idle", size);
  EXPECT_LE(size.BytesPerSample(), 1.1);
}

TEST(WireSizeTest, DeclarationsAreAOneTimeCostPerStream) {
  // The first cycle carries every declaration (names, labels, help: ~160 B a series); after it
  // only batches travel (checked in Measure), so over a stream of an hour at 1 s they no longer
  // matter.
  const WireSize size = Measure(/*load=*/0.4, /*seed=*/3);
  EXPECT_GT(size.first_cycle_bytes, 10 * size.batch_bytes / (kCycles - 1));
  EXPECT_LE(size.AmortizedBytesPerSample(3600), 2.0);
}

}  // namespace
}  // namespace fabricmon::wire
