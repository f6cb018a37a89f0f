# FABRICMON_FUZZ=ON: libFuzzer targets for every parser and decoder (tests/fuzz). Needs clang
# (-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14, libclang-rt-14-dev). Every target
# of the build gets coverage instrumentation with ASan+UBSan (-fsanitize=fuzzer-no-link,
# address,undefined); the fuzz executables add libFuzzer's main (-fsanitize=fuzzer). Included from
# the top-level CMakeLists.txt before any target, or through
# -DCMAKE_PROJECT_fabricmon_INCLUDE=<this file>. tests/fuzz/run_fuzzers.sh builds and runs them.
include_guard(GLOBAL)

option(FABRICMON_FUZZ "Build libFuzzer targets (tests/fuzz); needs clang" OFF)

if(FABRICMON_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FABRICMON_FUZZ needs clang: -DCMAKE_CXX_COMPILER=clang++-14 "
                        "-DCMAKE_C_COMPILER=clang-14 (found ${CMAKE_CXX_COMPILER_ID})")
  endif()
  if(FABRICMON_SANITIZE)
    message(FATAL_ERROR "FABRICMON_FUZZ already builds with ASan+UBSan; leave FABRICMON_SANITIZE empty")
  endif()
  set(FABRICMON_FUZZ_FLAGS -fsanitize=fuzzer-no-link,address,undefined
      -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  message(STATUS "fabricmon: fuzzing build: ${FABRICMON_FUZZ_FLAGS}")
  add_compile_options(${FABRICMON_FUZZ_FLAGS})
  add_link_options(-fsanitize=address,undefined)
endif()
