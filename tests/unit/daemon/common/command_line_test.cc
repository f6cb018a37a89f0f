// The shared command line (daemon/common/command_line.h): --help lists the program's own flags,
// --version names version and revision, and an unknown flag or a bad value becomes one line and
// exit status 2 instead of Abseil's exit 1.

#include "daemon/common/command_line.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "daemon/common/build_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, cl_test_config, "", "A configuration file.");
ABSL_FLAG(bool, cl_test_once, false, "Run once.");
ABSL_FLAG(int, cl_test_count, 3, "How many.");

namespace fabricmon {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

// argv from strings (CheckFlags takes char**, as main does).
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : args_(std::move(args)) {
    for (std::string& arg : args_) {
      pointers_.push_back(arg.data());
    }
    pointers_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(args_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> pointers_;
};

std::string Check(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  Argv argv(std::move(args));
  return CheckFlags(argv.argc(), argv.argv(), "prog");
}

ProgramInfo TestProgram() {
  ProgramInfo info;
  info.name = "prog";
  info.summary = "a test program";
  info.usage = {"prog --cl_test_config=FILE"};
  info.commands = {{"run NAME", "runs NAME"}};
  info.exit_statuses = {{"0", "fine"}, {"2", "usage"}};
  info.value_names = {{"cl_test_config", "FILE"}};
  info.flags_file = __FILE__;
  return info;
}

TEST(HelpTextTest, ListsTheProgramsOwnFlagsCommandsAndExitStatuses) {
  const std::string help = HelpText(TestProgram());
  EXPECT_THAT(help, StartsWith("prog - a test program\n\nUsage:\n  prog --cl_test_config=FILE\n"));
  EXPECT_THAT(help, AllOf(HasSubstr("\nCommands:\n  run NAME  runs NAME\n"),
                          HasSubstr("\n  --cl_test_config=FILE  A configuration file.\n"),
                          HasSubstr("\n  --cl_test_count=N      How many. (default 3)\n"),
                          HasSubstr("\n  --cl_test_once         Run once.\n"),
                          HasSubstr("\n  --help "), HasSubstr("\n  --version "),
                          HasSubstr("\nExit status:\n  0  fine\n  2  usage\n")));
  // Not Abseil's own flags, nor another file's.
  EXPECT_THAT(help, AllOf(Not(HasSubstr("--flagfile")), Not(HasSubstr("--undefok")),
                          Not(HasSubstr("--helpshort"))));
}

TEST(HelpTextTest, AnotherFilesFlagsAreLeftOut) {
  ProgramInfo info = TestProgram();
  info.flags_file = "somewhere/else.cc";
  EXPECT_THAT(HelpText(info),
              AllOf(Not(HasSubstr("--cl_test_count")), Not(HasSubstr("Run once."))));
}

TEST(CheckFlagsTest, KnownFlagsInEverySpellingPass) {
  EXPECT_THAT(Check({}), IsEmpty());
  EXPECT_THAT(Check({"--cl_test_config=a.textproto", "run", "x"}), IsEmpty());
  EXPECT_THAT(Check({"-cl_test_once", "--nocl_test_once", "--cl_test_once=false"}), IsEmpty());
  EXPECT_THAT(Check({"--cl_test_count", "7"}), IsEmpty());
  EXPECT_EQ(absl::GetFlag(FLAGS_cl_test_count), 7);
  // Abseil's own usage flags go on to Abseil.
  EXPECT_THAT(Check({"--helpfull"}), IsEmpty());
  EXPECT_THAT(Check({"--helpshort", "--helpon", "command_line_test"}), IsEmpty());
  // After "--" everything is positional.
  EXPECT_THAT(Check({"--", "--no_such_flag"}), IsEmpty());
}

TEST(CheckFlagsTest, UnknownFlagIsOneLineWithTheHint) {
  EXPECT_EQ(Check({"--no_such_flag"}), "prog: unknown flag --no_such_flag; see --help");
  EXPECT_EQ(Check({"--no_such_flag=1"}), "prog: unknown flag --no_such_flag; see --help");
  EXPECT_EQ(Check({"-x"}), "prog: unknown flag -x; see --help");
  EXPECT_EQ(Check({"--=1"}), "prog: unknown flag --; see --help");
  // --no<name> only negates booleans.
  EXPECT_EQ(Check({"--nocl_test_count"}), "prog: unknown flag --nocl_test_count; see --help");
}

TEST(CheckFlagsTest, BadOrMissingValuesAreUsageErrors) {
  EXPECT_THAT(Check({"--cl_test_count=many"}),
              AllOf(StartsWith("prog: bad value for --cl_test_count: "), HasSubstr("many"),
                    HasSubstr("; see --help")));
  EXPECT_THAT(Check({"--cl_test_once=maybe"}), StartsWith("prog: bad value for --cl_test_once"));
  EXPECT_EQ(Check({"--cl_test_config"}), "prog: missing value for --cl_test_config; see --help");
}

TEST(ParseCommandLineTest, HelpAndVersionExitZeroUnknownFlagsExitTwo) {
  ProgramInfo info = TestProgram();
  {
    Argv argv({"prog", "--no_such_flag", "--help"});
    EXPECT_EQ(ParseCommandLine(argv.argc(), argv.argv(), info).exit_status, kExitOk);
  }
  {
    Argv argv({"prog", "--version"});
    EXPECT_EQ(ParseCommandLine(argv.argc(), argv.argv(), info).exit_status, kExitOk);
  }
  {
    Argv argv({"prog", "--no_such_flag"});
    EXPECT_EQ(ParseCommandLine(argv.argc(), argv.argv(), info).exit_status, kExitUsage);
  }
  {
    Argv argv({"prog", "--cl_test_count=4", "run", "x"});
    ParsedCommandLine parsed = ParseCommandLine(argv.argc(), argv.argv(), info);
    EXPECT_FALSE(parsed.exit_status.has_value());
    ASSERT_EQ(parsed.positional.size(), 3u);
    EXPECT_STREQ(parsed.positional[1], "run");
    EXPECT_EQ(absl::GetFlag(FLAGS_cl_test_count), 4);
  }
}

TEST(VersionLineTest, NamesProgramVersionAndRevision) {
  EXPECT_THAT(VersionLine("prog"),
              MatchesRegex("prog [0-9]+\\.[0-9]+\\.[0-9]+ \\(git ([0-9a-f]+(-dirty)?|unknown)\\)"));
  EXPECT_THAT(std::string(ProjectVersion()), MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
}

}  // namespace
}  // namespace fabricmon
