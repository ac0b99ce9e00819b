/* Periodic malloc_trim (see memory-trim.h). */
#include "server/memory-trim.h"

#include "core/log.h"
#include "core/xalloc.h"

#include <malloc.h>
#include <stdlib.h>
#include <time.h>

#define COMPONENT "petreld"
/* A trim walks every arena; it is worth it only when the free memory they
 * hold moved by this much since the last one (pages already given back
 * still count as free chunks, so an idle process is not trimmed again and
 * again). */
#define TRIM_MIN_CHANGE (1024 * 1024)

struct memory_trim {
    struct event *timer;
    size_t free_after_last; /* arenas' free bytes after the last trim */
};

static void trim_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct memory_trim *trim = arg;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 before = mallinfo2();
    size_t change = before.fordblks > trim->free_after_last
                        ? before.fordblks - trim->free_after_last
                        : trim->free_after_last - before.fordblks;
    if (change < TRIM_MIN_CHANGE)
        return;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int released = malloc_trim(0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct mallinfo2 after = mallinfo2();
    trim->free_after_last = after.fordblks;
    log_debug(COMPONENT, "memory trimmed", "free=%zu released=%s ms=%.2f", before.fordblks,
              released ? "yes" : "no",
              (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
#elif defined(__GLIBC__)
    (void)trim;
    malloc_trim(0);
#else
    (void)trim;
#endif
}

struct memory_trim *memory_trim_start(struct event_base *base, int64_t interval_ms)
{
    if (interval_ms <= 0)
        return NULL;
    struct memory_trim *trim = xcalloc(1, sizeof(*trim));
    trim->timer = event_new(base, -1, EV_PERSIST, trim_cb, trim);
    struct timeval tv = {.tv_sec = interval_ms / 1000, .tv_usec = (interval_ms % 1000) * 1000};
    event_add(trim->timer, &tv);
    return trim;
}

void memory_trim_free(struct memory_trim *trim)
{
    if (trim == NULL)
        return;
    event_free(trim->timer);
    free(trim);
}
