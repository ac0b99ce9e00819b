/* The folder lock (flock on petrel.index.lock) and fileindex metrics.
 *
 * One lock per handle, re-entrant: a nested request for the same or a
 * weaker mode only counts (lock_reentrant_total); asking for exclusive while
 * holding shared is refused (flock would convert the lock in place and open
 * a window for another writer). Waiting polls with LOCK_NB and a growing
 * sleep (50 us .. 5 ms) up to fileindex_lock_timeout seconds, then fails with
 * PETREL_ERR_UNAVAILABLE.
 *
 * Metrics are registered once per registry (the registry hands the same
 * family to every handle that registers the name); each handle looks its
 * series up on first use. */
#include "storage/fileindex/fileindex-private.h"

#include "core/error.h"
#include "core/metrics.h"
#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

double fileindex_lock_timeout = 30.0;

static const char *const mode_names[2] = {"shared", "exclusive"};
static const char *const site_names[FI_SITE_COUNT] = {"open-probe", "reload-fallback", "read",
                                                      "write"};
static const char *const reload_names[FI_RELOAD_COUNT] = {"none",  "incremental", "full",
                                                          "adopt", "fallback",    "error"};
static const char *const part_names[FI_PART_COUNT] = {"lock", "reload", "build"};

void fi_metrics_init(struct fileindex *fi)
{
    struct metrics_registry *reg = fi->set.metrics;
    if (reg == NULL)
        return;
    static const char *const lock_labels[] = {"mode", "site", NULL};
    static const char *const part_labels[] = {"part", NULL};
    static const char *const result_labels[] = {"result", NULL};
    struct fi_metrics *m = &fi->m;
    m->read_seconds = metrics_histogram(reg, "petrel_fileindex_read_seconds",
                                        "Whole read of a folder index (open or refresh)", NULL,
                                        metrics_latency_buckets, metrics_latency_bucket_count);
    m->read_part =
        metrics_histogram(reg, "petrel_fileindex_read_part_seconds",
                          "Parts of a folder index read: lock wait, file reload, "
                          "building the view",
                          part_labels, metrics_latency_buckets, metrics_latency_bucket_count);
    m->lock_acquired = metrics_counter(reg, "petrel_fileindex_lock_acquired_total",
                                       "Folder locks acquired", lock_labels);
    m->lock_wait = metrics_histogram(reg, "petrel_fileindex_lock_wait_seconds",
                                     "Time spent waiting for the folder lock", lock_labels,
                                     metrics_latency_buckets, metrics_latency_bucket_count);
    m->lock_release =
        metrics_histogram(reg, "petrel_fileindex_lock_release_seconds",
                          "Time the folder lock was held, observed at release", lock_labels,
                          metrics_latency_buckets, metrics_latency_bucket_count);
    m->lock_reentrant = metrics_counter(reg, "petrel_fileindex_lock_reentrant_total",
                                        "Nested folder lock requests served by the lock "
                                        "already held",
                                        lock_labels);
    m->reload =
        metrics_counter(reg, "petrel_fileindex_reload_total",
                        "Index refreshes by how the view was brought up to date", result_labels);
    m->stamped =
        metrics_counter(reg, "petrel_fileindex_lineage_stamped_total",
                        "Indexes without lineage (older format) given one by a writer", NULL);
}

static struct metric_series *series(struct metric_family *fam, struct metric_series **slot,
                                    const char *const values[])
{
    if (fam == NULL)
        return NULL;
    if (*slot == NULL)
        *slot = metric_series_get(fam, values);
    return *slot;
}

static struct metric_series *lock_series(struct metric_family *fam,
                                         struct metric_series *slots[2][FI_SITE_COUNT],
                                         enum fi_lock_mode mode, enum fi_site site)
{
    int mi = mode == FI_LOCK_EXCLUSIVE ? 1 : 0;
    const char *const values[] = {mode_names[mi], site_names[site], NULL};
    return series(fam, &slots[mi][site], values);
}

void fi_metric_reload(struct fileindex *fi, enum fi_reload result)
{
    const char *const values[] = {reload_names[result], NULL};
    struct metric_series *s = series(fi->m.reload, &fi->m.reload_s[result], values);
    if (s != NULL)
        metric_add(s, 1);
}

