// LD_PRELOAD shim that makes Swift's cooperative pool one thread wide on Linux, so a task that
// blocks a pool thread while another task must run for it to go on deadlocks every time instead
// of only under load (docs/FAULTS.md, §9).
//
// On Linux, Swift's global executor is a libdispatch queue whose width is the number of logical
// CPUs (`dispatch_queue_set_width(…, DISPATCH_QUEUE_WIDTH_MAX_LOGICAL_CPUS)`), which libdispatch
// reads with sysconf(3). `LIBDISPATCH_COOPERATIVE_POOL_STRICT` is an Apple libdispatch setting
// that swift-corelibs-libdispatch does not read, and `taskset` does not change the width. This
// shim answers 1 for the processor counts and passes every other name to the C library.
//
//   cc -O2 -shared -fPIC -o /tmp/pool-one-wide.so scripts/pool-one-wide.c -ldl
//   LD_PRELOAD=/tmp/pool-one-wide.so swift test --skip-build --disable-xctest --filter FerryAgentTests
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>

long sysconf(int name) {
    static long (*next)(int);
    if (name == _SC_NPROCESSORS_CONF || name == _SC_NPROCESSORS_ONLN) return 1;
    if (!next) next = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    return next(name);
}
