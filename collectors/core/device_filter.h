#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fabricmon/v1/config.pb.h"

namespace re2 {
class RE2;
}

namespace fabricmon::collectors {

// Include/exclude by device name (RE2 full match), applied before any file of the device is
// read: restricted firmware logs a kernel error on every access, so excluded means untouched.
class DeviceFilter {
 public:
  // InvalidArgument if a pattern does not compile.
  static absl::StatusOr<DeviceFilter> Create(const v1::DeviceFilter& config);
  DeviceFilter();
  DeviceFilter(DeviceFilter&&) noexcept;
  DeviceFilter& operator=(DeviceFilter&&) noexcept;
  ~DeviceFilter();

  // True if `name` passes: matches include (or include is empty) and does not match exclude.
  bool Allows(absl::string_view name) const;

 private:
  std::unique_ptr<re2::RE2> include_;
  std::unique_ptr<re2::RE2> exclude_;
};

}  // namespace fabricmon::collectors
