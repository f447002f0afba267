#ifndef C_BENCH_SUPPORT_H
#define C_BENCH_SUPPORT_H

#ifdef __linux__
#include <sys/prctl.h>
#endif

/// Sets the calling thread's timer slack (how late the kernel may end its timed sleeps) to
/// `nanoseconds`. Returns 0, or -1 where it is not supported.
static inline int bench_set_timer_slack(unsigned long nanoseconds) {
#ifdef __linux__
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0);
#else
    (void)nanoseconds;
    return -1;
#endif
}

#endif
