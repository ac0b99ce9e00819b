/* The ring-protocol listener (ring-server.h). One connection per client:
 *
 *   WAIT_VERSION --VERSION--> WAIT_AUTH --AUTH ok--> WAIT_HELLO --HELLO--> READY
 *                     |                                  ^        (HOST lines, DONE sent)
 *                     +---- no secret configured --------+
 *
 * With a ring secret the director's VERSION carries a fresh nonce and only
 * AUTH (ring-auth.h) is taken until the client has proven the secret; HELLO
 * in WAIT_AUTH is accepted only with ring.allow_unauthenticated. Anything
 * unexpected before READY, a malformed line or a too-long line sends ERROR
 * and closes; a connection not authenticated within ring.auth_timeout is
 * closed. In READY the client's kind decides which requests it may send and
 * which pushes it receives. */
#include "services/director/ring-server.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/dlist.h"
#include "core/log.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "net/cidr.h"
#include "net/evbuffer-line.h"
#include "net/conn-limits.h"
#include "net/conn-slots.h"
#include "net/deadline.h"
#include "net/listener-set.h"
#include "net/sockaddr.h"
#include "clients/ring/ring-auth.h"
#include "clients/ring/ring-protocol.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "director"
/* Replies queued for a client above this (or a quarter of ring.max_output
 * when that is less): stop reading its requests until they drained
 * (pipelining flow control). Well below max_output, so a client's own
 * requests can never make it exceed max_output and be dropped. */
#define READ_PAUSE_OUTPUT (64 * 1024)

enum conn_state { WAIT_VERSION, WAIT_AUTH, WAIT_HELLO, READY };

struct ring_conn {
    struct ring_server *srv;
    struct bufferevent *bev;
    struct net_deadline *handshake_timer; /* handshake and auth timeouts */
    char peer[64];
    char name[RING_NAME_MAX + 1];
    enum conn_state state;
    enum ring_kind kind;
    bool authenticated;
    bool pending; /* counted in srv->pending (before READY) */
    struct sockaddr_storage addr; /* the key of that count */
    /* this connection's challenge ("" without a secret) */
    char nonce[RING_AUTH_HEX_LEN + 1];
    bool closing; /* no more reading; freed once its output has left */
    bool dead;    /* freed by the reaper (never inside a callback of its own) */
    bool throttled;
    struct smap *sessions; /* sid -> struct director_session * (login clients) */
    struct ring_conn *prev, *next;
};

struct ring_server {
    struct event_base *base;
    struct director_state *state;
    const struct director_config *cfg;
    struct net_listener_set *listeners;
    struct conn_slots *slots; /* director.ring.max_clients */
    struct cidr_list allowed;
    struct ring_conn *conns;
    struct event *reaper; /* frees dead connections from the loop */
    struct director_observer observer;
    struct buf line; /* scratch: the line being read */
    struct buf out;  /* scratch: the line being written */
    struct metric_series *lookup_seconds[RING_OUTCOME_COUNT];
    ring_peer_change_fn peer_fn;
    void *peer_ctx;
    char *secret; /* "" = no authentication (ring.allow_unauthenticated) */
    /* connections still in the handshake per client address, bounded by
     * ring.max_pending_per_address at accept */
    struct conn_limits *pending;
};

/* Lookups take microseconds: finer buckets than the request latencies. */
static const double lookup_buckets[] = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025,
                                        0.0005,  0.001,    0.0025,  0.005,  0.01,
                                        0.025,   0.05,     0.1,     0.25,   1};

/* ---------- connections ---------- */

/* Connections of one address that have not finished the handshake are
 * capped at accept (the listener's per-address limit, `srv->pending`): one
 * address that never authenticates must not take every ring.max_clients
 * slot and lock the monitor, login proxies and peers out (as nginx's
 * limit_conn and HAProxy's src_conn_cur do per source address). The count
 * is given back when the connection leaves the handshake (READY, closing
 * or freed). */
