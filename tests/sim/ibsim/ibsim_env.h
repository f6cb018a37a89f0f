#pragma once

// A simulated InfiniBand subnet for tests: ibsim (Debian ibsim-utils) serving a topology file,
// opensm run once to assign LIDs and routes, and helpers that run MAD clients (ibnetdiscover,
// perfquery, fabricmon-agent, the ib_fabric probe) under LD_PRELOAD=libumad2sim.so, which turns
// their umad calls into messages to this simulator. Real libibumad/libibmad/libibnetdisc code
// runs unchanged: the MAD traffic is real, only the wire is simulated.
//
// Hermetic: each environment has its own temp dir (umad2sim writes its fake sysfs into the
// client's working directory) and its own IBSIM_SOCKNAME, so environments run side by side.
// Every child runs in its own process group and is killed, by group id, when its handle goes
// away; every wait is bounded. Not thread-safe: one test thread drives it.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fabricmon::testing {

inline constexpr char kUmad2simLibrary[] = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so";

struct CommandResult {
  int exit_code = -1;  // -1 when killed on timeout
  bool timed_out = false;
  std::string out;
  std::string err;
};

// A child process with optional pipes to its stdin and stdout.
class Subprocess {
 public:
  struct Options {
    std::vector<std::string> argv;  // argv[0] is looked up on PATH
    std::vector<std::string> env;   // "NAME=value" added to (or replacing in) the environment
    std::string cwd;                // "" = inherit
    bool pipe_stdin = false;        // else /dev/null
    bool pipe_stdout = false;       // else stdout_path
    std::string stdout_path;        // "" = /dev/null
    std::string stderr_path;        // "" = /dev/null
  };
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const Options& options);
  ~Subprocess();  // Stop()
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Writes `line` + "\n" to the child's stdin.
  absl::Status WriteLine(const std::string& line);
  void CloseStdin();
  // Reads stdout until a line equal to `terminator` (returned without it); DeadlineExceeded on
  // timeout, Unavailable when the child closed stdout first.
  absl::StatusOr<std::string> ReadUntilLine(const std::string& terminator, absl::Duration timeout);
  // Waits up to `timeout` for the exit; the exit code (128 + signal when killed), or nullopt.
  std::optional<int> Wait(absl::Duration timeout);
  // SIGTERM to the process group, up to `grace` to exit, then SIGKILL. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(2));
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exit_code_.has_value(); }

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
  std::optional<int> exit_code_;
};

// Runs a command to completion (bounded by `timeout`, then its group is killed).
CommandResult RunCommand(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const std::string& cwd, absl::Duration timeout);

struct IbsimOptions {
  std::string topology;  // ibsim net file (ibnetdiscover-like format)
  std::string sim_host;  // SIM_HOST for clients: the node they attach to ("" = the first node)
  absl::Duration start_timeout = absl::Seconds(30);
  absl::Duration opensm_timeout = absl::Seconds(120);
};

class IbsimEnv {
 public:
  // True when ibsim, opensm and libumad2sim.so are installed; otherwise `why` says what is not.
  static bool Available(std::string* why);

  // Starts ibsim on `options.topology` in a fresh temp dir with a unique IBSIM_SOCKNAME, waits
  // until it is ready, then runs opensm once (-o) so that ports are Active with LIDs.
  static absl::StatusOr<std::unique_ptr<IbsimEnv>> Start(const IbsimOptions& options);
  ~IbsimEnv();  // quits ibsim, kills what is left, removes the temp dir
  IbsimEnv(const IbsimEnv&) = delete;
  IbsimEnv& operator=(const IbsimEnv&) = delete;

  // Sends one console command (`PerformanceSet "Switch1"[1] PortCounters.PortXmitWait=1234`,
  // `Unlink "Switch1"[1]`, `ReLink "Switch1"[1]`, `Error "Switch2" 100`) and waits until ibsim
  // has processed it (its next prompt). Returns the command's console output.
  absl::StatusOr<std::string> Console(const std::string& command,
                                      absl::Duration timeout = absl::Seconds(10));
  // Runs opensm once more (after ReLink, ports stay in Initialize until an SM arms them).
  absl::Status RunOpenSm();
  // Runs a MAD client to completion under umad2sim, in the temp dir.
  CommandResult RunClient(const std::vector<std::string>& argv,
                          absl::Duration timeout = absl::Seconds(60)) const;
  // Environment entries a client child needs (LD_PRELOAD, IBSIM_SOCKNAME, SIM_HOST).
  std::vector<std::string> ClientEnv() const;
  const std::string& dir() const { return dir_; }
  const std::string& socket_name() const { return socket_name_; }
  // ibsim's console output so far.
  std::string ConsoleLog() const;
  absl::Duration opensm_duration() const { return opensm_duration_; }

 private:
  IbsimEnv() = default;
  size_t CountPrompts() const;

  std::string dir_;
  std::string socket_name_;
  std::string sim_host_;
  absl::Duration opensm_timeout_;
  absl::Duration opensm_duration_;
  int opensm_runs_ = 0;
  std::unique_ptr<Subprocess> ibsim_;
};

}  // namespace fabricmon::testing
