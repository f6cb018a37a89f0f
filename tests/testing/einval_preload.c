// einval_preload: an LD_PRELOAD shim that makes a plain directory tree behave like the kernel's
// sysfs in the ways the ib_sysfs collector must survive, without changing the collector.
//
//   FABRICMON_EINVAL_PATHS   colon-separated substrings. read/pread/pread64 (and their _chk
//                            variants) on a file whose path contains one of them fail with EINVAL:
//                            what a firmware-restricted ConnectX-7 PF answers for every counter
//                            file (the PMA MAD / ACCESS_REG behind the read fails;
//                            collectors/ib_sysfs/README.md, "Every counters/ read is a
//                            firmware MAD" and "Firmware-restricted functions").
//   FABRICMON_EINVAL_LOG     file to which the path of every read failed with EINVAL is appended
//                            (one line each), so a test can count how often a refused file was
//                            asked.
//   FABRICMON_ENODEV_PATHS   colon-separated substrings. Reads on an open file whose path contains
//                            one of them and that has since been removed (st_nlink == 0) fail with
//                            ENODEV, as kernfs does when a device is unregistered under an open
//                            descriptor. (A regular file system keeps serving the old content.)
//   FABRICMON_OPEN_LOG       file to which every path passed to open/open64/openat/openat64,
//                            fopen/fopen64, opendir and readlink is appended as
//                            "<function>\t<path>", so a test can prove a device was never touched.
//
// The path of a descriptor is taken from /proc/self/fd/<fd>, so descriptors opened before the
// variables were set, or by any route, are covered. The variables are read on every call, so a
// test process that links this library (instead of preloading it) can change them with setenv().
// With none of them set every call goes straight to libc.
//
// Build: shared library fabricmon_einval_preload (tests/testing/CMakeLists.txt).

#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define FABRICMON_EXPORT __attribute__((visibility("default")))

typedef ssize_t (*read_fn)(int, void*, size_t);
typedef ssize_t (*pread_fn)(int, void*, size_t, off_t);
typedef int (*open_fn)(const char*, int, ...);
typedef int (*openat_fn)(int, const char*, int, ...);
typedef FILE* (*fopen_fn)(const char*, const char*);
typedef DIR* (*opendir_fn)(const char*);
typedef ssize_t (*readlink_fn)(const char*, char*, size_t);

// Resolved lazily with RTLD_NEXT: the next definition after this library (libc's).
static void* Next(const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == NULL) {
    fprintf(stderr, "einval_preload: dlsym(%s) failed: %s\n", name, dlerror());
    abort();
  }
  return fn;
}

#define REAL(type, name)             \
  static type real_##name = NULL;    \
  if (real_##name == NULL) {         \
    real_##name = (type)Next(#name); \
  }

static __thread int in_shim = 0;  // no logging from inside the shim's own calls

// True if `path` contains one of the colon-separated substrings of `list`.
static int PathMatches(const char* path, const char* list) {
  if (list == NULL || *list == '\0' || path == NULL) {
    return 0;
  }
  const char* start = list;
  for (;;) {
    const char* end = strchr(start, ':');
    size_t len = end ? (size_t)(end - start) : strlen(start);
    if (len > 0 && memmem(path, strlen(path), start, len) != NULL) {
      return 1;
    }
    if (end == NULL) {
      return 0;
    }
    start = end + 1;
  }
}

static void AppendLine(const char* log_path, const char* prefix, const char* path) {
  REAL(open_fn, open);
  in_shim = 1;
  int fd = real_open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    char line[4352];
    int n = snprintf(line, sizeof(line), "%s%s%s\n", prefix, prefix[0] ? "\t" : "", path);
    if (n > 0) {
      size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
      // One write with O_APPEND keeps lines whole across processes.
      ssize_t written = write(fd, line, len);
      (void)written;
    }
    close(fd);
  }
  in_shim = 0;
}

static void LogOpen(const char* function, const char* path) {
  if (in_shim || path == NULL) {
    return;
  }
  const char* log_path = getenv("FABRICMON_OPEN_LOG");
  if (log_path != NULL && *log_path != '\0') {
    AppendLine(log_path, function, path);
  }
}

// Decides whether a read on `fd` must fail. Returns 0 to proceed, or the errno to fail with.
static int ReadVerdict(int fd) {
  if (in_shim) {
    return 0;
  }
  const char* einval = getenv("FABRICMON_EINVAL_PATHS");
  const char* enodev = getenv("FABRICMON_ENODEV_PATHS");
  int want_einval = einval != NULL && *einval != '\0';
  int want_enodev = enodev != NULL && *enodev != '\0';
  if (!want_einval && !want_enodev) {
    return 0;
  }
  REAL(readlink_fn, readlink);
  char link[64];
  char path[4096];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  in_shim = 1;
  ssize_t n = real_readlink(link, path, sizeof(path) - 1);
  in_shim = 0;
  if (n <= 0) {
    return 0;
  }
  path[n] = '\0';
  if (want_einval && PathMatches(path, einval)) {
    const char* log_path = getenv("FABRICMON_EINVAL_LOG");
    if (log_path != NULL && *log_path != '\0') {
      AppendLine(log_path, "", path);
    }
    return EINVAL;
  }
  if (want_enodev && PathMatches(path, enodev)) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0) {
      return ENODEV;
    }
  }
  return 0;
}

