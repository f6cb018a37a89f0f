#pragma once

// Helpers shared by the NVML collector tests: series keys, state-file builders from the real
// captures in shared/fixtures/nvlink, and a promtool runner.

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collectors/core/recording_sink.h"
#include "daemon/exposition/text_exposition.h"
#include "gtest/gtest.h"

namespace fabricmon::collectors::nvml_test {

// `name{k="v",...}` with labels in the collector's order.
inline std::string SeriesKey(const SeriesDesc& desc) {
  std::string key = desc.name + "{";
  for (size_t i = 0; i < desc.labels.size(); ++i) {
    absl::StrAppend(&key, i ? "," : "", desc.labels[i].first, "=\"", desc.labels[i].second, "\"");
  }
  return key + "}";
}

// Raw values by series key. Fails the calling test on a duplicate series.
inline std::map<std::string, uint64_t> ByKey(const std::vector<RecordedSample>& samples) {
  std::map<std::string, uint64_t> out;
  for (const RecordedSample& sample : samples) {
    const bool inserted = out.emplace(SeriesKey(sample.series), sample.raw_value).second;
    if (!inserted) {
      ADD_FAILURE() << "duplicate series " << SeriesKey(sample.series);
    }
  }
  return out;
}

// One GPU of an `nvidia-smi -q` capture.
struct SmiGpu {
  std::string bus_id;
  std::string name;
  std::string uuid;
  std::vector<uint32_t> pids;
};

// Reads bus id, product name, UUID and process ids of every GPU in an `nvidia-smi -q` file.
inline std::vector<SmiGpu> ParseNvidiaSmiQ(const std::string& path) {
  std::vector<SmiGpu> gpus;
  std::ifstream in(path);
  std::string line;
  auto value_of = [](const std::string& text) {
    const size_t colon = text.find(" : ");
    return colon == std::string::npos
               ? std::string()
               : std::string(absl::StripAsciiWhitespace(text.substr(colon + 3)));
  };
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "GPU 0")) {
      gpus.push_back({std::string(absl::StripAsciiWhitespace(line.substr(4))), "", "", {}});
      continue;
    }
    if (gpus.empty()) {
      continue;
    }
    const std::string trimmed(absl::StripAsciiWhitespace(line));
    if (absl::StartsWith(trimmed, "Product Name")) {
      gpus.back().name = value_of(line);
    } else if (absl::StartsWith(trimmed, "GPU UUID")) {
      gpus.back().uuid = value_of(line);
    } else if (absl::StartsWith(trimmed, "Process ID")) {
      uint32_t pid = 0;
      if (absl::SimpleAtoi(value_of(line), &pid)) {
        gpus.back().pids.push_back(pid);
      }
    }
  }
  return gpus;
}

// One GPU of an `nvidia-smi nvlink -s` capture: UUID and, per link, whether it is active.
struct NvlinkStatusGpu {
  unsigned int index = 0;
  std::string name;
  std::string uuid;
  std::vector<bool> active;  // by link index
};

inline std::vector<NvlinkStatusGpu> ParseNvlinkStatus(const std::string& path) {
  std::vector<NvlinkStatusGpu> gpus;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const std::string trimmed(absl::StripAsciiWhitespace(line));
    if (absl::StartsWith(trimmed, "GPU ")) {
      // GPU 3: Tesla V100-SXM2-32GB (UUID: GPU-50b1bd2e-...)
      NvlinkStatusGpu gpu;
      const size_t colon = trimmed.find(':');
      (void)absl::SimpleAtoi(trimmed.substr(4, colon - 4), &gpu.index);
      const size_t paren = trimmed.find(" (UUID: ");
      gpu.name = trimmed.substr(colon + 2, paren - colon - 2);
      gpu.uuid = trimmed.substr(paren + 8, trimmed.size() - paren - 9);
      gpus.push_back(gpu);
    } else if (absl::StartsWith(trimmed, "Link ") && !gpus.empty()) {
      gpus.back().active.push_back(!absl::StrContains(trimmed, "<inactive>"));
    }
  }
  return gpus;
}

// Runs `promtool check metrics` on `text`. Returns false (and sets *output) if promtool is not
// installed; otherwise true with *exit_code and the tool's output.
inline bool RunPromtool(const std::string& dir, const std::string& text, int* exit_code,
                        std::string* output) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    *output = "promtool not installed";
    return false;
  }
  const std::string path = dir + "/metrics.prom";
  {
    std::ofstream out(path);
    out << text;
  }
  FILE* pipe = popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *output = "popen failed";
    return false;
  }
  char buffer[4096];
  size_t n;
  output->clear();
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    output->append(buffer, n);
  }
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return true;
}

}  // namespace fabricmon::collectors::nvml_test
