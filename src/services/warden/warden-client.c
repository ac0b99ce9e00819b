/* The warden protocol's client on a libevent loop (warden-client.h,
 * docs/warden-protocol.md).
 *
 * Connection: one bufferevent. It opens for the first request or session,
 * and writes HELLO followed by a CONNECT for every session in the table at
 * once (the bufferevent holds them until the connect completes). A connect
 * that fails or does not finish within the timeout, a refused HELLO, a
 * read or write error, a peer that stops reading, and a reply that breaks
 * the protocol take the connection down: waiting requests are answered
 * with ERROR and the next connect waits out a backoff (100 ms doubling to
 * 5 s, reset by the HELLO's OK). While sessions are registered, a timer
 * reconnects after the backoff by itself, so a warden that restarts is
 * filled again without any new session having to start.
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
 * decided there are queued and answered from a zero-delay event. A
 * callback may cancel or issue requests and may free the client: the
 * client is reference counted around callbacks. */
#include "services/warden/warden-client.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"
#include "services/warden/warden-protocol.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/util.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "warden-client"
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
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

enum req_state {
    REQ_WAITING,   /* written (or queued behind the connect); a reply is due */
    REQ_FAILED,    /* answered from the delivery event with `error` */
    REQ_ANSWERING, /* its final callback is running */
};

struct req_list {
    struct warden_client_request *head;
    struct warden_client_request *tail;
    size_t count;
};

struct warden_client_request {
    struct warden_client *client;
    uint64_t id;
    enum req_kind kind;
    enum req_state state;
    warden_client_cb *cb;
    void *ctx;
    struct warden_client_request *prev; /* in client->live or client->failed */
    struct warden_client_request *next;
    struct event *deadline;
    char *error; /* REQ_FAILED */
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
    struct event_base *base;
    char *address;
    struct net_addr addr;
    char *instance;
    char boot_id[17];
    uint64_t session_counter;
    int64_t timeout_ms;
    struct timeval timeout_tv;
    const struct timeval *timeout; /* libevent's common timeout for timeout_tv */

    struct bufferevent *bev; /* NULL: no connection */
    bool connected;          /* the connect completed */
    bool hello_ok;           /* the warden accepted our HELLO on this connection */
    struct event *connect_timer;
    struct event *reconnect_timer;
    struct buf line; /* the reply being handled */

    struct req_list live;   /* WAITING, in id order */
    struct req_list failed; /* FAILED, answered by `deliver` */
    struct event *deliver;
    uint64_t last_id;

    struct warden_client_session *sessions;
    size_t session_count;

    int64_t backoff_ms; /* 0: the last connection worked */
    int64_t retry_at;   /* monotonic ms: no connect before */
    char *last_error;
    bool failing; /* a failure was logged and no HELLO succeeded since */

    int64_t refusal_logged_ms; /* rate limit of logged refusals */
    unsigned refusals_suppressed;

