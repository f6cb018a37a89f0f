#pragma once

// Loads protobuf text-format configuration files. Unknown fields, bad values and syntax errors are
// InvalidArgument with file:line:column in the message: a typo never silently becomes a default.

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace fabricmon {

// Parses `text` into `message` (cleared first). `source_name` names the input in errors.
absl::Status ParseTextConfig(absl::string_view text, absl::string_view source_name,
                             google::protobuf::Message* message);

// Largest config file accepted: a config is a few kilobytes; anything near this is a wrong path.
inline constexpr size_t kMaxConfigFileBytes = size_t{4} << 20;

// Reads (ReadOperatorFile: a regular file of at most kMaxConfigFileBytes, else InvalidArgument
// naming it) and parses the file at `path`. NotFound if it does not exist.
absl::Status LoadTextConfig(const std::string& path, google::protobuf::Message* message);

}  // namespace fabricmon
