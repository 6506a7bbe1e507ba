/* clock — monotonic time for throughput and latency. */
#ifndef NS_UTIL_CLOCK_H
#define NS_UTIL_CLOCK_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double clock_now(void);

#endif
