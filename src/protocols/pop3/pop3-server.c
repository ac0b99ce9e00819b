/* The POP3 server: its metrics, the listener set (protocols/common/
 * mail-listeners.h), the secure networks, and the auth and warden clients. */
#include "protocols/pop3/pop3-server.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "protocols/common/mail-clients.h"
#include "protocols/common/mail-server-metrics.h"
#include "protocols/pop3/pop3-private.h"
#include "clients/warden/warden-client.h"

#include <stdlib.h>

struct pop3_server {
    struct pop3_server_ctx ctx;
};

const struct pop3_server_ctx *pop3_server_context(const struct pop3_server *srv)
{
    return &srv->ctx;
}

static void accept_cb(void *arg, struct bufferevent *bev, bool tls, const struct sockaddr *peer)
{
    pop3_session_start(arg, bev, tls, peer);
}

/* A proxy front's families are its own (petrel_pop3_proxy_*). */
static void metrics_init(struct pop3_server *srv, struct metrics_registry *reg, bool proxy)
{
    static const char *const state_labels[] = {"state", NULL};
    struct pop3_server_metrics *m = &srv->ctx.m;
    struct metric_family *sessions =
        proxy ? metrics_gauge(reg, "petrel_pop3_proxy_sessions",
                              "Open sessions of the login proxy's POP3 front by RFC 1939 state.",
                              state_labels)
              : metrics_gauge(reg, "petrel_pop3_sessions", "Open POP3 sessions by RFC 1939 state.",
                              state_labels);
    const char *authz[] = {"authorization"}, *trans[] = {"transaction"};
    m->sessions_authorization = metric_series_get(sessions, authz);
    m->sessions_transaction = metric_series_get(sessions, trans);
    mail_server_metrics_register(reg, proxy ? "pop3_proxy" : "pop3", proxy ? "POP3 proxy" : "POP3",
                                 &m->connections_total, &m->command_seconds, &m->bytes_in,
                                 &m->bytes_out, &m->logins);
}

static struct pop3_server *server_start(const struct service_env *env,
                                        const struct pop3_config *cfg, struct mail_storage *storage,
                                        struct mail_proxy_front *proxy, struct petrel_error *err)
{
    struct pop3_server *srv = xcalloc(1, sizeof(*srv));
    srv->ctx.cfg = cfg;
    srv->ctx.base = env->base;
    srv->ctx.storage = storage;
    srv->ctx.proxy = proxy;
    pop3_parser_limits_default(&srv->ctx.limits);
    srv->ctx.limits.max_line = (size_t)cfg->max_line_length;
    metrics_init(srv, env->metrics, proxy != NULL);
    if (!cidr_list_parse((const char *const *)cfg->secure_nets, &srv->ctx.secure_nets, err))
        goto fail;
    const struct mail_listeners_params lp = {
        .component = POP3_COMPONENT,
        .base = env->base,
        .cfg = &cfg->login,
        .busy_reply = "-ERR [SYS/TEMP] Too many connections, try again later.\r\n",
        .per_ip_reply = "-ERR [SYS/TEMP] Too many connections from your address.\r\n",
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
    log_info(POP3_COMPONENT, "listening", "address=%s listeners=%zu stls=%s auth=%s warden=%s",
             mail_listeners_address(srv->ctx.listeners), mail_listeners_count(srv->ctx.listeners),
             srv->ctx.tls != NULL ? "on" : "off", cfg->login.auth_addr,
             srv->ctx.warden != NULL ? cfg->login.warden_addr : "off");
    return srv;
fail:
    pop3_server_free(srv);
    return NULL;
}

struct pop3_server *pop3_server_start(const struct service_env *env, const struct pop3_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err)
{
    return server_start(env, cfg, storage, NULL, err);
}

struct pop3_server *pop3_server_start_proxy(const struct service_env *env,
                                            const struct pop3_config *cfg,
                                            struct mail_proxy_front *front,
                                            struct petrel_error *err)
{
    return server_start(env, cfg, NULL, front, err);
}

const char *pop3_server_address(const struct pop3_server *srv)
{
    return mail_listeners_address(srv->ctx.listeners);
}

void pop3_server_stop_accepting(struct pop3_server *srv)
{
    mail_listeners_shutdown(srv->ctx.listeners);
}

size_t pop3_server_sessions(const struct pop3_server *srv)
{
    return mail_listeners_sessions(srv->ctx.listeners);
}

void pop3_server_free(struct pop3_server *srv)
{
    if (srv == NULL)
        return;
    mail_listeners_free_sessions(srv->ctx.listeners);
    warden_client_free(srv->ctx.warden); /* after the sessions' registrations */
    auth_client_free(srv->ctx.auth);
    mail_listeners_free(srv->ctx.listeners);
    cidr_list_free(&srv->ctx.secure_nets);
    free(srv);
}
