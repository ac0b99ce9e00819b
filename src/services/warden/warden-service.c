/* The warden service: listeners, connections, request dispatch and metrics
 * (warden-service.h). The registry and the penalty table do the work; this
 * file frames lines, checks limits, answers, and reaps a connection's
 * sessions when it closes. */
#include "services/warden/warden-service.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/cidr.h"
#include "net/sockaddr.h"
#include "services/warden/warden-penalty.h"
#include "services/warden/warden-protocol.h"
#include "services/warden/warden-registry.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "warden"
#define WARDEN_MAX_LISTENERS 16
/* Output waiting for a client that does not read: above this, the
 * connection's requests are not read until it has drained. */
#define WARDEN_OUTPUT_MAX (1024 * 1024)

/* Verb label values: the protocol's verbs, then lines that named none. */
#define VERB_UNKNOWN WARDEN_VERB_COUNT
#define VERB_LABELS (WARDEN_VERB_COUNT + 1)

enum req_result { RESULT_OK, RESULT_ERROR, RESULT_NOT_FOUND, RESULT_COUNT };
static const char *const result_names[RESULT_COUNT] = {"ok", "error", "not_found"};

struct warden_conn {
    struct warden_service *svc;
    struct bufferevent *bev;
    struct warden_conn *next;
    struct warden_conn *prev;
    char peer[64];
    struct warden_owner *owner; /* after HELLO */
    bool closing;               /* free once the output has drained */
    bool throttled;             /* reading paused until the output has drained */
};

struct warden_listener {
    struct evconnlistener *evl;
    char address[128];
};

struct warden_metrics {
    struct metric_series *request[VERB_LABELS][RESULT_COUNT];
    struct metric_series *sessions;
    struct metric_series *reaped;
    struct metric_series *penalty[3]; /* by enum warden_penalty_lookup */
    struct metric_series *connections;
    struct metric_series *connections_total;
};

struct warden_service {
    const struct warden_config *cfg;
    struct event_base *base;
    struct warden_listener listeners[WARDEN_MAX_LISTENERS];
    size_t listener_count;
    struct cidr_list allowed;
    struct warden_registry *registry;
    struct warden_penalty *penalty;
    struct warden_conn *conns;
    size_t conn_count;
    struct warden_metrics m;
};

/* ---------- time ---------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double seconds_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

/* ---------- metrics ---------- */

static void metrics_init(struct warden_service *svc, struct metrics_registry *reg)
{
    static const char *const req_labels[] = {"verb", "result", NULL};
    static const char *const lookup_labels[] = {"result", NULL};
    struct warden_metrics *m = &svc->m;
    struct metric_family *req = metrics_histogram(
        reg, "petrel_warden_request_seconds", "Warden requests by verb and result, in seconds.",
        req_labels, metrics_latency_buckets, metrics_latency_bucket_count);
    for (int v = 0; v < VERB_LABELS; v++) {
        for (int r = 0; r < RESULT_COUNT; r++) {
            /* DISCONNECT is the one verb that can miss its target. */
            if (r == RESULT_NOT_FOUND && v != WARDEN_DISCONNECT)
                continue;
            if (v == VERB_UNKNOWN && r != RESULT_ERROR)
                continue;
            const char *values[] = {v == VERB_UNKNOWN ? "unknown"
                                                      : warden_verb_name((enum warden_verb)v),
                                    result_names[r]};
            m->request[v][r] = metric_series_get(req, values);
        }
    }
    m->sessions = metric_series_get(
        metrics_gauge(reg, "petrel_warden_sessions", "Sessions in the warden's registry.", NULL),
        NULL);
    m->reaped = metric_series_get(
        metrics_counter(reg, "petrel_warden_sessions_reaped_total",
                        "Sessions removed because their owner's connection closed or its "
                        "instance restarted.",
                        NULL),
        NULL);
    struct metric_family *lookups =
        metrics_counter(reg, "petrel_warden_penalty_lookups_total",
                        "Auth penalty lookups in the warden by result.", lookup_labels);
    const char *hit[] = {"hit"}, *miss[] = {"miss"}, *expired[] = {"expired"};
    m->penalty[WARDEN_PENALTY_HIT] = metric_series_get(lookups, hit);
    m->penalty[WARDEN_PENALTY_MISS] = metric_series_get(lookups, miss);
    m->penalty[WARDEN_PENALTY_EXPIRED] = metric_series_get(lookups, expired);
    m->connections = metric_series_get(
        metrics_gauge(reg, "petrel_warden_connections", "Open connections to the warden.", NULL),
        NULL);
    m->connections_total =
        metric_series_get(metrics_counter(reg, "petrel_warden_connections_total",
                                          "Connections accepted by the warden.", NULL),
                          NULL);
}

