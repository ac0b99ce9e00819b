#include "core/file-lock.h"

#include "core/clock.h"

#include <errno.h>
#include <sys/file.h>
#include <time.h>

#define LOCK_SLEEP_MIN_US 50
#define LOCK_SLEEP_MAX_US 5000

enum file_lock_result file_lock_take(int fd, bool exclusive, int64_t timeout_ms, int64_t *waited_ms)
{
    int op = (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
    int64_t start = clock_mono_us();
    int64_t deadline = start + timeout_ms * 1000;
    int64_t sleep_us = LOCK_SLEEP_MIN_US;
    enum file_lock_result result;
    for (;;) {
        if (flock(fd, op) == 0) {
            result = FILE_LOCK_TAKEN;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK) {
            result = FILE_LOCK_ERROR;
            break;
        }
        int64_t now = clock_mono_us();
        if (now >= deadline) {
            result = FILE_LOCK_TIMEOUT;
            break;
        }
        int64_t us = sleep_us < deadline - now ? sleep_us : deadline - now;
        struct timespec ts = {.tv_sec = (time_t)(us / 1000000),
                              .tv_nsec = (long)(us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        if (sleep_us < LOCK_SLEEP_MAX_US)
            sleep_us *= 2;
    }
    int saved = errno; /* the caller reads it after FILE_LOCK_ERROR */
    if (waited_ms != NULL)
        *waited_ms = (clock_mono_us() - start) / 1000;
    errno = saved;
    return result;
}

void file_lock_release(int fd)
{
    while (flock(fd, LOCK_UN) != 0 && errno == EINTR) {
    }
}
