#pragma once

// Helpers shared by the ib_sysfs collector tests: generated trees (tests/sim/gen_sysfs_tree.py),
// collector construction, sample lookup, and an independent table of the PMA counter files (the
// tests' own statement of the IBA / kernel sysfs.c counter table, not derived from the code
// under test).

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/core/collector_errors.h"
#include "collectors/core/recording_sink.h"
#include "collectors/ib_sysfs/ib_sysfs_collector.h"
#include "fabricmon/v1/inventory.pb.h"
#include "google/protobuf/struct.pb.h"

namespace fabricmon::collectors::ib_sysfs_testing {

// One PMA counter file under ports/N/counters/ and how it must be exported.
struct PmaFile {
  const char* file;    // kernel file name
  const char* metric;  // expected family
  uint8_t width;       // legacy PortCounters width; traffic counters: 32 legacy / 64 extended
  bool traffic;        // data/packet counter (32 or 64 bits depending on the group)
  bool ext_only;       // only in the extended group (unicast/multicast)
  Unit unit;
  double scale;
};
const std::vector<PmaFile>& PmaFiles();
// gtest prints parameters with this instead of a byte dump.
inline void PrintTo(const PmaFile& file, std::ostream* os) { *os << file.file; }
// nullptr if `file` is not a PMA counters/ file.
const PmaFile* FindPmaFile(absl::string_view file);

// counters_ext/ file → the counters/ file it duplicates ("port_xmit_data_64" → "port_xmit_data").
std::optional<std::string> CountersExtTwin(absl::string_view file);

// Runs tests/sim/gen_sysfs_tree.py. `out` must not exist yet (the generator creates it).
absl::Status GenerateTree(const std::string& out, absl::string_view profile = "dgx-h100",
                          int seed = 1);
// Bumps every counter of a generated tree `steps` times (in place).
absl::Status MutateTree(const std::string& out, int steps = 1);
// The generator's manifest (<out>/fabricmon_sim_manifest.json).
absl::StatusOr<google::protobuf::Struct> LoadManifest(const std::string& out);
// FABRICMON_EINVAL_PATHS value for the manifest's restricted devices.
std::string EinvalPaths(const google::protobuf::Struct& manifest);
// Relative path (under the tree root) of a generated device's real directory.
std::string DevicePath(const google::protobuf::Struct& manifest, absl::string_view device);

// Builds a collector on `root`. Dies (test failure) on a bad config.
std::unique_ptr<IbSysfsCollector> MakeCollector(const std::string& root,
                                                const std::string& include = "",
                                                const std::string& exclude = "",
                                                bool hw_counters = true);

// Discover + Collect into a fresh sink.
struct CollectResult {
  absl::Status discover;
  absl::Status collect;
  v1::Inventory inventory;
  std::vector<RecordedSample> samples;
};
CollectResult DiscoverAndCollect(IbSysfsCollector& collector);
std::vector<RecordedSample> CollectOnce(IbSysfsCollector& collector,
                                        absl::Status* status = nullptr);

// Value of a label of a series ("" if absent).
std::string Label(const SeriesDesc& desc, absl::string_view name);
// The sample of `metric` for device/port (port "" = no port label), or nullptr.
const RecordedSample* Find(const std::vector<RecordedSample>& samples, absl::string_view metric,
                           absl::string_view device, absl::string_view port = "");
// Like Find, for tests that only read the sample: a missing sample is a test failure (not a
// crash) and yields an empty placeholder.
const RecordedSample& Get(const std::vector<RecordedSample>& samples, absl::string_view metric,
                          absl::string_view device, absl::string_view port = "");
// Every sample of a device (any metric).
std::vector<const RecordedSample*> SamplesOfDevice(const std::vector<RecordedSample>& samples,
                                                   absl::string_view device);
// fabricmon_collector_errors_total{kind=...} in `samples` (0 if absent).
uint64_t ErrorCount(const std::vector<RecordedSample>& samples, ErrorKind kind);

// Reads a counter file of a tree as an integer; nullopt if it is not a number.
std::optional<uint64_t> ReadNumber(const std::string& path);

// Checks that every counter file of every port under <root>/class/infiniband (counters/,
// counters_ext/, hw_counters/ except lifespan) whose content is a number is exported with exactly
// that raw value and the expected family, counters_ext/ winning over its counters/ twin. Devices in
// `skip` are ignored. Adds gtest failures; returns the number of files checked.
int ExpectEveryCounterFileExported(const std::string& root,
                                   const std::vector<RecordedSample>& samples,
                                   const std::vector<std::string>& skip = {});

// Number of counter files the collector reads for one port directory (counters/, counters_ext/
// minus shadowed twins, hw_counters/ minus lifespan).
int CounterFilesOfPort(const std::string& port_dir);

}  // namespace fabricmon::collectors::ib_sysfs_testing
