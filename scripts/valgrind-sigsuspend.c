// LD_PRELOAD shim for running Swift programs under valgrind 3.19 (Debian 12).
//
// Swift's async `main` parks the main thread in libdispatch's `_dispatch_sig_thread`, which calls
// sigsuspend(2) with a mask that lives in libdispatch's read-only data. valgrind 3.19's wrapper for
// rt_sigsuspend removes its own signal from the mask *in place*, so it faults on the read-only page
// and valgrind dies with an internal SIGSEGV (fixed in later valgrind releases). This copy of
// sigsuspend hands the kernel a writable copy of the mask; it changes nothing else.
//
// Built and preloaded by scripts/callgrind-ingest:  cc -O2 -shared -fPIC -o shim.so this-file
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, (size_t)(_NSIG / 8));
}
