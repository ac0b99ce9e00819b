/* The IMAP server: its metrics, the listener set (protocols/common/
 * mail-listeners.h), and either one loop of its own (sessions on the
 * process's loop, with the auth and warden clients and the IDLE watch hub)
 * or imap.workers worker threads (imap-worker.h) the listeners hand
 * connections to in turn. */
#include "protocols/imap/imap-server.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "protocols/common/mail-clients.h"
#include "protocols/common/mail-server-metrics.h"
#include "protocols/imap/imap-private.h"
#include "protocols/imap/imap-worker.h"
#include "clients/warden/warden-protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct imap_server {
    /* With workers: only the shared parts (cfg, listeners, tls, limits,
     * metrics) and the template storage are used. */
    struct imap_server_ctx ctx;
    struct metrics_registry *registry;
    struct imap_worker **workers; /* imap.workers > 1 */
    size_t worker_count;
    size_t next_worker;
};

static void accept_cb(void *arg, struct bufferevent *bev, bool tls, const struct sockaddr *peer)
{
    struct imap_server *srv = arg;
    imap_session_start(&srv->ctx, bev, tls, peer);
}

/* Connections go to the workers in turn: sessions are long-lived and alike
 * enough that turns spread them as evenly as counting would. */
static void accept_fd_cb(void *arg, int fd, bool tls, const struct sockaddr *peer)
{
    struct imap_server *srv = arg;
    struct imap_worker *w = srv->workers[srv->next_worker];
    srv->next_worker = (srv->next_worker + 1) % srv->worker_count;
    imap_worker_hand(w, fd, tls, peer);
}

static bool start_workers(struct imap_server *srv, struct petrel_error *err)
{
    if (!mail_listeners_open(srv->ctx.listeners, err))
        return false;
    char instance[WARDEN_INSTANCE_MAX + 1];
    mail_listeners_instance(srv->ctx.listeners, instance, sizeof(instance));
    srv->worker_count = imap_config_workers(srv->ctx.cfg);
    srv->workers = xcalloc(srv->worker_count, sizeof(*srv->workers));
    for (size_t i = 0; i < srv->worker_count; i++) {
        srv->workers[i] = imap_worker_start(&srv->ctx, srv->registry, instance, (unsigned)i, err);
        if (srv->workers[i] == NULL)
            return false;
    }
    return true;
}

/* A proxy front's families are its own (petrel_imap_proxy_*), so a
 * process running both keeps the two apart. */
static void metrics_init(struct imap_server *srv, struct metrics_registry *reg, bool proxy)
{
    static const char *const state_labels[] = {"state", NULL};
    struct imap_server_metrics *m = &srv->ctx.m;
    struct metric_family *sessions =
        proxy
            ? metrics_gauge(reg, "petrel_imap_proxy_sessions",
                            "Open sessions of the login proxy's IMAP front by state.", state_labels)
            : metrics_gauge(reg, "petrel_imap_sessions", "Open IMAP sessions by state.",
                            state_labels);
    const char *unauth[] = {"not_authenticated"}, *auth[] = {"authenticated"};
    m->sessions_unauth = metric_series_get(sessions, unauth);
    m->sessions_auth = metric_series_get(sessions, auth);
    mail_server_metrics_register(reg, proxy ? "imap_proxy" : "imap", proxy ? "IMAP proxy" : "IMAP",
                                 &m->connections_total, &m->command_seconds, &m->bytes_in,
                                 &m->bytes_out, &m->logins);
}

