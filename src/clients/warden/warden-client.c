/* The warden protocol's client on a libevent loop (warden-client.h,
 * docs/warden-protocol.md), on the line-protocol client core
 * (net/line-client.h), which owns the connection, the backoff and the
 * request tables.
 *
 * Connection: it opens for the first request or session, and writes HELLO
 * followed by a CONNECT for every session in the table at once (they wait
 * in the connection until the connect completes). A connect that fails or
 * does not finish within the timeout, a refused HELLO, a read or write
 * error, a peer that stops reading (4 MiB of output not taken), and a reply
 * that breaks the protocol take the connection down: waiting requests are
 * answered with ERROR and the next connect waits out a backoff (100 ms
 * doubling to 5 s, reset by the HELLO's OK). While sessions are
 * registered, the core reconnects after the backoff by itself, so a warden
 * that restarts is filled again without any new session having to start.
 *
 * Requests (LIST, COUNT, PENALTY-GET) carry numeric ids; the warden
 * answers in order, so the reply usually belongs to the oldest request.
 * Each has a deadline; a late reply is dropped like the reply to a
 * cancelled request. A LIST restarts its deadline with every SESSION line,
 * so the deadline bounds silence, not the number of sessions.
 *
 * Fire-and-forget lines (CONNECT, DISCONNECT, PENALTY-INC) use the id "-":
 * the warden only answers when it refuses one, and those refusals are
 * logged (at most one line per second, with a count of the suppressed).
 *
 * Callbacks never run inside the call that issued the request: failures
 * decided there are queued and answered from the loop. A callback may
 * cancel or issue requests and may free the client: the client is held
 * around callbacks. */
#include "clients/warden/warden-client.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/dlist.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/line-client.h"
#include "clients/warden/warden-protocol.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "warden-client"
#define REASON_MAX 400
#define HELLO_ID "hello"
/* Output the warden has not taken: above this it is not reading, and the
 * connection is given up (the session table is re-sent on the next one). */
#define OUTPUT_MAX (4 * 1024 * 1024)

enum req_kind {
    REQ_LIST,
    REQ_COUNT,
    REQ_PENALTY,
};

struct warden_client_request {
    struct line_request base; /* first: the core's id, state and deadline */
    struct warden_client *client;
    enum req_kind kind;
    warden_client_cb *cb;
    void *ctx;
    /* LIST */
    struct warden_session_info *sessions; /* strings owned */
    size_t session_count;
    size_t session_cap;
    /* COUNT */
    struct warden_count_item *items; /* keys owned */
    size_t item_count;
    size_t item_cap;
};

struct warden_client_session {
    struct warden_client *client;
    struct warden_client_session *prev;
    struct warden_client_session *next;
    char id[WARDEN_SESSION_ID_MAX + 1];
    char *user;
    char *ip;
    const char *service; /* one of warden_services, or "" when unusable */
    int64_t connected_at;
    bool registrable; /* every field passes the protocol's rules */
};

struct warden_client {
    struct line_client *lc;
    char *instance;
    char boot_id[17];
    uint64_t session_counter;

    struct warden_client_session *sessions;
    size_t session_count;

    int64_t refusal_logged_ms; /* rate limit of logged refusals */
    unsigned refusals_suppressed;
};

static bool is_fire_and_forget(const char *id)
{
    return strcmp(id, "-") == 0;
}

static struct warden_client_request *request_of(struct line_request *base)
{
    return (struct warden_client_request *)base;
}

/* ---------- requests ---------- */

static struct warden_client_request *request_new(struct warden_client *c, enum req_kind kind,
                                                 warden_client_cb *cb, void *ctx)
{
    struct warden_client_request *req = xcalloc(1, sizeof(*req));
    line_request_init(c->lc, &req->base);
    req->client = c;
    req->kind = kind;
    req->cb = cb;
    req->ctx = ctx;
    return req;
}

static void request_free(struct warden_client_request *req)
{
    line_request_cleanup(&req->base);
    for (size_t i = 0; i < req->session_count; i++) {
        struct warden_session_info *s = &req->sessions[i];
        free((char *)s->id);
        free((char *)s->user);
        free((char *)s->ip);
    }
    free(req->sessions);
    for (size_t i = 0; i < req->item_count; i++)
        free((char *)req->items[i].key);
    free(req->items);
    free(req);
}