static void observe(struct warden_service *svc, int verb, enum req_result r,
                    const struct timespec *started)
{
    struct metric_series *s = svc->m.request[verb][r];
    if (s != NULL)
        metric_observe(s, seconds_since(started));
}

static void sessions_changed(struct warden_service *svc, size_t reaped)
{
    metric_set(svc->m.sessions, (double)warden_registry_sessions(svc->registry));
    if (reaped > 0)
        metric_add(svc->m.reaped, (double)reaped);
}

/* ---------- output ---------- */

static void send_reply(struct warden_conn *conn, const struct warden_reply *reply)
{
    struct buf line = {0};
    warden_reply_write(&line, reply);
    bufferevent_write(conn->bev, line.data, line.len);
    buf_free(&line);
}

static void send_error(struct warden_conn *conn, const char *id, const char *reason)
{
    struct warden_reply r = {.kind = WARDEN_REPLY_ERROR, .id = id, .reason = reason};
    send_reply(conn, &r);
}

/* OK <id>, unless the request asked for no answer. */
static void send_ok(struct warden_conn *conn, const char *id, uint64_t number)
{
    if (strcmp(id, "-") == 0)
        return;
    struct warden_reply r = {.kind = WARDEN_REPLY_OK, .id = id, .number = number};
    send_reply(conn, &r);
}

/* ---------- connections ---------- */

/* Closing a socket with unread input makes the kernel send a reset, which
 * can destroy our last reply (an ERROR) before the peer reads it: read
 * away what is already there first. */
static void discard_pending_input(struct warden_conn *conn)
{
    evutil_socket_t fd = bufferevent_getfd(conn->bev);
    char sink[4096];
    for (int i = 0; fd >= 0 && i < 256; i++) {
        if (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0)
            break;
    }
}

static void conn_free(struct warden_conn *conn)
{
    struct warden_service *svc = conn->svc;
    if (conn->closing)
        discard_pending_input(conn);
    if (conn->owner != NULL) {
        size_t reaped = warden_registry_detach(svc->registry, conn->owner);
        if (reaped > 0)
            log_info(COMPONENT, "sessions reaped: connection closed", "peer=%s sessions=%zu",
                     conn->peer, reaped);
        sessions_changed(svc, reaped);
    }
    if (conn->prev != NULL)
        conn->prev->next = conn->next;
    else
        svc->conns = conn->next;
    if (conn->next != NULL)
        conn->next->prev = conn->prev;
    svc->conn_count--;
    metric_set(svc->m.connections, (double)svc->conn_count);
    bufferevent_free(conn->bev);
    free(conn);
}

/* A framing error: ERROR - <reason>, then close once it has left (the
 * write callback, or conn_read_cb's end when nothing is queued: the
 * connection is never freed under the caller). */
static void conn_fail_and_close(struct warden_conn *conn, const char *reason)
{
    send_error(conn, "-", reason);
    char q[300];
    log_info(COMPONENT, "closing connection after a protocol error", "peer=%s reason=%s",
             conn->peer, log_quote(q, sizeof(q), reason));
    conn->closing = true;
    bufferevent_disable(conn->bev, EV_READ);
}

/* ---------- verbs ---------- */

static enum req_result handle_hello(struct warden_conn *conn, const struct warden_request *req)
{
    struct warden_service *svc = conn->svc;
    if (conn->owner != NULL) {
        send_error(conn, req->id, "HELLO was already sent on this connection");
        return RESULT_ERROR;
    }
    if (req->major != WARDEN_PROTOCOL_MAJOR) {
        char reason[96];
        snprintf(reason, sizeof(reason), "unsupported protocol version %llu (this warden: %d)",
                 (unsigned long long)req->major, WARDEN_PROTOCOL_MAJOR);
        send_error(conn, req->id, reason);
        return RESULT_ERROR;
    }
    size_t reaped = 0;
    conn->owner = warden_registry_attach(svc->registry, req->instance, req->boot_id, &reaped);
    char q_inst[300];
    log_quote(q_inst, sizeof(q_inst), req->instance);
    if (reaped > 0) {
        log_info(COMPONENT, "sessions reaped: instance restarted",
                 "instance=%s boot_id=%s sessions=%zu", q_inst, req->boot_id, reaped);
        sessions_changed(svc, reaped);
    }
    log_debug(COMPONENT, "hello", "peer=%s instance=%s boot_id=%s", conn->peer, q_inst,
              req->boot_id);
    send_ok(conn, req->id, WARDEN_PROTOCOL_MAJOR);
    return RESULT_OK;
}

