/* The IMAP server: its metrics, the listener set (protocols/common/
 * mail-listeners.h), the auth and warden clients, and the IDLE watch hub. */
#include "protocols/imap/imap-server.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "protocols/common/mail-clients.h"
#include "protocols/imap/imap-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct imap_server {
    struct imap_server_ctx ctx;
    struct metrics_registry *registry;
};

const struct imap_server_ctx *imap_server_context(const struct imap_server *srv)
{
    return &srv->ctx;
}

static void accept_cb(void *arg, struct bufferevent *bev, bool tls, const struct sockaddr *peer)
{
    imap_session_start(arg, bev, tls, peer);
}

static void metrics_init(struct imap_server *srv, struct metrics_registry *reg)
{
    static const char *const state_labels[] = {"state", NULL};
    static const char *const cmd_labels[] = {"command", "result", NULL};
    static const char *const dir_labels[] = {"direction", NULL};
    static const char *const login_labels[] = {"result", NULL};
    struct imap_server_metrics *m = &srv->ctx.m;
    struct metric_family *sessions =
        metrics_gauge(reg, "petrel_imap_sessions", "Open IMAP sessions by state.", state_labels);
    const char *unauth[] = {"not_authenticated"}, *auth[] = {"authenticated"};
    m->sessions_unauth = metric_series_get(sessions, unauth);
    m->sessions_auth = metric_series_get(sessions, auth);
    m->connections_total = metric_series_get(
        metrics_counter(reg, "petrel_imap_connections_total", "IMAP connections accepted.", NULL),
        NULL);
    m->command_seconds = metrics_histogram(
        reg, "petrel_imap_command_seconds", "IMAP commands by name and result, in seconds.",
        cmd_labels, metrics_latency_buckets, metrics_latency_bucket_count);
    struct metric_family *bytes = metrics_counter(
        reg, "petrel_imap_bytes_total", "Bytes received and sent by the IMAP server.", dir_labels);
    const char *in[] = {"in"}, *out[] = {"out"};
    m->bytes_in = metric_series_get(bytes, in);
    m->bytes_out = metric_series_get(bytes, out);
    m->logins =
        metrics_counter(reg, "petrel_imap_logins_total", "IMAP logins by result.", login_labels);
}

struct imap_server *imap_server_start(const struct service_env *env, const struct imap_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err)
{
    struct imap_server *srv = xcalloc(1, sizeof(*srv));
    srv->ctx.cfg = cfg;
    srv->ctx.base = env->base;
    srv->ctx.storage = storage;
    srv->registry = env->metrics;
    srv->ctx.watches = mailbox_watch_hub_new(env->base, true);
    imap_parser_limits_default(&srv->ctx.limits);
    srv->ctx.limits.max_line = (size_t)cfg->max_line_length;
    srv->ctx.limits.max_literal = (uint64_t)cfg->max_literal_size;
    srv->ctx.limits.non_sync_max = (uint64_t)cfg->max_literal_size;
    metrics_init(srv, env->metrics);
    const struct mail_listeners_params lp = {
        .component = IMAP_COMPONENT,
        .base = env->base,
        .cfg = &cfg->login,
        .busy_reply = "* BYE Too many connections, try again later\r\n",
        .connections_total = srv->ctx.m.connections_total,
        .bytes_out = srv->ctx.m.bytes_out,
        .accept = accept_cb,
        .accept_arg = srv,
    };
    srv->ctx.listeners = mail_listeners_new(&lp, err);
    if (srv->ctx.listeners == NULL)
        goto fail;
    srv->ctx.tls = mail_listeners_tls(srv->ctx.listeners);
    if (!mail_clients_start(env->base, &cfg->login, srv->ctx.listeners, &srv->ctx.auth,
                            &srv->ctx.warden, err))
        goto fail;
    mail_listeners_add_readiness(srv->ctx.listeners, env->readiness);
    log_info(IMAP_COMPONENT, "listening", "address=%s listeners=%zu starttls=%s auth=%s",
             mail_listeners_address(srv->ctx.listeners), mail_listeners_count(srv->ctx.listeners),
             srv->ctx.tls != NULL ? "on" : "off", cfg->login.auth_addr);
    return srv;
fail:
    imap_server_free(srv);
    return NULL;
}

const char *imap_server_address(const struct imap_server *srv)
{
    return mail_listeners_address(srv->ctx.listeners);
}

void imap_server_stop_accepting(struct imap_server *srv)
{
    mail_listeners_shutdown(srv->ctx.listeners);
}

size_t imap_server_sessions(const struct imap_server *srv)
{
    return mail_listeners_sessions(srv->ctx.listeners);
}

void imap_server_free(struct imap_server *srv)
{
    if (srv == NULL)
        return;
    mail_listeners_free_sessions(srv->ctx.listeners);
    mailbox_watch_hub_free(srv->ctx.watches); /* after the sessions' watches */
    warden_client_free(srv->ctx.warden);      /* after the sessions' registrations */
    auth_client_free(srv->ctx.auth);
    mail_listeners_free(srv->ctx.listeners);
    free(srv);
}
