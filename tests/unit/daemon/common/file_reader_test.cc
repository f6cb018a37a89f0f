#include "daemon/common/file_reader.h"

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_tree.h"

namespace fabricmon {
namespace {

using testing::StatusIs;

TEST(JoinPathTest, NeverDoubleSlash) {
  EXPECT_EQ(JoinPath("/sys", "/class/infiniband"), "/sys/class/infiniband");
  EXPECT_EQ(JoinPath("/sys/", "class"), "/sys/class");
  EXPECT_EQ(JoinPath("", "class"), "/class");
  EXPECT_EQ(JoinPath("/tmp/x", ""), "/tmp/x");
}

TEST(PreadFileTest, RereadsCurrentContentFromOffsetZero) {
  testing::TempTree tree;
  tree.WriteFile("counter", "41\n");
  absl::StatusOr<PreadFile> file = PreadFile::Open(tree.root() + "/counter");
  FABRICMON_ASSERT_OK(file);
  char buffer[16];
  absl::StatusOr<size_t> n = file->Read(buffer, sizeof(buffer));
  FABRICMON_ASSERT_OK(n);
  EXPECT_EQ(std::string(buffer, *n), "41\n");
  // Overwrite in place (same inode, as sysfs regenerates content on read).
  FILE* f = std::fopen((tree.root() + "/counter").c_str(), "r+");
  ASSERT_NE(f, nullptr);
  std::fputs("42\n", f);
  std::fclose(f);
  n = file->Read(buffer, sizeof(buffer));
  FABRICMON_ASSERT_OK(n);
  EXPECT_EQ(std::string(buffer, *n), "42\n");
}

TEST(FileReaderTest, ErrorsKeepErrnoMeaning) {
  testing::TempTree tree;
  EXPECT_THAT(ReadSmallFile(tree.root() + "/missing"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ListDirectory(tree.root() + "/missing"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ReadLinkBasename(tree.root() + "/missing"), StatusIs(absl::StatusCode::kNotFound));
  tree.MakeDir("dir");
  // Reading a directory is EISDIR: an error, not a crash or an empty value.
  EXPECT_FALSE(ReadSmallFile(tree.root() + "/dir").ok());
  PreadFile closed;
  char buffer[4];
  EXPECT_THAT(closed.Read(buffer, sizeof(buffer)), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(FileReaderTest, ListsSortedAndResolvesDriverLink) {
  testing::TempTree tree;
  tree.WriteFile("d/b", "");
  tree.WriteFile("d/a", "");
  tree.Symlink("dev/driver", "../../bus/pci/drivers/mlx5_core");
  auto names = ListDirectory(tree.root() + "/d");
  FABRICMON_ASSERT_OK(names);
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b"}));
  auto driver = ReadLinkBasename(tree.root() + "/dev/driver");
  FABRICMON_ASSERT_OK(driver);
  EXPECT_EQ(*driver, "mlx5_core");
}

}  // namespace
}  // namespace fabricmon
