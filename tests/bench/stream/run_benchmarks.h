#pragma once

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"

namespace fabricmon::bench {

// The rest of a Google Benchmark main(), run as the daemons run: this absl build checks lock
// order on every acquisition (GraphCycles, 3–4 % of the detector bench in perf), which the
// aggregator and the agent turn off at start, so the benchmarks do too.
inline int RunBenchmarksAsTheDaemonsRun(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace fabricmon::bench
