#include "daemon/remote_write/bearer_token_file.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/operator_file.h"

namespace fabricmon::remote_write {
namespace {

constexpr int64_t kNanosPerSecond = int64_t{1} * 1000 * 1000 * 1000;

BearerTokenFile::Signature Stat(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return {};
  }
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
          static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * kNanosPerSecond + st.st_mtim.tv_nsec,
          static_cast<int64_t>(st.st_ctim.tv_sec) * kNanosPerSecond + st.st_ctim.tv_nsec};
}

// The token in the file: surrounding whitespace trimmed (files end with a newline), nothing that
// could end the Authorization header line (CR, LF: header injection) or no token at all.
absl::StatusOr<std::string> ReadToken(const std::string& path) {
  absl::StatusOr<std::string> text =
      ReadOperatorFile(path, BearerTokenFile::kMaxTokenBytes, "bearer_token_file");
  if (!text.ok()) {
    return text.status();
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  bool printable = !token.empty();
  for (unsigned char c : token) {
    printable = printable && !((c < 0x20 && c != '\t') || c == 0x7f);
  }
  if (!printable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bearer_token_file \"", path, "\" holds no token (empty, or control characters inside)"));
  }
  return token;
}

}  // namespace

bool BearerTokenFile::Signature::operator==(const Signature& other) const {
  return device == other.device && inode == other.inode && size == other.size &&
         mtime_nanos == other.mtime_nanos && ctime_nanos == other.ctime_nanos;
}

absl::StatusOr<std::shared_ptr<BearerTokenFile>> BearerTokenFile::Create(std::string path,
                                                                         const Clock& clock,
                                                                         int64_t recheck_nanos) {
  std::shared_ptr<BearerTokenFile> file(new BearerTokenFile(std::move(path), clock, recheck_nanos));
  // The signature first: a change between stat and read is seen (and read) at the next check.
  const Signature signature = Stat(file->path_);
  absl::StatusOr<std::string> token = ReadToken(file->path_);
  if (!token.ok()) {
    return token.status();
  }
  absl::MutexLock lock(&file->mu_);
  file->token_ = *std::move(token);
  file->signature_ = signature;
  file->next_check_nanos_ = clock.MonotonicNanos() + recheck_nanos;
  return file;
}

std::string BearerTokenFile::Current() {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_.MonotonicNanos();
  if (now < next_check_nanos_) {
    return token_;
  }
  next_check_nanos_ = now + recheck_nanos_;
  const Signature signature = Stat(path_);
  if (signature == signature_) {
    return token_;
  }
  signature_ = signature;  // this change is handled once, whatever the read gives
  absl::StatusOr<std::string> token = ReadToken(path_);
  if (!token.ok()) {
    reload_failures_.fetch_add(1);
    FABRICMON_LOG(Warning) << token.status().message()
                           << "; the last token read is kept until the file changes again";
    return token_;
  }
  if (*token != token_) {
    token_ = *std::move(token);
    reloads_.fetch_add(1);
    FABRICMON_LOG(Info) << "bearer_token_file \"" << path_ << "\" changed: new token in use";
  }
  return token_;
}

}  // namespace fabricmon::remote_write