static void pending_done(struct ring_conn *conn)
{
    if (conn->pending) {
        conn->pending = false;
        conn_limits_release(conn->srv->pending, (const struct sockaddr *)&conn->addr);
    }
}

static void conn_free(struct ring_conn *conn)
{
    struct ring_server *srv = conn->srv;
    pending_done(conn);
    if (conn->sessions != NULL) {
        const char *key = NULL;
        struct director_session *s;
        while ((s = smap_seek(conn->sessions, "", false, &key)) != NULL) {
            director_state_session_end(srv->state, s);
            smap_remove(conn->sessions, key);
        }
        smap_free(conn->sessions, NULL);
    }
    net_deadline_free(conn->handshake_timer);
    DLIST_UNLINK(srv->conns, conn);
    conn_slots_release(srv->slots);
    bufferevent_free(conn->bev);
    free(conn);
}

static size_t pending_output(const struct ring_conn *conn)
{
    return evbuffer_get_length(bufferevent_get_output(conn->bev));
}

/* Writes srv->out to the connection and empties it. */
static void send_out(struct ring_conn *conn)
{
    struct ring_server *srv = conn->srv;
    if (!conn->closing)
        bufferevent_write(conn->bev, srv->out.data, srv->out.len);
    buf_reset(&srv->out);
}

static void send_msg(struct ring_conn *conn, const struct ring_msg *m)
{
    ring_msg_write(&conn->srv->out, m);
    send_out(conn);
}

static void send_error(struct ring_conn *conn, const char *text)
{
    struct ring_msg m = {.type = RING_MSG_ERROR};
    m.error.text = text;
    send_msg(conn, &m);
}

/* Marks the connection for the reaper: it stops reading and writing now
 * and is freed from the loop, so no caller up the stack (a read callback,
 * a broadcast for another client) ever sees it freed. */
static void conn_kill(struct ring_conn *conn)
{
    if (conn->dead)
        return;
    pending_done(conn);
    conn->closing = true;
    conn->dead = true;
    bufferevent_disable(conn->bev, EV_READ | EV_WRITE);
    event_active(conn->srv->reaper, EV_TIMEOUT, 0);
}

static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct ring_server *srv = arg;
    struct ring_conn *next;
    for (struct ring_conn *c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (c->dead)
            conn_free(c);
    }
}

/* Sends ERROR and closes once it has left (conn_write_cb). */
static void close_with_error(struct ring_conn *conn, const char *text)
{
    if (conn->closing)
        return;
    send_error(conn, text);
    char reason_q[300];
    log_info(COMPONENT, "ring client closed after a protocol error", "peer=%s reason=%s",
             conn->peer, log_quote(reason_q, sizeof(reason_q), text));
    conn->closing = true;
    pending_done(conn);
    bufferevent_disable(conn->bev, EV_READ);
    if (pending_output(conn) == 0)
        conn_kill(conn);
}

/* ---------- pushes (the state observer) ---------- */

static bool receives(const struct ring_conn *conn, bool users)
{
    if (conn->state != READY || conn->closing || conn->kind == RING_KIND_DIRECTOR)
        return false;
    return !users || conn->kind != RING_KIND_MONITOR;
}

/* Sends srv->out to every ready client that receives it; a client that let
 * too much pile up unread is dropped. */
static void broadcast(struct ring_server *srv, bool users)
{
    struct ring_conn *next;
    for (struct ring_conn *c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (!receives(c, users))
            continue;
        bufferevent_write(c->bev, srv->out.data, srv->out.len);
        if (pending_output(c) > (size_t)srv->cfg->ring_max_output) {
            log_warn(COMPONENT, "ring client dropped: it does not read its pushes",
                     "peer=%s kind=%s pending_bytes=%zu", c->peer, ring_kind_name(c->kind),
                     pending_output(c));
            conn_kill(c);
        }
    }
    buf_reset(&srv->out);
}

