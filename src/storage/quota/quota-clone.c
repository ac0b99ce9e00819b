/* The quota mirror (quota-clone.h). Two halves: the hooks, on any thread,
 * only put a name into `marks` (locked) and wake the main loop through an
 * eventfd; the main loop moves marks into `dirty` (its own, unlocked),
 * keeps one timer at the earliest due user and writes batches. */
#include "storage/quota/quota-clone.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "storage/quota/quota-module.h"
#include "storage/quota/quota-rule.h"
#include "storage/quota/quota-usage.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define COMPONENT "quota-clone"
/* Folder aggregates remembered between flushes (checked against the index
 * files on each use, so never stale). */
#define CLONE_USAGE_CACHE_FOLDERS 16384
/* A dict that keeps failing is logged at most this often. */
#define CLONE_FAIL_LOG_INTERVAL_MS 60000
/* Users due within this much of the first one join its batch. A user is
 * due this much after its delay has passed, so that joining a batch early
 * never brings its write closer than the delay to its previous one. */
#define CLONE_BATCH_SLACK_MS 50

/* Flags of a mark. */
#define MARK_DIRTY 1u
#define MARK_FINAL 2u

/* The value of `marks`: what the hooks said about one user since the loop
 * last looked. */
struct clone_mark {
    unsigned flags;
    /* The quota module's view of the user's rules on the marking handle
     * (quota_user_rules_copy): the mirror skips the folders they mark
     * ignore, as quota/show and GETQUOTA do. NULL: that handle had none. */
    char *rules;
};

struct clone_user {
    int64_t due_ms; /* monotonic */
    char *rules;    /* the latest rules a mark brought (NULL: none yet) */
};

struct clone_target {
    const char *name; /* borrowed from the configuration */
    struct metric_series *ok;
    struct metric_series *failed;
    int64_t last_fail_log_ms; /* 0: not failing */
    uint64_t failed_since_log;
};

struct quota_clone {
    struct event_base *base;
    const struct quota_config *cfg;
    struct dict_registry *dicts;
    struct mail_storage *storage;
    struct fileindex_usage_cache *usage_cache;
    struct clone_target *targets;
    size_t target_count;
    size_t in_flight;

    /* Filled by any thread. */
    pthread_mutex_t lock;
    struct smap *marks; /* username -> struct clone_mark */
    int wake_fd;
    struct event *wake;

    /* Main loop only. */
    struct smap *dirty; /* username -> struct clone_user */
    struct event *timer;
    int64_t timer_due_ms; /* 0: not armed */
};

/* One transaction to one dict. */
struct clone_batch {
    struct quota_clone *clone;
    struct clone_target *target;
    size_t users;
    char *first_user; /* for the log */
};