void fi_metric_read(struct fileindex *fi, const struct fi_timing *t)
{
    if (fi->m.read_seconds == NULL)
        return;
    static const char *const none[] = {NULL};
    double whole = fi_now() - t->start;
    metric_observe(series(fi->m.read_seconds, &fi->m.read_s, none), whole);
    for (int p = 0; p < FI_PART_COUNT; p++) {
        if (t->part[p] <= 0)
            continue;
        const char *const values[] = {part_names[p], NULL};
        double v = t->part[p] < whole ? t->part[p] : whole;
        metric_observe(series(fi->m.read_part, &fi->m.part_s[p], values), v);
    }
}

void fi_metric_stamped(struct fileindex *fi)
{
    static const char *const none[] = {NULL};
    struct metric_series *s = series(fi->m.stamped, &fi->m.stamped_s, none);
    if (s != NULL)
        metric_add(s, 1);
}

static bool open_lock_file(struct fileindex *fi, struct petrel_error *err)
{
    if (fi->lock_fd >= 0)
        return true;
    int fd = openat(fi->dir_fd, FI_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EACCES || errno == EROFS))
        fd = openat(fi->dir_fd, FI_LOCK_FILE, O_RDONLY | O_CLOEXEC); /* read-only folder */
    if (fd < 0)
        return fi_io_error(err, "cannot open lock file", fi->lock_path);
    fi->lock_fd = fd;
    return true;
}

bool fi_lock(struct fileindex *fi, enum fi_lock_mode mode, enum fi_site site, double *waited,
             struct petrel_error *err)
{
    return fi_lock_timed(fi, mode, site, fileindex_lock_timeout, waited, err);
}

bool fi_lock_timed(struct fileindex *fi, enum fi_lock_mode mode, enum fi_site site, double timeout,
                   double *waited, struct petrel_error *err)
{
    if (waited != NULL)
        *waited = 0;
    if (fi->lock_depth > 0) {
        if (mode > fi->lock_mode)
            return petrel_error_set(err, PETREL_ERR_CONFLICT,
                                    "folder lock held shared, cannot take it exclusively: %s",
                                    fi->dir);
        fi->lock_depth++;
        struct metric_series *s = lock_series(fi->m.lock_reentrant, fi->m.reent_s, mode, site);
        if (s != NULL)
            metric_add(s, 1);
        return true;
    }
    if (!open_lock_file(fi, err))
        return false;
    double t0 = fi_now();
    double deadline = t0 + timeout;
    long sleep_us = 50;
    int op = mode == FI_LOCK_EXCLUSIVE ? LOCK_EX : LOCK_SH;
    for (;;) {
        if (flock(fi->lock_fd, op | LOCK_NB) == 0)
            break;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK)
            return fi_io_error(err, "cannot lock", fi->lock_path);
        double now = fi_now();
        if (now >= deadline)
            return petrel_error_set(err, PETREL_ERR_UNAVAILABLE,
                                    "timed out after %.1f s waiting for the folder lock %s",
                                    timeout, fi->lock_path);
        double left_us = (deadline - now) * 1e6;
        long us = (double)sleep_us < left_us ? sleep_us : (long)left_us + 1;
        struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        if (sleep_us < 5000)
            sleep_us *= 2;
    }
    double t1 = fi_now();
    fi->lock_mode = mode;
    fi->lock_depth = 1;
    fi->lock_site = site;
    fi->lock_since = t1;
    struct metric_series *s = lock_series(fi->m.lock_acquired, fi->m.acq_s, mode, site);
    if (s != NULL) {
        metric_add(s, 1);
        metric_observe(lock_series(fi->m.lock_wait, fi->m.wait_s, mode, site), t1 - t0);
    }
    if (waited != NULL)
        *waited = t1 - t0;
    return true;
}

void fi_unlock(struct fileindex *fi)
{
    PETREL_ASSERT(fi->lock_depth > 0);
    if (--fi->lock_depth > 0)
        return;
    flock(fi->lock_fd, LOCK_UN);
    struct metric_series *s =
        lock_series(fi->m.lock_release, fi->m.rel_s, fi->lock_mode, fi->lock_site);
    if (s != NULL)
        metric_observe(s, fi_now() - fi->lock_since);
    fi->lock_mode = FI_LOCK_NONE;
}
