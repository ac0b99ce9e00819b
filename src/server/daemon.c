#include "server/daemon.h"

#include "server/component.h"

#include "core/log.h"
#include "core/metrics.h"
#include "core/xalloc.h"
#include "net/loop-drain.h"
#include "net/readiness.h"
#include "net/tls.h"
#include "server/config-exposure.h"
#include "server/config.h"
#include "server/memory-trim.h"
#include "server/privileges.h"
#include "services/telemetry/telemetry.h"
#include "storage/acl/acl-module.h"
#include "storage/acl/acl-index-module.h"
#include "storage/acl/acl-registry.h"
#include "storage/mail-storage-module.h"
#include "storage/mail-storage.h"
#include "storage/quota/quota-module.h"
#include "storage/quota/quota-clone.h"
#include "storage/metadata/metadata-store.h"
#ifdef PETREL_TEST_MODULES
#include "storage/test-veto-module.h"
#endif
#include "version.h"

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "petreld"

/* The process's top-level context: everything mutable the process owns. */
struct petrel_context {
    struct event_base *base;
    struct petrel_config *config;
    /* Every log level table installed so far, the live one last: a reload
     * installs a new one while other threads may still be reading the old,
     * so they are freed only at exit (one per SIGHUP, ~1.7 KB). */
    struct log_levels **log_tables;
    size_t log_table_count;
    struct metrics_registry *metrics;
    struct readiness *readiness;
    SSL_CTX *internal_tls;
    struct service_env env;
    struct telemetry *telemetry;
    /* running[i]: component_table[i] once started, else NULL. */
    void *running[COMPONENT_TABLE_MAX];
    struct mail_storage *storage;
    struct quota_module *quota; /* NULL when neither the engine nor IMAP QUOTA is on */
    struct quota_clone *quota_clone; /* quota.quota_clone_dicts; NULL without */
    struct dict_registry *dicts;     /* made from config->dicts (the `dicts:` section) */
    bool dicts_closed;
    bool stopping;
    struct timespec stop_started;
    struct event *sig_term;
    struct event *sig_int;
    struct event *sig_hup;
    struct event *drain_poll;
    struct memory_trim *memory_trim;
};

static size_t in_flight(const struct petrel_context *ctx)
{
    size_t n = ctx->telemetry != NULL ? telemetry_in_flight(ctx->telemetry) : 0;
    for (size_t i = 0; component_table[i] != NULL; i++) {
        if (ctx->running[i] != NULL && component_table[i]->in_flight != NULL)
            n += component_table[i]->in_flight(ctx->running[i]);
    }
    n += quota_clone_in_flight(ctx->quota_clone);
    return n;
}

/* Stopping: the dicts close (requests still arriving on open connections
 * get 503 from them) once the quota mirror has nothing left to write: its
 * dirty users are written first, those of sessions that end during the
 * drain too, and its batches answered. */
/* The work in flight of the component `name` (0 when it does not run). */
static size_t running_in_flight(const struct petrel_context *ctx, const char *name)
{
    for (size_t i = 0; component_table[i] != NULL; i++) {
        if (ctx->running[i] != NULL && component_table[i]->in_flight != NULL &&
            strcmp(component_table[i]->name, name) == 0)
            return component_table[i]->in_flight(ctx->running[i]);
    }
    return 0;
}

static void close_dicts_when_done(struct petrel_context *ctx)
{
    if (ctx->dicts_closed)
        return;
    if (ctx->quota_clone != NULL) {
        quota_clone_flush_all(ctx->quota_clone);
        size_t sessions = running_in_flight(ctx, "imap") + running_in_flight(ctx, "pop3");
        if (quota_clone_in_flight(ctx->quota_clone) > 0 || sessions > 0)
            return;
    }
    dict_registry_close(ctx->dicts);
    ctx->dicts_closed = true;
}

static double since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

static void drain_poll_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct petrel_context *ctx = arg;
    close_dicts_when_done(ctx);
    size_t busy = in_flight(ctx);
    double waited = since(&ctx->stop_started);
    if (busy == 0) {
        event_base_loopbreak(ctx->base);
        return;
    }
    if (waited * 1000 >= (double)ctx->config->shutdown_timeout_ms) {
        log_warn(COMPONENT, "shutdown timeout reached", "abandoned_requests=%zu", busy);
        /* Tell the clients (503) and give the replies a moment to leave. */
        for (size_t i = component_count(); i-- > 0;) {
            if (ctx->running[i] != NULL && component_table[i]->abandon != NULL)
                component_table[i]->abandon(ctx->running[i]);
        }
        if (ctx->telemetry != NULL)
            telemetry_abandon_in_flight(ctx->telemetry);
        struct timeval flush = {0, 500000};
        event_base_loopexit(ctx->base, &flush);
        return;
    }
    struct timeval tv = {0, 50000};
    evtimer_add(ctx->drain_poll, &tv);
}

