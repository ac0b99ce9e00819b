/* The line-protocol server core (line-server.h): listeners, admission,
 * per-connection line reading with back-pressure, closing after the
 * output has drained, and the connection gauges. */
#include "net/line-server.h"

#include "core/clock.h"
#include "core/dlist.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/cidr.h"
#include "net/conn-limits.h"
#include "net/conn-slots.h"
#include "net/listener-set.h"
#include "net/sockaddr.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Output waiting for a client that does not read: above this, the
 * connection's lines are not read until it has drained. */
#define OUTPUT_MAX (1024 * 1024)

struct line_conn {
    struct line_server *srv;
    struct bufferevent *bev;
    struct line_conn *next;
    struct line_conn *prev;
    char peer[64];
    struct sockaddr_storage addr; /* for the per-address count */
    void *state;                  /* the owner's */
    bool closing;                 /* free once the output has drained */
    bool throttled;               /* reading paused until the output has drained */
    bool established;             /* a line was answered without closing */
};

struct line_server {
    const struct line_server_config *cfg;
    const struct line_server_ops *ops;
    void *ctx;
    struct event_base *base;
    struct net_listener_set *listeners;
    struct conn_slots *slots; /* max_connections */
    struct cidr_list allowed;
    struct conn_limits *limits;
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
    DLIST_UNLINK(srv->conns, conn);
    srv->conn_count--;
    count_connections(srv);
    conn_limits_release(srv->limits, (const struct sockaddr *)&conn->addr);
    conn_slots_release(srv->slots);
    bufferevent_free(conn->bev);
    free(conn);
}

static void set_read_timeout(struct line_conn *conn, int64_t ms)
{
    struct timeval tv = clock_ms_to_timeval(ms);
    bufferevent_set_timeouts(conn->bev, ms > 0 ? &tv : NULL, NULL);
}

/* The first line answered without closing makes the connection a client's:
 * from then on only the idle timeout applies (auth clients keep one
 * connection for good, a warden client's registrations live with it). */
static void mark_established(struct line_conn *conn)
{
    if (conn->established || conn->closing)
        return;
    conn->established = true;
    set_read_timeout(conn, conn->srv->cfg->idle_timeout_ms);
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
        mark_established(conn);
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
            log_debug(conn->srv->cfg->component,
                      conn->established ? "idle connection closed"
                                        : "connection closed: no request within handshake_timeout",
                      "peer=%s", conn->peer);
        conn_free(conn);
    }
}

/* At max_connections, the connection that has waited longest without
 * sending a request makes room (nginx drains its reusable connections the
 * same way): idle sockets cannot lock clients out. NULL when every
 * connection is a client's. */
static struct line_conn *oldest_unestablished(const struct line_server *srv)
{
    struct line_conn *found = NULL;
    for (struct line_conn *c = srv->conns; c != NULL; c = c->next) {
        if (!c->established && !c->closing)
            found = c; /* the list is newest first */
    }
    return found;
}

