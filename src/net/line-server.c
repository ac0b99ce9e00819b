/* The line-protocol server core (line-server.h): listeners, admission,
 * per-connection line reading with back-pressure, closing after the
 * output has drained, and the connection gauges. */
#include "net/line-server.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/cidr.h"
#include "net/sockaddr.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LISTENERS 16
/* Output waiting for a client that does not read: above this, the
 * connection's lines are not read until it has drained. */
#define OUTPUT_MAX (1024 * 1024)

struct line_conn {
    struct line_server *srv;
    struct bufferevent *bev;
    struct line_conn *next;
    struct line_conn *prev;
    char peer[64];
    void *state;    /* the owner's */
    bool closing;   /* free once the output has drained */
    bool throttled; /* reading paused until the output has drained */
};

struct listener {
    struct evconnlistener *evl;
    char address[128];
};

struct line_server {
    const struct line_server_config *cfg;
    const struct line_server_ops *ops;
    void *ctx;
    struct event_base *base;
    struct listener listeners[MAX_LISTENERS];
    size_t listener_count;
    struct cidr_list allowed;
    struct line_conn *conns;
    size_t conn_count;
};

/* ---------- connections ---------- */

static void count_connections(struct line_server *srv)
{
    metric_set(srv->cfg->connections, (double)srv->conn_count);
}

/* Closing a socket with unread input makes the kernel send a reset, which
 * can destroy our last reply before the peer reads it: read away what is
 * already there first. */
static void discard_pending_input(struct line_conn *conn)
{
    evutil_socket_t fd = bufferevent_getfd(conn->bev);
    char sink[4096];
    for (int i = 0; fd >= 0 && i < 256; i++) {
        if (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0)
            break;
    }
}

static void conn_free(struct line_conn *conn)
{
    struct line_server *srv = conn->srv;
    if (conn->closing && srv->cfg->drain_on_close)
        discard_pending_input(conn);
    srv->ops->close(conn->state);
    if (conn->prev != NULL)
        conn->prev->next = conn->next;
    else
        srv->conns = conn->next;
    if (conn->next != NULL)
        conn->next->prev = conn->prev;
    srv->conn_count--;
    count_connections(srv);
    bufferevent_free(conn->bev);
    free(conn);
}

void line_conn_write(struct line_conn *conn, const void *data, size_t len)
{
    if (!conn->closing)
        bufferevent_write(conn->bev, data, len);
}

/* Freed by conn_write_cb once the output has left, or at the end of
 * conn_read_cb when nothing is queued: never under the caller. */
void line_conn_close(struct line_conn *conn)
{
    conn->closing = true;
    bufferevent_disable(conn->bev, EV_READ);
}

bool line_conn_closing(const struct line_conn *conn)
{
    return conn->closing;
}

const char *line_conn_peer(const struct line_conn *conn)
{
    return conn->peer;
}

static void read_lines(struct line_conn *conn, struct bufferevent *bev)
{
    const struct line_server_config *cfg = conn->srv->cfg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (!conn->closing) {
        if (evbuffer_get_length(bufferevent_get_output(bev)) > OUTPUT_MAX) {
            /* A client that sends without reading must not make us queue
             * replies without bound: wait for conn_write_cb. */
            conn->throttled = true;
            bufferevent_disable(bev, EV_READ);
            return;
        }
        size_t eol_len = 0;
        struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if (eol.pos < 0) {
            if (evbuffer_get_length(in) > cfg->max_line)
                conn->srv->ops->bad_input(conn->state, "line too long");
            return;
        }
        size_t len = (size_t)eol.pos;
        if (len > cfg->max_line) {
            conn->srv->ops->bad_input(conn->state, "line too long");
            return;
        }
        char *line = xmalloc(len + 1);
        evbuffer_remove(in, line, len);
        evbuffer_drain(in, eol_len);
        line[len] = '\0';
        conn->srv->ops->line(conn->state, line, len);
        explicit_bzero(line, len); /* it may have held a password */
        free(line);
    }
}

static void conn_read_cb(struct bufferevent *bev, void *ctx)
{
    struct line_conn *conn = ctx;
    read_lines(conn, bev);
    if (conn->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        conn_free(conn);
}

static void conn_write_cb(struct bufferevent *bev, void *ctx)
{
    struct line_conn *conn = ctx;
    if (conn->closing) {
        conn_free(conn);
    } else if (conn->throttled) {
        /* The client caught up: read on, starting with the lines already
         * buffered (no new data may come to trigger the read callback). */
        conn->throttled = false;
        bufferevent_enable(bev, EV_READ);
        conn_read_cb(bev, conn);
    }
}

static void conn_event_cb(struct bufferevent *bev, short what, void *ctx)
{
    (void)bev;
    struct line_conn *conn = ctx;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
        if (what & BEV_EVENT_TIMEOUT)
            log_debug(conn->srv->cfg->component, "idle connection closed", "peer=%s", conn->peer);
        conn_free(conn);
    }
}

