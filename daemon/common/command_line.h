#pragma once

// The command line every fabricmon binary shares, on top of absl::flags:
//   --help (or -h)  the program's own flags (those defined in its main file), its usage lines,
//                   its subcommands and exit statuses; exit 0. --helpfull keeps Abseil's list of
//                   every linked flag.
//   --version       "<program> <version> (git <revision>)"; exit 0.
//   an unknown flag, a flag without its value or a value that does not parse: one line on
//   stderr ("fabricmon-agent: unknown flag --foo; see --help") and exit status 2 (usage error),
//   before absl::ParseCommandLine could exit 1.
// The --help text has a fixed shape (sections "Usage:", "Commands:", "Flags:", "Exit status:")
// that cmake/man_page.cmake turns into the manual pages at build time.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace fabricmon {

// Exit statuses shared by the three binaries (README "Exit status").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // runtime failure; --check_config: the config is invalid
inline constexpr int kExitUsage = 2;    // bad flags or configuration: restarting cannot help

struct ProgramInfo {
  std::string name;     // "fabricmon-agent": --version and every message
  std::string summary;  // one line, e.g. "fabricmon node agent"
  // Synopsis lines, each starting with the program name.
  std::vector<std::string> usage;
  // Subcommands (the CLI): {"node NAME", "one node's inventory"}.
  std::vector<std::pair<std::string, std::string>> commands;
  // Exit statuses: {"0", "normal exit"}.
  std::vector<std::pair<std::string, std::string>> exit_statuses;
  // Placeholder of a flag's value in --help ("config" -> "FILE"); unnamed: N for numbers, VALUE.
  std::vector<std::pair<std::string, std::string>> value_names;
  // __FILE__ of the file whose ABSL_FLAGs are the program's own (its main): --help lists those.
  std::string flags_file;
};

struct ParsedCommandLine {
  // argv[0] and the positional arguments, as absl::ParseCommandLine returns them.
  std::vector<char*> positional;
  // Set when the program must exit now with this status (--help, --version, a bad flag); what
  // was to be printed has been printed.
  std::optional<int> exit_status;
};

// Checks argv, handles --help and --version, then hands argv to absl::ParseCommandLine (flags
// files, --helpfull). Never exits the process itself for what it checks.
ParsedCommandLine ParseCommandLine(int argc, char** argv, const ProgramInfo& info);

// The --help text.
std::string HelpText(const ProgramInfo& info);

// Empty when every flag in argv is defined and its value parses; otherwise the one-line
// message for stderr, without the trailing newline. Parsing a value sets the flag (the later
// absl::ParseCommandLine sets it again to the same value).
std::string CheckFlags(int argc, char** argv, absl::string_view program);

}  // namespace fabricmon