static void accept_cb(void *arg, struct net_listener *l, const struct net_accepted *a)
{
    struct line_server *srv = arg;
    const struct line_server_config *cfg = srv->cfg;
    evutil_socket_t fd = a->fd;
    char peer[64];
    net_addr_format(a->peer, peer, sizeof(peer));
    if (!conn_slots_acquire(srv->slots)) {
        struct line_conn *victim = oldest_unestablished(srv);
        if (victim == NULL) {
            conn_slots_refuse(srv->slots, l, a);
            return;
        }
        log_debug(cfg->component, "max_connections reached: closing a connection without request",
                  "peer=%s", victim->peer);
        conn_free(victim);
        if (!conn_slots_acquire(srv->slots)) {
            conn_slots_refuse(srv->slots, l, a);
            return;
        }
    }
    struct bufferevent *bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        log_warn(cfg->component, "connection refused: cannot set it up", "peer=%s", peer);
        conn_slots_release(srv->slots);
        net_listener_refuse(l, a, NULL);
        return;
    }
    struct line_conn *conn = xcalloc(1, sizeof(*conn));
    conn->srv = srv;
    snprintf(conn->peer, sizeof(conn->peer), "%s", peer);
    if (a->peer_len > 0 && (size_t)a->peer_len <= sizeof(conn->addr))
        memcpy(&conn->addr, a->peer, (size_t)a->peer_len);
    else
        conn->addr.ss_family = AF_UNSPEC;
    conn->bev = bev;
    bufferevent_setcb(bev, conn_read_cb, conn_write_cb, conn_event_cb, conn);
    /* Reading stops once a line without LF could not be a valid one. */
    bufferevent_setwatermark(bev, EV_READ, 0, cfg->max_line + 2);
    set_read_timeout(conn, cfg->handshake_timeout_ms > 0 ? cfg->handshake_timeout_ms
                                                         : cfg->idle_timeout_ms);
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
    char allowed_key[64], limit_key[64];
    snprintf(allowed_key, sizeof(allowed_key), "%s.allowed_nets", srv->cfg->section);
    snprintf(limit_key, sizeof(limit_key), "%s.max_connections_per_ip", srv->cfg->section);
    /* An empty allowed_nets admits no TCP client (only the Unix sockets). */
    struct net_listener_config lcfg = {
        .component = srv->cfg->component,
        .allowed_key = allowed_key,
        .limit_key = limit_key,
        .allowed = &srv->allowed,
        .limits = srv->limits,
        .accept = accept_cb,
        .arg = srv,
    };
    return net_listener_set_listen(srv->listeners, addr, (unsigned)srv->cfg->socket_mode, &lcfg,
                                   err);
}

bool line_server_listen(struct line_server *srv, char *const *listen, struct readiness *readiness,
                        struct petrel_error *err)
{
    for (size_t i = 0; listen != NULL && listen[i] != NULL; i++) {
        if (!listen_on(srv, listen[i], err))
            return false;
    }
    net_listener_set_add_readiness(srv->listeners, readiness, srv->cfg->component);
    return true;
}

size_t line_server_listener_count(const struct line_server *srv)
{
    return net_listener_set_count(srv->listeners);
}

const char *line_server_address(const struct line_server *srv)
{
    return net_listener_set_address(srv->listeners, 0);
}

void line_server_stop_accepting(struct line_server *srv)
{
    net_listener_set_stop(srv->listeners);
}

/* ---------- life cycle ---------- */

void line_server_metrics(struct metrics_registry *reg, const char *name, const char *what,
                         struct metric_series **connections,
                         struct metric_series **connections_total)
{
    char metric[128];
    char help[128];
    snprintf(metric, sizeof(metric), "petrel_%s_connections", name);
    snprintf(help, sizeof(help), "Open connections to %s.", what);
    *connections = metric_series_get(metrics_gauge(reg, metric, help, NULL), NULL);
    snprintf(metric, sizeof(metric), "petrel_%s_connections_total", name);
    snprintf(help, sizeof(help), "Connections accepted by %s.", what);
    *connections_total = metric_series_get(metrics_counter(reg, metric, help, NULL), NULL);
}

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
    struct conn_limits_config lc = {.max_per_ip = cfg->max_connections_per_ip, .exempt = NULL};
    srv->limits = conn_limits_new(&lc);
    srv->listeners = net_listener_set_new(base);
    char slots_key[96];
    snprintf(slots_key, sizeof(slots_key), "%s.max_connections", cfg->section);
    struct conn_slots_config sc = {
        .max = cfg->max_connections > 0 ? (size_t)cfg->max_connections : 0,
        .full = CONN_SLOTS_REFUSE,
        .component = cfg->component,
        .limit_key = slots_key,
    };
    srv->slots = conn_slots_new(&sc);
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
    conn_limits_free(srv->limits);
    conn_slots_free(srv->slots);
    net_listener_set_free(srv->listeners);
    free(srv);
}