/* ---------- callbacks ---------- */

/* Gives a request, already out of every table, its final answer and frees
 * it. False when the client was freed (or is being freed) meanwhile: the
 * caller must not touch it again. */
static bool finish(struct warden_client *c, struct warden_client_request *req,
                   const struct warden_client_reply *reply)
{
    struct line_client *lc = c->lc;
    line_client_hold(lc);
    req->cb(reply, req->ctx);
    request_free(req);
    return line_client_drop(lc);
}

static bool finish_error(struct warden_client *c, struct warden_client_request *req,
                         const char *reason)
{
    struct warden_client_reply reply = {.status = WARDEN_CLIENT_ERROR, .error = reason};
    return finish(c, req, &reply);
}

/* The core failed a request: deadline, broken connection, queued failure,
 * or the client closing. */
static bool request_failed(void *owner, struct line_request *base, const char *reason)
{
    return finish_error(owner, request_of(base), reason);
}

/* ---------- the connection ---------- */

static void write_connect(struct buf *out, const struct warden_client_session *s)
{
    struct warden_request req = {
        .verb = WARDEN_CONNECT,
        .id = "-",
        .session_id = s->id,
        .user = s->user,
        .ip = s->ip,
        .service = s->service,
        .connected_at = s->connected_at,
    };
    warden_request_write(out, &req);
}

/* HELLO and the whole session table, as the first lines of a connection. */
static void write_greeting(void *owner)
{
    struct warden_client *c = owner;
    struct buf out = {0};
    struct warden_request hello = {
        .verb = WARDEN_HELLO,
        .id = HELLO_ID,
        .major = WARDEN_PROTOCOL_MAJOR,
        .instance = c->instance,
        .boot_id = c->boot_id,
    };
    warden_request_write(&out, &hello);
    for (struct warden_client_session *s = c->sessions; s != NULL; s = s->next) {
        if (s->registrable)
            write_connect(&out, s);
    }
    line_client_write(c->lc, out.data, out.len);
    buf_free(&out);
}

static void log_fields(void *owner, char *dst, size_t size)
{
    const struct warden_client *c = owner;
    snprintf(dst, size, " sessions=%zu", c->session_count);
}

static void note_refusal(struct warden_client *c, const char *reason)
{
    int64_t now = clock_mono_ms();
    if (c->refusal_logged_ms != 0 && now - c->refusal_logged_ms < 1000) {
        c->refusals_suppressed++;
        return;
    }
    char q_addr[256], q_reason[REASON_MAX];
    log_warn(COMPONENT, "the warden refused a request", "addr=%s reason=%s suppressed=%u",
             log_quote(q_addr, sizeof(q_addr), line_client_address(c->lc)),
             log_quote(q_reason, sizeof(q_reason), reason), c->refusals_suppressed);
    c->refusal_logged_ms = now;
    c->refusals_suppressed = 0;
}

static bool hello_reply(struct warden_client *c, const struct warden_reply *r)
{
    if (r->kind == WARDEN_REPLY_ERROR) {
        line_client_protocol_error(c->lc, "the warden refused HELLO: %.300s", r->reason);
        return false;
    }
    if (r->kind != WARDEN_REPLY_OK || line_client_is_up(c->lc)) {
        line_client_protocol_error(c->lc, "unexpected reply to HELLO");
        return false;
    }
    if (!line_client_mark_up(c->lc)) { /* else "warden available again" was logged */
        char q_addr[256];
        log_debug(COMPONENT, "connected", "addr=%s sessions=%zu",
                  log_quote(q_addr, sizeof(q_addr), line_client_address(c->lc)), c->session_count);
    }
    return true;
}

