#include "collectors/core/device_filter.h"

#include "absl/strings/str_cat.h"
#include "re2/re2.h"

namespace fabricmon::collectors {
namespace {
absl::StatusOr<std::unique_ptr<re2::RE2>> Compile(const std::string& pattern,
                                                  absl::string_view what) {
  if (pattern.empty()) {
    return std::unique_ptr<re2::RE2>();
  }
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_unique<re2::RE2>(pattern, options);
  if (!re->ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", what, " pattern '", pattern, "': ", re->error()));
  }
  return re;
}
}  // namespace

DeviceFilter::DeviceFilter() = default;
DeviceFilter::DeviceFilter(DeviceFilter&&) noexcept = default;
DeviceFilter& DeviceFilter::operator=(DeviceFilter&&) noexcept = default;
DeviceFilter::~DeviceFilter() = default;

absl::StatusOr<DeviceFilter> DeviceFilter::Create(const v1::DeviceFilter& config) {
  DeviceFilter filter;
  auto include = Compile(config.include(), "include");
  if (!include.ok()) {
    return include.status();
  }
  auto exclude = Compile(config.exclude(), "exclude");
  if (!exclude.ok()) {
    return exclude.status();
  }
  filter.include_ = *std::move(include);
  filter.exclude_ = *std::move(exclude);
  return filter;
}

bool DeviceFilter::Allows(absl::string_view name) const {
  if (include_ && !re2::RE2::FullMatch(re2::StringPiece(name.data(), name.size()), *include_)) {
    return false;
  }
  if (exclude_ && re2::RE2::FullMatch(re2::StringPiece(name.data(), name.size()), *exclude_)) {
    return false;
  }
  return true;
}

}  // namespace fabricmon::collectors
