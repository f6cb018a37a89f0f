#pragma once

// One fuzz target = one function of (data, size) that feeds the bytes to a parser or decoder and
// checks what must hold for any input. The same source file builds two ways:
//
//  * with FABRICMON_LIBFUZZER defined (FABRICMON_FUZZ=ON, clang): a libFuzzer executable whose
//    LLVMFuzzerTestOneInput calls the function (tests/fuzz/run_fuzzers.sh runs them);
//  * without it (every build): linked into fabricmon_fuzz_replay_test, which runs the seed
//    corpora and every crash reproducer in tests/fuzz/regressions/<target>/ through the same
//    function, so a fixed crash stays fixed in the normal (and sanitizer) test runs.
//
// A violated invariant prints what failed and aborts: libFuzzer records the input as a crash, the
// replay test dies with the message.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>

#include "absl/strings/string_view.h"

namespace fabricmon::fuzz {

// Every target, for the replay test (fuzz_targets.cc lists them).
using FuzzFunction = void (*)(const uint8_t* data, size_t size);
struct FuzzTarget {
  const char* name;  // also the corpus/regressions folder name
  FuzzFunction function;
};

// gtest prints parameters with this (test names show the target, not bytes).
inline void PrintTo(const FuzzTarget& target, std::ostream* os) { *os << target.name; }

inline absl::string_view AsText(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace fabricmon::fuzz

#define FABRICMON_FUZZ_CHECK(condition)                                                           \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                               \
    }                                                                                             \
  } while (false)

#ifdef FABRICMON_LIBFUZZER
#define FABRICMON_FUZZ_ENTRY_(name)                                         \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    ::fabricmon::fuzz::Fuzz_##name(data, size);                             \
    return 0;                                                               \
  }
#else
#define FABRICMON_FUZZ_ENTRY_(name)
#endif

// Defines ::fabricmon::fuzz::Fuzz_<name>(data, size) and, in libFuzzer builds, the entry point.
// Use at global scope:  FABRICMON_FUZZ_TARGET(sysfs_value) { ... data, size ... }
#define FABRICMON_FUZZ_TARGET(name)                   \
  namespace fabricmon::fuzz {                         \
  void Fuzz_##name(const uint8_t* data, size_t size); \
  }                                                   \
  FABRICMON_FUZZ_ENTRY_(name)                         \
  void fabricmon::fuzz::Fuzz_##name(const uint8_t* data, size_t size)
