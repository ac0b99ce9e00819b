/* Quota warning crossings and their programs (quota-warning.h). */
#include "storage/quota/quota-warning.h"

#include "core/log.h"
#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define COMPONENT "quota"

enum wresult { WR_OK, WR_FAILED, WR_TIMEOUT, WR_LOGGED, WR_DROPPED, WR_COUNT };
static const char *const wresult_names[WR_COUNT] = {"ok", "failed", "timeout", "logged", "dropped"};

struct child {
    struct quota_warning_runner *runner;
    pid_t pid;
    int pidfd;
    bool killed;
    bool counted; /* a warning (petrel_quota_warnings_total), not the over-flag program */
    char *program;
    char *user;
    struct event *exit_ev;
    struct event *timer;
    struct child *next;
};

struct quota_warning_runner {
    struct event_base *base;
    const struct quota_config *cfg;
    struct child *children;
    size_t running;
    struct metric_series *results[WR_COUNT];
};

/* ---------- crossings ---------- */

static uint64_t limit_of(const struct quota_limits *l, int resource)
{
    return resource == QUOTA_RES_STORAGE ? l->storage : l->messages;
}

static uint64_t usage_of(const struct quota_usage *u, int resource)
{
    return resource == QUOTA_RES_STORAGE ? u->storage : u->messages;
}

/* usage >= pct % of limit, without overflow. */
static bool at_or_above(uint64_t usage, uint64_t limit, int64_t pct)
{
    /* usage * 100 >= limit * pct, compared as fractions of 100 */
    uint64_t p = (uint64_t)pct;
    uint64_t whole = limit / 100 * p;
    uint64_t part = (limit % 100) * p / 100;
    uint64_t threshold = whole + part;
    if (p != 0 && whole / p != limit / 100)
        return false; /* threshold beyond any usage */
    return usage >= threshold;
}

size_t quota_warnings_crossed(const struct quota_config *cfg, const struct quota_limits *limits,
                              const struct quota_usage *before, const struct quota_usage *after,
                              const struct quota_warning_config **out)
{
    size_t n = 0;
    for (size_t i = 0; i < cfg->warning_count; i++) {
        const struct quota_warning_config *w = &cfg->warnings[i];
        uint64_t limit = limit_of(limits, w->resource);
        if (limit == 0)
            continue;
        bool was = at_or_above(usage_of(before, w->resource), limit, w->percentage);
        bool is = at_or_above(usage_of(after, w->resource), limit, w->percentage);
        if ((w->threshold == QUOTA_WARN_OVER && !was && is) ||
            (w->threshold == QUOTA_WARN_UNDER && was && !is))
            out[n++] = w;
    }
    return n;
}

/* ---------- the runner ---------- */

struct quota_warning_runner *quota_warning_runner_new(struct event_base *base,
                                                      const struct quota_config *cfg,
                                                      struct metrics_registry *metrics)
{
    struct quota_warning_runner *r = xcalloc(1, sizeof(*r));
    r->base = base;
    r->cfg = cfg;
    if (metrics != NULL) {
        static const char *const labels[] = {"result", NULL};
        struct metric_family *f =
            metrics_counter(metrics, "petrel_quota_warnings_total",
                            "Quota warning crossings by what came of them.", labels);
        for (int i = 0; i < WR_COUNT; i++) {
            const char *values[] = {wresult_names[i]};
            r->results[i] = metric_series_get(f, values);
        }
    }
    return r;
}

static void count(struct quota_warning_runner *r, enum wresult w)
{
    if (r->results[w] != NULL)
        metric_add(r->results[w], 1);
}

