#include "tests/unit/collectors/ib_sysfs/ib_sysfs_test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectors/core/sysfs_value.h"
#include "daemon/common/file_reader.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::collectors::ib_sysfs_testing {

namespace fs = std::filesystem;

const std::vector<PmaFile>& PmaFiles() {
  // IBA PortCounters, PortCountersExtended; kernel drivers/infiniband/core/sysfs.c.
  static const auto* files = new std::vector<PmaFile>{
      {"symbol_error", "fabricmon_ib_symbol_error_total", 16, false, false, Unit::kNone, 1},
      {"link_error_recovery", "fabricmon_ib_link_error_recovery_total", 8, false, false,
       Unit::kNone, 1},
      {"link_downed", "fabricmon_ib_link_downed_total", 8, false, false, Unit::kNone, 1},
      {"port_rcv_errors", "fabricmon_ib_port_rcv_errors_total", 16, false, false, Unit::kNone, 1},
      {"port_rcv_remote_physical_errors", "fabricmon_ib_port_rcv_remote_physical_errors_total", 16,
       false, false, Unit::kNone, 1},
      {"port_rcv_switch_relay_errors", "fabricmon_ib_port_rcv_switch_relay_errors_total", 16, false,
       false, Unit::kNone, 1},
      {"port_xmit_discards", "fabricmon_ib_port_xmit_discards_total", 16, false, false, Unit::kNone,
       1},
      {"port_xmit_constraint_errors", "fabricmon_ib_port_xmit_constraint_errors_total", 8, false,
       false, Unit::kNone, 1},
      {"port_rcv_constraint_errors", "fabricmon_ib_port_rcv_constraint_errors_total", 8, false,
       false, Unit::kNone, 1},
      {"local_link_integrity_errors", "fabricmon_ib_local_link_integrity_errors_total", 4, false,
       false, Unit::kNone, 1},
      {"excessive_buffer_overrun_errors", "fabricmon_ib_excessive_buffer_overrun_errors_total", 4,
       false, false, Unit::kNone, 1},
      {"VL15_dropped", "fabricmon_ib_vl15_dropped_total", 16, false, false, Unit::kNone, 1},
      {"port_rcv_discards", "fabricmon_ib_port_rcv_discards_total", 16, false, false, Unit::kNone,
       1},
      // 32-bit in every group (PortCounters offset 320).
      {"port_xmit_wait", "fabricmon_ib_port_xmit_wait_total", 32, false, false, Unit::kTicks, 1},
      // Octets / 4 (IBA PortXmitData/PortRcvData).
      {"port_xmit_data", "fabricmon_ib_port_xmit_data_bytes_total", 32, true, false, Unit::kBytes,
       4},
      {"port_rcv_data", "fabricmon_ib_port_rcv_data_bytes_total", 32, true, false, Unit::kBytes, 4},
      {"port_xmit_packets", "fabricmon_ib_port_xmit_packets_total", 32, true, false, Unit::kPackets,
       1},
      {"port_rcv_packets", "fabricmon_ib_port_rcv_packets_total", 32, true, false, Unit::kPackets,
       1},
      {"unicast_xmit_packets", "fabricmon_ib_unicast_xmit_packets_total", 64, true, true,
       Unit::kPackets, 1},
      {"unicast_rcv_packets", "fabricmon_ib_unicast_rcv_packets_total", 64, true, true,
       Unit::kPackets, 1},
      {"multicast_xmit_packets", "fabricmon_ib_multicast_xmit_packets_total", 64, true, true,
       Unit::kPackets, 1},
      {"multicast_rcv_packets", "fabricmon_ib_multicast_rcv_packets_total", 64, true, true,
       Unit::kPackets, 1},
  };
  return *files;
}

const PmaFile* FindPmaFile(absl::string_view file) {
  for (const PmaFile& f : PmaFiles()) {
    if (file == f.file) {
      return &f;
    }
  }
  return nullptr;
}

std::optional<std::string> CountersExtTwin(absl::string_view file) {
  static const auto* twins = new std::map<std::string, std::string, std::less<>>{
      {"port_xmit_data_64", "port_xmit_data"},
      {"port_rcv_data_64", "port_rcv_data"},
      {"port_xmit_packets_64", "port_xmit_packets"},
      {"port_rcv_packets_64", "port_rcv_packets"},
      {"port_unicast_xmit_packets", "unicast_xmit_packets"},
      {"port_unicast_rcv_packets", "unicast_rcv_packets"},
      {"port_multicast_xmit_packets", "multicast_xmit_packets"},
      {"port_multicast_rcv_packets", "multicast_rcv_packets"},
  };
  auto it = twins->find(file);
  if (it == twins->end()) {
    return std::nullopt;
  }
  return it->second;
}