static void begin_shutdown(struct petrel_context *ctx, const char *signal_name)
{
    if (ctx->stopping) {
        log_warn(COMPONENT, "second stop signal, exiting now", "signal=%s", signal_name);
        event_base_loopbreak(ctx->base);
        return;
    }
    ctx->stopping = true;
    clock_gettime(CLOCK_MONOTONIC, &ctx->stop_started);
    log_info(COMPONENT, "stopping", "signal=%s in_flight=%zu", signal_name, in_flight(ctx));
    /* IMAP says BYE to every session, LMTP 421 once each transaction is
     * over, POP3 -ERR without deletions; the monitor stops probing. */
    for (size_t i = component_count(); i-- > 0;) {
        if (ctx->running[i] != NULL)
            component_table[i]->stop_accepting(ctx->running[i]);
    }
    close_dicts_when_done(ctx);
    if (ctx->telemetry != NULL)
        telemetry_stop_accepting(ctx->telemetry);
    ctx->drain_poll = evtimer_new(ctx->base, drain_poll_cb, ctx);
    drain_poll_cb(-1, 0, ctx);
}

/* A copy of `levels` made the live table. */
static void install_log_levels(struct petrel_context *ctx, const struct log_levels *levels)
{
    struct log_levels *table = xmalloc(sizeof(*table));
    *table = *levels;
    ctx->log_tables =
        xrealloc(ctx->log_tables, (ctx->log_table_count + 1) * sizeof(*ctx->log_tables));
    ctx->log_tables[ctx->log_table_count++] = table;
    log_install(table);
}

static void reload_log_levels(struct petrel_context *ctx)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct petrel_config *fresh = config_load(ctx->config->file, &err);
    if (fresh == NULL) {
        log_error(COMPONENT, "reload failed, keeping current settings", "error=\"%s\"",
                  err.message);
        return;
    }
    install_log_levels(ctx, &fresh->log);
    config_free(fresh);
    if (ctx->telemetry != NULL)
        telemetry_level_reloaded(ctx->telemetry);
    const struct log_levels *live = ctx->log_tables[ctx->log_table_count - 1];
    log_info(COMPONENT, "log levels reloaded", "level=%s overrides=%zu", log_level_name(live->base),
             live->override_count);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct petrel_context *ctx = arg;
    if (sig == SIGHUP)
        reload_log_levels(ctx);
    else
        begin_shutdown(ctx, sig == SIGTERM ? "TERM" : "INT");
}

/* Descriptors kept aside for what is not a client connection: listeners,
 * log and data files, index files, connections to the auth service, the
 * warden and the dict back ends. */
#define FD_RESERVE 256

/* The sum of max_connections over the listeners this process runs. */
static unsigned long long configured_connections(const struct petrel_config *cfg)
{
    unsigned long long n = 4096; /* telemetry (the HTTP server's default) */
    if (config_has_component(cfg, "backend-api"))
        n += (unsigned long long)cfg->backend_api.max_connections;
    if (config_has_component(cfg, "auth"))
        n += (unsigned long long)cfg->auth.max_connections;
    if (config_has_component(cfg, "warden"))
        n += (unsigned long long)cfg->warden.max_connections;
    if (config_has_component(cfg, "imap"))
        n += (unsigned long long)cfg->imap.login.max_connections;
    if (config_has_component(cfg, "pop3"))
        n += (unsigned long long)cfg->pop3.login.max_connections;
    if (config_has_component(cfg, "lmtp"))
        n += (unsigned long long)cfg->lmtp.max_connections;
    if (config_has_component(cfg, "quota-status"))
        n += (unsigned long long)cfg->quota.status.max_connections;
    if (config_has_component(cfg, "director"))
        n += (unsigned long long)cfg->director.api_max_connections +
             (unsigned long long)cfg->director.ring_max_clients;
    /* A proxied session holds two: the client's and the backend's. */
    if (config_has_component(cfg, "login")) {
        if (cfg->login.imap.enabled)
            n += 2 * (unsigned long long)cfg->login.imap.login.max_connections;
        if (cfg->login.pop3.enabled)
            n += 2 * (unsigned long long)cfg->login.pop3.login.max_connections;
    }
    return n;
}