static void on_backend_changed(const struct director_backend *b, enum ring_change change,
                               const struct director_change *from, void *ctx)
{
    struct ring_server *srv = ctx;
    director_write_ring_change(&srv->out, b, change, from);
    broadcast(srv, false);
}

static void on_user_moved(const char *user, uint32_t hash, const struct director_backend *to,
                          const struct director_change *from, void *ctx)
{
    struct ring_server *srv = ctx;
    director_write_user_moved(&srv->out, user, hash, to, from);
    broadcast(srv, true);
}

static void on_user_kicked(const char *user, uint32_t hash, const struct director_change *from,
                           void *ctx)
{
    struct ring_server *srv = ctx;
    director_write_user_kicked(&srv->out, user, hash, from);
    broadcast(srv, true);
}

/* ---------- the handshake ---------- */

static void handshake_timeout_cb(void *arg)
{
    struct ring_conn *conn = arg;
    if (conn->srv->secret[0] != '\0' && !conn->authenticated) {
        log_warn(COMPONENT, "ring client not authenticated in time", "peer=%s auth_timeout_ms=%lld",
                 conn->peer, (long long)conn->srv->cfg->ring_auth_timeout_ms);
        close_with_error(conn, "authentication timeout: VERSION and AUTH expected");
        return;
    }
    close_with_error(conn, "handshake timeout: VERSION and HELLO expected");
}

/* The first line of every connection: VERSION, with the challenge when the
 * director has a secret; the unauthenticated phase gets the shorter of the
 * two timeouts. */
static void send_greeting(struct ring_conn *conn)
{
    struct ring_server *srv = conn->srv;
    struct ring_msg m = {.type = RING_MSG_VERSION};
    m.version.major = RING_VERSION_MAJOR;
    m.version.minor = RING_VERSION_MINOR;
    if (srv->secret[0] != '\0') {
        if (!ring_auth_nonce(conn->nonce)) {
            log_error(COMPONENT, "no random bytes for a ring challenge", "peer=%s", conn->peer);
            close_with_error(conn, "internal error: cannot make a challenge");
            return;
        }
        m.version.auth = RING_AUTH_MECH;
        m.version.nonce = conn->nonce;
        int64_t ms = srv->cfg->ring_auth_timeout_ms;
        if (ms > srv->cfg->ring_handshake_timeout_ms)
            ms = srv->cfg->ring_handshake_timeout_ms;
        net_deadline_arm(conn->handshake_timer, ms);
    }
    send_msg(conn, &m);
}

/* Refuses a client that failed authentication: one log line (never the
 * secret or the proofs), ERROR, close. */
static void auth_refused(struct ring_conn *conn, const char *reason, const char *client_text)
{
    log_warn(COMPONENT, "ring authentication failed", "peer=%s reason=\"%s\"", conn->peer, reason);
    close_with_error(conn, client_text);
}

static void handle_auth(struct ring_conn *conn, const struct ring_msg *m)
{
    struct ring_server *srv = conn->srv;
    if (strcmp(m->auth.mech, RING_AUTH_MECH) != 0) {
        auth_refused(conn, "unsupported mechanism",
                     "authentication failed: unsupported mechanism (" RING_AUTH_MECH " expected)");
        return;
    }
    /* Our own nonce sent back: a reflection attempt (the role label in the
     * MAC would defeat it anyway; refuse it plainly). */
    if (strcmp(m->auth.nonce, conn->nonce) == 0) {
        auth_refused(conn, "the client nonce repeats the director's",
                     "authentication failed: the client nonce must be fresh");
        return;
    }
    size_t len = strlen(srv->secret);
    if (!ring_auth_check(srv->secret, len, RING_AUTH_CLIENT, conn->nonce, m->auth.nonce,
                         m->auth.proof)) {
        auth_refused(conn, "wrong proof (another secret, or none)", "authentication failed");
        return;
    }
    char proof[RING_AUTH_HEX_LEN + 1];
    ring_auth_proof(srv->secret, len, RING_AUTH_SERVER, conn->nonce, m->auth.nonce, proof);
    struct ring_msg ok = {.type = RING_MSG_AUTH_OK};
    ok.auth_ok.proof = proof;
    send_msg(conn, &ok);
    conn->authenticated = true;
    conn->state = WAIT_HELLO;
    net_deadline_arm(conn->handshake_timer, srv->cfg->ring_handshake_timeout_ms);
    log_debug(COMPONENT, "ring client authenticated", "peer=%s", conn->peer);
}

