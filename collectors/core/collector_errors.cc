#include "collectors/core/collector_errors.h"

#include <string>

namespace fabricmon::collectors {

absl::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kMissing:
      return "missing";
    case ErrorKind::kEmpty:
      return "empty";
    case ErrorKind::kNoPma:
      return "no_pma";
    case ErrorKind::kNotNumeric:
      return "not_numeric";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kPermission:
      return "permission";
    case ErrorKind::kIo:
    case ErrorKind::kCount:
      break;
  }
  return "io";
}

ErrorKind ErrorKindFromStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return ErrorKind::kMissing;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnimplemented:
      return ErrorKind::kUnsupported;
    case absl::StatusCode::kPermissionDenied:
      return ErrorKind::kPermission;
    default:
      return ErrorKind::kIo;
  }
}

CollectorErrors::CollectorErrors(absl::string_view collector) {
  for (size_t i = 0; i < series_.size(); ++i) {
    series_[i] = SeriesFromSpec(kCollectorErrorsFamily, collector,
                                {{"collector", std::string(collector)},
                                 {"kind", std::string(ErrorKindName(static_cast<ErrorKind>(i)))}});
  }
}

uint64_t CollectorErrors::total() const {
  uint64_t sum = 0;
  for (uint64_t c : counts_) {
    sum += c;
  }
  return sum;
}

void CollectorErrors::Emit(SampleSink& sink) const {
  for (size_t i = 0; i < series_.size(); ++i) {
    sink.Add(series_[i], counts_[i]);
  }
}

}  // namespace fabricmon::collectors