static enum req_result handle_connect(struct warden_conn *conn, const struct warden_request *req)
{
    struct warden_service *svc = conn->svc;
    if (conn->owner == NULL) {
        send_error(conn, req->id, "CONNECT before HELLO");
        return RESULT_ERROR;
    }
    struct warden_session_info info = {
        .id = req->session_id,
        .user = req->user,
        .ip = req->ip,
        .service = req->service,
        .connected_at = req->connected_at,
    };
    struct petrel_error err;
    if (!warden_registry_connect(svc->registry, conn->owner, &info, &err)) {
        char reason[600];
        snprintf(reason, sizeof(reason), "CONNECT %s: %s", req->session_id, err.message);
        send_error(conn, req->id, reason);
        return RESULT_ERROR;
    }
    sessions_changed(svc, 0);
    send_ok(conn, req->id, 0);
    return RESULT_OK;
}

static enum req_result handle_disconnect(struct warden_conn *conn, const struct warden_request *req)
{
    /* Idempotent: a session that is gone already (reaped, or never
     * registered because the registry was full) is not an error. */
    bool found = warden_registry_disconnect(conn->svc->registry, req->session_id);
    sessions_changed(conn->svc, 0);
    send_ok(conn, req->id, 0);
    return found ? RESULT_OK : RESULT_NOT_FOUND;
}

struct list_ctx {
    struct warden_conn *conn;
    const char *id;
    struct buf out;
};

static void list_one(const struct warden_session_info *s, void *arg)
{
    struct list_ctx *lc = arg;
    struct warden_reply r = {
        .kind = WARDEN_REPLY_SESSION,
        .id = lc->id,
        .session_id = s->id,
        .user = s->user,
        .ip = s->ip,
        .service = s->service,
        .connected_at = s->connected_at,
    };
    warden_reply_write(&lc->out, &r);
    /* Hand big answers over in pieces instead of one huge buffer. */
    if (lc->out.len >= 65536) {
        bufferevent_write(lc->conn->bev, lc->out.data, lc->out.len);
        buf_reset(&lc->out);
    }
}

static void count_one(const char *key, uint64_t count, void *arg)
{
    struct list_ctx *lc = arg;
    struct warden_reply r = {.kind = WARDEN_REPLY_ITEM, .id = lc->id, .key = key, .number = count};
    warden_reply_write(&lc->out, &r);
    if (lc->out.len >= 65536) {
        bufferevent_write(lc->conn->bev, lc->out.data, lc->out.len);
        buf_reset(&lc->out);
    }
}

static enum req_result handle_query(struct warden_conn *conn, const struct warden_request *req)
{
    if (strcmp(req->id, "-") == 0) {
        send_error(conn, req->id, "LIST and COUNT need a request id");
        return RESULT_ERROR;
    }
    struct list_ctx lc = {.conn = conn, .id = req->id};
    uint64_t n;
    if (req->verb == WARDEN_LIST)
        n = warden_registry_list(conn->svc->registry, req->service, req->user, list_one, &lc);
    else
        n = warden_registry_count(conn->svc->registry, req->by, req->service, req->user, count_one,
                                  &lc);
    struct warden_reply done = {.kind = WARDEN_REPLY_DONE, .id = req->id, .number = n};
    warden_reply_write(&lc.out, &done);
    bufferevent_write(conn->bev, lc.out.data, lc.out.len);
    buf_free(&lc.out);
    return RESULT_OK;
}

static enum req_result handle_penalty(struct warden_conn *conn, const struct warden_request *req)
{
    struct warden_service *svc = conn->svc;
    unsigned failures;
    if (req->verb == WARDEN_PENALTY_GET) {
        enum warden_penalty_lookup how;
        failures = warden_penalty_get(svc->penalty, req->ip, now_ms(), &how);
        metric_add(svc->m.penalty[how], 1);
    } else {
        failures = warden_penalty_inc(svc->penalty, req->ip, now_ms());
    }
    if (strcmp(req->id, "-") != 0) {
        struct warden_reply r = {.kind = WARDEN_REPLY_PENALTY, .id = req->id, .number = failures};
        send_reply(conn, &r);
    }
    return RESULT_OK;
}

