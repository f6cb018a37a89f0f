#pragma once

// Every metric family the project's collectors and the agent can declare under a fixed name, from
// the tables they emit from (each collector folder's `<name>_families.h`). Built into every
// binary whatever collectors the build leaves out: the aggregator's catalogue (daemon/wire/
// metric_catalogue.h) must know the families of agents built with other options.

#include <vector>

#include "collectors/core/sample.h"

namespace fabricmon::collectors {

// Appends one label-less series per family and per width it can be declared with; a family
// declared by several collectors appears once per collector.
void AppendProjectFamilies(std::vector<SeriesDesc>* out);

}  // namespace fabricmon::collectors
