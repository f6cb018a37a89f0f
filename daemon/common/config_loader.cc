#include "daemon/common/config_loader.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/operator_file.h"
#include "daemon/common/status.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace fabricmon {
namespace {

// Collects parser errors instead of letting protobuf print them to stderr.
class ErrorCollector final : public google::protobuf::io::ErrorCollector {
 public:
  explicit ErrorCollector(absl::string_view source) : source_(source) {}
  void AddError(int line, int column, const std::string& message) override {
    errors_.push_back(absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, int column, const std::string& message) override {
    AddError(line, column, message);
  }
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

}  // namespace

absl::Status ParseTextConfig(absl::string_view text, absl::string_view source_name,
                             google::protobuf::Message* message) {
  message->Clear();
  ErrorCollector errors(source_name);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.AllowUnknownField(false);
  parser.AllowUnknownExtension(false);
  if (!parser.ParseFromString(std::string(text), message)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", message->GetTypeName(), " config: ", errors.Joined()));
  }
  return absl::OkStatus();
}

absl::Status LoadTextConfig(const std::string& path, google::protobuf::Message* message) {
  absl::StatusOr<std::string> text = ReadOperatorFile(path, kMaxConfigFileBytes, "config file");
  if (!text.ok()) {
    return text.status();
  }
  return ParseTextConfig(*text, path, message);
}

}  // namespace fabricmon
