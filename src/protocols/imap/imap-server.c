/* Listeners, TLS, the session list and per-user counts of the IMAP server. */
#include "protocols/imap/imap-server.h"

#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"
#include "net/tls.h"
#include "protocols/imap/imap-private.h"
#include "services/warden/warden-protocol.h"

#include <event2/bufferevent_ssl.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IMAP_MAX_LISTENERS 32

struct imap_listener {
    struct evconnlistener *evl;
    char address[128];
    bool tls;
};

struct imap_server {
    struct imap_server_ctx ctx;
    struct metrics_registry *registry;
    struct imap_listener listeners[IMAP_MAX_LISTENERS];
    size_t listener_count;
    struct imap_session *sessions;
    size_t session_count;
    struct smap *per_user; /* username -> (uintptr_t) session count */
    bool stopping;
    unsigned long long session_ids;
};

unsigned long long imap_server_next_session_id(struct imap_server *srv)
{
    return ++srv->session_ids;
}

const struct imap_server_ctx *imap_server_context(const struct imap_server *srv)
{
    return &srv->ctx;
}

bool imap_server_user_add(struct imap_server *srv, const char *username)
{
    uintptr_t n = (uintptr_t)smap_get(srv->per_user, username);
    int64_t limit = srv->ctx.cfg->max_connections_per_user;
    if (limit > 0 && n >= (uintptr_t)limit)
        return false;
    smap_put(srv->per_user, username, (void *)(n + 1));
    return true;
}

void imap_server_user_remove(struct imap_server *srv, const char *username)
{
    uintptr_t n = (uintptr_t)smap_get(srv->per_user, username);
    if (n <= 1)
        smap_remove(srv->per_user, username);
    else
        smap_put(srv->per_user, username, (void *)(n - 1));
}

void imap_server_session_gone(struct imap_server *srv, struct imap_session *s)
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
    struct imap_server *srv = arg;
    bool tls = false;
    for (size_t i = 0; i < srv->listener_count; i++) {
        if (srv->listeners[i].evl == evl)
            tls = srv->listeners[i].tls;
    }
    if (srv->session_count >= (size_t)srv->ctx.cfg->max_connections) {
        static const char busy[] = "* BYE Too many connections, try again later\r\n";
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
    imap_session_start(srv, bev, tls, sa);
}

void imap_server_session_added(struct imap_server *srv, struct imap_session *s)
{
    s->next = srv->sessions;
    if (srv->sessions != NULL)
        srv->sessions->prev = s;
    srv->sessions = s;
    srv->session_count++;
    metric_add(srv->ctx.m.connections_total, 1);
}

static bool listen_on(struct imap_server *srv, const char *addr, bool tls, struct petrel_error *err)
{
    if (srv->listener_count >= IMAP_MAX_LISTENERS)
        return petrel_error_set(err, PETREL_ERR_INVALID, "imap: too many listeners");
    int fd = net_listen(addr, false, err);
    if (fd < 0)
        return false;
    struct imap_listener *l = &srv->listeners[srv->listener_count];
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
    srv->per_user = smap_new();
    srv->ctx.watches = mailbox_watch_hub_new(env->base, true);
    imap_parser_limits_default(&srv->ctx.limits);
    srv->ctx.limits.max_line = (size_t)cfg->max_line_length;
    srv->ctx.limits.max_literal = (uint64_t)cfg->max_literal_size;
    srv->ctx.limits.non_sync_max = (uint64_t)cfg->max_literal_size;
    metrics_init(srv, env->metrics);
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
        petrel_error_set(err, PETREL_ERR_INVALID, "imap: no listener configured");
        goto fail;
    }
    if (cfg->warden_addr != NULL && *cfg->warden_addr != '\0') {
        /* The instance name outlives a restart (stale sessions of the old
         * process are reaped when the new one says HELLO). */
        char host[256] = "localhost", instance[WARDEN_INSTANCE_MAX + 1];
        gethostname(host, sizeof(host) - 1);
        snprintf(instance, sizeof(instance), "imap@%.64s:%.58s", host, srv->listeners[0].address);
        srv->ctx.warden =
            warden_client_new(env->base, cfg->warden_addr, instance, cfg->auth_timeout_ms, err);
        if (srv->ctx.warden == NULL)
            goto fail;
    }
    for (size_t i = 0; i < srv->listener_count; i++) {
        char name[64];
        snprintf(name, sizeof(name), "imap-listener-%zu", i);
        readiness_add_tcp(env->readiness, name, srv->listeners[i].address, srv->listeners[i].tls,
                          NULL, NULL);
    }
    log_info(IMAP_COMPONENT, "listening", "address=%s listeners=%zu starttls=%s auth=%s",
             srv->listeners[0].address, srv->listener_count, srv->ctx.tls != NULL ? "on" : "off",
             cfg->auth_addr);
    return srv;
fail:
    imap_server_free(srv);
    return NULL;
}

const char *imap_server_address(const struct imap_server *srv)
{
    return srv->listener_count > 0 ? srv->listeners[0].address : "";
}

static void close_listeners(struct imap_server *srv)
{
    for (size_t i = 0; i < srv->listener_count; i++) {
        if (srv->listeners[i].evl != NULL) {
            evconnlistener_free(srv->listeners[i].evl);
            srv->listeners[i].evl = NULL;
        }
    }
}

void imap_server_stop_accepting(struct imap_server *srv)
{
    close_listeners(srv);
    srv->stopping = true;
    struct imap_session *s = srv->sessions;
    while (s != NULL) {
        struct imap_session *next = s->next;
        imap_session_shutdown(s, "Server shutting down.");
        s = next;
    }
}

size_t imap_server_sessions(const struct imap_server *srv)
{
    return srv->session_count;
}

void imap_server_free(struct imap_server *srv)
{
    if (srv == NULL)
        return;
    close_listeners(srv);
    while (srv->sessions != NULL)
        imap_session_free(srv->sessions);
    mailbox_watch_hub_free(srv->ctx.watches); /* after the sessions' watches */
    warden_client_free(srv->ctx.warden);      /* after the sessions' registrations */
    auth_client_free(srv->ctx.auth);
    if (srv->ctx.tls != NULL)
        SSL_CTX_free(srv->ctx.tls);
    smap_free(srv->per_user, NULL);
    free(srv);
}