static void child_free(struct child *c)
{
    struct quota_warning_runner *r = c->runner;
    for (struct child **p = &r->children; *p != NULL; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    r->running--;
    event_free(c->exit_ev);
    event_free(c->timer);
    close(c->pidfd);
    free(c->program);
    free(c->user);
    free(c);
}

static void child_exited(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct child *c = arg;
    int status = 0;
    pid_t got = waitpid(c->pid, &status, WNOHANG);
    if (got == 0)
        return; /* not yet (spurious wake-up) */
    enum wresult res = WR_FAILED;
    if (c->killed)
        res = WR_TIMEOUT;
    else if (got == c->pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        res = WR_OK;
    if (res == WR_OK)
        log_info(COMPONENT, "quota program finished", "user=%s program=%s", c->user, c->program);
    else if (res == WR_TIMEOUT)
        log_warn(COMPONENT, "quota program killed at the timeout",
                 "user=%s program=%s timeout_ms=%lld", c->user, c->program,
                 (long long)c->runner->cfg->warning_exec_timeout_ms);
    else
        log_warn(COMPONENT, "quota program failed", "user=%s program=%s status=%d", c->user,
                 c->program, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    if (c->counted)
        count(c->runner, res);
    child_free(c);
}

static void child_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct child *c = arg;
    c->killed = true;
    kill(-c->pid, SIGKILL); /* its group: what the program started goes too */
    kill(c->pid, SIGKILL);
}

static char *env_entry(const char *name, const char *value)
{
    return xasprintf("%s=%s", name, value != NULL ? value : "");
}

/* Starts `bin_dir/program` with `envp` (no shell, own process group,
 * stdio on /dev/null) and watches it on the loop. `what` names it in logs. */
static bool spawn(struct quota_warning_runner *r, const char *what, const char *program,
                  const char *user, char *const *envp, bool counted)
{
    if (r->running >= QUOTA_WARNING_MAX_RUNNING) {
        log_warn(COMPONENT, "too many quota programs running, event dropped",
                 "user=%s what=%s running=%zu", user, what, r->running);
        if (counted)
            count(r, WR_DROPPED);
        return false;
    }
    char *path = xasprintf("%s/%s", r->cfg->warning_bin_dir, program);
    char *argv[] = {(char *)program, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    for (int fd = 0; fd <= 2; fd++)
        posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, path, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    bool ok = false;
    if (rc != 0) {
        log_warn(COMPONENT, "cannot start the quota program",
                 "user=%s what=%s program=%s error=\"%s\"", user, what, path, strerror(rc));
        if (counted)
            count(r, WR_FAILED);
        goto out;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        /* Cannot watch it without blocking: stop it rather than leave it. */
        log_warn(COMPONENT, "cannot watch the quota program", "user=%s program=%s error=\"%s\"",
                 user, path, strerror(errno));
        kill(-pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (counted)
            count(r, WR_FAILED);
        goto out;
    }
    struct child *c = xcalloc(1, sizeof(*c));
    c->runner = r;
    c->pid = pid;
    c->pidfd = pidfd;
    c->counted = counted;
    c->program = xstrdup(path);
    c->user = xstrdup(user);
    c->exit_ev = event_new(r->base, pidfd, EV_READ | EV_PERSIST, child_exited, c);
    c->timer = evtimer_new(r->base, child_timeout, c);
    event_add(c->exit_ev, NULL);
    struct timeval tv = {(time_t)(r->cfg->warning_exec_timeout_ms / 1000),
                         (suseconds_t)(r->cfg->warning_exec_timeout_ms % 1000) * 1000};
    evtimer_add(c->timer, &tv);
    c->next = r->children;
    r->children = c;
    r->running++;
    log_info(COMPONENT, "quota program started", "user=%s what=%s program=%s pid=%d", user, what,
             path, (int)pid);
    ok = true;
out:
    free(path);
    return ok;
}

static void host_name(char *host, size_t size)
{
    if (gethostname(host, size) != 0)
        snprintf(host, size, "localhost");
    host[size - 1] = '\0';
}

bool quota_warning_run(struct quota_warning_runner *r, const struct quota_warning_config *w,
                       const char *user, const char *home, uint64_t usage, uint64_t limit)
{
    const char *resource = w->resource == QUOTA_RES_STORAGE ? "storage" : "message";
    const char *threshold = quota_warning_threshold_name(w->threshold);
    if (r->cfg->warning_bin_dir == NULL || w->execute == NULL) {
        log_info(COMPONENT, "quota warning",
                 "user=%s name=%s resource=%s threshold=%s "
                 "percentage=%lld usage=%llu limit=%llu",
                 user, w->name, resource, threshold, (long long)w->percentage,
                 (unsigned long long)usage, (unsigned long long)limit);
        count(r, WR_LOGGED);
        return false;
    }
    char host[256];
    host_name(host, sizeof(host));
    char pct[32], use[32], lim[32];
    snprintf(pct, sizeof(pct), "%lld", (long long)w->percentage);
    snprintf(use, sizeof(use), "%llu", (unsigned long long)usage);
    snprintf(lim, sizeof(lim), "%llu", (unsigned long long)limit);
    char *envp[] = {
        env_entry("USER", user),
        env_entry("HOME", home),
        env_entry("HOST", host),
        env_entry("QUOTA_WARNING_NAME", w->name),
        env_entry("QUOTA_RESOURCE", resource),
        env_entry("QUOTA_THRESHOLD", threshold),
        env_entry("QUOTA_PERCENTAGE", pct),
        env_entry("QUOTA_USAGE", use),
        env_entry("QUOTA_LIMIT", lim),
        NULL,
    };
    log_info(COMPONENT, "quota warning crossed", "user=%s name=%s usage=%llu limit=%llu", user,
             w->name, (unsigned long long)usage, (unsigned long long)limit);
    bool ok = spawn(r, "warning", w->execute, user, envp, true);
    for (size_t i = 0; envp[i] != NULL; i++)
        free(envp[i]);
    return ok;
}

bool quota_over_status_run(struct quota_warning_runner *r, const char *user, const char *home,
                           const char *flag, bool over)
{
    if (r->cfg->warning_bin_dir == NULL || r->cfg->over_status_execute == NULL) {
        char fq[300];
        log_info(COMPONENT, "quota over-flag stale", "user=%s flag=%s over=%s", user,
                 log_quote(fq, sizeof(fq), flag), over ? "yes" : "no");
        return false;
    }
    char host[256];
    host_name(host, sizeof(host));
    char *envp[] = {
        env_entry("USER", user),
        env_entry("HOME", home),
        env_entry("HOST", host),
        env_entry("QUOTA_OVER_FLAG", flag),
        env_entry("QUOTA_OVER", over ? "yes" : "no"),
        NULL,
    };
    bool ok = spawn(r, "over-status", r->cfg->over_status_execute, user, envp, false);
    for (size_t i = 0; envp[i] != NULL; i++)
        free(envp[i]);
    return ok;
}

size_t quota_warning_runner_running(const struct quota_warning_runner *r)
{
    return r->running;
}

void quota_warning_runner_free(struct quota_warning_runner *r)
{
    if (r == NULL)
        return;
    while (r->children != NULL) {
        struct child *c = r->children;
        kill(-c->pid, SIGKILL);
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        child_free(c);
    }
    free(r);
}