    bool closing; /* warden_client_free() ran or is running */
    unsigned refs;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool is_fire_and_forget(const char *id)
{
    return strcmp(id, "-") == 0;
}

/* ---------- request tables ---------- */

static void list_push(struct req_list *l, struct warden_client_request *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    l->count++;
}

static void list_remove(struct req_list *l, struct warden_client_request *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    l->count--;
}

static struct warden_client_request *find_live(const struct warden_client *c, uint64_t id)
{
    for (struct warden_client_request *r = c->live.head; r != NULL; r = r->next) {
        if (r->id == id)
            return r;
        if (r->id > id)
            break; /* in id order: it was cancelled or timed out */
    }
    return NULL;
}

static void make_live(struct warden_client *c, struct warden_client_request *req)
{
    list_push(&c->live, req);
    req->state = REQ_WAITING;
    evtimer_add(req->deadline, c->timeout);
}

static void detach_live(struct warden_client *c, struct warden_client_request *req)
{
    list_remove(&c->live, req);
    evtimer_del(req->deadline);
}

static void deadline_passed(evutil_socket_t fd, short what, void *arg);

static struct warden_client_request *request_new(struct warden_client *c, enum req_kind kind,
                                                 warden_client_cb *cb, void *ctx)
{
    PETREL_ASSERT(c->deliver != NULL);
    struct warden_client_request *req = xcalloc(1, sizeof(*req));
    req->client = c;
    req->id = ++c->last_id;
    req->kind = kind;
    req->cb = cb;
    req->ctx = ctx;
    req->deadline = evtimer_new(c->base, deadline_passed, req);
    if (req->deadline == NULL)
        petrel_fatal("out of memory creating a warden request timer");
    return req;
}

static void request_free(struct warden_client_request *req)
{
    event_free(req->deadline);
    free(req->error);
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

static void fail_later(struct warden_client *c, struct warden_client_request *req,
                       const char *error)
{
    req->state = REQ_FAILED;
    free(req->error);
    req->error = xstrdup(error);
    evtimer_del(req->deadline);
    list_push(&c->failed, req);
    event_active(c->deliver, EV_TIMEOUT, 1);
}

/* ---------- callbacks ---------- */

static void client_release(struct warden_client *c)
{
    buf_free(&c->line);
    free(c->address);
    free(c->instance);
    free(c->last_error);
    free(c);
}

/* Runs a callback with the client held. False when the client was freed
 * (or is being freed) meanwhile: the caller must not touch it again. */
static bool finish(struct warden_client *c, struct warden_client_request *req,
                   const struct warden_client_reply *reply)
{
    req->state = REQ_ANSWERING;
    c->refs++;
    req->cb(reply, req->ctx);
    request_free(req);
    bool usable = !c->closing;
    if (--c->refs == 0 && c->closing)
        client_release(c);
    return usable;
}

static bool finish_error(struct warden_client *c, struct warden_client_request *req,
                         const char *reason)
{
    struct warden_client_reply reply = {.status = WARDEN_CLIENT_ERROR, .error = reason};
    return finish(c, req, &reply);
}

static void deliver_failed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct warden_client *c = arg;
    struct warden_client_request *req;
    while ((req = c->failed.head) != NULL) {
        list_remove(&c->failed, req);
        char *error = req->error;
        req->error = NULL;
        bool usable = finish_error(c, req, error);
        free(error);
        if (!usable)
            return;
    }
}

static void deadline_passed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct warden_client_request *req = arg;
    struct warden_client *c = req->client;
    detach_live(c, req);
    char reason[REASON_MAX];
    snprintf(reason, sizeof(reason), "warden %.200s did not answer within %" PRId64 " ms",
             c->address, c->timeout_ms);
    finish_error(c, req, reason);
}

/* ---------- connection ---------- */

static void unavailable_message(const struct warden_client *c, char *dst, size_t size)
{
    snprintf(dst, size, "warden unavailable: %.300s",
             c->last_error != NULL ? c->last_error : "not connected");
}

static void conn_close(struct warden_client *c)
{
    if (c->bev != NULL) {
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    evtimer_del(c->connect_timer);
    c->connected = false;
    c->hello_ok = false;
}

static void schedule_reconnect(struct warden_client *c)
{
    if (c->closing || c->session_count == 0 || c->bev != NULL)
        return;
    int64_t wait = c->retry_at - mono_ms();
    if (wait < BACKOFF_MIN_MS)
        wait = BACKOFF_MIN_MS;
    struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)((wait % 1000) * 1000)};
    evtimer_add(c->reconnect_timer, &tv);
}

/* The connection is gone or never came up: every request on it is failed
 * (from the loop). `failure` starts or extends the backoff. */
