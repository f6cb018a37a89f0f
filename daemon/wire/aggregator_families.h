#pragma once

// The families the aggregator writes itself — its exporter (node and aggregator health), the
// detection engine's findings and topology, jobs, the recording, remote write, and the text
// exposition's saturated-counter flag — with HELP, type and unit: the aggregator's half of the
// project's metric catalogue (MetricCatalogue::Project() holds the collectors' half). No agent may
// declare one (IsReservedFamily). tests/unit/daemon/aggregator/aggregator_server_test.cc checks
// that the exporters write exactly these families with this HELP and type; the metric names test
// checks dashboards and alert rules against both halves.

#include <vector>

#include "absl/strings/string_view.h"
#include "daemon/wire/metric_catalogue.h"

namespace fabricmon::wire {

// Sorted by name. Counters carry no width (the aggregator computes them, nothing wraps).
const std::vector<CatalogueFamily>& AggregatorFamilies();

// The aggregator's family `name`, or null.
const CatalogueFamily* FindAggregatorFamily(absl::string_view name);

// A family of the project, whoever writes it: the collectors' (MetricCatalogue::Project()) or the
// aggregator's; null for any other name.
const CatalogueFamily* FindProjectFamily(absl::string_view name);

}  // namespace fabricmon::wire
