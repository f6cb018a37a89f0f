#include "daemon/common/command_line.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "daemon/common/build_info.h"

namespace fabricmon {
namespace {

// Abseil's own flags whose values Abseil interprets (files, environment): left to it.
bool IsAbseilParsingFlag(absl::string_view name) {
  return name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok";
}

// Abseil's usage flags (absl/flags/internal/usage.cc): handled by absl::ParseCommandLine, and
// not all of them are found by absl::FindCommandLineFlag.
bool IsAbseilUsageFlag(absl::string_view name) {
  return name == "helpfull" || name == "helpshort" || name == "helppackage" || name == "helpon" ||
         name == "helpmatch" || name == "only_check_args";
}

// Abseil reports file names without their leading slashes (usage_config.cc); so do we.
absl::string_view NormalizeFile(absl::string_view file) {
  while (absl::ConsumePrefix(&file, "/")) {
  }
  return file;
}

std::string Placeholder(const absl::CommandLineFlag& flag, const ProgramInfo& info) {
  if (flag.IsOfType<bool>()) {
    return "";
  }
  for (const auto& [name, value_name] : info.value_names) {
    if (name == flag.Name()) {
      return absl::StrCat("=", value_name);
    }
  }
  if (flag.IsOfType<int>() || flag.IsOfType<int64_t>() || flag.IsOfType<uint32_t>() ||
      flag.IsOfType<uint64_t>() || flag.IsOfType<int16_t>() || flag.IsOfType<uint16_t>()) {
    return "=N";
  }
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) {
    return "=X";
  }
  return "=VALUE";
}

std::string DefaultNote(const absl::CommandLineFlag& flag) {
  const std::string value = flag.DefaultValue();
  if (flag.IsOfType<bool>() || value.empty()) {
    return "";
  }
  if (flag.IsOfType<std::string>()) {
    return absl::StrCat(" (default \"", value, "\")");
  }
  return absl::StrCat(" (default ", value, ")");
}

// Two columns: the left padded to the widest entry (at most 30), two spaces, the right.
void AppendColumns(const std::vector<std::pair<std::string, std::string>>& rows, std::string* out) {
  size_t width = 0;
  for (const auto& [left, right] : rows) {
    width = std::max(width, std::min<size_t>(left.size(), 30));
  }
  for (const auto& [left, right] : rows) {
    absl::StrAppend(out, "  ", left);
    if (left.size() > width) {
      absl::StrAppend(out, "\n  ", std::string(width, ' '));
    } else {
      absl::StrAppend(out, std::string(width - left.size(), ' '));
    }
    absl::StrAppend(out, "  ", right, "\n");
  }
}

}  // namespace

std::string HelpText(const ProgramInfo& info) {
  std::string out = absl::StrCat(info.name, " - ", info.summary, "\n\nUsage:\n");
  for (const std::string& line : info.usage) {
    absl::StrAppend(&out, "  ", line, "\n");
  }
  if (!info.commands.empty()) {
    absl::StrAppend(&out, "\nCommands:\n");
    AppendColumns(info.commands, &out);
  }
  std::vector<std::pair<std::string, std::string>> flags;
  const absl::string_view own_file = NormalizeFile(info.flags_file);
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired() || NormalizeFile(flag->Filename()) != own_file) {
      continue;
    }
    flags.emplace_back(absl::StrCat("--", name, Placeholder(*flag, info)),
                       absl::StrCat(flag->Help(), DefaultNote(*flag)));
  }
  flags.emplace_back("--help", "Print this help and exit.");
  flags.emplace_back("--helpfull", "Print every flag, including the libraries' (Abseil's list).");
  flags.emplace_back("--version", "Print the version and the git revision, and exit.");
  std::sort(flags.begin(), flags.end());
  absl::StrAppend(&out, "\nFlags:\n");
  AppendColumns(flags, &out);
  if (!info.exit_statuses.empty()) {
    absl::StrAppend(&out, "\nExit status:\n");
    AppendColumns(info.exit_statuses, &out);
  }
  return out;
}

std::string CheckFlags(int argc, char** argv, absl::string_view program) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      break;  // the rest is positional
    }
    if (arg.size() < 2 || arg[0] != '-') {
      continue;  // positional (or "-")
    }
    absl::string_view spelled = arg.substr(0, arg.find('='));
    absl::string_view name = spelled;
    if (!absl::ConsumePrefix(&name, "--")) {
      absl::ConsumePrefix(&name, "-");
    }
    const bool has_value = arg.find('=') != absl::string_view::npos;
    const absl::string_view value = has_value ? arg.substr(arg.find('=') + 1) : "";
    if (IsAbseilUsageFlag(name)) {
      if (!has_value && (name == "helpon" || name == "helpmatch")) {
        ++i;  // its value is the next argument
      }
      continue;
    }
    absl::CommandLineFlag* flag = name.empty() ? nullptr : absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      // --nofoo sets a boolean --foo to false.
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        continue;
      }
    }
    if (flag == nullptr || flag->IsRetired()) {
      return absl::StrCat(program, ": unknown flag ", spelled, "; see --help");
    }
    if (IsAbseilParsingFlag(name)) {
      if (!has_value) {
        ++i;  // its value is the next argument
      }
      continue;
    }
    std::string text(value);
    if (!has_value) {
      if (flag->IsOfType<bool>()) {
        continue;  // --foo means --foo=true
      }
      if (i + 1 >= argc) {
        return absl::StrCat(program, ": missing value for ", spelled, "; see --help");
      }
      text = argv[++i];  // --flag VALUE, as Abseil accepts it
    }
    std::string error;
    if (!flag->ParseFrom(text, &error)) {
      return absl::StrCat(program, ": bad value for ", spelled, ": ", error, "; see --help");
    }
  }
  return "";
}

ParsedCommandLine ParseCommandLine(int argc, char** argv, const ProgramInfo& info) {
  ParsedCommandLine parsed;
  // --help and --version win over everything else on the line (an operator asking for help
  // gets it even with a typo beside it).
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") {
      break;
    }
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      const std::string text = HelpText(info);
      std::fwrite(text.data(), 1, text.size(), stdout);
      parsed.exit_status = kExitOk;
      return parsed;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") {
      break;
    }
    if (arg == "--version" || arg == "-version") {
      std::printf("%s\n", VersionLine(info.name).c_str());
      parsed.exit_status = kExitOk;
      return parsed;
    }
  }
  if (std::string error = CheckFlags(argc, argv, info.name); !error.empty()) {
    std::cerr << error << "\n";
    parsed.exit_status = kExitUsage;
    return parsed;
  }
  absl::SetProgramUsageMessage(
      absl::StrCat(info.summary, "\n  ", absl::StrJoin(info.usage, "\n  ")));
  parsed.positional = absl::ParseCommandLine(argc, argv);
  return parsed;
}

}  // namespace fabricmon