bool quota_clone_parse_value(const char *data, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] < '0' || data[i] > '9')
            return false;
        unsigned d = (unsigned)(data[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* ---------- any thread ---------- */

static void clone_mark_free(void *v)
{
    struct clone_mark *m = v;
    if (m != NULL)
        free(m->rules);
    free(m);
}

static void clone_user_free(void *v)
{
    struct clone_user *u = v;
    if (u != NULL)
        free(u->rules);
    free(u);
}

void quota_clone_mark(struct quota_clone *clone, const char *username, const char *rules,
                      bool final)
{
    unsigned add = final ? MARK_FINAL : MARK_DIRTY;
    char *copy = rules != NULL ? xstrdup(rules) : NULL;
    pthread_mutex_lock(&clone->lock);
    bool wake = smap_count(clone->marks) == 0;
    struct clone_mark *m = smap_get(clone->marks, username);
    if (m == NULL) {
        m = xcalloc(1, sizeof(*m));
        smap_put(clone->marks, username, m);
    }
    m->flags |= add;
    if (copy != NULL) {
        free(m->rules);
        m->rules = copy;
        copy = NULL;
    }
    pthread_mutex_unlock(&clone->lock);
    free(copy);
    if (wake) {
        uint64_t one = 1;
        /* EAGAIN: the counter is full, so the loop is woken anyway. */
        ssize_t n = write(clone->wake_fd, &one, sizeof(one));
        (void)n;
    }
}

/* Marks `user` with the quota module's view of its rules on this handle. */
static void mark_user(struct quota_clone *clone, struct mail_user *user, bool final)
{
    char *rules = quota_user_rules_copy(user);
    quota_clone_mark(clone, mail_user_name(user), rules, final);
    free(rules);
}

static void hook_saved(void *ctx, const struct mail_save_info *info, const uint32_t *uids,
                       size_t count)
{
    (void)uids;
    (void)count;
    struct mail_user *dst = mailbox_user(info->dst);
    mark_user(ctx, dst, false);
    /* A MOVE out of another user's folder lowers that user's usage. */
    if (info->src != NULL && mailbox_user(info->src) != dst)
        mark_user(ctx, mailbox_user(info->src), false);
}

static void hook_expunged(void *ctx, struct mailbox *box, const uint32_t *uids, size_t count)
{
    (void)uids;
    if (count > 0)
        mark_user(ctx, mailbox_user(box), false);
}

static void hook_folder_deleted(void *ctx, struct mail_user *user,
                                const struct namespace_config *ns, const char *name)
{
    (void)ns;
    (void)name;
    mark_user(ctx, user, false);
}

static void hook_user_released(void *ctx, struct mail_user *user)
{
    mark_user(ctx, user, true);
}

const struct mail_storage_module quota_clone_module = {
    .name = "quota-clone",
    .saved = hook_saved,
    .expunged = hook_expunged,
    .folder_deleted = hook_folder_deleted,
    .user_released = hook_user_released,
};

/* ---------- main loop ---------- */

static void arm_timer(struct quota_clone *clone, int64_t due_ms)
{
    if (clone->timer_due_ms != 0 && clone->timer_due_ms <= due_ms)
        return;
    int64_t wait = due_ms - clock_mono_ms();
    if (wait < 0)
        wait = 0;
    struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)((wait % 1000) * 1000)};
    evtimer_add(clone->timer, &tv);
    clone->timer_due_ms = due_ms;
}

static void fail_log(struct clone_target *t, size_t users, const char *first_user,
                     const char *error)
{
    int64_t now = clock_mono_ms();
    t->failed_since_log += users;
    if (t->last_fail_log_ms != 0 && now - t->last_fail_log_ms < CLONE_FAIL_LOG_INTERVAL_MS)
        return;
    log_warn(COMPONENT, "cannot write the quota mirror",
             "dict=%s users=%zu user=%s failed_since_last_log=%" PRIu64 " error=\"%s\"", t->name,
             users, first_user, t->failed_since_log, error != NULL ? error : "");
    t->last_fail_log_ms = now;
    t->failed_since_log = 0;
}

static void batch_done(enum dict_commit_result result, const char *error, void *ctx)
{
    struct clone_batch *b = ctx;
    struct clone_target *t = b->target;
    b->clone->in_flight--;
    if (result == DICT_COMMIT_OK) {
        metric_add(t->ok, (double)b->users);
        if (t->last_fail_log_ms != 0) {
            log_info(COMPONENT, "quota mirror writes again",
                     "dict=%s failed_since_last_log=%" PRIu64, t->name, t->failed_since_log);
            t->last_fail_log_ms = 0;
            t->failed_since_log = 0;
        }
        log_debug(COMPONENT, "mirror written", "dict=%s users=%zu user=%s", t->name, b->users,
                  b->first_user);
    } else {
        metric_add(t->failed, (double)b->users);
        fail_log(t, b->users, b->first_user, error);
    }
    free(b->first_user);
    free(b);
}

struct clone_value {
    char *user;
    struct quota_usage usage;
};

/* Writes `values` to every dict, one transaction each, all sent at once. */
static void write_batch(struct quota_clone *clone, const struct clone_value *values, size_t count)
{
    if (count == 0)
        return;
    for (size_t t = 0; t < clone->target_count; t++) {
        struct clone_target *target = &clone->targets[t];
        struct dict *dict = dict_registry_get(clone->dicts, target->name);
        struct clone_batch *b = xcalloc(1, sizeof(*b));
        b->clone = clone;
        b->target = target;
        b->users = count;
        b->first_user = xstrdup(values[0].user);
        clone->in_flight++;
        if (dict == NULL) {
            batch_done(DICT_COMMIT_FAILED, "no such dict", b);
            continue;
        }
        struct dict_op_settings set = {.username = values[0].user};
        struct dict_transaction *tx = dict_transaction_begin(dict, &set);
        for (size_t i = 0; i < count; i++) {
            char num[24];
            dict_transaction_set_user(tx, values[i].user);
            int n = snprintf(num, sizeof(num), "%" PRIu64, values[i].usage.storage);
            dict_set(tx, QUOTA_CLONE_KEY_STORAGE, num, (size_t)n);
            n = snprintf(num, sizeof(num), "%" PRIu64, values[i].usage.messages);
            dict_set(tx, QUOTA_CLONE_KEY_MESSAGES, num, (size_t)n);
        }
        dict_transaction_commit(tx, batch_done, b);
    }
}