static void add_user_line(const struct director_user *u, void *ctx)
{
    struct ring_server *srv = ctx;
    struct ring_msg m = {.type = RING_MSG_USER};
    m.user.hash = u->hash;
    m.user.ip = u->backend->ip;
    m.user.port = u->backend->port;
    int64_t at = u->sessions > 0 ? director_state_now_ms(srv->state) +
                                       director_users_expire_ms(director_state_users(srv->state))
                                 : u->expires_at_ms;
    m.user.expires_at = at / 1000;
    m.user.weak = u->weak;
    ring_msg_write(&srv->out, &m);
}

static void send_hosts(struct ring_conn *conn)
{
    const struct director_backends *reg = director_state_backends(conn->srv->state);
    for (size_t i = 0; i < director_backends_count(reg); i++) {
        struct ring_msg m = {.type = RING_MSG_HOST};
        director_backend_ring_host(director_backends_at(reg, i), &m.host);
        ring_msg_write(&conn->srv->out, &m);
    }
    if (conn->kind == RING_KIND_DIRECTOR) /* a peer merges our user mappings too */
        director_users_foreach_mapped(director_state_users(conn->srv->state),
                                      director_state_now_ms(conn->srv->state), add_user_line,
                                      conn->srv);
    struct ring_msg done = {.type = RING_MSG_DONE};
    ring_msg_write(&conn->srv->out, &done);
    send_out(conn);
}

static void handle_handshake(struct ring_conn *conn, const struct ring_msg *m)
{
    if (conn->state == WAIT_VERSION) {
        if (m->type != RING_MSG_VERSION) {
            close_with_error(conn, "VERSION expected first");
            return;
        }
        if (m->version.major != RING_VERSION_MAJOR) {
            char text[96];
            snprintf(text, sizeof(text), "unsupported major version %u (this director speaks %d)",
                     m->version.major, RING_VERSION_MAJOR);
            close_with_error(conn, text);
            return;
        }
        conn->state = conn->srv->secret[0] != '\0' ? WAIT_AUTH : WAIT_HELLO;
        return;
    }
    if (conn->state == WAIT_AUTH) {
        if (m->type == RING_MSG_AUTH) {
            handle_auth(conn, m);
            return;
        }
        if (m->type != RING_MSG_HELLO || !conn->srv->cfg->ring_allow_unauthenticated) {
            auth_refused(conn, m->type == RING_MSG_HELLO ? "HELLO without AUTH" : "no AUTH",
                         "authentication required: AUTH expected after VERSION");
            return;
        }
        /* ring.allow_unauthenticated: an anonymous client goes on */
    } else if (m->type == RING_MSG_AUTH) {
        close_with_error(conn, conn->authenticated
                                   ? "AUTH already done: HELLO expected"
                                   : "AUTH not expected: this director has no ring secret");
        return;
    }
    if (m->type != RING_MSG_HELLO) {
        close_with_error(conn, "HELLO expected after VERSION");
        return;
    }
    conn->kind = m->hello.kind;
    snprintf(conn->name, sizeof(conn->name), "%s", m->hello.name);
    conn->state = READY;
    pending_done(conn);
    net_deadline_clear(conn->handshake_timer);
    if (conn->kind == RING_KIND_LOGIN)
        conn->sessions = smap_new();
    char name_q[300];
    log_info(COMPONENT, "ring client connected", "peer=%s kind=%s name=%s auth=%s", conn->peer,
             ring_kind_name(conn->kind), log_quote(name_q, sizeof(name_q), conn->name),
             conn->authenticated ? RING_AUTH_MECH : "none");
    send_hosts(conn);
}

