#pragma once

// Status helpers Abseil 20220623 lacks: early-return macros (Reverb's pattern), errno mapping
// (absl::ErrnoToStatus arrived later) and annotation. gRPC conversions live in grpc_status.h so
// that libraries without gRPC can use this header.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricmon {

// Maps an errno value to the closest absl code: ENOENT/ENODEV/ENXIO → NotFound,
// EACCES/EPERM → PermissionDenied, EINVAL/EOPNOTSUPP → InvalidArgument / Unimplemented,
// EAGAIN/EINTR/EBUSY/ETIMEDOUT → Unavailable / DeadlineExceeded, anything else → Unknown.
absl::Status ErrnoToStatus(int error_number, absl::string_view message);

// Returns `status` with `context` prepended to its message ("context: message"); OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace fabricmon

#define FABRICMON_STATUS_CONCAT_INNER_(a, b) a##b
#define FABRICMON_STATUS_CONCAT_(a, b) FABRICMON_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if not OK.
#define FABRICMON_RETURN_IF_ERROR(expr)        \
  do {                                         \
    ::absl::Status fabricmon_status_ = (expr); \
    if (!fabricmon_status_.ok()) {             \
      return fabricmon_status_;                \
    }                                          \
  } while (false)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>), or return its status from the function.
#define FABRICMON_ASSIGN_OR_RETURN(lhs, rexpr)                                                   \
  FABRICMON_ASSIGN_OR_RETURN_IMPL_(FABRICMON_STATUS_CONCAT_(fabricmon_statusor_, __LINE__), lhs, \
                                   rexpr)

#define FABRICMON_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                     \
  if (!statusor.ok()) {                                        \
    return std::move(statusor).status();                       \
  }                                                            \
  lhs = *std::move(statusor)
