#pragma once

// Aggregator-wide admission of declared series into /metrics ("exposition is ours"):
//   * a family of the metric catalogue must be declared with the catalogue's type, unit, scale,
//     width and overflow; its HELP is replaced by the catalogue's, whatever the agent sent;
//   * families the aggregator writes itself are refused to every agent (reserved);
//   * any other family must pass the exposition rules (wire::CheckFamilyName, CheckHelp) and is
//     pinned by its first declaration, from whichever node: type, unit and HELP. A later
//     declaration that differs is refused for the node that sent it; the pin, and every other
//     node's series, stay as they were;
//   * label names follow wire::CheckLabelName on every series.
// Admit runs once per series declaration, never per sample; it writes the authoritative HELP
// into the declaration, so the exporter needs no lookup at scrape time.
//
// Thread-safe: one mutex over the pins, taken once per declaration.

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "collectors/core/sample.h"
#include "daemon/wire/metric_catalogue.h"

namespace fabricmon::store {

class FamilyRegistry {
 public:
  // Pinned families beyond this many are refused (ResourceExhausted): an agent inventing family
  // names cannot grow the pins without bound.
  static constexpr size_t kDefaultMaxPinned = 4096;

  // Keeps a reference to `catalogue`, which must outlive the registry.
  explicit FamilyRegistry(const wire::MetricCatalogue& catalogue,
                          size_t max_pinned = kDefaultMaxPinned)
      : catalogue_(catalogue), max_pinned_(max_pinned) {}

  // Checks `desc` (already through wire::FromDeclaration) and on success sets its HELP to the
  // family's. Errors, each a reason the stream reports and counts:
  //   PermissionDenied   the family is the aggregator's own (reserved);
  //   FailedPrecondition the declaration contradicts the catalogue or the family's pin;
  //   InvalidArgument    a name, label name or HELP /metrics cannot carry;
  //   ResourceExhausted  a new family beyond the pin limit.
  absl::Status Admit(collectors::SeriesDesc& desc) ABSL_LOCKS_EXCLUDED(mu_);

  // Families pinned so far (outside the catalogue).
  size_t pinned() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pin {
    collectors::MetricType type;
    collectors::Unit unit;
    std::string help;
  };

  const wire::MetricCatalogue& catalogue_;
  const size_t max_pinned_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Pin> pins_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricmon::store