/* ---------- requests ---------- */

static void reply_lookup_fail(struct ring_conn *conn, const char *id, enum ring_outcome outcome,
                              uint32_t retry_ms, const char *error)
{
    struct ring_msg r = {.type = RING_MSG_LOOKUP_FAIL};
    r.lookup_fail.id = id;
    r.lookup_fail.outcome = outcome;
    r.lookup_fail.retry_ms = retry_ms;
    r.lookup_fail.error = error;
    send_msg(conn, &r);
}

static void handle_lookup(struct ring_conn *conn, const struct ring_msg *m)
{
    struct ring_server *srv = conn->srv;
    struct timespec t0;
    t0 = clock_mono_now();
    struct director_lookup res;
    director_state_lookup(srv->state, m->lookup.user, strlen(m->lookup.user), m->lookup.tag, true,
                          &res);
    metric_observe(srv->lookup_seconds[res.outcome], clock_seconds_since(&t0));
    if (res.outcome == RING_OUTCOME_STICKY || res.outcome == RING_OUTCOME_ASSIGNED) {
        struct ring_msg r = {.type = RING_MSG_LOOKUP_OK};
        r.lookup_ok.id = m->lookup.id;
        r.lookup_ok.ip = res.backend->ip;
        r.lookup_ok.port = res.backend->port;
        r.lookup_ok.tag = res.backend->tag;
        r.lookup_ok.outcome = res.outcome;
        send_msg(conn, &r);
        return;
    }
    const char *error = res.error;
    if (res.outcome == RING_OUTCOME_NO_BACKENDS)
        error = "no backend is up for this tag";
    else if (res.outcome == RING_OUTCOME_KILLING)
        error = "the user is being moved";
    reply_lookup_fail(conn, m->lookup.id, res.outcome, res.retry_ms, error);
}

static void handle_session_start(struct ring_conn *conn, const struct ring_msg *m)
{
    struct ring_server *srv = conn->srv;
    const char *sid = m->session_start.sid;
    if (smap_get(conn->sessions, sid) != NULL) {
        send_error(conn, "SESSION-START: duplicate session id");
        return;
    }
    if (smap_count(conn->sessions) >= (size_t)srv->cfg->ring_max_sessions_per_client) {
        send_error(conn, "SESSION-START: too many sessions on this connection");
        return;
    }
    struct petrel_error err;
    struct director_session *s = director_state_session_start(
        srv->state, m->session_start.user, m->session_start.ip, m->session_start.protocol, &err);
    if (s == NULL) {
        char text[600];
        snprintf(text, sizeof(text), "SESSION-START: %s", err.message);
        send_error(conn, text);
        return;
    }
    smap_put(conn->sessions, sid, s);
}

static void handle_session_end(struct ring_conn *conn, const struct ring_msg *m)
{
    struct director_session *s = smap_remove(conn->sessions, m->session_end.sid);
    if (s == NULL) {
        send_error(conn, "SESSION-END: unknown session id");
        return;
    }
    director_state_session_end(conn->srv->state, s);
}

static void handle_monitor_report(struct ring_conn *conn, const struct ring_msg *m)
{
    bool up = m->type == RING_MSG_BACKEND_UP;
    const char *ip = up ? m->backend_up.ip : m->backend_flush.ip;
    struct petrel_error err;
    if (!director_state_backend_set_state(conn->srv->state, ip,
                                          up ? RING_STATE_UP : RING_STATE_FLUSH, NULL, &err)) {
        char text[128];
        snprintf(text, sizeof(text), "unknown backend: %s", ip);
        send_error(conn, text);
        return;
    }
    char reason_q[300];
    log_info(COMPONENT, up ? "monitor reports backend up" : "monitor reports backend down",
             "backend=%s monitor=%s reason=%s", ip, conn->peer,
             log_quote(reason_q, sizeof(reason_q),
                       !up && m->backend_flush.reason != NULL ? m->backend_flush.reason : "-"));
}

