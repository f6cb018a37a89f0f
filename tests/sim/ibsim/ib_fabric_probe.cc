// ib_fabric_probe: the ib_fabric collector in a process of its own, driven line by line over
// stdin, for the ibsim tests and the sweep benchmark. Run it under
// LD_PRELOAD=libumad2sim.so (umad2sim only intercepts umad calls in the process that loads it).
//
//   ib_fabric_probe [--config='<IbFabricCollectorConfig textproto>']
//
// Commands (one per line) and their answers, each closed by a line "END":
//   discover     BEGIN discover <status code>, then the inventory in protobuf text format
//   collect      BEGIN collect <status code>, then one line per sample:
//                S<TAB>name<TAB>labels<TAB>raw<TAB>saturated(0|1)<TAB>wants_rediscovery(0|1)
//                with labels as k=v joined by \x1f (values C-escaped)
//   sweep N      N collects back to back into a sink as cheap as the agent's; BEGIN sweep,
//                then per sweep T<TAB>ns<TAB>sent<TAB>ok<TAB>timeouts<TAB>retries<TAB>skipped
//                <TAB>ports<TAB>status<TAB>samples
//   quit         exit 0

#include <iostream>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectors/core/recording_sink.h"
#include "collectors/ib_fabric/ib_fabric_collector.h"
#include "daemon/common/clock.h"
#include "daemon/common/logging.h"
#include "google/protobuf/text_format.h"

namespace fabricmon {
namespace {

// What the agent's sink costs per sample (daemon/agent/cycle_builder.cc: a fingerprint lookup
// and a push), so that `sweep` times the collector as the agent runs it; RecordingSink would
// copy every SeriesDesc.
class FingerprintSink final : public collectors::SampleSink {
 public:
  void Add(const collectors::SeriesDesc& desc, uint64_t raw_value) override {
    auto [it, inserted] = ids_.try_emplace(desc.fingerprint, static_cast<uint32_t>(ids_.size()));
    ids_seen_.push_back(it->second);
    values_.push_back(raw_value);
  }
  void Clear() {
    ids_seen_.clear();
    values_.clear();
  }
  size_t size() const { return values_.size(); }

 private:
  std::unordered_map<uint64_t, uint32_t> ids_;
  std::vector<uint32_t> ids_seen_;
  std::vector<uint64_t> values_;
};

int Main(int argc, char** argv) {
  std::string config_text;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--config=", 0) == 0) {
      config_text = arg.substr(9);
    } else if (arg == "--debug") {
      SetMinLogLevel(LogLevel::kDebug);
    } else {
      std::cerr << "usage: ib_fabric_probe [--config=TEXTPROTO] [--debug]\n";
      return 2;
    }
  }
  v1::IbFabricCollectorConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(config_text, &config)) {
    std::cerr << "ib_fabric_probe: bad --config\n";
    return 2;
  }
  auto collector = collectors::IbFabricCollector::Create(config, RealClock::Get());
  if (!collector.ok()) {
    std::cerr << "ib_fabric_probe: " << collector.status() << "\n";
    return 2;
  }
  FingerprintSink sink;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "quit") {
      break;
    }
    if (line == "discover") {
      v1::Inventory inventory;
      absl::Status status = (*collector)->Discover(inventory);
      std::string text;
      google::protobuf::TextFormat::PrintToString(inventory, &text);
      std::cout << "BEGIN discover " << absl::StatusCodeToString(status.code()) << "\n"
                << (status.ok() ? "" : absl::StrCat("# ", status.message(), "\n")) << text << "END"
                << std::endl;
      continue;
    }
    if (line == "collect") {
      collectors::RecordingSink sink;
      absl::Status status = (*collector)->Collect(sink);
      std::cout << "BEGIN collect " << absl::StatusCodeToString(status.code()) << "\n";
      const bool rediscover = (*collector)->WantsRediscovery();
      for (const collectors::RecordedSample& sample : sink.samples()) {
        std::vector<std::string> labels;
        for (const auto& [key, value] : sample.series.labels) {
          labels.push_back(absl::StrCat(key, "=", absl::CEscape(value)));
        }
        std::cout << "S\t" << sample.series.name << "\t" << absl::StrJoin(labels, "\x1f") << "\t"
                  << sample.raw_value << "\t"
                  << (sample.series.IsSaturated(sample.raw_value) ? 1 : 0) << "\t"
                  << (rediscover ? 1 : 0) << "\n";
      }
      std::cout << "END" << std::endl;
      continue;
    }
    if (line.rfind("sweep ", 0) == 0) {
      int count = 0;
      if (!absl::SimpleAtoi(line.substr(6), &count) || count < 0) {
        std::cout << "BEGIN sweep INVALID_ARGUMENT\nEND" << std::endl;
        continue;
      }
      std::cout << "BEGIN sweep OK\n";
      for (int i = 0; i < count; ++i) {
        sink.Clear();
        absl::Status status = (*collector)->Collect(sink);
        const auto& stats = (*collector)->last_sweep_stats();
        std::cout << "T\t" << (*collector)->last_sweep_ns() << "\t" << stats.sent << "\t"
                  << stats.ok << "\t" << stats.timeouts << "\t" << stats.retries << "\t"
                  << stats.skipped << "\t" << (*collector)->swept_ports() << "\t"
                  << absl::StatusCodeToString(status.code()) << "\t" << sink.size() << "\n";
      }
      std::cout << "END" << std::endl;
      continue;
    }
    std::cout << "BEGIN error\n# unknown command: " << line << "\nEND" << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace fabricmon

int main(int argc, char** argv) { return fabricmon::Main(argc, argv); }
