#pragma once

// gMock matchers for absl::Status / StatusOr (open-source gMock has none for Abseil 20220623).

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace fabricmon::testing {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = GetStatus(arg);
  if (!status.ok()) {
    *result_listener << "status is " << status;
  }
  return status.ok();
}

MATCHER_P(StatusIs, code, "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code;
}

}  // namespace fabricmon::testing

#define FABRICMON_ASSERT_OK(expr) ASSERT_THAT(expr, ::fabricmon::testing::IsOk())
#define FABRICMON_EXPECT_OK(expr) EXPECT_THAT(expr, ::fabricmon::testing::IsOk())