/* A user due to be written, with the rules its marks brought. */
struct due_user {
    char *name;
    char *rules; /* NULL: none known */
};

/* Writes the users in `due` (their usage read now). */
static void flush_users(struct quota_clone *clone, const struct due_user *due, size_t count)
{
    struct clone_value *values = xcalloc(count > 0 ? count : 1, sizeof(*values));
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        struct petrel_error err;
        petrel_error_clear(&err);
        /* The folders the user's rules mark ignore are left out, as in
         * quota/show and GETQUOTA; rules that no session of this process
         * handed over (none known) or that do not parse count every folder
         * (the value is advisory; enforcement fails open on them too). */
        struct quota_rules rules;
        quota_rules_init(&rules);
        struct petrel_error rerr;
        if (due[i].rules != NULL && !quota_rules_add_lines(&rules, due[i].rules, &rerr)) {
            quota_rules_free(&rules);
            quota_rules_init(&rules);
        }
        struct mail_user *user = mail_user_get(clone->storage, due[i].name, &err);
        struct quota_usage usage;
        bool ok = user != NULL && quota_usage_get(user, &rules, clone->usage_cache, &usage, &err);
        quota_rules_free(&rules);
        if (!ok) {
            log_warn(COMPONENT, "cannot read the usage to mirror", "user=%s error=\"%s\"",
                     due[i].name, err.message);
            continue;
        }
        values[n].user = due[i].name;
        values[n].usage = usage;
        if (++n == QUOTA_CLONE_BATCH_USERS) {
            write_batch(clone, values, n);
            n = 0;
        }
    }
    write_batch(clone, values, n);
    free(values);
}

/* Takes the users due by `until` (every one with `all`) out of `dirty`,
 * writes them, and re-arms the timer for the rest. */
static void flush_due(struct quota_clone *clone, int64_t until, bool all)
{
    struct due_user *due = NULL;
    size_t count = 0, cap = 0;
    int64_t next = 0;
    const char *key = "";
    bool strict = false;
    struct clone_user *u;
    while ((u = smap_seek(clone->dirty, key, strict, &key)) != NULL) {
        strict = true;
        if (all || u->due_ms <= until) {
            due = xgrow(due, &cap, count + 1, sizeof(*due));
            due[count].name = xstrdup(key);
            due[count].rules = u->rules;
            u->rules = NULL;
            count++;
        } else if (next == 0 || u->due_ms < next) {
            next = u->due_ms;
        }
    }
    for (size_t i = 0; i < count; i++)
        clone_user_free(smap_remove(clone->dirty, due[i].name));
    clone->timer_due_ms = 0;
    if (next != 0)
        arm_timer(clone, next);
    flush_users(clone, due, count);
    for (size_t i = 0; i < count; i++) {
        free(due[i].name);
        free(due[i].rules);
    }
    free(due);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct quota_clone *clone = arg;
    clone->timer_due_ms = 0;
    flush_due(clone, clock_mono_ms() + CLONE_BATCH_SLACK_MS, false);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct quota_clone *clone = arg;
    uint64_t n;
    while (read(fd, &n, sizeof(n)) == (ssize_t)sizeof(n)) {
    }
    pthread_mutex_lock(&clone->lock);
    struct smap *marks = clone->marks;
    clone->marks = smap_new();
    pthread_mutex_unlock(&clone->lock);

    int64_t now = clock_mono_ms();
    int64_t earliest = 0;
    const char *key = "";
    bool strict = false;
    struct clone_mark *m;
    while ((m = smap_seek(marks, key, strict, &key)) != NULL) {
        strict = true;
        unsigned flags = m->flags;
        struct clone_user *u = smap_get(clone->dirty, key);
        if (u == NULL) {
            /* A session that ended with nothing changed since the last
             * write has nothing to write. */
            if ((flags & MARK_DIRTY) == 0)
                continue;
            u = xcalloc(1, sizeof(*u));
            int64_t delay = clone->cfg->clone_flush_delay_ms;
            u->due_ms = now + (delay > 0 ? delay + CLONE_BATCH_SLACK_MS : 0);
            smap_put(clone->dirty, key, u);
        }
        if (m->rules != NULL) {
            free(u->rules);
            u->rules = m->rules;
            m->rules = NULL;
        }
        if ((flags & MARK_FINAL) != 0)
            u->due_ms = now;
        if (earliest == 0 || u->due_ms < earliest)
            earliest = u->due_ms;
    }
    smap_free(marks, clone_mark_free);
    if (earliest != 0)
        arm_timer(clone, earliest);
}

