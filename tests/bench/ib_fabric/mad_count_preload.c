/* Counts the MADs a process sends: an LD_PRELOAD shim over libibumad's umad_send, stacked in
 * front of libumad2sim.so by sweep_bench.sh so that fabricmon's probe and ibqueryerrors are
 * measured the same way. Appends "<sends> <send errors>" to $FABRICMON_MAD_COUNT_FILE at exit (one
 * line per process: wrappers such as timeout(1) inherit LD_PRELOAD too and add "0 0").
 * Test tooling only; never loaded by fabricmon itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long long sends;
static unsigned long long send_errors;

int umad_send(int portid, int agentid, void *umad, int length, int timeout_ms, int retries) {
  static int (*real)(int, int, void *, int, int, int);
  if (real == NULL) {
    real = (int (*)(int, int, void *, int, int, int))dlsym(RTLD_NEXT, "umad_send");
  }
  int rc = real != NULL ? real(portid, agentid, umad, length, timeout_ms, retries) : -1;
  if (rc < 0) {
    __atomic_add_fetch(&send_errors, 1, __ATOMIC_RELAXED);
  } else {
    __atomic_add_fetch(&sends, 1, __ATOMIC_RELAXED);
  }
  return rc;
}

__attribute__((destructor)) static void report(void) {
  const char *path = getenv("FABRICMON_MAD_COUNT_FILE");
  if (path == NULL) {
    return;
  }
  FILE *f = fopen(path, "a");
  if (f != NULL) {
    fprintf(f, "%llu %llu\n", sends, send_errors);
    fclose(f);
  }
}