static void handle_peer_change(struct ring_conn *conn, const struct ring_msg *m)
{
    struct ring_server *srv = conn->srv;
    if (srv->peer_fn == NULL) {
        send_error(conn, "peer synchronisation is not enabled on this director");
        return;
    }
    struct petrel_error err;
    if (!srv->peer_fn(conn->name, m, &err, srv->peer_ctx)) {
        char text_q[600];
        log_warn(COMPONENT, "peer change not applied", "peer=%s verb=%s reason=%s", conn->name,
                 ring_msg_verb(m->type), log_quote(text_q, sizeof(text_q), err.message));
        send_error(conn, err.message);
    }
}

/* True when a client of this kind may send this message. */
static bool allowed(enum ring_kind kind, enum ring_msg_type type)
{
    switch (type) {
    case RING_MSG_LOOKUP:
    case RING_MSG_SESSION_START:
    case RING_MSG_SESSION_END:
        return kind == RING_KIND_LOGIN;
    case RING_MSG_BACKEND_FLUSH:
    case RING_MSG_BACKEND_UP:
        return kind == RING_KIND_MONITOR;
    case RING_MSG_PING:
    case RING_MSG_PONG:
    case RING_MSG_ERROR:
        return true;
    default:
        return false;
    }
}

static void handle_ready(struct ring_conn *conn, const struct ring_msg *m)
{
    if (m->type == RING_MSG_RING_CHANGE || m->type == RING_MSG_USER_MOVED ||
        m->type == RING_MSG_USER_KICKED) {
        if (conn->kind == RING_KIND_DIRECTOR) {
            handle_peer_change(conn, m);
            return;
        }
    }
    if (!allowed(conn->kind, m->type)) {
        char text[96];
        snprintf(text, sizeof(text), "%s is not accepted from %s clients", ring_msg_verb(m->type),
                 ring_kind_name(conn->kind));
        send_error(conn, text);
        return;
    }
    switch (m->type) {
    case RING_MSG_LOOKUP:
        handle_lookup(conn, m);
        break;
    case RING_MSG_SESSION_START:
        handle_session_start(conn, m);
        break;
    case RING_MSG_SESSION_END:
        handle_session_end(conn, m);
        break;
    case RING_MSG_BACKEND_FLUSH:
    case RING_MSG_BACKEND_UP:
        handle_monitor_report(conn, m);
        break;
    case RING_MSG_PING: {
        struct ring_msg pong = ring_msg_pong(m);
        send_msg(conn, &pong);
        break;
    }
    case RING_MSG_ERROR: {
        char text_q[300];
        log_info(COMPONENT, "ring client reports an error", "peer=%s error=%s", conn->peer,
                 log_quote(text_q, sizeof(text_q), m->error.text));
        break;
    }
    default:
        break; /* PONG */
    }
}

/* A LOOKUP whose fields are bad still gets its answer by id when the id is
 * readable; true when it was answered that way. */
static bool answer_bad_lookup(struct ring_conn *conn, const struct ring_line *line, const char *why)
{
    if (conn->state != READY || conn->kind != RING_KIND_LOGIN || line->count < 2 ||
        strcmp(line->fields[0], "LOOKUP") != 0 || !ring_id_valid(line->fields[1]))
        return false;
    metric_observe(conn->srv->lookup_seconds[RING_OUTCOME_BAD_REQUEST], 0);
    reply_lookup_fail(conn, line->fields[1], RING_OUTCOME_BAD_REQUEST, 0, why);
    return true;
}

