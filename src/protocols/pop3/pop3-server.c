/* Listeners, TLS, the session list, per-user counts and metrics of the POP3
 * server. */
#include "protocols/pop3/pop3-server.h"

#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"
#include "net/tls.h"
#include "protocols/pop3/pop3-private.h"
#include "services/warden/warden-client.h"

#include <event2/bufferevent_ssl.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POP3_MAX_LISTENERS 32

struct pop3_listener {
    struct evconnlistener *evl;
    char address[128];
    bool tls;
};

struct pop3_server {
    struct pop3_server_ctx ctx;
    struct pop3_listener listeners[POP3_MAX_LISTENERS];
    size_t listener_count;
    struct pop3_session *sessions;
    size_t session_count;
    struct smap *per_user; /* username -> (uintptr_t) session count */
    unsigned long long session_ids;
};

unsigned long long pop3_server_next_session_id(struct pop3_server *srv)
{
    return ++srv->session_ids;
}

const struct pop3_server_ctx *pop3_server_context(const struct pop3_server *srv)
{
    return &srv->ctx;
}

bool pop3_server_user_add(struct pop3_server *srv, const char *username)
{
    uintptr_t n = (uintptr_t)smap_get(srv->per_user, username);
    int64_t limit = srv->ctx.cfg->max_connections_per_user;
    if (limit > 0 && n >= (uintptr_t)limit)
        return false;
    smap_put(srv->per_user, username, (void *)(n + 1));
    return true;
}

void pop3_server_user_remove(struct pop3_server *srv, const char *username)
{
    uintptr_t n = (uintptr_t)smap_get(srv->per_user, username);
    if (n <= 1)
        smap_remove(srv->per_user, username);
    else
        smap_put(srv->per_user, username, (void *)(n - 1));
}

void pop3_server_session_added(struct pop3_server *srv, struct pop3_session *s)
{
    s->next = srv->sessions;
    if (srv->sessions != NULL)
        srv->sessions->prev = s;
    srv->sessions = s;
    srv->session_count++;
    metric_add(srv->ctx.m.connections_total, 1);
}

void pop3_server_session_gone(struct pop3_server *srv, struct pop3_session *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        srv->sessions = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    srv->session_count--;
}