static void accept_cb(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *ctx)
{
    (void)evl;
    (void)socklen;
    struct line_server *srv = ctx;
    const struct line_server_config *cfg = srv->cfg;
    char peer[64];
    net_addr_format(sa, peer, sizeof(peer));
    if (sa->sa_family != AF_UNIX && !cidr_list_match(&srv->allowed, sa)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "connection refused: address not in %s.allowed_nets",
                 cfg->section);
        log_warn(cfg->component, msg, "peer=%s", peer);
        evutil_closesocket(fd);
        return;
    }
    if (srv->conn_count >= (size_t)cfg->max_connections) {
        log_warn(cfg->component, "connection refused: max_connections reached",
                 "peer=%s limit=%lld", peer, (long long)cfg->max_connections);
        evutil_closesocket(fd);
        return;
    }
    struct bufferevent *bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        log_warn(cfg->component, "connection refused: cannot set it up", "peer=%s", peer);
        evutil_closesocket(fd);
        return;
    }
    struct line_conn *conn = xcalloc(1, sizeof(*conn));
    conn->srv = srv;
    snprintf(conn->peer, sizeof(conn->peer), "%s", peer);
    conn->bev = bev;
    bufferevent_setcb(bev, conn_read_cb, conn_write_cb, conn_event_cb, conn);
    /* Reading stops once a line without LF could not be a valid one. */
    bufferevent_setwatermark(bev, EV_READ, 0, cfg->max_line + 2);
    if (cfg->idle_timeout_ms > 0) {
        struct timeval tv = {(time_t)(cfg->idle_timeout_ms / 1000),
                             (suseconds_t)((cfg->idle_timeout_ms % 1000) * 1000)};
        bufferevent_set_timeouts(bev, &tv, NULL);
    }
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    conn->next = srv->conns;
    if (srv->conns != NULL)
        srv->conns->prev = conn;
    srv->conns = conn;
    srv->conn_count++;
    count_connections(srv);
    metric_add(cfg->connections_total, 1);
    conn->state = srv->ops->open(srv->ctx, conn);
}

/* ---------- listeners ---------- */

static bool listen_on(struct line_server *srv, const char *addr, struct petrel_error *err)
{
    if (srv->listener_count >= MAX_LISTENERS)
        return petrel_error_set(err, PETREL_ERR_INVALID, "%s.listen: too many addresses",
                                srv->cfg->section);
    int fd = net_listen(addr, false, err);
    if (fd < 0)
        return false;
    struct listener *l = &srv->listeners[srv->listener_count];
    if (strncmp(addr, "unix:", 5) == 0 && chmod(addr + 5, (mode_t)srv->cfg->socket_mode) != 0) {
        close(fd);
        return petrel_error_set(err, PETREL_ERR_IO, "cannot set the mode of %s: %s", addr + 5,
                                strerror(errno));
    }
    l->evl = evconnlistener_new(srv->base, accept_cb, srv, LEV_OPT_CLOSE_ON_FREE, -1, fd);
    if (l->evl == NULL) {
        close(fd);
        return petrel_error_set(err, PETREL_ERR_IO, "cannot listen on %s", addr);
    }
    net_bound_address(fd, l->address, sizeof(l->address));
    srv->listener_count++;
    return true;
}

bool line_server_listen(struct line_server *srv, char *const *listen, struct readiness *readiness,
                        struct petrel_error *err)
{
    for (size_t i = 0; listen != NULL && listen[i] != NULL; i++) {
        if (!listen_on(srv, listen[i], err))
            return false;
        char name[64];
        snprintf(name, sizeof(name), "%s-listener-%zu", srv->cfg->component, i);
        readiness_add_tcp(readiness, name, srv->listeners[srv->listener_count - 1].address, false,
                          NULL, NULL);
    }
    return true;
}

size_t line_server_listener_count(const struct line_server *srv)
{
    return srv->listener_count;
}

const char *line_server_address(const struct line_server *srv)
{
    return srv->listener_count > 0 ? srv->listeners[0].address : "";
}

void line_server_stop_accepting(struct line_server *srv)
{
    for (size_t i = 0; i < srv->listener_count; i++) {
        if (srv->listeners[i].evl != NULL) {
            evconnlistener_free(srv->listeners[i].evl);
            srv->listeners[i].evl = NULL;
        }
    }
}

/* ---------- life cycle ---------- */

struct line_server *line_server_new(struct event_base *base, const struct line_server_config *cfg,
                                    const struct line_server_ops *ops, void *ctx,
                                    struct petrel_error *err)
{
    struct line_server *srv = xcalloc(1, sizeof(*srv));
    srv->cfg = cfg;
    srv->ops = ops;
    srv->ctx = ctx;
    srv->base = base;
    if (!cidr_list_parse(cfg->allowed_nets, &srv->allowed, err)) {
        free(srv);
        return NULL;
    }
    return srv;
}

void line_server_each(const struct line_server *srv, void (*fn)(void *state, void *arg), void *arg)
{
    for (const struct line_conn *c = srv->conns; c != NULL; c = c->next)
        fn(c->state, arg);
}

void line_server_free(struct line_server *srv)
{
    if (srv == NULL)
        return;
    line_server_stop_accepting(srv);
    while (srv->conns != NULL)
        conn_free(srv->conns);
    cidr_list_free(&srv->allowed);
    free(srv);
}
