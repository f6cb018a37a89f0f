#pragma once

// `fabricmon-agent --doctor`: runs each collector's own discovery and one collection under the
// given config, then prints one line per collector saying what it reads and, where it cannot,
// why and how to fix it (Collector::Diagnose: each collector explains itself; this file only
// drives them and formats). Lines:
//
//   <name>: ok: <what it reads>
//   <name>: FAIL: <why>; fix: <how>        (also when the collector cannot be built)
//   <name>: off: <why>                     (turned off by the capture rule)
//   <name>: disabled in the config
//
// then a summary line. Returns 0 when every enabled collector works, 1 otherwise.

#include <ostream>

#include "collectors/core/collector_registry.h"
#include "daemon/common/clock.h"
#include "fabricmon/v1/config.pb.h"

namespace fabricmon::agent {

// Diagnoses every collector of `registry` under `config`, writing to `out`. Touches the sources
// the collectors would (files, ioctls, MADs, NVML) once; sends nothing anywhere.
int Doctor(const collectors::CollectorRegistry& registry, const v1::AgentConfig& config,
           Clock& clock, std::ostream& out);

// Doctor() over the collectors built into this binary (collectors/builtin.cc), real clock.
int RunDoctor(const v1::AgentConfig& config, std::ostream& out);

}  // namespace fabricmon::agent