struct quota_clone *quota_clone_new(struct event_base *base, const struct quota_config *cfg,
                                    struct dict_registry *dicts, struct mail_storage *storage,
                                    struct metrics_registry *metrics, struct petrel_error *err)
{
    struct quota_clone *clone = xcalloc(1, sizeof(*clone));
    clone->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (clone->wake_fd < 0) {
        petrel_error_set(err, PETREL_ERR_IO, "quota mirror: eventfd: %s", strerror(errno));
        free(clone);
        return NULL;
    }
    clone->base = base;
    clone->cfg = cfg;
    clone->dicts = dicts;
    clone->storage = storage;
    clone->usage_cache = quota_usage_cache_new(CLONE_USAGE_CACHE_FOLDERS);
    pthread_mutex_init(&clone->lock, NULL);
    clone->marks = smap_new();
    clone->dirty = smap_new();
    clone->wake = event_new(base, clone->wake_fd, EV_READ | EV_PERSIST, wake_cb, clone);
    event_add(clone->wake, NULL);
    clone->timer = evtimer_new(base, timer_cb, clone);
    static const char *const labels[] = {"dict", "result", NULL};
    struct metric_family *fam = metrics_counter(
        metrics, "petrel_quota_clone_writes_total",
        "Usage values of one user written to a quota mirror dict, by dict and result.", labels);
    for (size_t i = 0; cfg->clone_dicts[i] != NULL; i++)
        clone->target_count++;
    clone->targets =
        xcalloc(clone->target_count > 0 ? clone->target_count : 1, sizeof(*clone->targets));
    for (size_t i = 0; i < clone->target_count; i++) {
        struct clone_target *t = &clone->targets[i];
        t->name = cfg->clone_dicts[i];
        const char *ok[] = {t->name, "ok"};
        const char *failed[] = {t->name, "failed"};
        t->ok = metric_series_get(fam, ok);
        t->failed = metric_series_get(fam, failed);
    }
    log_info(COMPONENT, "mirroring quota usage", "dicts=%zu flush_delay_ms=%lld",
             clone->target_count, (long long)cfg->clone_flush_delay_ms);
    return clone;
}

void quota_clone_flush_all(struct quota_clone *clone)
{
    if (clone == NULL)
        return;
    wake_cb(clone->wake_fd, EV_READ, clone);
    if (clone->timer_due_ms != 0)
        evtimer_del(clone->timer);
    clone->timer_due_ms = 0;
    flush_due(clone, 0, true);
}

size_t quota_clone_in_flight(const struct quota_clone *clone)
{
    return clone != NULL ? clone->in_flight : 0;
}

void quota_clone_free(struct quota_clone *clone)
{
    if (clone == NULL)
        return;
    if (smap_count(clone->dirty) > 0)
        log_warn(COMPONENT, "quota mirror left unwritten", "users=%zu", smap_count(clone->dirty));
    event_free(clone->wake);
    event_free(clone->timer);
    close(clone->wake_fd);
    smap_free(clone->marks, clone_mark_free);
    smap_free(clone->dirty, clone_user_free);
    pthread_mutex_destroy(&clone->lock);
    quota_usage_cache_free(clone->usage_cache);
    free(clone->targets);
    free(clone);
}