static void conn_down(struct warden_client *c, const char *reason, bool failure)
{
    conn_close(c);
    free(c->last_error);
    c->last_error = xstrdup(reason);
    if (failure) {
        c->backoff_ms = c->backoff_ms == 0 ? BACKOFF_MIN_MS : c->backoff_ms * 2;
        if (c->backoff_ms > BACKOFF_MAX_MS)
            c->backoff_ms = BACKOFF_MAX_MS;
        c->retry_at = mono_ms() + c->backoff_ms;
        if (!c->failing) {
            char q_addr[256], q_reason[REASON_MAX];
            log_warn(COMPONENT, "warden unavailable",
                     "addr=%s reason=%s retry_ms=%" PRId64 " sessions=%zu",
                     log_quote(q_addr, sizeof(q_addr), c->address),
                     log_quote(q_reason, sizeof(q_reason), reason), c->backoff_ms,
                     c->session_count);
            c->failing = true;
        }
    }
    char msg[REASON_MAX + 64];
    unavailable_message(c, msg, sizeof(msg));
    struct warden_client_request *req;
    while ((req = c->live.head) != NULL) {
        detach_live(c, req);
        fail_later(c, req, msg);
    }
    schedule_reconnect(c);
}

static void protocol_error(struct warden_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void protocol_error(struct warden_client *c, const char *fmt, ...)
{
    char reason[REASON_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    char q_addr[256], q_reason[REASON_MAX + 16];
    log_warn(COMPONENT, "warden protocol error", "addr=%s reason=%s",
             log_quote(q_addr, sizeof(q_addr), c->address),
             log_quote(q_reason, sizeof(q_reason), reason));
    conn_down(c, reason, true);
}

/* Writes one line on the connection. False (the connection taken down)
 * when the warden has stopped reading. */
static bool conn_write(struct warden_client *c, const struct buf *line)
{
    if (c->bev == NULL)
        return false;
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) > OUTPUT_MAX) {
        conn_down(c, "the warden is not reading its input", true);
        return false;
    }
    bufferevent_write(c->bev, line->data, line->len);
    return true;
}

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
static void write_greeting(struct warden_client *c)
{
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
    bufferevent_write(c->bev, out.data, out.len);
    buf_free(&out);
}

static void note_refusal(struct warden_client *c, const char *reason)
{
    int64_t now = mono_ms();
    if (c->refusal_logged_ms != 0 && now - c->refusal_logged_ms < 1000) {
        c->refusals_suppressed++;
        return;
    }
    char q_addr[256], q_reason[REASON_MAX];
    log_warn(COMPONENT, "the warden refused a request", "addr=%s reason=%s suppressed=%u",
             log_quote(q_addr, sizeof(q_addr), c->address),
             log_quote(q_reason, sizeof(q_reason), reason), c->refusals_suppressed);
    c->refusal_logged_ms = now;
    c->refusals_suppressed = 0;
}

static bool hello_reply(struct warden_client *c, const struct warden_reply *r)
{
    if (r->kind == WARDEN_REPLY_ERROR) {
        protocol_error(c, "the warden refused HELLO: %.300s", r->reason);
        return false;
    }
    if (r->kind != WARDEN_REPLY_OK || c->hello_ok) {
        protocol_error(c, "unexpected reply to HELLO");
        return false;
    }
    c->hello_ok = true;
    c->backoff_ms = 0;
    c->retry_at = 0;
    char q_addr[256];
    if (c->failing) {
        log_info(COMPONENT, "warden available again", "addr=%s sessions=%zu",
                 log_quote(q_addr, sizeof(q_addr), c->address), c->session_count);
        c->failing = false;
    } else {
        log_debug(COMPONENT, "connected", "addr=%s sessions=%zu",
                  log_quote(q_addr, sizeof(q_addr), c->address), c->session_count);
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
        detach_live(c, req);
        return finish_error(c, req, r->reason);
    case WARDEN_REPLY_SESSION:
        if (req->kind != REQ_LIST)
            break;
        add_session_info(req, r);
        evtimer_add(req->deadline, c->timeout); /* progress: the deadline starts again */
        return true;
    case WARDEN_REPLY_ITEM:
        if (req->kind != REQ_COUNT)
            break;
        add_count_item(req, r);
        evtimer_add(req->deadline, c->timeout);
        return true;
    case WARDEN_REPLY_DONE: {
        if (req->kind == REQ_PENALTY)
            break;
        detach_live(c, req);
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
        detach_live(c, req);
        struct warden_client_reply reply = {
            .status = WARDEN_CLIENT_OK,
            .failures = r->number > UINT32_MAX ? UINT32_MAX : (unsigned)r->number,
        };
        return finish(c, req, &reply);
    }
    case WARDEN_REPLY_OK:
        break;
    }
    protocol_error(c, "unexpected reply to request %" PRIu64, req->id);
    return false;
}