static void handle_line(struct warden_conn *conn, char *text, size_t len)
{
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    struct warden_line line;
    struct petrel_error err;
    if (!warden_line_parse(text, len, (size_t)conn->svc->cfg->max_line_length, &line, &err)) {
        observe(conn->svc, VERB_UNKNOWN, RESULT_ERROR, &started);
        conn_fail_and_close(conn, err.message);
        return;
    }
    struct warden_request req;
    const char *id = NULL;
    if (!warden_request_read(&line, &req, &id, &err)) {
        observe(conn->svc, req.verb, RESULT_ERROR, &started);
        if (id == NULL) {
            conn_fail_and_close(conn, err.message);
            return;
        }
        char reason[600];
        snprintf(reason, sizeof(reason), "%s: %s",
                 req.verb < WARDEN_VERB_COUNT ? warden_verb_name(req.verb) : line.fields[0],
                 err.message);
        send_error(conn, id, reason);
        return;
    }
    enum req_result r = RESULT_ERROR;
    switch (req.verb) {
    case WARDEN_HELLO:
        r = handle_hello(conn, &req);
        break;
    case WARDEN_CONNECT:
        r = handle_connect(conn, &req);
        break;
    case WARDEN_DISCONNECT:
        r = handle_disconnect(conn, &req);
        break;
    case WARDEN_LIST:
    case WARDEN_COUNT:
        r = handle_query(conn, &req);
        break;
    case WARDEN_PENALTY_GET:
    case WARDEN_PENALTY_INC:
        r = handle_penalty(conn, &req);
        break;
    case WARDEN_VERB_COUNT:
        break;
    }
    observe(conn->svc, req.verb, r, &started);
}

static void read_lines(struct warden_conn *conn, struct bufferevent *bev)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t max_line = (size_t)conn->svc->cfg->max_line_length;
    while (!conn->closing) {
        if (evbuffer_get_length(bufferevent_get_output(bev)) > WARDEN_OUTPUT_MAX) {
            /* A client that sends without reading must not make us queue
             * replies without bound: wait for conn_write_cb. */
            conn->throttled = true;
            bufferevent_disable(bev, EV_READ);
            return;
        }
        size_t eol_len = 0;
        struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if (eol.pos < 0) {
            if (evbuffer_get_length(in) > max_line)
                conn_fail_and_close(conn, "line too long");
            return;
        }
        size_t len = (size_t)eol.pos;
        if (len > max_line) {
            conn_fail_and_close(conn, "line too long");
            return;
        }
        char *line = xmalloc(len + 1);
        evbuffer_remove(in, line, len);
        evbuffer_drain(in, eol_len);
        line[len] = '\0';
        handle_line(conn, line, len);
        free(line);
    }
}

static void conn_read_cb(struct bufferevent *bev, void *ctx)
{
    struct warden_conn *conn = ctx;
    read_lines(conn, bev);
    if (conn->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        conn_free(conn);
}

static void conn_write_cb(struct bufferevent *bev, void *ctx)
{
    struct warden_conn *conn = ctx;
    if (conn->closing) {
        conn_free(conn);
    } else if (conn->throttled) {
        /* The client caught up: read on, starting with what is buffered. */
        conn->throttled = false;
        bufferevent_enable(bev, EV_READ);
        conn_read_cb(bev, conn);
    }
}

static void conn_event_cb(struct bufferevent *bev, short what, void *ctx)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        conn_free(ctx);
}

static void accept_cb(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *ctx)
{
    (void)evl;
    (void)socklen;
    struct warden_service *svc = ctx;
    char peer[64];
    net_addr_format(sa, peer, sizeof(peer));
    if (sa->sa_family != AF_UNIX && !cidr_list_match(&svc->allowed, sa)) {
        log_warn(COMPONENT, "connection refused: address not in warden_service.allowed_nets",
                 "peer=%s", peer);
        evutil_closesocket(fd);
        return;
    }
    if (svc->conn_count >= (size_t)svc->cfg->max_connections) {
        log_warn(COMPONENT, "connection refused: max_connections reached", "peer=%s limit=%lld",
                 peer, (long long)svc->cfg->max_connections);
        evutil_closesocket(fd);
        return;
    }
    struct bufferevent *bev = bufferevent_socket_new(svc->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        log_warn(COMPONENT, "connection refused: cannot set it up", "peer=%s", peer);
        evutil_closesocket(fd);
        return;
    }
    struct warden_conn *conn = xcalloc(1, sizeof(*conn));
    conn->svc = svc;
    snprintf(conn->peer, sizeof(conn->peer), "%s", peer);
    conn->bev = bev;
    bufferevent_setcb(bev, conn_read_cb, conn_write_cb, conn_event_cb, conn);
    /* Reading stops once a line without LF could not be a valid one. */
    bufferevent_setwatermark(bev, EV_READ, 0, (size_t)svc->cfg->max_line_length + 2);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    conn->next = svc->conns;
    if (svc->conns != NULL)
        svc->conns->prev = conn;
    svc->conns = conn;
    svc->conn_count++;
    metric_set(svc->m.connections, (double)svc->conn_count);
    metric_add(svc->m.connections_total, 1);
}

