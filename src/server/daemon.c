#include "server/daemon.h"

#include "core/log.h"
#include "core/metrics.h"
#include "core/xalloc.h"
#include "net/readiness.h"
#include "net/tls.h"
#include "server/config-exposure.h"
#include "server/config.h"
#include "server/memory-trim.h"
#include "server/privileges.h"
#include "protocols/imap/imap-server.h"
#include "protocols/lmtp/lmtp-server.h"
#include "protocols/pop3/pop3-server.h"
#include "services/auth/auth-service.h"
#include "services/backend-api/backend-api.h"
#include "services/director/director-service.h"
#include "services/monitor/monitor-service.h"
#include "services/quota-status/quota-status-service.h"
#include "services/service.h"
#include "services/telemetry/telemetry.h"
#include "services/warden/warden-service.h"
#include "storage/mail-storage-module.h"
#include "storage/mail-storage.h"
#include "storage/quota/quota-module.h"
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
    struct backend_api *backend_api;
    struct auth_service *auth;
    struct warden_service *warden;
    struct director_service *director;
    struct monitor_service *monitor;
    struct imap_server *imap;
    struct lmtp_server *lmtp;
    struct pop3_server *pop3;
    struct quota_status_service *quota_status;
    struct mail_storage *storage;
    struct quota_module *quota; /* NULL when neither the engine nor IMAP QUOTA is on */
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
    size_t n = 0;
    if (ctx->backend_api != NULL)
        n += backend_api_in_flight(ctx->backend_api);
    if (ctx->telemetry != NULL)
        n += telemetry_in_flight(ctx->telemetry);
    if (ctx->auth != NULL)
        n += auth_service_in_flight(ctx->auth);
    if (ctx->director != NULL)
        n += director_service_in_flight(ctx->director);
    if (ctx->monitor != NULL)
        n += monitor_service_in_flight(ctx->monitor);
    if (ctx->imap != NULL)
        n += imap_server_sessions(ctx->imap);
    if (ctx->lmtp != NULL)
        n += lmtp_server_sessions(ctx->lmtp);
    if (ctx->pop3 != NULL)
        n += pop3_server_sessions(ctx->pop3);
    if (ctx->quota_status != NULL)
        n += quota_status_service_in_flight(ctx->quota_status);
    return n;
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
    size_t busy = in_flight(ctx);
    double waited = since(&ctx->stop_started);
    if (busy == 0) {
        event_base_loopbreak(ctx->base);
        return;
    }
    if (waited * 1000 >= (double)ctx->config->shutdown_timeout_ms) {
        log_warn(COMPONENT, "shutdown timeout reached", "abandoned_requests=%zu", busy);
        /* Tell the clients (503) and give the replies a moment to leave. */
        if (ctx->backend_api != NULL)
            backend_api_abandon_in_flight(ctx->backend_api);
        if (ctx->director != NULL)
            director_service_abandon_in_flight(ctx->director);
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
    if (ctx->backend_api != NULL)
        backend_api_stop_accepting(ctx->backend_api);
    if (ctx->auth != NULL)
        auth_service_stop_accepting(ctx->auth);
    if (ctx->warden != NULL)
        warden_service_stop_accepting(ctx->warden);
    if (ctx->director != NULL)
        director_service_stop_accepting(ctx->director);
    if (ctx->monitor != NULL)
        monitor_service_stop(ctx->monitor); /* no more probes, director link closed */
    if (ctx->imap != NULL)
        imap_server_stop_accepting(ctx->imap); /* BYE to every session */
    if (ctx->lmtp != NULL)
        lmtp_server_stop_accepting(ctx->lmtp); /* 421 once each transaction is over */
    if (ctx->pop3 != NULL)
        pop3_server_stop_accepting(ctx->pop3); /* -ERR to every session, no deletions */
    if (ctx->quota_status != NULL)
        quota_status_service_stop_accepting(ctx->quota_status);
    /* Requests still arriving on open connections get 503 from the dicts. */
    dict_registry_close(ctx->config->dicts);
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

static bool start_components(struct petrel_context *ctx, struct petrel_error *err)
{
    ctx->telemetry = telemetry_start(&ctx->env, &ctx->config->telemetry, err);
    if (ctx->telemetry == NULL)
        return false;
    if (config_has_component(ctx->config, "auth")) {
        ctx->auth = auth_service_start(&ctx->env, &ctx->config->auth, err);
        if (ctx->auth == NULL)
            return false;
    }
    if (config_has_component(ctx->config, "director")) {
        ctx->director = director_service_start(&ctx->env, &ctx->config->director, err);
        if (ctx->director == NULL)
            return false;
    }
    if (config_has_component(ctx->config, "monitor")) {
        ctx->monitor = monitor_service_start(&ctx->env, &ctx->config->monitor, err);
        if (ctx->monitor == NULL)
            return false;
    }
    if (config_has_component(ctx->config, "warden")) {
        ctx->warden = warden_service_start(&ctx->env, &ctx->config->warden, err);
        if (ctx->warden == NULL)
            return false;
    }
    if (config_has_component(ctx->config, "imap")) {
        ctx->imap = imap_server_start(&ctx->env, &ctx->config->imap, ctx->storage, err);
        if (ctx->imap == NULL)
            return false;
    }
    if (config_has_component(ctx->config, "lmtp")) {
        ctx->lmtp = lmtp_server_start(&ctx->env, &ctx->config->lmtp, ctx->storage, err);
        if (ctx->lmtp == NULL)
            return false;
    }
    if (config_has_component(ctx->config, "pop3")) {
        ctx->pop3 = pop3_server_start(&ctx->env, &ctx->config->pop3, ctx->storage, err);
        if (ctx->pop3 == NULL)
            return false;
    }
    if (config_has_component(ctx->config, "quota-status")) {
        ctx->quota_status =
            quota_status_service_start(&ctx->env, &ctx->config->quota, ctx->storage, err);
        if (ctx->quota_status == NULL)
            return false;
    }
    if (config_has_component(ctx->config, "backend-api")) {
        ctx->backend_api = backend_api_start(&ctx->env, &ctx->config->backend_api,
                                             ctx->config->dicts, ctx->storage, err);
        if (ctx->backend_api == NULL)
            return false;
    }
    return true;
}

static void context_free(struct petrel_context *ctx)
{
    /* Dicts close first: drivers answer what is still pending with errors,
     * and those answers reach API objects that must still exist. They also
     * go before the event loop (network drivers hold events on it). */
    if (ctx->config != NULL) {
        dict_registry_free(ctx->config->dicts);
        ctx->config->dicts = NULL;
    }
    backend_api_free(ctx->backend_api);
    imap_server_free(ctx->imap);
    lmtp_server_free(ctx->lmtp);
    pop3_server_free(ctx->pop3);
    quota_status_service_free(ctx->quota_status);
    auth_service_free(ctx->auth);
    warden_service_free(ctx->warden);
    monitor_service_free(ctx->monitor);
    director_service_free(ctx->director);
    memory_trim_free(ctx->memory_trim);
    mail_storage_free(ctx->storage);
    quota_module_free(ctx->quota);
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
    if (ctx->base != NULL)
        event_base_free(ctx->base);
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
        bool known = false;
        for (size_t k = 0; config_component_names[k] != NULL; k++)
            known = known || strcmp(config_component_names[k], names[i]) == 0;
        if (!known) {
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
    /* The monitor's own file (MONITOR_CONFIG, monitor.config_file), once the
     * component list is final. */
    if (config_has_component(ctx.config, "monitor") &&
        !monitor_config_load(&ctx.config->monitor, &err)) {
        fprintf(stderr, "petreld: %s\n", err.message);
        config_free(ctx.config);
        return 2;
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

    ctx.storage = mail_storage_new(&ctx.config->mail, ctx.metrics);
    if (!register_storage_modules(&ctx, ctx.storage, &err)) {
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
    if (!dict_registry_open(ctx.config->dicts, ctx.base, ctx.metrics, &err)) {
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
    log_info(COMPONENT, "started",
             "version=%s config=%s telemetry=%s backend_api=%s auth=%s imap=%s warden=%s pop3=%s "
             "lmtp=%s director=%s monitor=%s quota_status=%s",
             PETREL_VERSION, ctx.config->file, telemetry_address(ctx.telemetry),
             ctx.backend_api != NULL ? backend_api_address(ctx.backend_api) : "off",
             ctx.auth != NULL ? auth_service_address(ctx.auth) : "off",
             ctx.imap != NULL ? imap_server_address(ctx.imap) : "off",
             ctx.warden != NULL ? warden_service_address(ctx.warden) : "off",
             ctx.pop3 != NULL ? pop3_server_address(ctx.pop3) : "off",
             ctx.lmtp != NULL ? lmtp_server_address(ctx.lmtp) : "off",
             ctx.director != NULL ? director_service_api_address(ctx.director) : "off",
             ctx.monitor != NULL ? "on" : "off",
             ctx.quota_status != NULL ? quota_status_service_address(ctx.quota_status) : "off");
    event_base_dispatch(ctx.base);
    log_info(COMPONENT, "stopped", "in_flight=%zu", in_flight(&ctx));
    rc = 0;
out:
    context_free(&ctx);
    return rc;
}