FABRICMON_EXPORT ssize_t read(int fd, void* buf, size_t count) {
  REAL(read_fn, read);
  int error = ReadVerdict(fd);
  if (error != 0) {
    errno = error;
    return -1;
  }
  return real_read(fd, buf, count);
}

FABRICMON_EXPORT ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  REAL(pread_fn, pread);
  int error = ReadVerdict(fd);
  if (error != 0) {
    errno = error;
    return -1;
  }
  return real_pread(fd, buf, count, offset);
}

FABRICMON_EXPORT ssize_t pread64(int fd, void* buf, size_t count, off_t offset) {
  REAL(pread_fn, pread64);
  int error = ReadVerdict(fd);
  if (error != 0) {
    errno = error;
    return -1;
  }
  return real_pread64(fd, buf, count, offset);
}

// _FORTIFY_SOURCE variants (the buffer-size check is libc's job; forward to the checked ones).
typedef ssize_t (*read_chk_fn)(int, void*, size_t, size_t);
typedef ssize_t (*pread_chk_fn)(int, void*, size_t, off_t, size_t);

FABRICMON_EXPORT ssize_t __read_chk(int fd, void* buf, size_t count, size_t buflen) {
  REAL(read_chk_fn, __read_chk);
  int error = ReadVerdict(fd);
  if (error != 0) {
    errno = error;
    return -1;
  }
  return real___read_chk(fd, buf, count, buflen);
}

FABRICMON_EXPORT ssize_t __pread_chk(int fd, void* buf, size_t count, off_t offset, size_t buflen) {
  REAL(pread_chk_fn, __pread_chk);
  int error = ReadVerdict(fd);
  if (error != 0) {
    errno = error;
    return -1;
  }
  return real___pread_chk(fd, buf, count, offset, buflen);
}

FABRICMON_EXPORT ssize_t __pread64_chk(int fd, void* buf, size_t count, off_t offset,
                                       size_t buflen) {
  REAL(pread_chk_fn, __pread64_chk);
  int error = ReadVerdict(fd);
  if (error != 0) {
    errno = error;
    return -1;
  }
  return real___pread64_chk(fd, buf, count, offset, buflen);
}

// The mode argument exists only with O_CREAT / O_TMPFILE.
static mode_t ModeArg(int flags, va_list args) {
  if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) {
    return (mode_t)va_arg(args, int);
  }
  return 0;
}

FABRICMON_EXPORT int open(const char* path, int flags, ...) {
  REAL(open_fn, open);
  va_list args;
  va_start(args, flags);
  mode_t mode = ModeArg(flags, args);
  va_end(args);
  LogOpen("open", path);
  return real_open(path, flags, mode);
}

FABRICMON_EXPORT int open64(const char* path, int flags, ...) {
  REAL(open_fn, open64);
  va_list args;
  va_start(args, flags);
  mode_t mode = ModeArg(flags, args);
  va_end(args);
  LogOpen("open64", path);
  return real_open64(path, flags, mode);
}

FABRICMON_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  REAL(openat_fn, openat);
  va_list args;
  va_start(args, flags);
  mode_t mode = ModeArg(flags, args);
  va_end(args);
  LogOpen("openat", path);
  return real_openat(dirfd, path, flags, mode);
}

FABRICMON_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  REAL(openat_fn, openat64);
  va_list args;
  va_start(args, flags);
  mode_t mode = ModeArg(flags, args);
  va_end(args);
  LogOpen("openat64", path);
  return real_openat64(dirfd, path, flags, mode);
}

typedef int (*open2_fn)(const char*, int);
typedef int (*openat2_fn)(int, const char*, int);

FABRICMON_EXPORT int __open_2(const char* path, int flags) {
  REAL(open2_fn, __open_2);
  LogOpen("open", path);
  return real___open_2(path, flags);
}

FABRICMON_EXPORT int __open64_2(const char* path, int flags) {
  REAL(open2_fn, __open64_2);
  LogOpen("open64", path);
  return real___open64_2(path, flags);
}

FABRICMON_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  REAL(openat2_fn, __openat_2);
  LogOpen("openat", path);
  return real___openat_2(dirfd, path, flags);
}

FABRICMON_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  REAL(openat2_fn, __openat64_2);
  LogOpen("openat64", path);
  return real___openat64_2(dirfd, path, flags);
}

FABRICMON_EXPORT FILE* fopen(const char* path, const char* mode) {
  REAL(fopen_fn, fopen);
  LogOpen("fopen", path);
  return real_fopen(path, mode);
}

FABRICMON_EXPORT FILE* fopen64(const char* path, const char* mode) {
  REAL(fopen_fn, fopen64);
  LogOpen("fopen64", path);
  return real_fopen64(path, mode);
}

FABRICMON_EXPORT DIR* opendir(const char* path) {
  REAL(opendir_fn, opendir);
  LogOpen("opendir", path);
  return real_opendir(path);
}

FABRICMON_EXPORT ssize_t readlink(const char* path, char* buf, size_t size) {
  REAL(readlink_fn, readlink);
  LogOpen("readlink", path);
  return real_readlink(path, buf, size);
}