/* ---------- life cycle ---------- */

static bool listen_on(struct warden_service *svc, const char *addr, struct petrel_error *err)
{
    if (svc->listener_count >= WARDEN_MAX_LISTENERS)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "warden_service.listen: too many addresses");
    int fd = net_listen(addr, false, err);
    if (fd < 0)
        return false;
    struct warden_listener *l = &svc->listeners[svc->listener_count];
    if (strncmp(addr, "unix:", 5) == 0 && chmod(addr + 5, (mode_t)svc->cfg->socket_mode) != 0) {
        close(fd);
        return petrel_error_set(err, PETREL_ERR_IO, "cannot set the mode of %s: %s", addr + 5,
                                strerror(errno));
    }
    l->evl = evconnlistener_new(svc->base, accept_cb, svc, LEV_OPT_CLOSE_ON_FREE, -1, fd);
    if (l->evl == NULL) {
        close(fd);
        return petrel_error_set(err, PETREL_ERR_IO, "cannot listen on %s", addr);
    }
    net_bound_address(fd, l->address, sizeof(l->address));
    svc->listener_count++;
    return true;
}

struct warden_service *warden_service_start(const struct service_env *env,
                                            const struct warden_config *cfg,
                                            struct petrel_error *err)
{
    struct warden_service *svc = xcalloc(1, sizeof(*svc));
    svc->cfg = cfg;
    svc->base = env->base;
    metrics_init(svc, env->metrics);
    svc->registry = warden_registry_new((size_t)cfg->max_sessions);
    struct warden_penalty_config pcfg = {.decay_ms = cfg->penalty_decay_ms,
                                         .max_ips = cfg->penalty_max_ips};
    svc->penalty = warden_penalty_new(&pcfg);
    if (!cidr_list_parse((const char *const *)cfg->allowed_nets, &svc->allowed, err))
        goto fail;
    for (size_t i = 0; cfg->listen != NULL && cfg->listen[i] != NULL; i++) {
        if (!listen_on(svc, cfg->listen[i], err))
            goto fail;
        char name[64];
        snprintf(name, sizeof(name), "warden-listener-%zu", i);
        readiness_add_tcp(env->readiness, name, svc->listeners[i].address, false, NULL, NULL);
    }
    if (svc->listener_count == 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "warden_service.listen: no address configured");
        goto fail;
    }
    log_info(COMPONENT, "listening",
             "address=%s listeners=%zu max_sessions=%lld max_connections=%lld",
             svc->listeners[0].address, svc->listener_count, (long long)cfg->max_sessions,
             (long long)cfg->max_connections);
    return svc;
fail:
    warden_service_free(svc);
    return NULL;
}

const char *warden_service_address(const struct warden_service *svc)
{
    return svc->listener_count > 0 ? svc->listeners[0].address : "";
}

void warden_service_stop_accepting(struct warden_service *svc)
{
    for (size_t i = 0; i < svc->listener_count; i++) {
        if (svc->listeners[i].evl != NULL) {
            evconnlistener_free(svc->listeners[i].evl);
            svc->listeners[i].evl = NULL;
        }
    }
}

size_t warden_service_sessions(const struct warden_service *svc)
{
    return warden_registry_sessions(svc->registry);
}

void warden_service_free(struct warden_service *svc)
{
    if (svc == NULL)
        return;
    warden_service_stop_accepting(svc);
    while (svc->conns != NULL)
        conn_free(svc->conns);
    warden_registry_free(svc->registry);
    warden_penalty_free(svc->penalty);
    cidr_list_free(&svc->allowed);
    free(svc);
}