static void add_session_info(struct warden_client_request *req, const struct warden_reply *r)
{
    req->sessions =
        xgrow(req->sessions, &req->session_cap, req->session_count + 1, sizeof(*req->sessions));
    struct warden_session_info *s = &req->sessions[req->session_count++];
    s->id = xstrdup(r->session_id);
    s->user = xstrdup(r->user);
    s->ip = xstrdup(r->ip);
    s->service = "";
    for (size_t i = 0; warden_services[i] != NULL; i++) {
        if (strcmp(warden_services[i], r->service) == 0)
            s->service = warden_services[i];
    }
    s->connected_at = r->connected_at;
}

static void add_count_item(struct warden_client_request *req, const struct warden_reply *r)
{
    req->items = xgrow(req->items, &req->item_cap, req->item_count + 1, sizeof(*req->items));
    req->items[req->item_count].key = xstrdup(r->key);
    req->items[req->item_count].count = r->number;
    req->item_count++;
}

static bool request_reply(struct warden_client *c, struct warden_client_request *req,
                          const struct warden_reply *r)
{
    switch (r->kind) {
    case WARDEN_REPLY_ERROR:
        line_client_detach(c->lc, &req->base);
        return finish_error(c, req, r->reason);
    case WARDEN_REPLY_SESSION:
        if (req->kind != REQ_LIST)
            break;
        add_session_info(req, r);
        line_request_touch(&req->base); /* progress: the deadline starts again */
        return true;
    case WARDEN_REPLY_ITEM:
        if (req->kind != REQ_COUNT)
            break;
        add_count_item(req, r);
        line_request_touch(&req->base);
        return true;
    case WARDEN_REPLY_DONE: {
        if (req->kind == REQ_PENALTY)
            break;
        line_client_detach(c->lc, &req->base);
        struct warden_client_reply reply = {
            .status = WARDEN_CLIENT_OK,
            .sessions = req->sessions,
            .session_count = req->session_count,
            .total = r->number,
            .items = req->items,
            .item_count = req->item_count,
        };
        return finish(c, req, &reply);
    }
    case WARDEN_REPLY_PENALTY: {
        if (req->kind != REQ_PENALTY)
            break;
        line_client_detach(c->lc, &req->base);
        struct warden_client_reply reply = {
            .status = WARDEN_CLIENT_OK,
            .failures = r->number > UINT32_MAX ? UINT32_MAX : (unsigned)r->number,
        };
        return finish(c, req, &reply);
    }
    case WARDEN_REPLY_OK:
        break;
    }
    line_client_protocol_error(c->lc, "unexpected reply to request %" PRIu64, req->base.id);
    return false;
}

/* Handles one reply line. False when the connection went down or the
 * client went away: stop reading. */
static bool handle_line(void *owner, char *text, size_t len)
{
    struct warden_client *c = owner;
    struct warden_line line;
    struct warden_reply r;
    struct petrel_error err;
    if (!warden_line_parse(text, len, WARDEN_LINE_MAX, &line, &err) ||
        !warden_reply_read(&line, &r, &err)) {
        line_client_protocol_error(c->lc, "unreadable reply: %s", err.message);
        return false;
    }
    if (strcmp(r.id, HELLO_ID) == 0)
        return hello_reply(c, &r);
    if (!line_client_is_up(c->lc)) {
        line_client_protocol_error(c->lc, "reply before the answer to HELLO");
        return false;
    }
    if (is_fire_and_forget(r.id)) {
        if (r.kind != WARDEN_REPLY_ERROR) {
            line_client_protocol_error(c->lc, "unexpected reply to a request without an id");
            return false;
        }
        note_refusal(c, r.reason);
        return true;
    }
    uint64_t id;
    if (!warden_parse_uint(r.id, UINT64_MAX, &id)) {
        line_client_protocol_error(c->lc, "reply with an unknown id");
        return false;
    }
    struct line_request *req = line_client_find(c->lc, id);
    if (req == NULL)
        return true; /* cancelled, or its deadline passed: the reply is dropped */
    return request_reply(c, request_of(req), &r);
}

/* ---------- sending ---------- */