static void accept_cb(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *arg)
{
    (void)socklen;
    struct pop3_server *srv = arg;
    bool tls = false;
    for (size_t i = 0; i < srv->listener_count; i++) {
        if (srv->listeners[i].evl == evl)
            tls = srv->listeners[i].tls;
    }
    if (srv->session_count >= (size_t)srv->ctx.cfg->max_connections) {
        /* In clear text even on a TLS port: no handshake is spent on a refusal. */
        static const char busy[] = "-ERR [SYS/TEMP] Too many connections, try again later.\r\n";
        ssize_t ignored = write(fd, busy, sizeof(busy) - 1);
        (void)ignored;
        evutil_closesocket(fd);
        return;
    }
    struct bufferevent *bev;
    if (tls) {
        SSL *ssl = SSL_new(srv->ctx.tls);
        bev = bufferevent_openssl_socket_new(srv->ctx.base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                             BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    } else {
        bev = bufferevent_socket_new(srv->ctx.base, fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (bev == NULL) {
        evutil_closesocket(fd);
        return;
    }
    pop3_session_start(srv, bev, tls, sa);
}

static bool listen_on(struct pop3_server *srv, const char *addr, bool tls, struct petrel_error *err)
{
    if (srv->listener_count >= POP3_MAX_LISTENERS)
        return petrel_error_set(err, PETREL_ERR_INVALID, "pop3: too many listeners");
    int fd = net_listen(addr, false, err);
    if (fd < 0)
        return false;
    struct pop3_listener *l = &srv->listeners[srv->listener_count];
    l->evl = evconnlistener_new(srv->ctx.base, accept_cb, srv, LEV_OPT_CLOSE_ON_FREE, -1, fd);
    if (l->evl == NULL) {
        close(fd);
        return petrel_error_set(err, PETREL_ERR_IO, "cannot listen on %s", addr);
    }
    l->tls = tls;
    net_bound_address(fd, l->address, sizeof(l->address));
    srv->listener_count++;
    return true;
}

static void metrics_init(struct pop3_server *srv, struct metrics_registry *reg)
{
    static const char *const state_labels[] = {"state", NULL};
    static const char *const cmd_labels[] = {"command", "result", NULL};
    static const char *const dir_labels[] = {"direction", NULL};
    static const char *const login_labels[] = {"result", NULL};
    struct pop3_server_metrics *m = &srv->ctx.m;
    struct metric_family *sessions = metrics_gauge(
        reg, "petrel_pop3_sessions", "Open POP3 sessions by RFC 1939 state.", state_labels);
    const char *authz[] = {"authorization"}, *trans[] = {"transaction"};
    m->sessions_authorization = metric_series_get(sessions, authz);
    m->sessions_transaction = metric_series_get(sessions, trans);
    m->connections_total = metric_series_get(
        metrics_counter(reg, "petrel_pop3_connections_total", "POP3 connections accepted.", NULL),
        NULL);
    m->command_seconds = metrics_histogram(
        reg, "petrel_pop3_command_seconds", "POP3 commands by name and result, in seconds.",
        cmd_labels, metrics_latency_buckets, metrics_latency_bucket_count);
    struct metric_family *bytes = metrics_counter(
        reg, "petrel_pop3_bytes_total", "Bytes received and sent by the POP3 server.", dir_labels);
    const char *in[] = {"in"}, *out[] = {"out"};
    m->bytes_in = metric_series_get(bytes, in);
    m->bytes_out = metric_series_get(bytes, out);
    m->logins =
        metrics_counter(reg, "petrel_pop3_logins_total", "POP3 logins by result.", login_labels);
}

static bool start_warden(struct pop3_server *srv, const struct service_env *env,
                         struct petrel_error *err)
{
    const struct pop3_config *cfg = srv->ctx.cfg;
    if (cfg->warden_addr == NULL || *cfg->warden_addr == '\0')
        return true;
    char host[256];
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    /* "pop3@<host>:<first listener>", cut to the warden's 128 bytes. */
    struct buf instance = {0};
    buf_printf(&instance, "pop3@%s:%s", host, srv->listeners[0].address);
    if (instance.len > 128) {
        instance.len = 128;
        instance.data[128] = '\0';
    }
    srv->ctx.warden =
        warden_client_new(env->base, cfg->warden_addr, instance.data, cfg->auth_timeout_ms, err);
    buf_free(&instance);
    return srv->ctx.warden != NULL;
}

struct pop3_server *pop3_server_start(const struct service_env *env, const struct pop3_config *cfg,
                                      struct mail_storage *storage, struct petrel_error *err)
{
    struct pop3_server *srv = xcalloc(1, sizeof(*srv));
    srv->ctx.cfg = cfg;
    srv->ctx.base = env->base;
    srv->ctx.storage = storage;
    srv->per_user = smap_new();
    pop3_parser_limits_default(&srv->ctx.limits);
    srv->ctx.limits.max_line = (size_t)cfg->max_line_length;
    metrics_init(srv, env->metrics);
    if (!cidr_list_parse((const char *const *)cfg->secure_nets, &srv->ctx.secure_nets, err))
        goto fail;
    if (cfg->tls_cert_file != NULL && *cfg->tls_cert_file != '\0') {
        struct tls_server_options topts = {
            .cert_file = cfg->tls_cert_file,
            .key_file = cfg->tls_key_file,
        };
        srv->ctx.tls = tls_server_ctx_new(&topts, err);
        if (srv->ctx.tls == NULL)
            goto fail;
    }
    srv->ctx.auth = auth_client_new(env->base, cfg->auth_addr, cfg->auth_timeout_ms, err);
    if (srv->ctx.auth == NULL)
        goto fail;
    for (size_t i = 0; cfg->listen != NULL && cfg->listen[i] != NULL; i++) {
        if (!listen_on(srv, cfg->listen[i], false, err))
            goto fail;
    }
    for (size_t i = 0; cfg->listen_tls != NULL && cfg->listen_tls[i] != NULL; i++) {
        if (!listen_on(srv, cfg->listen_tls[i], true, err))
            goto fail;
    }
    if (srv->listener_count == 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "pop3: no listener configured");
        goto fail;
    }
    if (!start_warden(srv, env, err))
        goto fail;
    for (size_t i = 0; i < srv->listener_count; i++) {
        char name[64];
        snprintf(name, sizeof(name), "pop3-listener-%zu", i);
        readiness_add_tcp(env->readiness, name, srv->listeners[i].address, srv->listeners[i].tls,
                          NULL, NULL);
    }
    log_info(POP3_COMPONENT, "listening", "address=%s listeners=%zu stls=%s auth=%s warden=%s",
             srv->listeners[0].address, srv->listener_count, srv->ctx.tls != NULL ? "on" : "off",
             cfg->auth_addr, srv->ctx.warden != NULL ? cfg->warden_addr : "off");
    return srv;
fail:
    pop3_server_free(srv);
    return NULL;
}

const char *pop3_server_address(const struct pop3_server *srv)
{
    return srv->listener_count > 0 ? srv->listeners[0].address : "";
}

static void close_listeners(struct pop3_server *srv)
{
    for (size_t i = 0; i < srv->listener_count; i++) {
        if (srv->listeners[i].evl != NULL) {
            evconnlistener_free(srv->listeners[i].evl);
            srv->listeners[i].evl = NULL;
        }
    }
}

void pop3_server_stop_accepting(struct pop3_server *srv)
{
    close_listeners(srv);
    struct pop3_session *s = srv->sessions;
    while (s != NULL) {
        struct pop3_session *next = s->next;
        pop3_session_shutdown(s, "Server shutting down.");
        s = next;
    }
}

size_t pop3_server_sessions(const struct pop3_server *srv)
{
    return srv->session_count;
}

void pop3_server_free(struct pop3_server *srv)
{
    if (srv == NULL)
        return;
    close_listeners(srv);
    while (srv->sessions != NULL)
        pop3_session_free(srv->sessions);
    if (srv->ctx.warden != NULL)
        warden_client_free(srv->ctx.warden); /* after the sessions' registrations */
    auth_client_free(srv->ctx.auth);
    if (srv->ctx.tls != NULL)
        SSL_CTX_free(srv->ctx.tls);
    smap_free(srv->per_user, NULL);
    cidr_list_free(&srv->ctx.secure_nets);
    free(srv);
}