/* Handles one reply line. False when the connection went down or the
 * client went away: stop reading. */
static bool handle_line(struct warden_client *c, char *text, size_t len)
{
    struct warden_line line;
    struct warden_reply r;
    struct petrel_error err;
    if (!warden_line_parse(text, len, WARDEN_LINE_MAX, &line, &err) ||
        !warden_reply_read(&line, &r, &err)) {
        protocol_error(c, "unreadable reply: %s", err.message);
        return false;
    }
    if (strcmp(r.id, HELLO_ID) == 0)
        return hello_reply(c, &r);
    if (!c->hello_ok) {
        protocol_error(c, "reply before the answer to HELLO");
        return false;
    }
    if (is_fire_and_forget(r.id)) {
        if (r.kind != WARDEN_REPLY_ERROR) {
            protocol_error(c, "unexpected reply to a request without an id");
            return false;
        }
        note_refusal(c, r.reason);
        return true;
    }
    uint64_t id;
    if (!warden_parse_uint(r.id, UINT64_MAX, &id)) {
        protocol_error(c, "reply with an unknown id");
        return false;
    }
    struct warden_client_request *req = find_live(c, id);
    if (req == NULL)
        return true; /* cancelled, or its deadline passed: the reply is dropped */
    return request_reply(c, req, &r);
}

static void conn_read(struct bufferevent *bev, void *arg)
{
    struct warden_client *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (c->bev == bev) {
        size_t eol_len = 0;
        struct evbuffer_ptr lf = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if (lf.pos < 0) {
            if (evbuffer_get_length(in) > WARDEN_LINE_MAX)
                protocol_error(c, "reply line longer than %d bytes", WARDEN_LINE_MAX);
            return;
        }
        size_t len = (size_t)lf.pos;
        if (len > WARDEN_LINE_MAX) {
            protocol_error(c, "reply line longer than %d bytes", WARDEN_LINE_MAX);
            return;
        }
        buf_reset(&c->line);
        buf_reserve(&c->line, len + 1);
        evbuffer_remove(in, c->line.data, len + 1); /* the LF's place ends the last field */
        c->line.len = len;
        c->refs++;
        bool go_on = handle_line(c, c->line.data, len);
        bool usable = !c->closing;
        if (--c->refs == 0 && c->closing)
            client_release(c);
        if (!go_on || !usable)
            return;
    }
}

