/* The quota storage module (quota-module.h). */
#include "storage/quota/quota-module.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/slice.h"
#include "core/xalloc.h"
#include "storage/mail-storage-private.h"
#include "storage/quota/quota-usage.h"
#include "storage/quota/quota-warning.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "quota"
/* Per user and handle, made at the first check: a stat of a folder's index
 * files instead of a read (~13 KiB; a user with more folders reads the
 * indexes of the rest again on each check). */
#define USAGE_CACHE_FOLDERS 64
#define MAX_QUEUED_PROGRAMS 1024 /* crossings waiting for the loop */
#define OVER_FLAG_FRESH_MS 10000 /* document 3: the userdb flag counts within 10 s of login */

/* What the saves of one user hold while they run (any thread). */
struct reservation {
    char *user;
    struct quota_usage reserved;  /* said yes to, not committed yet */
    struct quota_usage committed; /* committed since the entry exists (only grows) */
    unsigned inflight;            /* saves between their usage read and saved/aborted */
};

/* A program for the loop to start. */
struct job {
    struct job *next;
    const struct quota_warning_config *warning; /* NULL: the over-flag program */
    char *user;
    char *home;
    uint64_t usage;
    uint64_t limit;
    char *flag;
    bool over;
};

struct quota_module {
    const struct quota_config *cfg;
    struct quota_config check_cfg; /* cfg without quota_mail_size (checked on its own) */
    struct event_base *base;
    struct metrics_registry *metrics;
    struct metric_family *rejections;
    struct quota_warning_runner *runner;
    pthread_mutex_t lock; /* reservations and jobs */
    struct reservation **resv;
    size_t resv_count;
    size_t resv_cap;
    struct job *jobs;
    struct job **jobs_tail;
    size_t job_count;
    int wake_fd;
    struct event *wake_ev;
};

/* Per user and storage handle (one thread). */
struct quota_user {
    struct quota_module *qm;
    struct quota_rules rules;
    bool rules_bad;
    char *rule_text; /* the fields the rules came from, '\n'-joined (NULL: none set yet) */
    struct fileindex_usage_cache *cache;
    struct quota_folder_list *folders; /* made with the cache */
    /* the save between its hook and saved/save_aborted */
    bool pending;
    struct reservation *pend_resv;
    struct quota_usage pend_add;
    struct quota_usage pend_before;
    /* the usage last read or saved on this handle (the test allocation's
     * estimate; usage_get sets it) */
    bool last_known;
    struct quota_usage last;
    /* the expunge between its hooks */
    bool exp_before_ok;
    struct quota_usage exp_before;
    /* over-flag sync */
    char *over_flag;
    bool over_check_due;
    struct timespec login_at;
};

/* ---------- the loop side: programs ---------- */

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct quota_module *qm = arg;
    uint64_t n;
    if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        log_warn(COMPONENT, "quota wake-up read failed", "error=\"%s\"", strerror(errno));
    pthread_mutex_lock(&qm->lock);
    struct job *jobs = qm->jobs;
    qm->jobs = NULL;
    qm->jobs_tail = &qm->jobs;
    qm->job_count = 0;
    pthread_mutex_unlock(&qm->lock);
    while (jobs != NULL) {
        struct job *j = jobs;
        jobs = j->next;
        if (j->warning != NULL)
            quota_warning_run(qm->runner, j->warning, j->user, j->home, j->usage, j->limit);
        else
            quota_over_status_run(qm->runner, j->user, j->home, j->flag, j->over);
        free(j->user);
        free(j->home);
        free(j->flag);
        free(j);
    }
}

