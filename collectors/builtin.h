#pragma once

#include "collectors/core/collector_registry.h"

namespace fabricmon::collectors {

// Registers every collector compiled into this build, in a fixed order. This function is the
// only list of collectors: adding one means one line here and one folder under collectors/.
void RegisterBuiltinCollectors(CollectorRegistry& registry);

}  // namespace fabricmon::collectors
