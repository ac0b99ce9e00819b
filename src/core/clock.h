/* Time for every layer: the monotonic clock for durations, deadlines and
 * rate windows (never jumps, but means nothing across processes), the real
 * clock for what is stored or shown (expiry times, log stamps).
 *
 * One helper instead of a now_ms() in every file: the conversions
 * (seconds + nanoseconds to milliseconds, milliseconds to a timeval for
 * libevent) are written once and cannot overflow differently per copy. */
#ifndef PETREL_CORE_CLOCK_H
#define PETREL_CORE_CLOCK_H

#include <stdint.h>
#include <sys/time.h>
#include <time.h>

/* CLOCK_MONOTONIC in milliseconds / microseconds since an unspecified
 * point (boot). */
int64_t clock_mono_ms(void);
int64_t clock_mono_us(void);

/* A monotonic start stamp, and how long ago it was. */
struct timespec clock_mono_now(void);
double clock_seconds_since(const struct timespec *start);
int64_t clock_ms_since(const struct timespec *start);

/* CLOCK_REALTIME: micro-, milliseconds / seconds since the epoch. */
int64_t clock_real_us(void);
int64_t clock_real_ms(void);
int64_t clock_real_sec(void);

/* A duration in milliseconds as a timeval (libevent timers); negative
 * durations become zero. */
struct timeval clock_ms_to_timeval(int64_t ms);

#endif