static struct imap_server *server_start(const struct service_env *env,
                                        const struct imap_config *cfg, struct mail_storage *storage,
                                        struct mail_proxy_front *proxy, struct petrel_error *err)
{
    struct imap_server *srv = xcalloc(1, sizeof(*srv));
    srv->ctx.cfg = cfg;
    srv->ctx.base = env->base;
    srv->ctx.storage = storage;
    srv->ctx.proxy = proxy;
    srv->registry = env->metrics;
    /* Proxy mode has no storage to wait for: the process's loop serves. */
    unsigned workers = proxy != NULL ? 1 : imap_config_workers(cfg);
    bool threaded = workers > 1;
    if (!threaded && proxy == NULL)
        srv->ctx.watches = mailbox_watch_hub_new(env->base, true);
    imap_parser_limits_default(&srv->ctx.limits);
    srv->ctx.limits.max_line = (size_t)cfg->max_line_length;
    srv->ctx.limits.max_literal = (uint64_t)cfg->max_literal_size;
    srv->ctx.limits.non_sync_max = (uint64_t)cfg->max_literal_size;
    metrics_init(srv, env->metrics, proxy != NULL);
    const struct mail_listeners_params lp = {
        .component = IMAP_COMPONENT,
        .base = env->base,
        .cfg = &cfg->login,
        .busy_reply = "* BYE Too many connections, try again later\r\n",
        .per_ip_reply = "* BYE Too many connections from your address\r\n",
        .connections_total = srv->ctx.m.connections_total,
        .bytes_out = srv->ctx.m.bytes_out,
        .accept = accept_cb,
        .accept_fd = threaded ? accept_fd_cb : NULL,
        .accept_arg = srv,
    };
    srv->ctx.listeners = mail_listeners_new(&lp, err);
    if (srv->ctx.listeners == NULL)
        goto fail;
    srv->ctx.sessions = mail_listeners_main_set(srv->ctx.listeners);
    srv->ctx.tls = mail_listeners_tls(srv->ctx.listeners);
    if (threaded ? !start_workers(srv, err)
                 : !mail_clients_start(env->base, &cfg->login, srv->ctx.listeners, &srv->ctx.auth,
                                       &srv->ctx.warden, err))
        goto fail;
    mail_listeners_add_readiness(srv->ctx.listeners, env->readiness);
    log_info(IMAP_COMPONENT, "listening",
             "address=%s listeners=%zu starttls=%s auth=%s workers=%u proxy=%s",
             mail_listeners_address(srv->ctx.listeners), mail_listeners_count(srv->ctx.listeners),
             srv->ctx.tls != NULL ? "on" : "off", cfg->login.auth_addr, workers,
             proxy != NULL ? "yes" : "no");
    return srv;
fail:
    imap_server_free(srv);
    return NULL;
}

struct imap_server *imap_server_start(const struct service_env *env, const struct imap_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err)
{
    return server_start(env, cfg, storage, NULL, err);
}

struct imap_server *imap_server_start_proxy(const struct service_env *env,
                                            const struct imap_config *cfg,
                                            struct mail_proxy_front *front,
                                            struct petrel_error *err)
{
    return server_start(env, cfg, NULL, front, err);
}

const char *imap_server_address(const struct imap_server *srv)
{
    return mail_listeners_address(srv->ctx.listeners);
}

void imap_server_stop_accepting(struct imap_server *srv)
{
    mail_listeners_shutdown(srv->ctx.listeners);
    for (size_t i = 0; i < srv->worker_count; i++)
        imap_worker_shutdown(srv->workers[i]);
}

size_t imap_server_sessions(const struct imap_server *srv)
{
    return mail_listeners_sessions(srv->ctx.listeners);
}

void imap_server_free(struct imap_server *srv)
{
    if (srv == NULL)
        return;
    if (srv->ctx.listeners != NULL)
        mail_listeners_close(srv->ctx.listeners); /* nothing more is handed to a worker */
    for (size_t i = 0; i < srv->worker_count; i++)
        imap_worker_stop(srv->workers[i]);
    free(srv->workers);
    mail_listeners_free_sessions(srv->ctx.listeners);
    mailbox_watch_hub_free(srv->ctx.watches); /* after the sessions' watches */
    warden_client_free(srv->ctx.warden);      /* after the sessions' registrations */
    auth_client_free(srv->ctx.auth);
    mail_listeners_free(srv->ctx.listeners);
    free(srv);
}