/* From any thread: hands `j` to the loop (never waits for the program). */
static void post(struct quota_module *qm, struct job *j)
{
    pthread_mutex_lock(&qm->lock);
    bool full = qm->job_count >= MAX_QUEUED_PROGRAMS;
    if (!full) {
        *qm->jobs_tail = j;
        qm->jobs_tail = &j->next;
        qm->job_count++;
    }
    pthread_mutex_unlock(&qm->lock);
    if (full) {
        log_warn(COMPONENT, "too many quota programs waiting, event dropped", "user=%s", j->user);
        free(j->user);
        free(j->home);
        free(j->flag);
        free(j);
        return;
    }
    uint64_t one = 1;
    if (write(qm->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn(COMPONENT, "quota wake-up write failed", "error=\"%s\"", strerror(errno));
}

static void post_crossings(struct quota_module *qm, struct mail_user *user,
                           const struct quota_limits *limits, const struct quota_usage *before,
                           const struct quota_usage *after)
{
    const struct quota_config *cfg = qm->cfg;
    if (cfg->warning_count == 0)
        return;
    const struct quota_warning_config *crossed[QUOTA_MAX_WARNINGS];
    size_t n = quota_warnings_crossed(cfg, limits, before, after, crossed);
    for (size_t i = 0; i < n; i++) {
        bool storage = crossed[i]->resource == QUOTA_RES_STORAGE;
        struct job *j = xcalloc(1, sizeof(*j));
        j->warning = crossed[i];
        j->user = xstrdup(user->name);
        j->home = xstrdup(user->home != NULL ? user->home : "");
        j->usage = storage ? after->storage : after->messages;
        j->limit = storage ? limits->storage : limits->messages;
        post(qm, j);
    }
}

/* ---------- module ---------- */

struct quota_module *quota_module_new(const struct quota_config *cfg, struct event_base *base,
                                      struct metrics_registry *metrics)
{
    struct quota_module *qm = xcalloc(1, sizeof(*qm));
    qm->cfg = cfg;
    qm->check_cfg = *cfg;
    qm->check_cfg.mail_size = 0;
    qm->base = base;
    qm->metrics = metrics;
    pthread_mutex_init(&qm->lock, NULL);
    qm->jobs_tail = &qm->jobs;
    qm->wake_fd = -1;
    if (metrics != NULL && cfg->enabled) {
        static const char *const labels[] = {"point", "resource", NULL};
        qm->rejections = metrics_counter(metrics, "petrel_quota_rejections_total",
                                         "Saves and folder creations the quota refused.", labels);
    }
    if (cfg->enabled || cfg->over_status_mask[0] != '\0') {
        qm->runner = quota_warning_runner_new(base, cfg, metrics);
        qm->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (qm->wake_fd >= 0) {
            qm->wake_ev = event_new(base, qm->wake_fd, EV_READ | EV_PERSIST, wake_cb, qm);
            event_add(qm->wake_ev, NULL);
        } else {
            log_warn(COMPONENT, "no eventfd: quota programs are only logged", "error=\"%s\"",
                     strerror(errno));
        }
    }
    return qm;
}

void quota_module_free(struct quota_module *qm)
{
    if (qm == NULL)
        return;
    if (qm->wake_ev != NULL)
        event_free(qm->wake_ev);
    if (qm->wake_fd >= 0)
        close(qm->wake_fd);
    while (qm->jobs != NULL) {
        struct job *j = qm->jobs;
        qm->jobs = j->next;
        free(j->user);
        free(j->home);
        free(j->flag);
        free(j);
    }
    quota_warning_runner_free(qm->runner);
    for (size_t i = 0; i < qm->resv_count; i++) {
        free(qm->resv[i]->user);
        free(qm->resv[i]);
    }
    free(qm->resv);
    pthread_mutex_destroy(&qm->lock);
    free(qm);
}

static void count_rejection(struct quota_module *qm, const char *point, const char *resource)
{
    if (qm->rejections == NULL)
        return;
    const char *values[] = {point, resource};
    metric_add(metric_series_get(qm->rejections, values), 1);
}

static const char *point_name(const struct mail_save_info *info)
{
    if (info->delivery)
        return "delivery";
    switch (info->kind) {
    case MAIL_SAVE_COPY:
        return "copy";
    case MAIL_SAVE_MOVE:
        return "move";
    default:
        return "append";
    }
}

/* ---------- reservations (under qm->lock) ---------- */

static struct reservation *resv_enter(struct quota_module *qm, const char *user,
                                      struct quota_usage *committed_at_start)
{
    pthread_mutex_lock(&qm->lock);
    struct reservation *r = NULL;
    for (size_t i = 0; i < qm->resv_count && r == NULL; i++) {
        if (strcmp(qm->resv[i]->user, user) == 0)
            r = qm->resv[i];
    }
    if (r == NULL) {
        r = xcalloc(1, sizeof(*r));
        r->user = xstrdup(user);
        qm->resv = xgrow(qm->resv, &qm->resv_cap, qm->resv_count + 1, sizeof(*qm->resv));
        qm->resv[qm->resv_count++] = r;
    }
    r->inflight++;
    *committed_at_start = r->committed;
    pthread_mutex_unlock(&qm->lock);
    return r;
}

/* Under the lock: drops the entry once no save of its user runs. */
static void resv_leave_locked(struct quota_module *qm, struct reservation *r)
{
    if (--r->inflight > 0)
        return;
    for (size_t i = 0; i < qm->resv_count; i++) {
        if (qm->resv[i] == r) {
            qm->resv[i] = qm->resv[--qm->resv_count];
            break;
        }
    }
    free(r->user);
    free(r);
}

static void resv_leave(struct quota_module *qm, struct reservation *r)
{
    pthread_mutex_lock(&qm->lock);
    resv_leave_locked(qm, r);
    pthread_mutex_unlock(&qm->lock);
}

/* ---------- users ---------- */

static struct quota_module *module_of(const struct mail_user *user)
{
    return mail_storage_module_ctx(user->storage, QUOTA_MODULE_NAME);
}

static struct quota_user *user_state(struct mail_user *user, struct quota_module *qm)
{
    if (user->quota == NULL) {
        struct quota_user *qu = xcalloc(1, sizeof(*qu));
        qu->qm = qm;
        quota_rules_init(&qu->rules);
        user->quota = qu;
    }
    return user->quota;
}

void quota_user_free(struct quota_user *qu)
{
    if (qu == NULL)
        return;
    quota_rules_free(&qu->rules);
    if (qu->cache != NULL)
        quota_usage_cache_free(qu->cache);
    quota_folder_list_free(qu->folders);
    free(qu->rule_text);
    free(qu->over_flag);
    free(qu);
}

/* Whether `fields` are the ones `text` was joined from (without joining
 * them again: LMTP asks on every delivery). */
static bool same_rules(const char *text, char *const *fields)
{
    if (text == NULL)
        return false;
    for (size_t i = 0; fields != NULL && fields[i] != NULL; i++) {
        size_t len = strlen(fields[i]);
        if (strncmp(text, fields[i], len) != 0 || text[len] != '\n')
            return false;
        text += len + 1;
    }
    return *text == '\0';
}

bool quota_storage_enforces(const struct mail_storage *storage)
{
    const struct quota_module *qm = mail_storage_module_ctx(storage, QUOTA_MODULE_NAME);
    return qm != NULL && qm->cfg->enabled;
}

void quota_user_set(struct mail_user *user, char *const *rule_fields)
{
    struct quota_module *qm = module_of(user);
    if (qm == NULL)
        return;
    struct quota_user *qu = user_state(user, qm);
    /* LMTP sets them for every delivery: parsed again only when changed */
    if (same_rules(qu->rule_text, rule_fields))
        return;
    struct buf text = {0};
    for (size_t i = 0; rule_fields != NULL && rule_fields[i] != NULL; i++) {
        buf_append_str(&text, rule_fields[i]);
        buf_append_char(&text, '\n');
    }
    const char *now = text.len > 0 ? buf_cstr(&text) : "";
    free(qu->rule_text);
    qu->rule_text = xstrdup(now);
    buf_free(&text);
    quota_rules_free(&qu->rules);
    quota_rules_init(&qu->rules);
    qu->rules_bad = false;
    struct petrel_error err;
    if (rule_fields != NULL && !quota_rules_add_list(&qu->rules, rule_fields, &err)) {
        /* Not enforced (fail open), as quota-status answers DUNNO for it. */
        qu->rules_bad = true;
        log_warn(COMPONENT, "quota rule does not parse: the user's quota is not enforced",
                 "user=%s error=\"%s\"", user->name, err.message);
    }
}

bool quota_user_enforced(struct mail_user *user)
{
    struct quota_module *qm = module_of(user);
    return qm != NULL && qm->cfg->enabled;
}

char *quota_user_rules_copy(const struct mail_user *user)
{
    const struct quota_user *qu = user->quota;
    if (qu == NULL || qu->rule_text == NULL)
        return NULL;
    return xstrdup(qu->rule_text);
}

/* Usage through the user's cache (made on first use). */
static bool usage_get(struct mail_user *user, struct quota_user *qu, struct quota_usage *out,
                      struct petrel_error *err)
{
    if (qu->cache == NULL) {
        qu->cache = quota_usage_cache_new(USAGE_CACHE_FOLDERS);
        qu->folders = quota_folder_list_new();
    }
    qu->last_known = quota_usage_get_listed(user, &qu->rules, qu->folders, qu->cache, out, err);
    if (qu->last_known)
        qu->last = *out;
    return qu->last_known;
}

static long long ms_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)(now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

/* Document 3, Events 2: compares the userdb's flag with the actual state
 * and runs the program on a mismatch. Once per login, within 10 s of it. */
static void over_check(struct mail_user *user, struct quota_user *qu)
{
    if (!qu->over_check_due)
        return;
    qu->over_check_due = false;
    struct quota_module *qm = qu->qm;
    if (ms_since(&qu->login_at) > OVER_FLAG_FRESH_MS) {
        log_debug(COMPONENT, "over-flag not checked: the userdb value is stale", "user=%s",
                  user->name);
        return;
    }
    if (qu->rules_bad)
        return;
    struct quota_usage u;
    struct petrel_error err;
    if (!usage_get(user, qu, &u, &err)) {
        log_warn(COMPONENT, "over-flag not checked: cannot read usage", "user=%s error=\"%s\"",
                 user->name, err.message);
        return;
    }
    struct quota_limits l;
    quota_limits_compute(qm->cfg, &qu->rules, NULL, QUOTA_POINT_INTERACTIVE, &l);
    bool over =
        (l.storage != 0 && u.storage >= l.storage) || (l.messages != 0 && u.messages >= l.messages);
    const char *flag = qu->over_flag != NULL ? qu->over_flag : "";
    bool flagged = flag[0] != '\0' && str_glob_match(qm->cfg->over_status_mask, flag, true);
    if (over == flagged)
        return;
    char fq[300];
    log_info(COMPONENT, "quota over-flag differs from usage", "user=%s flag=%s over=%s", user->name,
             log_quote(fq, sizeof(fq), flag), over ? "yes" : "no");
    struct job *j = xcalloc(1, sizeof(*j));
    j->user = xstrdup(user->name);
    j->home = xstrdup(user->home != NULL ? user->home : "");
    j->flag = xstrdup(flag);
    j->over = over;
    post(qm, j);
}

void quota_user_login(struct mail_user *user, char *const *rule_fields, const char *over_flag)
{
    quota_user_set(user, rule_fields);
    struct quota_module *qm = module_of(user);
    if (qm == NULL || qm->cfg->over_status_mask[0] == '\0')
        return;
    struct quota_user *qu = user_state(user, qm);
    free(qu->over_flag);
    qu->over_flag = over_flag != NULL ? xstrdup(over_flag) : NULL;
    qu->over_check_due = true;
    clock_gettime(CLOCK_MONOTONIC, &qu->login_at);
    if (!qm->cfg->over_status_lazy_check)
        over_check(user, qu);
}

bool quota_user_report(struct mail_user *user, struct quota_report *out, struct petrel_error *err)
{
    struct quota_module *qm = module_of(user);
    if (qm == NULL)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no quota");
    struct quota_user *qu = user_state(user, qm);
    over_check(user, qu);
    if (qu->rules_bad)
        return petrel_error_set(err, PETREL_ERR_INVALID, "the user's quota rule does not parse");
    memset(out, 0, sizeof(*out));
    out->name = qm->cfg->quota_name;
    quota_limits_compute(qm->cfg, &qu->rules, NULL, QUOTA_POINT_INTERACTIVE, &out->limits);
    bool unlimited = out->limits.storage == 0 && out->limits.messages == 0;
    out->hidden = qm->cfg->hidden || (qm->cfg->ignore_unlimited && unlimited);
    if (out->hidden)
        return true;
    return usage_get(user, qu, &out->usage, err);
}

/* Dovecot's quota_max_mail_size text (document 3's Errors table). */
static void too_large_text(char *text, size_t text_size, uint64_t size, uint64_t cap)
{
    snprintf(text, text_size, "Requested allocation size %llu exceeds max mail size %llu",
             (unsigned long long)size, (unsigned long long)cap);
}

/* ---------- hooks ---------- */

static bool refuse(struct quota_module *qm, struct petrel_error *err, const char *point,
                   const char *resource, bool permanent, const char *text)
{
    count_rejection(qm, point, resource);
    petrel_error_set(err, PETREL_ERR_OVER_QUOTA, "%s", text);
    if (err != NULL)
        err->permanent = permanent;
    return false;
}

static bool q_save(void *ctx, const struct mail_save_info *info, struct petrel_error *err)
{
    struct quota_module *qm = ctx;
    const struct quota_config *cfg = qm->cfg;
    struct mail_user *user = mailbox_user(info->dst);
    struct quota_user *qu = user_state(user, qm);
    qu->pending = false;
    qu->exp_before_ok = false;
    over_check(user, qu);
    const char *point = point_name(info);
    const char *dst = mailbox_name(info->dst);
    char text[256];
    /* A move within the user brings no new message in (as Dovecot skips
     * every check for a move inside one quota root). */
    bool move_within =
        info->kind == MAIL_SAVE_MOVE && info->src != NULL && mailbox_user(info->src) == user;
    if (cfg->mail_size != 0 && info->max_size > cfg->mail_size && !move_within) {
        /* never fits, whatever is freed; per message for COPY and MOVE */
        too_large_text(text, sizeof(text), info->max_size, cfg->mail_size);
        return refuse(qm, err, point, "mail_size", true, text);
    }
    if (cfg->mailbox_message_count > 0) {
        struct mail_folder_usage fu = {0, 0};
        struct petrel_error ferr;
        const struct mailbox_common *c = mailbox_common(info->dst);
        if (!mail_folder_usage(user, c->ns, dst, NULL, &fu, &ferr))
            log_warn(COMPONENT, "quota check skipped: cannot read the folder's usage",
                     "user=%s folder=%s error=\"%s\"", user->name, dst, ferr.message);
        else if (fu.messages + info->count > (uint64_t)cfg->mailbox_message_count)
            return refuse(qm, err, point, "mailbox_messages", true,
                          "Too many messages in the mailbox");
    }
    if (qu->rules_bad || quota_rules_mailbox_ignored(&qu->rules, dst))
        return true;
    struct quota_usage add = {.storage = info->size, .messages = info->count};
    /* A move between counted folders of one user changes nothing. */
    if (info->kind == MAIL_SAVE_MOVE && info->src != NULL && mailbox_user(info->src) == user &&
        !quota_rules_mailbox_ignored(&qu->rules, mailbox_name(info->src)))
        return true;
    struct quota_limits limits;
    quota_limits_compute(cfg, &qu->rules, dst,
                         info->delivery ? QUOTA_POINT_DELIVERY : QUOTA_POINT_INTERACTIVE, &limits);
    if (limits.storage == 0 && limits.messages == 0)
        return true;
    struct quota_usage committed0;
    struct reservation *r = resv_enter(qm, user->name, &committed0);
    struct quota_usage u;
    struct petrel_error uerr;
    if (!usage_get(user, qu, &u, &uerr)) {
        /* Document 3: a transient read error skips the check (fail open). */
        log_warn(COMPONENT, "quota check skipped: cannot read usage", "user=%s error=\"%s\"",
                 user->name, uerr.message);
        resv_leave(qm, r);
        return true;
    }
    pthread_mutex_lock(&qm->lock);
    /* Saves committed since the read began may or may not be in `u`:
     * counted again rather than missed, so the check errs on the safe side. */
    struct quota_usage seen = {
        .storage = u.storage + r->reserved.storage + (r->committed.storage - committed0.storage),
        .messages =
            u.messages + r->reserved.messages + (r->committed.messages - committed0.messages)};
    enum quota_verdict v = quota_check(&qm->check_cfg, &limits, &seen, add.storage, add.messages);
    if (v == QUOTA_OK) {
        r->reserved.storage += add.storage;
        r->reserved.messages += add.messages;
    } else {
        resv_leave_locked(qm, r);
    }
    pthread_mutex_unlock(&qm->lock);
    if (v != QUOTA_OK)
        return refuse(qm, err, point, v == QUOTA_OVER_MESSAGES ? "messages" : "storage", false,
                      cfg->exceeded_message);
    qu->pending = true;
    qu->pend_resv = r;
    qu->pend_add = add;
    qu->pend_before = u;
    return true;
}

/* mail_save_test: what `save` would say of an APPEND of `size` bytes (one
 * message of `max_size` among them) without reserving anything, so that
 * IMAP refuses a literal before the client sends it (Dovecot's
 * quota_test_alloc at save begin). Fails open like `save`; the save is
 * checked again when it happens. The usage this handle last read or saved
 * is the estimate: when it says the save fits, that is the answer (no
 * read: a yes promises nothing); only a no is read again, so a stale
 * estimate never refuses what would fit. */
static bool q_save_test(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                        const char *name, uint64_t size, uint64_t max_size,
                        struct petrel_error *err)
{
    struct quota_module *qm = ctx;
    const struct quota_config *cfg = qm->cfg;
    char text[256];
    if (cfg->mail_size != 0 && max_size > cfg->mail_size) {
        too_large_text(text, sizeof(text), max_size, cfg->mail_size);
        return refuse(qm, err, "append", "mail_size", true, text);
    }
    if (ns->type != NAMESPACE_PERSONAL)
        return true; /* another owner's quota: left to the save */
    struct quota_user *qu = user_state(user, qm);
    if (qu->rules_bad || quota_rules_mailbox_ignored(&qu->rules, name))
        return true;
    struct quota_limits limits;
    quota_limits_compute(cfg, &qu->rules, name, QUOTA_POINT_INTERACTIVE, &limits);
    if (limits.storage == 0 && limits.messages == 0)
        return true;
    if (qu->last_known && quota_check(&qm->check_cfg, &limits, &qu->last, size, 1) == QUOTA_OK)
        return true;
    struct quota_usage u;
    struct petrel_error uerr;
    if (!usage_get(user, qu, &u, &uerr))
        return true;
    enum quota_verdict v = quota_check(&qm->check_cfg, &limits, &u, size, 1);
    if (v == QUOTA_OK)
        return true;
    return refuse(qm, err, "append", v == QUOTA_OVER_MESSAGES ? "messages" : "storage", false,
                  cfg->exceeded_message);
}

/* Ends the pending save's reservation; `committed`: it was written. */
static struct quota_user *save_end(struct quota_module *qm, const struct mail_save_info *info,
                                   bool committed)
{
    struct quota_user *qu = mailbox_user(info->dst)->quota;
    if (qu == NULL || !qu->pending)
        return NULL;
    qu->pending = false;
    struct reservation *r = qu->pend_resv;
    pthread_mutex_lock(&qm->lock);
    r->reserved.storage -= qu->pend_add.storage;
    r->reserved.messages -= qu->pend_add.messages;
    if (committed) {
        r->committed.storage += qu->pend_add.storage;
        r->committed.messages += qu->pend_add.messages;
    }
    resv_leave_locked(qm, r);
    pthread_mutex_unlock(&qm->lock);
    return qu;
}

static void q_saved(void *ctx, const struct mail_save_info *info, const uint32_t *uids,
                    size_t count)
{
    (void)uids;
    (void)count;
    struct quota_module *qm = ctx;
    struct quota_user *qu = save_end(qm, info, true);
    if (qu == NULL)
        return;
    qu->last.storage = qu->pend_before.storage + qu->pend_add.storage;
    qu->last.messages = qu->pend_before.messages + qu->pend_add.messages;
    qu->last_known = true;
    if (qm->cfg->warning_count == 0)
        return;
    struct mail_user *user = mailbox_user(info->dst);
    struct quota_limits limits;
    quota_limits_compute(qm->cfg, &qu->rules, NULL, QUOTA_POINT_INTERACTIVE, &limits);
    struct quota_usage after = {.storage = qu->pend_before.storage + qu->pend_add.storage,
                                .messages = qu->pend_before.messages + qu->pend_add.messages};
    post_crossings(qm, user, &limits, &qu->pend_before, &after);
}

static void q_save_aborted(void *ctx, const struct mail_save_info *info)
{
    save_end(ctx, info, false);
}

/* Usage before an expunge, for the `under` crossings (only when warnings
 * are configured: it costs a usage read). */
static bool q_expunge(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                      struct petrel_error *err)
{
    (void)uids;
    (void)uid_count;
    (void)err;
    struct quota_module *qm = ctx;
    if (qm->cfg->warning_count == 0)
        return true;
    struct mail_user *user = mailbox_user(box);
    struct quota_user *qu = user->quota;
    if (qu == NULL || qu->rules_bad)
        return true;
    struct petrel_error uerr;
    qu->exp_before_ok = usage_get(user, qu, &qu->exp_before, &uerr);
    return true;
}

static void q_expunged(void *ctx, struct mailbox *box, const uint32_t *uids, size_t count)
{
    (void)uids;
    (void)count;
    struct quota_module *qm = ctx;
    struct mail_user *user = mailbox_user(box);
    struct quota_user *qu = user->quota;
    if (qu == NULL || !qu->exp_before_ok)
        return;
    qu->exp_before_ok = false;
    struct quota_usage after;
    struct petrel_error uerr;
    if (!usage_get(user, qu, &after, &uerr))
        return;
    struct quota_limits limits;
    quota_limits_compute(qm->cfg, &qu->rules, NULL, QUOTA_POINT_INTERACTIVE, &limits);
    post_crossings(qm, user, &limits, &qu->exp_before, &after);
}

static bool q_folder_create(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                            const char *name, struct mail_folder_create_params *params,
                            struct petrel_error *err)
{
    (void)name;
    (void)params;
    struct quota_module *qm = ctx;
    if (qm->cfg->mailbox_count <= 0)
        return true;
    char **names = NULL;
    size_t n = 0;
    struct petrel_error lerr;
    if (!mail_folder_list(user, ns, &names, &n, &lerr)) {
        log_warn(COMPONENT, "folder count not checked: cannot list", "user=%s error=\"%s\"",
                 user->name, lerr.message);
        return true;
    }
    mail_folder_list_free(names, n);
    if (n < (size_t)qm->cfg->mailbox_count)
        return true;
    count_rejection(qm, "create", "mailbox_count");
    return petrel_error_set(err, PETREL_ERR_LIMIT, "Maximum number of mailboxes reached.");
}

static const struct mail_storage_module quota_enforcing_module = {
    .name = QUOTA_MODULE_NAME,
    .folder_create = q_folder_create,
    .save = q_save,
    .save_test = q_save_test,
    .saved = q_saved,
    .save_aborted = q_save_aborted,
    .expunge = q_expunge,
    .expunged = q_expunged,
};

/* quota.enabled off, imap.imap_quota on: the report only. */
static const struct mail_storage_module quota_report_module = {
    .name = QUOTA_MODULE_NAME,
};

bool quota_module_register(struct quota_module *qm, struct mail_storage *storage,
                           struct petrel_error *err)
{
    return mail_storage_module_register(
        storage, qm->cfg->enabled ? &quota_enforcing_module : &quota_report_module, qm, err);
}
