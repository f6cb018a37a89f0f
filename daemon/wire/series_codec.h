#pragma once

// Conversions between the in-process sample model (collectors/core/sample.h) and the wire
// contract (fabricmon.v1.SeriesDeclaration), with validation of everything an agent may send.

#include <cstdint>

#include "absl/status/statusor.h"
#include "collectors/core/sample.h"
#include "fabricmon/v1/telemetry.pb.h"

namespace fabricmon::wire {

// Limits on declared series; violating one is InvalidArgument.
struct DeclarationLimits {
  size_t max_name_bytes = 200;
  size_t max_labels = 16;
  size_t max_label_name_bytes = 64;
  size_t max_label_value_bytes = 256;
  size_t max_help_bytes = 1024;
  size_t max_collector_bytes = 64;
};

v1::SeriesDeclaration ToDeclaration(const collectors::SeriesDesc& desc, uint32_t id);

// Validates a declaration from the wire (metric and label names in Prometheus' charset
// [a-zA-Z_:][a-zA-Z0-9_:]* / [a-zA-Z_][a-zA-Z0-9_]*, no duplicate label names, reserved "node"
// label refused since the aggregator adds it, valid type/width, a scale in (0, 1e12], UTF-8
// values and HELP, nothing over `limits`: refused, never cut) and converts it. The exposition
// rules (metric_catalogue.h) are the aggregator's, checked after this. InvalidArgument with the
// reason otherwise.
absl::StatusOr<collectors::SeriesDesc> FromDeclaration(const v1::SeriesDeclaration& declaration,
                                                       const DeclarationLimits& limits = {});

// True if `name` is a valid Prometheus metric name.
bool IsValidMetricName(absl::string_view name);
// True if `name` is a valid Prometheus label name (and not reserved "__" prefix).
bool IsValidLabelName(absl::string_view name);
// True if `s` is well-formed UTF-8 (what Prometheus' parser requires of label values and HELP).
bool IsValidUtf8(absl::string_view s);

}  // namespace fabricmon::wire