/* Sends a request with an answer, or queues its failure. */
static void submit(struct warden_client *c, struct warden_client_request *req,
                   const struct warden_request *wire)
{
    struct buf out = {0};
    char id[24];
    snprintf(id, sizeof(id), "%" PRIu64, req->base.id);
    struct warden_request line = *wire;
    line.id = id;
    warden_request_write(&out, &line);
    if (!line_client_closing(c->lc) && out.len - 1 > WARDEN_LINE_MAX)
        line_client_fail_later(c->lc, &req->base,
                               "request longer than the warden protocol's line limit");
    else
        line_client_submit(c->lc, &req->base, out.data, out.len);
    buf_free(&out);
}

/* Sends a fire-and-forget line when a connection is (or can be) up. */
static void send_oneway(struct warden_client *c, const struct warden_request *wire)
{
    if (!line_client_ensure(c->lc))
        return;
    struct buf out = {0};
    warden_request_write(&out, wire);
    line_client_write(c->lc, out.data, out.len);
    buf_free(&out);
}

/* ---------- public: life cycle ---------- */

static void make_boot_id(char out[17])
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    snprintf(out, 17, "%016" PRIx64, r);
}

static void client_release(void *owner)
{
    struct warden_client *c = owner;
    free(c->instance);
    free(c);
}

static const struct line_client_ops client_ops = {
    .line = handle_line,
    .fail = request_failed,
    .opened = write_greeting,
    .log_fields = log_fields,
    .release = client_release,
};

struct warden_client *warden_client_new(struct event_base *base, const char *addr,
                                        const char *instance, int64_t timeout_ms,
                                        struct petrel_error *err)
{
    if (instance == NULL || !warden_instance_valid(instance)) {
        petrel_error_set(err, PETREL_ERR_INVALID,
                         "warden instance name must be 1-%d printable bytes without spaces",
                         WARDEN_INSTANCE_MAX);
        return NULL;
    }
    const struct line_client_config cfg = {
        .protocol = "warden",
        .peer = "warden",
        .address = addr,
        .timeout_ms = timeout_ms,
        .max_line = WARDEN_LINE_MAX,
        .output_max = OUTPUT_MAX,
        .keepalive = true, /* a warden host that vanished without a FIN is noticed */
        .handshake = true, /* HELLO */
    };
    struct warden_client *c = xcalloc(1, sizeof(*c));
    c->lc = line_client_new(base, &cfg, &client_ops, c, err);
    if (c->lc == NULL) {
        free(c);
        return NULL;
    }
    c->instance = xstrdup(instance);
    make_boot_id(c->boot_id);
    return c;
}

/* The client's memory goes in client_release(), once no callback runs. */
void warden_client_free(struct warden_client *c)
{
    if (c == NULL || line_client_closing(c->lc))
        return;
    if (c->session_count > 0) {
        log_warn(COMPONENT, "client freed with registered sessions", "sessions=%zu",
                 c->session_count);
        while (c->sessions != NULL) {
            struct warden_client_session *s = c->sessions;
            c->sessions = s->next;
            free(s->user);
            free(s->ip);
            free(s);
        }
        c->session_count = 0;
    }
    line_client_free(c->lc);
}

const char *warden_client_address(const struct warden_client *c)
{
    return line_client_address(c->lc);
}

const char *warden_client_boot_id(const struct warden_client *c)
{
    return c->boot_id;
}

size_t warden_client_session_count(const struct warden_client *c)
{
    return c->session_count;
}

bool warden_client_connected(const struct warden_client *c)
{
    return line_client_is_up(c->lc);
}

/* ---------- public: sessions ---------- */

static const char *known_service(const char *service)
{
    for (size_t i = 0; service != NULL && warden_services[i] != NULL; i++) {
        if (strcmp(warden_services[i], service) == 0)
            return warden_services[i];
    }
    return NULL;
}

