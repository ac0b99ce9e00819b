/* The warden service: request dispatch and metrics (warden-service.h), on
 * the line-protocol server core (net/line-server.h: listeners,
 * allowed_nets, connections, line reading). The registry and the penalty
 * table do the work; this file frames lines, checks limits, answers, and
 * reaps a connection's sessions when it closes. */
#include "services/warden/warden-service.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/line-server.h"
#include "services/warden/warden-penalty.h"
#include "clients/warden/warden-protocol.h"
#include "services/warden/warden-registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COMPONENT "warden"

/* Verb label values: the protocol's verbs, then lines that named none. */
#define VERB_UNKNOWN WARDEN_VERB_COUNT
#define VERB_LABELS (WARDEN_VERB_COUNT + 1)

enum req_result { RESULT_OK, RESULT_ERROR, RESULT_NOT_FOUND, RESULT_COUNT };
static const char *const result_names[RESULT_COUNT] = {"ok", "error", "not_found"};

/* One client connection's registration (the connection itself is the
 * server core's). */
struct warden_conn {
    struct warden_service *svc;
    struct line_conn *lc;
    struct warden_owner *owner; /* after HELLO */
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
    struct line_server_config server_cfg;
    struct line_server *server;
    struct warden_registry *registry;
    struct warden_penalty *penalty;
    struct warden_metrics m;
};

/* ---------- time ---------- */

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
    line_server_metrics(reg, "warden", "the warden", &m->connections, &m->connections_total);
}

static void observe(struct warden_service *svc, int verb, enum req_result r,
                    const struct timespec *started)
{
    struct metric_series *s = svc->m.request[verb][r];
    if (s != NULL)
        metric_observe(s, clock_seconds_since(started));
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
    line_conn_write(conn->lc, line.data, line.len);
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

static void *conn_open(void *ctx, struct line_conn *lc)
{
    struct warden_conn *conn = xcalloc(1, sizeof(*conn));
    conn->svc = ctx;
    conn->lc = lc;
    return conn;
}

static void conn_close(void *state)
{
    struct warden_conn *conn = state;
    struct warden_service *svc = conn->svc;
    if (conn->owner != NULL) {
        size_t reaped = warden_registry_detach(svc->registry, conn->owner);
        if (reaped > 0)
            log_info(COMPONENT, "sessions reaped: connection closed", "peer=%s sessions=%zu",
                     line_conn_peer(conn->lc), reaped);
        sessions_changed(svc, reaped);
    }
    free(conn);
}

/* A framing error: ERROR - <reason>, then close once it has left. */
static void conn_fail_and_close(struct warden_conn *conn, const char *reason)
{
    send_error(conn, "-", reason);
    char q[300];
    log_info(COMPONENT, "closing connection after a protocol error", "peer=%s reason=%s",
             line_conn_peer(conn->lc), log_quote(q, sizeof(q), reason));
    line_conn_close(conn->lc);
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
    log_debug(COMPONENT, "hello", "peer=%s instance=%s boot_id=%s", line_conn_peer(conn->lc),
              q_inst, req->boot_id);
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
        line_conn_write(lc->conn->lc, lc->out.data, lc->out.len);
        buf_reset(&lc->out);
    }
}

static void count_one(const char *key, uint64_t count, void *arg)
{
    struct list_ctx *lc = arg;
    struct warden_reply r = {.kind = WARDEN_REPLY_ITEM, .id = lc->id, .key = key, .number = count};
    warden_reply_write(&lc->out, &r);
    if (lc->out.len >= 65536) {
        line_conn_write(lc->conn->lc, lc->out.data, lc->out.len);
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
    line_conn_write(conn->lc, lc.out.data, lc.out.len);
    buf_free(&lc.out);
    return RESULT_OK;
}

static enum req_result handle_penalty(struct warden_conn *conn, const struct warden_request *req)
{
    struct warden_service *svc = conn->svc;
    unsigned failures;
    if (req->verb == WARDEN_PENALTY_GET) {
        enum warden_penalty_lookup how;
        failures = warden_penalty_get(svc->penalty, req->ip, clock_mono_ms(), &how);
        metric_add(svc->m.penalty[how], 1);
    } else {
        failures = warden_penalty_inc(svc->penalty, req->ip, clock_mono_ms());
    }
    if (strcmp(req->id, "-") != 0) {
        struct warden_reply r = {.kind = WARDEN_REPLY_PENALTY, .id = req->id, .number = failures};
        send_reply(conn, &r);
    }
    return RESULT_OK;
}

static void handle_line(void *state, char *text, size_t len)
{
    struct warden_conn *conn = state;
    struct timespec started;
    started = clock_mono_now();
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

static void conn_bad_input(void *state, const char *reason)
{
    conn_fail_and_close(state, reason);
}

static const struct line_server_ops server_ops = {
    .open = conn_open,
    .line = handle_line,
    .bad_input = conn_bad_input,
    .close = conn_close,
};

/* ---------- life cycle ---------- */

struct warden_service *warden_service_start(const struct service_env *env,
                                            const struct warden_config *cfg,
                                            struct petrel_error *err)
{
    struct warden_service *svc = xcalloc(1, sizeof(*svc));
    svc->cfg = cfg;
    metrics_init(svc, env->metrics);
    svc->registry = warden_registry_new((size_t)cfg->max_sessions);
    struct warden_penalty_config pcfg = {.decay_ms = cfg->penalty_decay_ms,
                                         .max_ips = cfg->penalty_max_ips};
    svc->penalty = warden_penalty_new(&pcfg);
    svc->server_cfg = (struct line_server_config){
        .component = COMPONENT,
        .section = "warden_service",
        .allowed_nets = (const char *const *)cfg->allowed_nets,
        .socket_mode = cfg->socket_mode,
        .max_connections = cfg->max_connections,
        .max_connections_per_ip = cfg->max_connections_per_ip,
        .max_line = (size_t)cfg->max_line_length,
        .handshake_timeout_ms = cfg->handshake_timeout_ms,
        .drain_on_close = true,
        .connections = svc->m.connections,
        .connections_total = svc->m.connections_total,
    };
    svc->server = line_server_new(env->base, &svc->server_cfg, &server_ops, svc, err);
    if (svc->server == NULL || !line_server_listen(svc->server, cfg->listen, env->readiness, err))
        goto fail;
    if (line_server_listener_count(svc->server) == 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "warden_service.listen: no address configured");
        goto fail;
    }
    log_info(COMPONENT, "listening",
             "address=%s listeners=%zu max_sessions=%lld max_connections=%lld",
             line_server_address(svc->server), line_server_listener_count(svc->server),
             (long long)cfg->max_sessions, (long long)cfg->max_connections);
    return svc;
fail:
    warden_service_free(svc);
    return NULL;
}

const char *warden_service_address(const struct warden_service *svc)
{
    return svc->server != NULL ? line_server_address(svc->server) : "";
}

void warden_service_stop_accepting(struct warden_service *svc)
{
    if (svc->server != NULL)
        line_server_stop_accepting(svc->server);
}

size_t warden_service_sessions(const struct warden_service *svc)
{
    return warden_registry_sessions(svc->registry);
}

void warden_service_free(struct warden_service *svc)
{
    if (svc == NULL)
        return;
    line_server_free(svc->server); /* the listeners, then every connection (reaped) */
    warden_registry_free(svc->registry);
    warden_penalty_free(svc->penalty);
    free(svc);
}