static void handle_line(struct ring_conn *conn, char *text, size_t len)
{
    struct ring_line line;
    struct ring_msg m;
    struct petrel_error err;
    if (!ring_line_split(text, len, (size_t)conn->srv->cfg->ring_max_line, &line, &err)) {
        close_with_error(conn, err.message);
        return;
    }
    if (!ring_msg_decode(&line, &m, &err)) {
        if (answer_bad_lookup(conn, &line, err.message))
            return;
        if (conn->state != READY)
            close_with_error(conn, err.message);
        else
            send_error(conn, err.message); /* a bad or unknown request: the client may go on */
        return;
    }
    if (conn->state != READY)
        handle_handshake(conn, &m);
    else
        handle_ready(conn, &m);
}

/* ---------- I/O callbacks ---------- */

static void conn_read_cb(struct bufferevent *bev, void *ctx)
{
    struct ring_conn *conn = ctx;
    struct ring_server *srv = conn->srv;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t max_line = (size_t)srv->cfg->ring_max_line;
    size_t pause_at = (size_t)srv->cfg->ring_max_output / 4;
    if (pause_at > READ_PAUSE_OUTPUT)
        pause_at = READ_PAUSE_OUTPUT;
    while (!conn->closing) {
        if (pending_output(conn) > pause_at) {
            conn->throttled = true;
            bufferevent_disable(bev, EV_READ);
            return;
        }
        enum evbuffer_line_result r = evbuffer_line_take(in, EVBUFFER_EOL_LF, max_line, &srv->line);
        if (r != EVBUFFER_LINE_OK) {
            if (r == EVBUFFER_LINE_TOO_LONG)
                close_with_error(conn, "line too long");
            return;
        }
        handle_line(conn, srv->line.data, srv->line.len); /* never frees conn (conn_kill) */
    }
}

static void conn_write_cb(struct bufferevent *bev, void *ctx)
{
    struct ring_conn *conn = ctx;
    if (conn->dead)
        return;
    if (conn->closing) {
        conn_kill(conn);
    } else if (conn->throttled) {
        conn->throttled = false;
        bufferevent_enable(bev, EV_READ);
        conn_read_cb(bev, conn); /* lines already buffered */
    }
}

static void conn_event_cb(struct bufferevent *bev, short what, void *ctx)
{
    (void)bev;
    struct ring_conn *conn = ctx;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (conn->state == READY && !conn->closing)
            log_info(COMPONENT, "ring client disconnected", "peer=%s kind=%s", conn->peer,
                     ring_kind_name(conn->kind));
        conn_kill(conn);
    }
}

/* Past net/listener.h's check of director.ring.allowed_nets. */
static void accept_cb(void *ctx, struct net_listener *l, const struct net_accepted *a)
{
    struct ring_server *srv = ctx;
    evutil_socket_t fd = a->fd;
    char peer[64];
    net_addr_format(a->peer, peer, sizeof(peer));
    if (!conn_slots_admit(srv->slots, l, a))
        return;
    struct bufferevent *bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        conn_slots_release(srv->slots);
        net_listener_refuse(l, a, NULL);
        return;
    }
    struct ring_conn *conn = xcalloc(1, sizeof(*conn));
    conn->srv = srv;
    conn->bev = bev;
    snprintf(conn->peer, sizeof(conn->peer), "%s", peer);
    if (a->peer_len > 0 && (size_t)a->peer_len <= sizeof(conn->addr))
        memcpy(&conn->addr, a->peer, (size_t)a->peer_len);
    conn->pending = true; /* counted by the listener */
    conn->handshake_timer = net_deadline_new(srv->base, handshake_timeout_cb, conn);
    net_deadline_arm(conn->handshake_timer, srv->cfg->ring_handshake_timeout_ms);
    conn->next = srv->conns;
    if (srv->conns != NULL)
        srv->conns->prev = conn;
    srv->conns = conn;
    bufferevent_setcb(bev, conn_read_cb, conn_write_cb, conn_event_cb, conn);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    send_greeting(conn);
}

/* ---------- life cycle ---------- */

