#include "core/clock.h"

static struct timespec read_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts;
}

/* Whole units of 1/`per_sec` seconds in `ts`. */
static int64_t in_units(struct timespec ts, int64_t per_sec)
{
    return (int64_t)ts.tv_sec * per_sec + ts.tv_nsec / (1000000000 / per_sec);
}

int64_t clock_mono_ms(void)
{
    return in_units(read_clock(CLOCK_MONOTONIC), 1000);
}

int64_t clock_mono_us(void)
{
    return in_units(read_clock(CLOCK_MONOTONIC), 1000000);
}

struct timespec clock_mono_now(void)
{
    return read_clock(CLOCK_MONOTONIC);
}

double clock_seconds_since(const struct timespec *start)
{
    struct timespec now = clock_mono_now();
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

int64_t clock_ms_since(const struct timespec *start)
{
    struct timespec now = clock_mono_now();
    return (int64_t)(now.tv_sec - start->tv_sec) * 1000 +
           (int64_t)(now.tv_nsec - start->tv_nsec) / 1000000;
}

int64_t clock_real_us(void)
{
    return in_units(read_clock(CLOCK_REALTIME), 1000000);
}

int64_t clock_real_ms(void)
{
    return in_units(read_clock(CLOCK_REALTIME), 1000);
}

int64_t clock_real_sec(void)
{
    return (int64_t)read_clock(CLOCK_REALTIME).tv_sec;
}

struct timeval clock_ms_to_timeval(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                         .tv_usec = (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}