/* Raises the descriptor limit to the hard limit (as nginx's
 * worker_rlimit_nofile and HAProxy's automatic ulimit-n do) and says so
 * when the configured connection limits cannot all be open at once. Not
 * fatal: when descriptors run out, the listeners pause accepting for a
 * moment (net/listener.h) rather than spin, and open connections go on. */
static void raise_fd_limit(const struct petrel_config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t before = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            rl.rlim_cur = rl.rlim_max;
    }
    unsigned long long need = configured_connections(cfg) + FD_RESERVE;
    unsigned long long have = (unsigned long long)rl.rlim_cur;
    if (rl.rlim_cur != RLIM_INFINITY && need > have)
        log_warn(COMPONENT,
                 "the descriptor limit is below what the configured max_connections may need: "
                 "accepting will pause whenever descriptors run out; raise the hard limit "
                 "(ulimit -Hn, systemd LimitNOFILE=) or lower max_connections",
                 "nofile=%llu nofile_before=%llu connections_configured=%llu reserve=%d", have,
                 (unsigned long long)before, need - FD_RESERVE, FD_RESERVE);
    else
        log_debug(COMPONENT, "descriptor limit", "nofile=%llu nofile_before=%llu needed=%llu", have,
                  (unsigned long long)before, need);
}

/* The storage modules this process adds after the storage's own, before
 * any component makes its sibling handles (which copy the list). */
static bool register_storage_modules(struct petrel_context *ctx, struct mail_storage *storage,
                                     struct petrel_error *err)
{
    /* ACLs first: a folder the user may not use is refused before any
     * other module (quota) counts anything for it. */
    const struct mail_config *mail = &ctx->config->mail;
    /* The sharing registry (storage/acl/acl-registry.h): the main handle
     * uses the configured dict; siblings bind instances of their own. */
    if (mail->acl.sharing_map != NULL)
        acl_registry_storage_set_dict(storage,
                                      dict_registry_get(ctx->dicts, mail->acl.sharing_map));
    if (mail->acl.enabled &&
        !mail_storage_module_register(storage, &acl_storage_module, (void *)&mail->acl, err))
        return false;
    /* The ACL list index follows deletes and renames whatever wrote it. */
    if (!mail_storage_module_register(storage, &acl_index_module, NULL, err))
        return false;
    const struct quota_config *qcfg = &ctx->config->quota;
    if (qcfg->enabled || ctx->config->imap.imap_quota || qcfg->over_status_mask[0] != '\0') {
        ctx->quota = quota_module_new(qcfg, ctx->base, ctx->metrics);
        if (!quota_module_register(ctx->quota, storage, err))
            return false;
    }
#ifdef PETREL_TEST_MODULES
    /* Test builds only: the environment's value lives as long as the
     * process (nothing here changes the environment). */
    const char *user = getenv(TEST_VETO_SAVE_ENV);
    if (user != NULL && *user != '\0') {
        log_warn(COMPONENT, "test storage module enabled", "module=%s user=%s",
                 test_veto_save_module.name, user);
        return mail_storage_module_register(storage, &test_veto_save_module, (void *)user, err);
    }
#endif
    (void)storage;
    (void)err;
    return true;
}

/* The quota mirror (docs/quota.md), part of the quota engine: a storage
 * module, so it is registered with the others before any sibling handle. */
static bool start_quota_clone(struct petrel_context *ctx, struct petrel_error *err)
{
    const struct quota_config *q = &ctx->config->quota;
    if (q->clone_dicts[0] == NULL)
        return true;
    if (!q->enabled) {
        log_warn(COMPONENT, "quota mirror off",
                 "reason=\"quota.quota_clone_dicts is set but quota.enabled is false\"%s", "");
        return true;
    }
    ctx->quota_clone = quota_clone_new(ctx->base, q, ctx->dicts, ctx->storage, ctx->metrics, err);
    return ctx->quota_clone != NULL &&
           mail_storage_module_register(ctx->storage, &quota_clone_module, ctx->quota_clone, err);
}

/* METADATA (docs/metadata.md): the main storage uses the configured dict
 * as it is (opened on the main loop below); siblings on other loops open
 * instances of their own. The module comes last, after every module that
 * may refuse a folder deletion. */
static bool register_metadata(struct petrel_context *ctx, struct petrel_error *err)
{
    const char *name = ctx->config->mail.attribute_dict;
    if (name == NULL)
        return true;
    metadata_storage_set_dict(ctx->storage, dict_registry_get(ctx->dicts, name));
    return mail_storage_module_register(ctx->storage, &metadata_module, NULL, err);
}

