#pragma once

// Helpers shared by the collector benchmark programs (ib_sysfs_bench.cc,
// host_collectors_bench.cc): a sink that only counts, a scratch directory removed at exit, and
// the generated sysfs trees of tests/sim/gen_sysfs_tree.py. Header-only; the including target
// defines FABRICMON_SOURCE_DIR.

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "collectors/core/sample.h"

namespace fabricmon::bench {

// A sink that only counts, like a batch encoder that does nothing.
class CountingSink final : public collectors::SampleSink {
 public:
  void Add(const collectors::SeriesDesc& desc, uint64_t raw_value) override {
    ++values_;
    counters_ += desc.type == collectors::MetricType::kCounter ? 1 : 0;
    checksum_ += raw_value;
  }
  uint64_t values() const { return values_; }
  uint64_t counters() const { return counters_; }
  uint64_t checksum() const { return checksum_; }

 private:
  uint64_t values_ = 0;
  uint64_t counters_ = 0;
  uint64_t checksum_ = 0;
};

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
// path() is empty when it could not be created (the error is printed).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    std::error_code ec;
    std::string pattern =
        (std::filesystem::temp_directory_path(ec) / (prefix + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      return;
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes the `profile` tree of tests/sim/gen_sysfs_tree.py (seed 1) to `out`, which must not
// hold a tree yet. False, with the command on stderr, when the generator fails.
inline bool GenerateSysfsTree(const std::string& profile, const std::string& out) {
  const std::string command =
      absl::StrCat("python3 '", FABRICMON_SOURCE_DIR, "/tests/sim/gen_sysfs_tree.py' --profile ",
                   profile, " --seed 1 --out '", out, "' >/dev/null");
  const int rc = std::system(command.c_str());
  if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    std::fprintf(stderr, "tree generation failed: %s\n", command.c_str());
    return false;
  }
  return true;
}

}  // namespace fabricmon::bench
