#include "daemon/common/status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fabricmon {

absl::Status ErrnoToStatus(int error_number, absl::string_view message) {
  const std::string text = absl::StrCat(message, ": ", std::strerror(error_number));
  switch (error_number) {
    case 0:
      return absl::OkStatus();
    case ENOENT:
    case ENODEV:
    case ENXIO:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(text);
    case EINVAL:
      return absl::InvalidArgumentError(text);
    case EOPNOTSUPP:
      return absl::UnimplementedError(text);
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case EIO:
      return absl::UnavailableError(text);
    case ETIMEDOUT:
      return absl::DeadlineExceededError(text);
    case ENOMEM:
    case ENOSPC:
      return absl::ResourceExhaustedError(text);
    case EEXIST:
      return absl::AlreadyExistsError(text);
    default:
      return absl::UnknownError(text);
  }
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) {
    return status;
  }
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace fabricmon