static bool start_components(struct petrel_context *ctx, struct petrel_error *err)
{
    ctx->telemetry = telemetry_start(&ctx->env, &ctx->config->telemetry, err);
    if (ctx->telemetry == NULL)
        return false;
    const struct component_start start = {
        .env = &ctx->env,
        .config = ctx->config,
        .storage = ctx->storage,
        .dicts = ctx->dicts,
    };
    for (size_t i = 0; component_table[i] != NULL; i++) {
        if (!config_has_component(ctx->config, component_table[i]->name))
            continue;
        ctx->running[i] = component_table[i]->start(&start, err);
        if (ctx->running[i] == NULL)
            return false;
    }
    return true;
}

/* "name=address" for each component ("off" when not running), as the
 * `started` line lists them. */
static void started_fields(const struct petrel_context *ctx, char *dst, size_t size)
{
    size_t used = 0;
    dst[0] = '\0';
    for (size_t i = 0; component_table[i] != NULL && used < size; i++) {
        const struct component_def *c = component_table[i];
        const char *addr = ctx->running[i] == NULL ? "off"
                           : c->address != NULL    ? c->address(ctx->running[i])
                                                   : "on";
        char key[32];
        snprintf(key, sizeof(key), "%s", c->name);
        for (char *p = key; *p != '\0'; p++)
            *p = *p == '-' ? '_' : *p;
        int n = snprintf(dst + used, size - used, " %s=%s", key, addr);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static void context_free(struct petrel_context *ctx)
{
    /* Dicts close first: drivers answer what is still pending with errors,
     * and those answers reach API objects that must still exist. They also
     * go before the event loop (network drivers hold events on it). */
    dict_registry_free(ctx->dicts);
    ctx->dicts = NULL;
    for (size_t i = component_count(); i-- > 0;) {
        if (ctx->running[i] != NULL)
            component_table[i]->free(ctx->running[i]);
    }
    memory_trim_free(ctx->memory_trim);
    mail_storage_free(ctx->storage);
    quota_module_free(ctx->quota);
    /* After the dicts answered its batches and the sessions (whose end
     * marks users) are gone. */
    quota_clone_free(ctx->quota_clone);
    telemetry_free(ctx->telemetry);
    readiness_free(ctx->readiness);
    if (ctx->internal_tls != NULL)
        SSL_CTX_free(ctx->internal_tls);
    metrics_registry_free(ctx->metrics);
    if (ctx->sig_term != NULL)
        event_free(ctx->sig_term);
    if (ctx->sig_int != NULL)
        event_free(ctx->sig_int);
    if (ctx->sig_hup != NULL)
        event_free(ctx->sig_hup);
    if (ctx->drain_poll != NULL)
        event_free(ctx->drain_poll);
    if (ctx->base != NULL) {
        net_loop_drain(ctx->base); /* every event of ours is freed */
        event_base_free(ctx->base);
    }
    log_install(NULL);
    for (size_t i = 0; i < ctx->log_table_count; i++)
        free(ctx->log_tables[i]);
    free(ctx->log_tables);
    config_free(ctx->config);
}

static bool override_components(struct petrel_config *cfg, const char *const *names,
                                struct petrel_error *err)
{
    size_t n = 0;
    while (names[n] != NULL)
        n++;
    char **list = xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        if (component_find(names[i]) == NULL) {
            for (size_t k = 0; k < i; k++)
                free(list[k]);
            free(list);
            return petrel_error_set(err, PETREL_ERR_INVALID, "--component: unknown component '%s'",
                                    names[i]);
        }
        list[i] = xstrdup(names[i]);
    }
    for (size_t i = 0; cfg->components[i] != NULL; i++)
        free(cfg->components[i]);
    free(cfg->components);
    cfg->components = list;
    return true;
}

int daemon_run(const struct daemon_options *opts)
{
    struct petrel_context ctx;
    memset(&ctx, 0, sizeof(ctx));
    struct petrel_error err;
    petrel_error_clear(&err);

    ctx.config = config_load(opts->config_path, &err);
    if (ctx.config == NULL) {
        fprintf(stderr, "petreld: %s\n", err.message);
        return 2;
    }
    if (opts->components != NULL && opts->components[0] != NULL &&
        !override_components(ctx.config, opts->components, &err)) {
        fprintf(stderr, "petreld: %s\n", err.message);
        config_free(ctx.config);
        return 2;
    }
    /* What a component reads once the list is final (the monitor's own
     * file). */
    for (size_t i = 0; component_table[i] != NULL; i++) {
        const struct component_def *c = component_table[i];
        if (c->config_finish == NULL || !config_has_component(ctx.config, c->name))
            continue;
        if (!c->config_finish(ctx.config, &err)) {
            fprintf(stderr, "petreld: %s\n", err.message);
            config_free(ctx.config);
            return 2;
        }
    }
    /* An operator API reachable from other hosts without a token is a
     * configuration error, once the component list is final. */
    if (!config_check_exposure(ctx.config, &err)) {
        fprintf(stderr, "petreld: %s\n", err.message);
        config_free(ctx.config);
        return 2;
    }
    if (opts->check_config) {
        config_print(ctx.config, stdout);
        fprintf(stderr, "petreld: %s: configuration is valid\n", ctx.config->file);
        config_free(ctx.config);
        return 0;
    }

    install_log_levels(&ctx, &ctx.config->log);
    raise_fd_limit(ctx.config);
    signal(SIGPIPE, SIG_IGN);
    ctx.base = event_base_new();
    if (ctx.base == NULL)
        petrel_fatal("event_base_new failed");
    ctx.metrics = metrics_registry_new();
    static const char *const build_labels[] = {"version", NULL};
    const char *build_values[] = {PETREL_VERSION};
    metric_set(metric_series_get(metrics_gauge(ctx.metrics, "petrel_build_info",
                                               "Always 1; the version label names the build.",
                                               build_labels),
                                 build_values),
               1);
    ctx.readiness = readiness_new(ctx.base, ctx.metrics);

    int rc = 1;
    const struct tls_config *tls = &ctx.config->internal_tls;
    if (tls->enabled) {
        struct tls_server_options topts = {
            .cert_file = tls->cert_file,
            .key_file = tls->key_file,
            .ca_file = tls->ca_file,
            .require_client_cert = tls->require_client_cert,
        };
        ctx.internal_tls = tls_server_ctx_new(&topts, &err);
        if (ctx.internal_tls == NULL) {
            log_error(COMPONENT, "cannot start", "error=\"internal_tls: %s\"", err.message);
            goto out;
        }
    }
    ctx.env.base = ctx.base;
    ctx.env.metrics = ctx.metrics;
    ctx.env.readiness = ctx.readiness;
    ctx.env.internal_tls = ctx.internal_tls;
    ctx.env.tls_client_cert = tls->enabled ? tls->cert_file : NULL;
    ctx.env.tls_client_key = tls->enabled ? tls->key_file : NULL;

    ctx.dicts = dict_registry_new(ctx.config->dicts);
    ctx.storage = mail_storage_new(&ctx.config->mail, ctx.metrics);
    if (!register_storage_modules(&ctx, ctx.storage, &err) || !start_quota_clone(&ctx, &err) ||
        !register_metadata(&ctx, &err)) {
        log_error(COMPONENT, "cannot start", "error=\"%s\"", err.message);
        goto out;
    }
    if (!start_components(&ctx, &err)) {
        log_error(COMPONENT, "cannot start", "error=\"%s\"", err.message);
        goto out;
    }
    if (!privileges_drop(ctx.config->user, ctx.config->group, ctx.config->allow_root, &err)) {
        log_error(COMPONENT, "cannot start", "error=\"%s\"", err.message);
        goto out;
    }
    /* Data files are opened as the unprivileged user, so they are owned by it;
     * no request is served before the loop runs. */
    if (!dict_registry_open(ctx.dicts, ctx.base, ctx.metrics, &err)) {
        log_error(COMPONENT, "cannot start", "error=\"%s\"", err.message);
        goto out;
    }
    ctx.sig_term = evsignal_new(ctx.base, SIGTERM, signal_cb, &ctx);
    ctx.sig_int = evsignal_new(ctx.base, SIGINT, signal_cb, &ctx);
    ctx.sig_hup = evsignal_new(ctx.base, SIGHUP, signal_cb, &ctx);
    evsignal_add(ctx.sig_term, NULL);
    evsignal_add(ctx.sig_int, NULL);
    evsignal_add(ctx.sig_hup, NULL);

    telemetry_start_refresh(ctx.telemetry);
    ctx.memory_trim = memory_trim_start(ctx.base, ctx.config->memory_trim_interval_ms);
    char fields[1024];
    started_fields(&ctx, fields, sizeof(fields));
    log_info(COMPONENT, "started", "version=%s config=%s telemetry=%s%s", PETREL_VERSION,
             ctx.config->file, telemetry_address(ctx.telemetry), fields);
    event_base_dispatch(ctx.base);
    log_info(COMPONENT, "stopped", "in_flight=%zu", in_flight(&ctx));
    rc = 0;
out:
    context_free(&ctx);
    return rc;
}