struct ring_server *ring_server_start(struct event_base *base, struct director_state *state,
                                      const struct director_config *cfg, const char *secret,
                                      struct metrics_registry *metrics, struct petrel_error *err)
{
    struct ring_server *srv = xcalloc(1, sizeof(*srv));
    srv->base = base;
    srv->state = state;
    srv->cfg = cfg;
    srv->secret = xstrdup(secret != NULL ? secret : "");
    if (!cidr_list_parse((const char *const *)cfg->ring_allowed_nets, &srv->allowed, err)) {
        ring_secret_free(srv->secret);
        free(srv);
        return NULL;
    }
    static const char *const labels[] = {"outcome", NULL};
    struct metric_family *fam =
        metrics_histogram(metrics, "petrel_director_lookup_seconds",
                          "Director user lookups over the ring protocol, by outcome.", labels,
                          lookup_buckets, sizeof(lookup_buckets) / sizeof(lookup_buckets[0]));
    for (int o = 0; o < RING_OUTCOME_COUNT; o++) {
        const char *values[] = {ring_outcome_name((enum ring_outcome)o)};
        srv->lookup_seconds[o] = metric_series_get(fam, values);
    }
    srv->listeners = net_listener_set_new(base);
    struct conn_slots_config sc = {
        .max = (size_t)cfg->ring_max_clients,
        .full = CONN_SLOTS_REFUSE,
        .component = COMPONENT,
        .limit_key = "director.ring.max_clients",
    };
    srv->slots = conn_slots_new(&sc);
    struct conn_limits_config pc = {.max_per_ip = cfg->ring_max_pending_per_address};
    srv->pending = conn_limits_new(&pc);
    struct net_listener_config lcfg = {
        .component = COMPONENT,
        .allowed_key = "director.ring.allowed_nets",
        .limit_key = "director.ring.max_pending_per_address",
        .allowed = &srv->allowed, /* empty: nobody */
        .limits = srv->pending,
        .accept = accept_cb,
        .arg = srv,
    };
    if (!net_listener_set_listen(srv->listeners, cfg->ring_listen, 0, &lcfg, err)) {
        net_listener_set_free(srv->listeners);
        conn_slots_free(srv->slots);
        conn_limits_free(srv->pending);
        cidr_list_free(&srv->allowed);
        ring_secret_free(srv->secret);
        free(srv);
        return NULL;
    }
    srv->reaper = event_new(base, -1, 0, reap_cb, srv);
    srv->observer.backend_changed = on_backend_changed;
    srv->observer.user_moved = on_user_moved;
    srv->observer.user_kicked = on_user_kicked;
    srv->observer.ctx = srv;
    director_state_subscribe(state, &srv->observer);
    return srv;
}

void ring_server_set_peer_handler(struct ring_server *srv, ring_peer_change_fn fn, void *ctx)
{
    srv->peer_fn = fn;
    srv->peer_ctx = ctx;
}

const char *ring_server_address(const struct ring_server *srv)
{
    return net_listener_set_address(srv->listeners, 0);
}

void ring_server_stop_accepting(struct ring_server *srv)
{
    net_listener_set_stop(srv->listeners);
}

size_t ring_server_client_count(const struct ring_server *srv)
{
    return conn_slots_used(srv->slots); /* a slot per connection */
}

void ring_server_free(struct ring_server *srv)
{
    if (srv == NULL)
        return;
    ring_server_stop_accepting(srv);
    director_state_unsubscribe(srv->state, &srv->observer);
    while (srv->conns != NULL)
        conn_free(srv->conns);
    if (srv->reaper != NULL)
        event_free(srv->reaper);
    conn_limits_free(srv->pending);
    net_listener_set_free(srv->listeners);
    conn_slots_free(srv->slots);
    cidr_list_free(&srv->allowed);
    buf_free(&srv->line);
    buf_free(&srv->out);
    ring_secret_free(srv->secret);
    free(srv);
}