struct warden_client_session *warden_client_session_connect(struct warden_client *c,
                                                            const char *user, const char *ip,
                                                            const char *service,
                                                            int64_t connected_at)
{
    struct warden_client_session *s = xcalloc(1, sizeof(*s));
    s->client = c;
    snprintf(s->id, sizeof(s->id), "%s-%" PRIu64, c->boot_id, ++c->session_counter);
    s->user = xstrdup(user != NULL ? user : "");
    /* A peer without an IP (a Unix socket client) is listed without one. */
    s->ip = xstrdup(ip != NULL && warden_ip_valid(ip, true) ? ip : "");
    s->service = known_service(service);
    s->connected_at = connected_at;
    s->registrable = s->service != NULL && warden_user_valid(s->user) && connected_at >= 0 &&
                     connected_at <= WARDEN_TIME_MAX;
    if (s->service == NULL)
        s->service = "";
    s->next = c->sessions;
    if (c->sessions != NULL)
        c->sessions->prev = s;
    c->sessions = s;
    c->session_count++;
    line_client_keep_connected(c->lc, true); /* re-registered on every reconnect */
    if (!s->registrable) {
        char q_user[300], q_service[64];
        log_warn(COMPONENT, "session not registered: a field breaks the warden's rules",
                 "session=%s user=%s service=%s", s->id, log_quote(q_user, sizeof(q_user), s->user),
                 log_quote(q_service, sizeof(q_service), service != NULL ? service : ""));
        return s;
    }
    /* A new connection's greeting carries the session already. */
    bool fresh = !line_client_is_open(c->lc);
    if (!line_client_ensure(c->lc) || fresh)
        return s;
    struct buf out = {0};
    write_connect(&out, s);
    line_client_write(c->lc, out.data, out.len);
    buf_free(&out);
    return s;
}

const char *warden_client_session_id(const struct warden_client_session *s)
{
    return s->id;
}

void warden_client_session_disconnect(struct warden_client_session *s)
{
    if (s == NULL)
        return;
    struct warden_client *c = s->client;
    DLIST_UNLINK(c->sessions, s);
    c->session_count--;
    if (s->registrable && line_client_is_open(c->lc)) {
        struct warden_request req = {.verb = WARDEN_DISCONNECT, .id = "-", .session_id = s->id};
        struct buf out = {0};
        warden_request_write(&out, &req);
        line_client_write(c->lc, out.data, out.len);
        buf_free(&out);
    }
    if (c->session_count == 0)
        line_client_keep_connected(c->lc, false);
    free(s->user);
    free(s->ip);
    free(s);
}

/* ---------- public: queries ---------- */

static const char *filter(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : NULL;
}

struct warden_client_request *warden_client_list(struct warden_client *c, const char *service,
                                                 const char *user, warden_client_cb *cb, void *ctx)
{
    struct warden_client_request *req = request_new(c, REQ_LIST, cb, ctx);
    struct warden_request wire = {
        .verb = WARDEN_LIST, .service = filter(service), .user = filter(user)};
    submit(c, req, &wire);
    return req;
}

struct warden_client_request *warden_client_count(struct warden_client *c, const char *by,
                                                  const char *service, const char *user,
                                                  warden_client_cb *cb, void *ctx)
{
    struct warden_client_request *req = request_new(c, REQ_COUNT, cb, ctx);
    struct warden_request wire = {
        .verb = WARDEN_COUNT, .service = filter(service), .user = filter(user)};
    if (by != NULL && strcmp(by, "protocol") == 0)
        wire.by = WARDEN_BY_PROTOCOL;
    else if (by != NULL && strcmp(by, "user") == 0)
        wire.by = WARDEN_BY_USER;
    submit(c, req, &wire);
    return req;
}

struct warden_client_request *warden_client_penalty_get(struct warden_client *c, const char *ip,
                                                        warden_client_cb *cb, void *ctx)
{
    struct warden_client_request *req = request_new(c, REQ_PENALTY, cb, ctx);
    struct warden_request wire = {.verb = WARDEN_PENALTY_GET, .ip = ip != NULL ? ip : ""};
    submit(c, req, &wire);
    return req;
}

void warden_client_penalty_inc(struct warden_client *c, const char *ip)
{
    if (ip == NULL || !warden_penalty_key_valid(ip))
        return;
    struct warden_request wire = {.verb = WARDEN_PENALTY_INC, .id = "-", .ip = ip};
    send_oneway(c, &wire);
}

void warden_client_cancel(struct warden_client_request *req)
{
    /* Not while inside its own final callback: freed when that returns. */
    if (req != NULL && line_client_cancel(req->client->lc, &req->base))
        request_free(req);
}