namespace {

// A generated tree is ~900 small files and symlinks: about 0.1 s on a tmpfs, but more than a
// second on a busy virtual disk. TempTree follows TMPDIR (std::filesystem::temp_directory_path),
// so prefer /dev/shm when the caller has not chosen a TMPDIR. Runs before any test.
[[maybe_unused]] const bool kMemoryBackedTmpdir = [] {
  if (std::getenv("TMPDIR") == nullptr && access("/dev/shm", W_OK | X_OK) == 0) {
    return setenv("TMPDIR", "/dev/shm", /*overwrite=*/0) == 0;
  }
  return false;
}();

// The generator needs only the standard library, so any python3 will do; the distribution's
// avoids wrapper scripts (pyenv shims cost ~0.3 s per call). FABRICMON_PYTHON3 overrides.
std::string Python3() {
  if (const char* env = std::getenv("FABRICMON_PYTHON3"); env != nullptr && *env != '\0') {
    return env;
  }
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

absl::Status RunGenerator(const std::string& args) {
  const std::string command =
      absl::StrCat(Python3(), " '", testing::SourcePath("tests/sim/gen_sysfs_tree.py"), "' ", args,
                   " >/dev/null");
  const int rc = std::system(command.c_str());
  if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    return absl::InternalError(absl::StrCat("generator failed (", rc, "): ", command));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GenerateTree(const std::string& out, absl::string_view profile, int seed) {
  return RunGenerator(absl::StrCat("--profile ", profile, " --out '", out, "' --seed ", seed));
}

absl::Status MutateTree(const std::string& out, int steps) {
  return RunGenerator(absl::StrCat("--mutate --out '", out, "' --steps ", steps));
}

absl::StatusOr<google::protobuf::Struct> LoadManifest(const std::string& out) {
  absl::StatusOr<std::string> text =
      ReadSmallFile(JoinPath(out, "fabricmon_sim_manifest.json"), 1 << 22);
  if (!text.ok()) {
    return text.status();
  }
  google::protobuf::Struct manifest;
  auto status = google::protobuf::util::JsonStringToMessage(*text, &manifest);
  if (!status.ok()) {
    return absl::DataLossError(absl::StrCat("manifest: ", status.ToString()));
  }
  return manifest;
}

std::string EinvalPaths(const google::protobuf::Struct& manifest) {
  std::vector<std::string> paths;
  for (const auto& value : manifest.fields().at("einval_paths").list_value().values()) {
    paths.push_back(value.string_value());
  }
  return absl::StrJoin(paths, ":");
}

std::string DevicePath(const google::protobuf::Struct& manifest, absl::string_view device) {
  for (const auto& value : manifest.fields().at("devices").list_value().values()) {
    const auto& fields = value.struct_value().fields();
    if (fields.at("name").string_value() == device) {
      return fields.at("path").string_value();
    }
  }
  ADD_FAILURE() << "no device " << device << " in the manifest";
  return "";
}

std::unique_ptr<IbSysfsCollector> MakeCollector(const std::string& root, const std::string& include,
                                                const std::string& exclude, bool hw_counters) {
  v1::IbSysfsCollectorConfig config;
  config.set_sysfs_root(root);
  config.mutable_devices()->set_include(include);
  config.mutable_devices()->set_exclude(exclude);
  config.set_hw_counters(hw_counters);
  auto collector = IbSysfsCollector::Create(config);
  EXPECT_TRUE(collector.ok()) << collector.status();
  return collector.ok() ? *std::move(collector) : nullptr;
}

CollectResult DiscoverAndCollect(IbSysfsCollector& collector) {
  CollectResult result;
  result.discover = collector.Discover(result.inventory);
  RecordingSink sink;
  result.collect = collector.Collect(sink);
  result.samples = sink.Take();
  return result;
}

std::vector<RecordedSample> CollectOnce(IbSysfsCollector& collector, absl::Status* status) {
  RecordingSink sink;
  absl::Status s = collector.Collect(sink);
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s;
  }
  return sink.Take();
}

std::string Label(const SeriesDesc& desc, absl::string_view name) {
  for (const auto& [key, value] : desc.labels) {
    if (key == name) {
      return value;
    }
  }
  return "";
}

const RecordedSample* Find(const std::vector<RecordedSample>& samples, absl::string_view metric,
                           absl::string_view device, absl::string_view port) {
  for (const RecordedSample& sample : samples) {
    if (sample.series.name == metric && Label(sample.series, "device") == device &&
        Label(sample.series, "port") == port) {
      return &sample;
    }
  }
  return nullptr;
}

const RecordedSample& Get(const std::vector<RecordedSample>& samples, absl::string_view metric,
                          absl::string_view device, absl::string_view port) {
  static const auto* missing = new RecordedSample();
  const RecordedSample* sample = Find(samples, metric, device, port);
  if (sample == nullptr) {
    ADD_FAILURE() << "no sample " << metric << "{device=" << device << ",port=" << port << "}";
    return *missing;
  }
  return *sample;
}

std::vector<const RecordedSample*> SamplesOfDevice(const std::vector<RecordedSample>& samples,
                                                   absl::string_view device) {
  std::vector<const RecordedSample*> out;
  for (const RecordedSample& sample : samples) {
    if (Label(sample.series, "device") == device) {
      out.push_back(&sample);
    }
  }
  return out;
}

uint64_t ErrorCount(const std::vector<RecordedSample>& samples, ErrorKind kind) {
  for (const RecordedSample& sample : samples) {
    if (sample.series.name == "fabricmon_collector_errors_total" &&
        Label(sample.series, "kind") == ErrorKindName(kind)) {
      return sample.raw_value;
    }
  }
  return 0;
}

std::optional<uint64_t> ReadNumber(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path);
  if (!text.ok()) {
    return std::nullopt;
  }
  ParsedCounter parsed = ParseCounter(*text);
  if (!parsed.ok) {
    return std::nullopt;
  }
  return parsed.value;
}

namespace {

// Expected family and scale of one counter file, from the tests' own table.
struct Expected {
  std::string metric;
  double scale = 1;
};

Expected ExpectedFor(absl::string_view group, absl::string_view file) {
  if (group == "hw_counters") {
    std::string name;
    bool underscore = false;
    for (char c : file) {
      if (absl::ascii_isalnum(static_cast<unsigned char>(c))) {
        if (underscore && !name.empty()) {
          name.push_back('_');
        }
        underscore = false;
        name.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
      } else {
        underscore = true;
      }
    }
    return {absl::StrCat("fabricmon_ib_hw_", name, "_total"), 1};
  }
  std::string base(file);
  if (group == "counters_ext") {
    std::optional<std::string> twin = CountersExtTwin(file);
    if (!twin) {
      ADD_FAILURE() << "unknown counters_ext file " << file;
      return {};
    }
    base = *twin;
  }
  const PmaFile* pma = FindPmaFile(base);
  if (pma == nullptr) {
    ADD_FAILURE() << "unknown counters file " << file;
    return {};
  }
  return {pma->metric, pma->scale};
}

}  // namespace

int CounterFilesOfPort(const std::string& port_dir) {
  std::set<std::string> metrics;
  for (const char* group : {"counters", "counters_ext", "hw_counters"}) {
    absl::StatusOr<std::vector<std::string>> files = ListDirectory(JoinPath(port_dir, group));
    if (!files.ok()) {
      continue;
    }
    for (const std::string& file : *files) {
      if (file == "lifespan" && absl::string_view(group) == "hw_counters") {
        continue;
      }
      metrics.insert(ExpectedFor(group, file).metric);
    }
  }
  return static_cast<int>(metrics.size());
}

int ExpectEveryCounterFileExported(const std::string& root,
                                   const std::vector<RecordedSample>& samples,
                                   const std::vector<std::string>& skip) {
  int checked = 0;
  const std::string class_dir = JoinPath(root, "class/infiniband");
  absl::StatusOr<std::vector<std::string>> devices = ListDirectory(class_dir);
  EXPECT_TRUE(devices.ok()) << devices.status();
  if (!devices.ok()) {
    return 0;
  }
  for (const std::string& device : *devices) {
    if (std::find(skip.begin(), skip.end(), device) != skip.end()) {
      continue;
    }
    absl::StatusOr<std::vector<std::string>> ports =
        ListDirectory(JoinPath(class_dir, device + "/ports"));
    if (!ports.ok()) {
      continue;
    }
    for (const std::string& port : *ports) {
      const std::string port_dir = JoinPath(class_dir, device + "/ports/" + port);
      const bool has_ext = fs::is_directory(JoinPath(port_dir, "counters_ext"));
      for (const char* group : {"counters", "counters_ext", "hw_counters"}) {
        absl::StatusOr<std::vector<std::string>> files = ListDirectory(JoinPath(port_dir, group));
        if (!files.ok()) {
          continue;
        }
        for (const std::string& file : *files) {
          const absl::string_view g(group);
          if (g == "hw_counters" && file == "lifespan") {
            continue;
          }
          const std::string path = JoinPath(port_dir, absl::StrCat(group, "/", file));
          std::optional<uint64_t> value = ReadNumber(path);
          if (!value) {
            continue;  // N/A (no PMA), empty, junk: checked by the tests that plant them
          }
          if (g == "counters" && has_ext) {
            // Shadowed by a counters_ext/ twin?
            bool shadowed = false;
            absl::StatusOr<std::vector<std::string>> ext =
                ListDirectory(JoinPath(port_dir, "counters_ext"));
            for (const std::string& e : ext.ok() ? *ext : std::vector<std::string>{}) {
              shadowed = shadowed || CountersExtTwin(e) == file;
            }
            if (shadowed) {
              continue;
            }
          }
          const Expected expected = ExpectedFor(group, file);
          const RecordedSample* sample = Find(samples, expected.metric, device, port);
          ++checked;
          if (sample == nullptr) {
            ADD_FAILURE() << "no " << expected.metric << " for " << path;
            continue;
          }
          EXPECT_EQ(sample->raw_value, *value) << path;
          EXPECT_EQ(sample->series.type, MetricType::kCounter) << path;
          EXPECT_EQ(sample->series.scale, expected.scale) << path;
          EXPECT_EQ(ExportedValue(sample->series, sample->raw_value),
                    static_cast<double>(*value) * expected.scale)
              << path;
          // No raw value may exceed the width its series declares.
          EXPECT_LE(sample->raw_value, sample->series.MaxRaw()) << path;
        }
      }
    }
  }
  return checked;
}

}  // namespace fabricmon::collectors::ib_sysfs_testing
