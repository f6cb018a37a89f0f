#include "collectors/core/collector.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace fabricmon::collectors {
namespace {

// Payload key marking a TurnedOffStatus (absl::Status payloads are keyed by a type URL).
constexpr char kTurnedOffPayload[] = "type.fabricmon.dev/collector.turned_off";

}  // namespace

Diagnosis DefaultDiagnosis(absl::string_view collector, const DiagnosisInput& input) {
  Diagnosis diagnosis;
  const absl::Status& failed = !input.discovery.ok() ? input.discovery : input.collection;
  if (failed.ok()) {
    diagnosis.works = true;
    diagnosis.reads = absl::StrCat(input.samples, " series");
    return diagnosis;
  }
  diagnosis.problem = std::string(failed.message());
  if (absl::IsNotFound(failed)) {
    diagnosis.fix = absl::StrCat("nothing to read on this node: install what ", collector,
                                 " reads, or set ", collector, " { enabled: false }");
  } else if (absl::IsPermissionDenied(failed)) {
    diagnosis.fix =
        "the agent's user may not read it: check the modes of what it reads and the "
        "sandboxing of the agent's systemd unit (deploy/systemd/"
        "fabricmon-agent.service)";
  } else {
    diagnosis.fix = absl::StrCat("see collectors/", collector, "/README.md");
  }
  return diagnosis;
}

absl::Status TurnedOffStatus(absl::string_view reason) {
  absl::Status status = absl::FailedPreconditionError(reason);
  status.SetPayload(kTurnedOffPayload, absl::Cord("1"));
  return status;
}

bool IsTurnedOff(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kTurnedOffPayload).has_value();
}

}  // namespace fabricmon::collectors
