#include "daemon/cli/slurm.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace fabricmon::cli {
namespace {

bool OnlyChars(absl::string_view text, absl::string_view extra) {
  return std::all_of(text.begin(), text.end(), [extra](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           extra.find(c) != absl::string_view::npos;
  });
}

// For error messages: at most 80 printable characters of untrusted text.
std::string Shown(absl::string_view text) {
  std::string shown;
  for (char c : text.substr(0, 80)) {
    shown += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return text.size() > 80 ? absl::StrCat(shown, "...") : shown;
}

// The value of `key` when it is the first field of `line` ("   NodeList=gpu[1-2]").
bool FirstField(absl::string_view line, absl::string_view key, absl::string_view* value) {
  line = absl::StripLeadingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, "=")) {
    return false;
  }
  const size_t end = line.find_first_of(" \t");
  *value = line.substr(0, end);
  return true;
}

}  // namespace

absl::Status ValidateSlurmJobId(absl::string_view id) {
  absl::string_view rest = id;
  auto digits = [&rest]() {
    size_t n = 0;
    while (n < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[n]))) ++n;
    rest.remove_prefix(n);
    return n;
  };
  const size_t first = digits();
  if (first > 0 && first <= 20 && !rest.empty() && (rest[0] == '_' || rest[0] == '+')) {
    rest.remove_prefix(1);
    const size_t second = digits();
    if (second == 0 || second > 20) rest = "x";
  }
  if (first == 0 || first > 20 || !rest.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Slurm job id \"", Shown(id), "\" is not N, N_TASK (array) or N+COMPONENT (het job)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SlurmJobRecord>> ParseScontrolShowJob(absl::string_view text) {
  std::vector<SlurmJobRecord> records;
  std::vector<int> node_lists;  // NodeList lines seen per record
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::string_view value;
    if (FirstField(line, "JobId", &value)) {
      if (absl::Status valid = ValidateSlurmJobId(value); !valid.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("scontrol show job, line ", line_number, ": ", valid.message()));
      }
      records.push_back({std::string(value), "", ""});
      node_lists.push_back(0);
      continue;
    }
    if (records.empty()) {
      continue;  // a banner or warning before the first record
    }
    if (FirstField(line, "JobState", &value)) {
      records.back().state = std::string(value);
    } else if (FirstField(line, "NodeList", &value)) {
      ++node_lists.back();
      // Slurm prints "(null)" for a job that holds no nodes (pending), older versions "None".
      if (value != "(null)" && value != "None") {
        if (absl::Status valid = ValidateHostlist(value); !valid.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("scontrol show job, line ", line_number, ": ", valid.message()));
        }
        records.back().node_list = std::string(value);
      }
    }
  }
  if (records.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scontrol show job printed no job record (no line starting with JobId=): \"",
                     Shown(text), "\""));
  }
  for (size_t i = 0; i < records.size(); ++i) {
    if (node_lists[i] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("scontrol show job: job ", records[i].job_id, " has ", node_lists[i],
                       " NodeList lines, expected one (is this scontrol's multi-line format?)"));
    }
  }
  return records;
}

absl::Status ValidateHostlist(absl::string_view expression) {
  if (expression.empty() || expression.size() > 65536 || !OnlyChars(expression, "._,[]-")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hostlist \"", Shown(expression), "\" is not 1..65536 characters of [A-Za-z0-9._,[]-]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseHostnames(absl::string_view text) {
  std::vector<std::string> hosts;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (line.size() > 253 || !OnlyChars(line, "._-")) {
      return absl::InvalidArgumentError(absl::StrCat("scontrol show hostnames, line ", line_number,
                                                     ": \"", Shown(line), "\" is not a host name"));
    }
    hosts.emplace_back(line);
  }
  return hosts;
}

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       std::chrono::milliseconds timeout, size_t max_output_bytes) {
  if (argv.empty()) {
    return absl::InvalidArgumentError("no command");
  }
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int error = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(error)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return absl::NotFoundError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(spawned)));
  }
  std::string out, err;
  std::string failure;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0 && failure.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      failure = absl::StrCat(argv[0], " did not finish within ", timeout.count(), " ms");
      break;
    }
    const int ready = poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      failure = absl::StrCat("poll: ", std::strerror(errno));
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buffer[65536];
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      std::string& sink = i == 0 ? out : err;
      // Standard error is only for the message: keep its start.
      if (i == 1 && sink.size() >= 4096) continue;
      sink.append(buffer, static_cast<size_t>(n));
      if (i == 0 && sink.size() > max_output_bytes) {
        failure = absl::StrCat(argv[0], " wrote more than ", max_output_bytes, " bytes");
      }
    }
  }
  for (const pollfd& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  if (!failure.empty()) {
    kill(pid, SIGKILL);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!failure.empty()) {
    return absl::DeadlineExceededError(failure);
  }
  if (WIFSIGNALED(status)) {
    return absl::UnavailableError(
        absl::StrCat(argv[0], " was killed by signal ", WTERMSIG(status)));
  }
  if (WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(absl::StrCat(absl::StrJoin(argv, " "), " exited with status ",
                                               WEXITSTATUS(status), ": ",
                                               Shown(absl::StripAsciiWhitespace(err))));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveSlurmJob(absl::string_view id,
                                                         const std::string& scontrol,
                                                         std::chrono::milliseconds timeout) {
  if (absl::Status valid = ValidateSlurmJobId(id); !valid.ok()) {
    return valid;
  }
  absl::StatusOr<std::string> shown =
      RunCommand({scontrol, "show", "job", std::string(id)}, timeout);
  if (!shown.ok()) {
    return shown.status();
  }
  absl::StatusOr<std::vector<SlurmJobRecord>> records = ParseScontrolShowJob(*shown);
  if (!records.ok()) {
    return records.status();
  }
  std::set<std::string> nodes;
  std::vector<std::string> states;
  for (const SlurmJobRecord& record : *records) {
    states.push_back(absl::StrCat(record.job_id, " ", record.state));
    if (record.node_list.empty()) continue;
    absl::StatusOr<std::string> expanded =
        RunCommand({scontrol, "show", "hostnames", record.node_list}, timeout);
    if (!expanded.ok()) {
      return expanded.status();
    }
    absl::StatusOr<std::vector<std::string>> hosts = ParseHostnames(*expanded);
    if (!hosts.ok()) {
      return hosts.status();
    }
    nodes.insert(hosts->begin(), hosts->end());
  }
  if (nodes.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Slurm job ", id, " holds no nodes (", absl::StrJoin(states, ", "), ")"));
  }
  return std::vector<std::string>(nodes.begin(), nodes.end());
}

}  // namespace fabricmon::cli
