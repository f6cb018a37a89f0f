// ThreadSanitizer annotations for Debian's (uninstrumented) absl::Mutex and absl::CondVar.
//
// libabsl_synchronization.so is not built with -fsanitize=thread, so TSan cannot see absl::Mutex
// lock and unlock: every access guarded by one looks unsynchronised, and a TSan run of fabricmon
// (whose shared state is all ABSL_GUARDED_BY an absl::Mutex) drowns in thousands of false
// reports. This file, linked into every executable of a FABRICMON_SANITIZE=thread build
// (tests/sanitizers/sanitizers.cmake), defines the Mutex and CondVar entry points itself: each
// tells TSan what is happening (__tsan_mutex_pre_lock / post_lock / pre_unlock / post_unlock,
// the API TSan offers for custom mutexes) and calls the library's own function, found with
// dlsym(RTLD_NEXT). The executable's definitions interpose on every caller, the library's own
// calls included (they go through the PLT: absl::Notification, gRPC's grpc_core::Mutex).
//
// Only for TSan builds; never linked into anything shipped.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#define FABRICMON_STR2_(x) #x
#define FABRICMON_STR_(x) FABRICMON_STR2_(x)

namespace {

// Itanium mangling of absl::<inline namespace>::<rest>, e.g. rest = "5Mutex4LockEv".
std::string Mangled(const char* rest) {
#if defined(ABSL_OPTION_USE_INLINE_NAMESPACE) && ABSL_OPTION_USE_INLINE_NAMESPACE == 1
  const char* ns = FABRICMON_STR_(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return std::string("_ZN4absl") + std::to_string(std::strlen(ns)) + ns + rest;
#else
  return std::string("_ZN4absl") + rest;
#endif
}

template <typename Fn>
Fn Real(const char* rest) {
  const std::string name = Mangled(rest);
  void* symbol = dlsym(RTLD_NEXT, name.c_str());
  if (symbol == nullptr) {
    std::fprintf(stderr, "tsan_absl_shim: %s not found: %s\n", name.c_str(), dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(symbol);
}

using Plain = void (*)(absl::Mutex*);
using Try = bool (*)(absl::Mutex*);
using When = void (*)(absl::Mutex*, const absl::Condition&);
using WhenTimeout = bool (*)(absl::Mutex*, const absl::Condition&, absl::Duration);
using WhenDeadline = bool (*)(absl::Mutex*, const absl::Condition&, absl::Time);
using WaitFn = void (*)(absl::CondVar*, absl::Mutex*);
using WaitTimeoutFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Duration);
using WaitDeadlineFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Time);

constexpr unsigned kRead = __tsan_mutex_read_lock;

// The library's functions call each other through the PLT too (AwaitWithTimeout calls
// AwaitWithDeadline, CondVar::WaitWithTimeout calls WaitWithDeadline): only the outermost call
// on a thread is annotated.
thread_local int t_depth = 0;
struct Outermost {
  Outermost() : outermost(t_depth++ == 0) {}
  ~Outermost() { --t_depth; }
  const bool outermost;
};

// The caller holds `mu` (in `flags` mode) before and after; the library releases it meanwhile.
struct ReleasedWhileWaiting {
  ReleasedWhileWaiting(absl::Mutex* mu, unsigned flags) : mu(mu), flags(flags) {
    if (guard.outermost) {
      __tsan_mutex_pre_unlock(mu, flags);
      __tsan_mutex_post_unlock(mu, flags);
      __tsan_mutex_pre_lock(mu, flags);
    }
  }
  ~ReleasedWhileWaiting() {
    if (guard.outermost) {
      __tsan_mutex_post_lock(mu, flags, 0);
    }
  }
  Outermost guard;
  absl::Mutex* mu;
  unsigned flags;
};

// Annotates one acquisition (pre_lock now, post_lock at scope end) on the outermost call only.
struct Acquire {
  Acquire(absl::Mutex* mu, unsigned flags) : mu(mu), flags(flags) {
    if (guard.outermost) {
      __tsan_mutex_pre_lock(mu, flags);
    }
  }
  ~Acquire() {
    if (guard.outermost) {
      __tsan_mutex_post_lock(mu, flags, 0);
    }
  }
  Outermost guard;
  absl::Mutex* mu;
  unsigned flags;
};

struct Release {
  Release(absl::Mutex* mu, unsigned flags) : mu(mu), flags(flags) {
    if (guard.outermost) {
      __tsan_mutex_pre_unlock(mu, flags);
    }
  }
  ~Release() {
    if (guard.outermost) {
      __tsan_mutex_post_unlock(mu, flags);
    }
  }
  Outermost guard;
  absl::Mutex* mu;
  unsigned flags;
};

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// No __tsan_mutex_destroy: TSan forgets a mutex when its memory is freed, and gRPC destroys
// mutexes after hand-offs TSan cannot see (its reference counts live in libgrpc), which
// would be reported as races with the last unlock.
Mutex::~Mutex() {
  static const Plain real = Real<Plain>("5MutexD2Ev");
  real(this);
}

void Mutex::Lock() {
  static const Plain real = Real<Plain>("5Mutex4LockEv");
  Acquire acquire(this, 0);
  real(this);
}

void Mutex::Unlock() {
  static const Plain real = Real<Plain>("5Mutex6UnlockEv");
  Release release(this, 0);
  real(this);
}

bool Mutex::TryLock() {
  static const Try real = Real<Try>("5Mutex7TryLockEv");
  Outermost guard;
  if (!guard.outermost) {
    return real(this);
  }
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed, 0);
  return locked;
}

void Mutex::ReaderLock() {
  static const Plain real = Real<Plain>("5Mutex10ReaderLockEv");
  Acquire acquire(this, kRead);
  real(this);
}

void Mutex::ReaderUnlock() {
  static const Plain real = Real<Plain>("5Mutex12ReaderUnlockEv");
  Release release(this, kRead);
  real(this);
}

bool Mutex::ReaderTryLock() {
  static const Try real = Real<Try>("5Mutex13ReaderTryLockEv");
  Outermost guard;
  if (!guard.outermost) {
    return real(this);
  }
  __tsan_mutex_pre_lock(this, kRead | __tsan_mutex_try_lock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(
      this, kRead | (locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  static const When real = Real<When>("5Mutex8LockWhenERKNS0_9ConditionE");
  Acquire acquire(this, 0);
  real(this, cond);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const When real = Real<When>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Acquire acquire(this, kRead);
  real(this, cond);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const WhenTimeout real =
      Real<WhenTimeout>("5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Acquire acquire(this, 0);  // held on return either way
  return real(this, cond, timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static const WhenDeadline real =
      Real<WhenDeadline>("5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Acquire acquire(this, 0);  // held on return either way
  return real(this, cond, deadline);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const WhenTimeout real =
      Real<WhenTimeout>("5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Acquire acquire(this, kRead);  // held on return either way
  return real(this, cond, timeout);
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static const WhenDeadline real =
      Real<WhenDeadline>("5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Acquire acquire(this, kRead);  // held on return either way
  return real(this, cond, deadline);
}

// Await* are called with the mutex held (exclusively, in fabricmon) and release it while waiting.
void Mutex::Await(const Condition& cond) {
  static const When real = Real<When>("5Mutex5AwaitERKNS0_9ConditionE");
  ReleasedWhileWaiting released(this, 0);
  real(this, cond);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const WhenTimeout real =
      Real<WhenTimeout>("5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  ReleasedWhileWaiting released(this, 0);
  return real(this, cond, timeout);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static const WhenDeadline real =
      Real<WhenDeadline>("5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  ReleasedWhileWaiting released(this, 0);
  return real(this, cond, deadline);
}

void CondVar::Wait(Mutex* mu) {
  static const WaitFn real = Real<WaitFn>("7CondVar4WaitEPNS0_5MutexE");
  ReleasedWhileWaiting released(mu, 0);
  real(this, mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static const WaitTimeoutFn real =
      Real<WaitTimeoutFn>("7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  ReleasedWhileWaiting released(mu, 0);
  return real(this, mu, timeout);
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static const WaitDeadlineFn real =
      Real<WaitDeadlineFn>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  ReleasedWhileWaiting released(mu, 0);
  return real(this, mu, deadline);
}

ABSL_NAMESPACE_END
}  // namespace absl