static void conn_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct warden_client *c = arg;
    char reason[REASON_MAX];
    if ((what & BEV_EVENT_CONNECTED) != 0) {
        c->connected = true;
        evtimer_del(c->connect_timer);
        int fd = (int)bufferevent_getfd(c->bev);
        if (c->addr.ss.ss_family != AF_UNIX) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            /* A warden host that vanished without a FIN is noticed. */
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        }
        return;
    }
    if (!c->connected) {
        snprintf(reason, sizeof(reason), "cannot connect to %.200s: %.150s", c->address,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(c, reason, true);
    } else if ((what & BEV_EVENT_EOF) != 0) {
        snprintf(reason, sizeof(reason), "%.200s closed the connection", c->address);
        /* Closed before accepting HELLO: as good as refused. */
        conn_down(c, reason, !c->hello_ok || c->live.head != NULL);
    } else {
        snprintf(reason, sizeof(reason), "connection to %.200s failed: %.150s", c->address,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(c, reason, true);
    }
}

static void connect_timed_out(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct warden_client *c = arg;
    char reason[REASON_MAX];
    snprintf(reason, sizeof(reason), "connecting to %.200s timed out after %" PRId64 " ms",
             c->address, c->timeout_ms);
    conn_down(c, reason, true);
}

/* Starts connecting and queues the greeting. False (the connection down,
 * with backoff) when that failed at once. */
static bool conn_start(struct warden_client *c)
{
    char reason[REASON_MAX];
    evtimer_del(c->reconnect_timer);
    c->bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) {
        snprintf(reason, sizeof(reason), "cannot create a connection to %.200s", c->address);
        conn_down(c, reason, true);
        return false;
    }
    c->connected = false;
    c->hello_ok = false;
    bufferevent_setcb(c->bev, conn_read, NULL, conn_event, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, WARDEN_LINE_MAX + 1);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&c->addr.ss, (int)c->addr.len) < 0) {
        snprintf(reason, sizeof(reason), "cannot connect to %.200s: %.150s", c->address,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(c, reason, true);
        return false;
    }
    evtimer_add(c->connect_timer, c->timeout);
    write_greeting(c);
    return true;
}

/* A connection to write on: the current one, or a new one unless the
 * backoff forbids it. */
static bool conn_ensure(struct warden_client *c)
{
    if (c->closing)
        return false;
    if (c->bev != NULL)
        return true;
    if (mono_ms() < c->retry_at) {
        schedule_reconnect(c);
        return false;
    }
    return conn_start(c);
}

static void reconnect_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct warden_client *c = arg;
    if (c->bev == NULL && c->session_count > 0)
        conn_start(c);
}

/* Sends a request with an answer, or queues its failure. */
static void submit(struct warden_client *c, struct warden_client_request *req,
                   const struct warden_request *wire)
{
    char msg[REASON_MAX + 64];
    if (c->closing) {
        fail_later(c, req, "warden client closed");
        return;
    }
    struct buf out = {0};
    char id[24];
    snprintf(id, sizeof(id), "%" PRIu64, req->id);
    struct warden_request line = *wire;
    line.id = id;
    warden_request_write(&out, &line);
    if (out.len - 1 > WARDEN_LINE_MAX) {
        fail_later(c, req, "request longer than the warden protocol's line limit");
    } else if (!conn_ensure(c)) {
        unavailable_message(c, msg, sizeof(msg));
        fail_later(c, req, msg);
    } else if (!conn_write(c, &out)) {
        unavailable_message(c, msg, sizeof(msg));
        fail_later(c, req, msg);
    } else {
        make_live(c, req);
    }
    buf_free(&out);
}

/* Sends a fire-and-forget line when a connection is (or can be) up. */
static void send_oneway(struct warden_client *c, const struct warden_request *wire)
{
    if (!conn_ensure(c))
        return;
    struct buf out = {0};
    warden_request_write(&out, wire);
    conn_write(c, &out);
    buf_free(&out);
}

/* ---------- public: life cycle ---------- */

static bool has_port(const struct net_addr *a)
{
    if (a->ss.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&a->ss)->sin_port != 0;
    if (a->ss.ss_family == AF_INET6)
        return ((const struct sockaddr_in6 *)&a->ss)->sin6_port != 0;
    return true; /* a Unix socket */
}

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

