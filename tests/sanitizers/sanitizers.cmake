# FABRICMON_SANITIZE: build every target (libraries, daemons, tests) with a sanitizer.
#   address  ASan + UBSan (-fsanitize=address,undefined; UBSan not recoverable, so the first
#            report fails the test). Unsigned wrap-around is defined and deliberate in counter
#            arithmetic; it is not checked.
#   thread   TSan (-fsanitize=thread)
# Works with clang and gcc. Included from the top-level CMakeLists.txt right after the warning
# options (before any target), or through -DCMAKE_PROJECT_fabricmon_INCLUDE=<this file>.
# tests/sanitizers/run.sh configures, builds and runs ctest in a separate build directory.
include_guard(GLOBAL)

set(FABRICMON_SANITIZE "" CACHE STRING "Sanitizer build: address (ASan+UBSan), thread (TSan) or empty")
set_property(CACHE FABRICMON_SANITIZE PROPERTY STRINGS "" address thread)

if(FABRICMON_SANITIZE STREQUAL "address")
  set(fabricmon_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined
      -fno-omit-frame-pointer)
elseif(FABRICMON_SANITIZE STREQUAL "thread")
  set(fabricmon_sanitize_flags -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT FABRICMON_SANITIZE STREQUAL "")
  message(FATAL_ERROR "FABRICMON_SANITIZE must be address, thread or empty, not '${FABRICMON_SANITIZE}'")
endif()

if(fabricmon_sanitize_flags)
  if(FABRICMON_FUZZ)
    message(FATAL_ERROR "FABRICMON_FUZZ already builds with ASan+UBSan; leave FABRICMON_SANITIZE empty")
  endif()
  message(STATUS "fabricmon: sanitizer build (${FABRICMON_SANITIZE}): ${fabricmon_sanitize_flags}")
  add_compile_options(${fabricmon_sanitize_flags})
  add_link_options(${fabricmon_sanitize_flags})
endif()

# TSan cannot see Debian's uninstrumented absl::Mutex; tsan_absl_shim.cc annotates it. Built here,
# at configure time, and linked into every executable (not into libraries, not shipped).
if(FABRICMON_SANITIZE STREQUAL "thread")
  # The object's name carries the source's hash: a changed shim changes every executable's link
  # command, so ninja relinks them.
  file(MD5 ${CMAKE_CURRENT_LIST_DIR}/tsan_absl_shim.cc fabricmon_tsan_shim_hash)
  string(SUBSTRING ${fabricmon_tsan_shim_hash} 0 12 fabricmon_tsan_shim_hash)
  set(fabricmon_tsan_shim ${CMAKE_BINARY_DIR}/fabricmon_tsan_absl_shim-${fabricmon_tsan_shim_hash}.o)
  execute_process(
    COMMAND ${CMAKE_CXX_COMPILER} -std=c++17 -O1 -g -fPIC -fsanitize=thread -w
            -c ${CMAKE_CURRENT_LIST_DIR}/tsan_absl_shim.cc -o ${fabricmon_tsan_shim}
    RESULT_VARIABLE fabricmon_tsan_shim_rc
    ERROR_VARIABLE fabricmon_tsan_shim_error)
  if(NOT fabricmon_tsan_shim_rc EQUAL 0)
    message(FATAL_ERROR "tests/sanitizers/tsan_absl_shim.cc: ${fabricmon_tsan_shim_error}")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${CMAKE_CURRENT_LIST_DIR}/tsan_absl_shim.cc)
  add_link_options("$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:${fabricmon_tsan_shim}>")
  link_libraries(${CMAKE_DL_LIBS})
endif()
