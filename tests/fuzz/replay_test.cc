// Replays every file of tests/fuzz/corpus/<target>/ (hand-made seeds) and
// tests/fuzz/regressions/<target>/ (inputs that once crashed a target or broke one of its
// invariants) through the same function libFuzzer drives, in every build: a fixed crash stays
// fixed without clang or libFuzzer, and the ASan+UBSan build replays them instrumented.
//
// A target that crashes kills the test binary; ctest shows the target's message and the file
// (printed before each input) in the output.

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "daemon/common/file_reader.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/testing/fixture_path.h"

namespace fabricmon::fuzz {
namespace {

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(dir);
  if (!names.ok()) {
    return files;
  }
  for (const std::string& name : *names) {
    if (name != "README.md" && name[0] != '.') {
      files.push_back(dir + "/" + name);
    }
  }
  return files;
}

class ReplayTest : public ::testing::TestWithParam<FuzzTarget> {};

TEST_P(ReplayTest, CorpusAndRegressionsRunClean) {
  const FuzzTarget& target = GetParam();
  std::vector<std::string> files =
      FilesIn(testing::SourcePath(std::string("tests/fuzz/corpus/") + target.name));
  const std::vector<std::string> regressions =
      FilesIn(testing::SourcePath(std::string("tests/fuzz/regressions/") + target.name));
  files.insert(files.end(), regressions.begin(), regressions.end());
  ASSERT_FALSE(files.empty()) << "no seeds for " << target.name;
  for (const std::string& file : files) {
    absl::StatusOr<std::string> content = ReadSmallFile(file, 8 << 20);
    ASSERT_TRUE(content.ok()) << content.status();
    std::fprintf(stderr, "replay %s: %s (%zu bytes)\n", target.name, file.c_str(), content->size());
    target.function(reinterpret_cast<const uint8_t*>(content->data()), content->size());
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, ReplayTest, ::testing::ValuesIn(AllFuzzTargets()),
                         [](const ::testing::TestParamInfo<FuzzTarget>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace fabricmon::fuzz