struct warden_client *warden_client_new(struct event_base *base, const char *addr,
                                        const char *instance, int64_t timeout_ms,
                                        struct petrel_error *err)
{
    if (timeout_ms <= 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "warden client timeout must be positive");
        return NULL;
    }
    if (instance == NULL || !warden_instance_valid(instance)) {
        petrel_error_set(err, PETREL_ERR_INVALID,
                         "warden instance name must be 1-%d printable bytes without spaces",
                         WARDEN_INSTANCE_MAX);
        return NULL;
    }
    struct warden_client *c = xcalloc(1, sizeof(*c));
    if (addr == NULL || !net_addr_parse(addr, &c->addr, err)) {
        if (addr == NULL)
            petrel_error_set(err, PETREL_ERR_INVALID, "no warden address");
        free(c);
        return NULL;
    }
    if (!has_port(&c->addr)) {
        free(c);
        petrel_error_set(err, PETREL_ERR_INVALID, "warden address '%s' needs a port", addr);
        return NULL;
    }
    c->base = base;
    c->address = xstrdup(addr);
    c->instance = xstrdup(instance);
    make_boot_id(c->boot_id);
    c->timeout_ms = timeout_ms;
    c->timeout_tv.tv_sec = (time_t)(timeout_ms / 1000);
    c->timeout_tv.tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000;
    c->timeout = event_base_init_common_timeout(base, &c->timeout_tv);
    if (c->timeout == NULL)
        c->timeout = &c->timeout_tv;
    c->connect_timer = evtimer_new(base, connect_timed_out, c);
    c->reconnect_timer = evtimer_new(base, reconnect_cb, c);
    c->deliver = event_new(base, -1, 0, deliver_failed, c);
    if (c->connect_timer == NULL || c->reconnect_timer == NULL || c->deliver == NULL)
        petrel_fatal("out of memory creating warden client events");
    return c;
}

void warden_client_free(struct warden_client *c)
{
    if (c == NULL || c->closing)
        return;
    c->closing = true;
    c->refs++;
    conn_close(c);
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
    for (;;) {
        struct warden_client_request *req = c->live.head;
        if (req != NULL) {
            detach_live(c, req);
        } else if ((req = c->failed.head) != NULL) {
            list_remove(&c->failed, req);
        } else {
            break;
        }
        finish_error(c, req, "warden client closed");
    }
    event_free(c->connect_timer);
    event_free(c->reconnect_timer);
    event_free(c->deliver);
    c->connect_timer = NULL;
    c->reconnect_timer = NULL;
    c->deliver = NULL;
    if (--c->refs == 0)
        client_release(c);
}

const char *warden_client_address(const struct warden_client *c)
{
    return c->address;
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
    return c->hello_ok;
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
    if (!s->registrable) {
        char q_user[300], q_service[64];
        log_warn(COMPONENT, "session not registered: a field breaks the warden's rules",
                 "session=%s user=%s service=%s", s->id, log_quote(q_user, sizeof(q_user), s->user),
                 log_quote(q_service, sizeof(q_service), service != NULL ? service : ""));
        return s;
    }
    /* A new connection's greeting carries the session already. */
    bool fresh = c->bev == NULL;
    if (!conn_ensure(c) || fresh)
        return s;
    struct buf out = {0};
    write_connect(&out, s);
    conn_write(c, &out);
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
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        c->sessions = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    c->session_count--;
    if (s->registrable && c->bev != NULL) {
        struct warden_request req = {.verb = WARDEN_DISCONNECT, .id = "-", .session_id = s->id};
        struct buf out = {0};
        warden_request_write(&out, &req);
        conn_write(c, &out);
        buf_free(&out);
    }
    if (c->session_count == 0)
        evtimer_del(c->reconnect_timer);
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
    if (ip == NULL || !warden_ip_valid(ip, false))
        return;
    struct warden_request wire = {.verb = WARDEN_PENALTY_INC, .id = "-", .ip = ip};
    send_oneway(c, &wire);
}

void warden_client_cancel(struct warden_client_request *req)
{
    if (req == NULL)
        return;
    struct warden_client *c = req->client;
    switch (req->state) {
    case REQ_WAITING:
        detach_live(c, req);
        break;
    case REQ_FAILED:
        list_remove(&c->failed, req);
        break;
    case REQ_ANSWERING:
        return; /* inside its own final callback: freed when that returns */
    }
    request_free(req);
}
