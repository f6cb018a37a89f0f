/* Preloaded in front of libumad2sim.so (LD_PRELOAD="<this> libumad2sim.so") for every MAD
 * client the simulated fabric runs: closing a umad fd releases all the agents registered on it,
 * as the kernel's umad device does.
 *
 * Why: umad2sim (ibsim-utils 0.10) has 32 agent slots per simulated device, and its close()
 * frees only the first agent it finds registered on the fd (a `break` in close_fd). libibmad's
 * mad_rpc_close_port() closes the fd without unregistering, relying on the kernel, so every
 * mad_rpc_open_port() with two classes leaks one slot under umad2sim, and every
 * ibnd_discover_fabric() two. A long-running fabric sweeper (rediscovery after every port state
 * change) ran out of slots after a dozen rediscoveries: "Failed to register SMI_DIRECT agent",
 * then mad_rpc_open_port ENOMEM. On hardware close() releases every agent, so this is the
 * simulator's bug, fixed here rather than worked around in the product.
 *
 * How: ioctl() records the agent ids that IB_USER_MAD_REGISTER_AGENT hands out per fd (and
 * forgets the ones IB_USER_MAD_UNREGISTER_AGENT releases); close() of such an fd unregisters the
 * ones left, then closes. Everything else passes through to the next definition (umad2sim's,
 * which passes non-umad fds on to libc). */

#define _GNU_SOURCE

#include <dlfcn.h>
#include <pthread.h>
#include <rdma/rdma_user_ioctl.h> /* IB_USER_MAD_(UN)REGISTER_AGENT */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>

/* umad2sim hands out umad fds 1024 + 8 * device + index (< 2048; 2048 + device are issm fds). */
enum { kFirstUmadFd = 1024, kUmadFds = 1024, kAgentsPerFd = 32 };

struct fd_agents {
  int count;
  uint32_t ids[kAgentsPerFd];
};

static struct fd_agents agents_by_fd[kUmadFds];
static pthread_mutex_t agents_mutex = PTHREAD_MUTEX_INITIALIZER;

typedef int (*ioctl_fn)(int, unsigned long, ...);
typedef int (*close_fn)(int);

static ioctl_fn next_ioctl(void) {
  static ioctl_fn fn;
  if (fn == NULL) {
    fn = (ioctl_fn)dlsym(RTLD_NEXT, "ioctl");
  }
  return fn;
}

static close_fn next_close(void) {
  static close_fn fn;
  if (fn == NULL) {
    fn = (close_fn)dlsym(RTLD_NEXT, "close");
  }
  return fn;
}

static int is_umad_fd(int fd) { return fd >= kFirstUmadFd && fd < kFirstUmadFd + kUmadFds; }

static void remember(int fd, uint32_t id) {
  struct fd_agents* a = &agents_by_fd[fd - kFirstUmadFd];
  if (a->count < kAgentsPerFd) { /* umad2sim has no more slots than this per device */
    a->ids[a->count++] = id;
  }
}

static void forget(int fd, uint32_t id) {
  struct fd_agents* a = &agents_by_fd[fd - kFirstUmadFd];
  for (int i = 0; i < a->count; ++i) {
    if (a->ids[i] == id) {
      a->ids[i] = a->ids[--a->count];
      return;
    }
  }
}

int ioctl(int fd, unsigned long request, ...) {
  va_list args;
  va_start(args, request);
  void* arg = va_arg(args, void*);
  va_end(args);
  ioctl_fn real = next_ioctl();
  if (real == NULL) {
    return -1;
  }
  const int rc = real(fd, request, arg);
  if (rc == 0 && arg != NULL && is_umad_fd(fd)) {
    uint32_t id; /* the first field of struct ib_user_mad_reg_req, and the whole unregister arg */
    memcpy(&id, arg, sizeof(id));
    pthread_mutex_lock(&agents_mutex);
    if (request == IB_USER_MAD_REGISTER_AGENT) {
      remember(fd, id);
    } else if (request == IB_USER_MAD_UNREGISTER_AGENT) {
      forget(fd, id);
    }
    pthread_mutex_unlock(&agents_mutex);
  }
  return rc;
}

int close(int fd) {
  close_fn real = next_close();
  if (real == NULL) {
    return -1;
  }
  if (is_umad_fd(fd)) {
    struct fd_agents left;
    pthread_mutex_lock(&agents_mutex);
    left = agents_by_fd[fd - kFirstUmadFd];
    agents_by_fd[fd - kFirstUmadFd].count = 0;
    pthread_mutex_unlock(&agents_mutex);
    ioctl_fn unregister = next_ioctl();
    for (int i = 0; unregister != NULL && i < left.count; ++i) {
      uint32_t id = left.ids[i];
      unregister(fd, IB_USER_MAD_UNREGISTER_AGENT, &id);
    }
  }
  return real(fd);
}
