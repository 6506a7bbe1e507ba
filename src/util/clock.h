/* clock — monotonic time for throughput and latency. */
#ifndef NS_UTIL_CLOCK_H
#define NS_UTIL_CLOCK_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double clock_now(void);

/* CPU seconds this process has used, all its threads together (CLOCK_PROCESS_CPUTIME_ID); -1 unknown. */
double clock_cpu_s(void);

#endif
