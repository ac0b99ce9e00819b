/* The auth protocol's client on a libevent loop (auth-client.h,
 * docs/auth-protocol.md).
 *
 * Connection: one bufferevent, opened by the first request. Requests are
 * written at once, also while the connect is still under way (the
 * bufferevent holds them until it completes), and matched to replies by id
 * through a small hash map, so replies may come in any order. A connect
 * that fails or does not finish within the timeout, a read or write error,
 * an EOF while requests are out, and a reply that breaks the protocol all
 * take the connection down: every request on it is answered with ERROR
 * "auth service unavailable: <reason>", and the next connect waits out a
 * backoff (100 ms doubling to 5 s, reset by the first reply on a new
 * connection). Until then new requests fail at once, so a dead auth
 * service costs callers nothing. An EOF while nothing is out is the server
 * closing an idle connection: no backoff, the next request reconnects.
 *
 * Deadlines: each request has its own timer. One that passes answers that
 * request with ERROR and leaves the connection up: the server may simply be
 * slow for this one (VERIFY failures are answered after a growing delay),
 * and its late reply is dropped like the reply to a cancelled request. A
 * SASL request waiting for the caller's answer to a challenge has no
 * deadline (the end user is typing); the timer starts again with the
 * answer. An ITERATE restarts its timer with every ITEM, so the deadline
 * bounds silence, not the size of the user list. Cancelling a request that
 * holds a challenge answers the challenge with "*", so the service ends the
 * exchange instead of keeping it (and a request slot) until the connection
 * closes.
 *
 * Callbacks never run inside the call that issued the request: failures
 * decided there (backoff, a request over the line limit, a closing client)
 * are queued and answered from a zero-delay event. A callback may cancel
 * or issue requests and may free the client: a request is taken out of
 * every table before its final callback runs, and the client is reference
 * counted around callbacks, so a free inside one only finishes once the
 * outermost callback returned. */
#include "services/auth/auth-client.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"
#include "services/auth/auth-protocol.h"

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
#include <sys/socket.h>
#include <time.h>

#define COMPONENT "auth-client"
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define MAP_MIN_BUCKETS 16
#define REASON_MAX 400

enum req_kind {
    REQ_USER,
    REQ_VERIFY,
    REQ_SASL,
    REQ_ITERATE,
};

enum req_state {
    REQ_WAITING,    /* written (or queued behind the connect); a reply is due */
    REQ_CHALLENGED, /* SASL: the caller has a challenge to answer */
    REQ_FAILED,     /* answered from the delivery event with `error` */
    REQ_ANSWERING,  /* its final callback is running */
};

struct req_list {
    struct auth_client_request *head;
    struct auth_client_request *tail;
    size_t count;
};

struct auth_client_request {
    struct auth_client *client;
    uint64_t id;
    enum req_kind kind;
    enum req_state state;
    auth_client_cb *cb;
    void *ctx;
    struct auth_client_request *prev; /* in client->live or client->failed */
    struct auth_client_request *next;
    struct auth_client_request *map_next; /* in the id map while live */
    struct event *deadline;
    /* REQ_FAILED */
    enum auth_client_status fail_status;
    char *error;
    /* REQ_ITERATE */
    char **users;
    size_t user_count;
    size_t user_cap;
};

struct auth_client {
    struct event_base *base;
    char *address;
    struct net_addr addr;
    int64_t timeout_ms;
    struct timeval timeout_tv;
    const struct timeval *timeout; /* libevent's common timeout for timeout_tv */

    struct bufferevent *bev; /* NULL: no connection */
    bool connected;          /* the connect completed */
    bool replied;            /* a reply came on this connection */
    struct event *connect_timer;
    struct buf line; /* the reply being handled */

    struct req_list live;   /* WAITING and CHALLENGED, also in the map */
    struct req_list failed; /* FAILED, answered by `deliver` */
    struct auth_client_request **buckets;
    size_t bucket_count; /* a power of two */
    struct event *deliver;
    uint64_t last_id;

    int64_t backoff_ms; /* 0: the last connection worked */
    int64_t retry_at;   /* monotonic ms: no connect before */
    char *last_error;
    bool failing; /* a failure was logged and no reply came since */

    bool closing; /* auth_client_free() ran or is running */
    unsigned refs;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------- request tables ---------- */

static void list_push(struct req_list *l, struct auth_client_request *r)
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

static void list_remove(struct req_list *l, struct auth_client_request *r)
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

/* Ids come from a counter, so the low bits alone spread them evenly. */
static size_t map_slot(const struct auth_client *c, uint64_t id)
{
    return (size_t)(id & (c->bucket_count - 1));
}

static void map_grow(struct auth_client *c)
{
    size_t count = c->bucket_count * 2;
    struct auth_client_request **buckets = xcalloc(count, sizeof(*buckets));
    for (size_t i = 0; i < c->bucket_count; i++) {
        struct auth_client_request *r = c->buckets[i];
        while (r != NULL) {
            struct auth_client_request *next = r->map_next;
            size_t slot = (size_t)(r->id & (count - 1));
            r->map_next = buckets[slot];
            buckets[slot] = r;
            r = next;
        }
    }
    free(c->buckets);
    c->buckets = buckets;
    c->bucket_count = count;
}

static struct auth_client_request *map_find(const struct auth_client *c, uint64_t id)
{
    for (struct auth_client_request *r = c->buckets[map_slot(c, id)]; r != NULL; r = r->map_next) {
        if (r->id == id)
            return r;
    }
    return NULL;
}

static void map_remove(struct auth_client *c, struct auth_client_request *req)
{
    struct auth_client_request **p = &c->buckets[map_slot(c, req->id)];
    while (*p != NULL && *p != req)
        p = &(*p)->map_next;
    if (*p == req)
        *p = req->map_next;
    req->map_next = NULL;
}

/* Makes `req` live: waiting for its reply, with its deadline running. */
static void make_live(struct auth_client *c, struct auth_client_request *req)
{
    if (c->live.count >= c->bucket_count)
        map_grow(c);
    size_t slot = map_slot(c, req->id);
    req->map_next = c->buckets[slot];
    c->buckets[slot] = req;
    list_push(&c->live, req);
    req->state = REQ_WAITING;
    evtimer_add(req->deadline, c->timeout);
}

/* Takes a live request out of the tables; its callback has not run. */
static void detach_live(struct auth_client *c, struct auth_client_request *req)
{
    map_remove(c, req);
    list_remove(&c->live, req);
    evtimer_del(req->deadline);
}

static void deadline_passed(evutil_socket_t fd, short what, void *arg);

static struct auth_client_request *request_new(struct auth_client *c, enum req_kind kind,
                                               auth_client_cb *cb, void *ctx)
{
    /* Inside auth_client_free() callbacks may still issue requests (they
     * fail at once); after it, the client is gone. */
    PETREL_ASSERT(c->deliver != NULL);
    struct auth_client_request *req = xcalloc(1, sizeof(*req));
    req->client = c;
    req->id = ++c->last_id;
    req->kind = kind;
    req->cb = cb;
    req->ctx = ctx;
    req->deadline = evtimer_new(c->base, deadline_passed, req);
    if (req->deadline == NULL)
        petrel_fatal("out of memory creating an auth request timer");
    return req;
}

static void request_free(struct auth_client_request *req)
{
    event_free(req->deadline);
    free(req->error);
    for (size_t i = 0; i < req->user_count; i++)
        free(req->users[i]);
    free(req->users);
    free(req);
}

/* Queues `req` (in no table) to be answered with `status` and `error` from
 * the loop, never from inside the caller's current call. */
static void fail_later(struct auth_client *c, struct auth_client_request *req,
                       enum auth_client_status status, const char *error)
{
    req->state = REQ_FAILED;
    req->fail_status = status;
    free(req->error);
    req->error = xstrdup(error);
    evtimer_del(req->deadline);
    list_push(&c->failed, req);
    event_active(c->deliver, EV_TIMEOUT, 1);
}

/* ---------- callbacks ---------- */

/* The last of the client. The reply line lives until here: a callback that
 * frees the client may still read the reply it was given. */
static void client_release(struct auth_client *c)
{
    buf_free(&c->line);
    free(c->address);
    free(c->last_error);
    free(c);
}

/* Runs a callback with the client held. False when the client was freed
 * (or is being freed) meanwhile: the caller must not touch it again. */
static bool run_callback(struct auth_client *c, auth_client_cb *cb, void *ctx,
                         const struct auth_client_reply *reply)
{
    c->refs++;
    cb(reply, ctx);
    bool usable = !c->closing;
    if (--c->refs == 0 && c->closing)
        client_release(c);
    return usable;
}

/* Gives a request, already out of every table, its final answer and frees
 * it. Returns what run_callback() returns. */
static bool finish(struct auth_client *c, struct auth_client_request *req,
                   const struct auth_client_reply *reply)
{
    req->state = REQ_ANSWERING;
    bool usable = run_callback(c, req->cb, req->ctx, reply);
    request_free(req);
    return usable;
}

static bool finish_error(struct auth_client *c, struct auth_client_request *req,
                         enum auth_client_status status, const char *reason)
{
    struct auth_client_reply reply = {.status = status, .reason = reason, .temporary = true};
    if (status == AUTH_CLIENT_FAIL)
        reply.temporary = false; /* a refused request: trying again will not help */
    return finish(c, req, &reply);
}

static void deliver_failed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct auth_client *c = arg;
    struct auth_client_request *req;
    while ((req = c->failed.head) != NULL) {
        list_remove(&c->failed, req);
        char *error = req->error;
        req->error = NULL;
        bool usable = finish_error(c, req, req->fail_status, error);
        free(error);
        if (!usable)
            return;
    }
}

static void deadline_passed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct auth_client_request *req = arg;
    struct auth_client *c = req->client;
    detach_live(c, req);
    char reason[REASON_MAX];
    snprintf(reason, sizeof(reason), "auth service %.200s did not answer within %" PRId64 " ms",
             c->address, c->timeout_ms);
    finish_error(c, req, AUTH_CLIENT_ERROR, reason);
}

/* ---------- connection ---------- */

static void unavailable_message(const struct auth_client *c, char *dst, size_t size)
{
    snprintf(dst, size, "auth service unavailable: %.300s",
             c->last_error != NULL ? c->last_error : "not connected");
}

/* Closes the connection, if any, without answering anybody. */
static void conn_close(struct auth_client *c)
{
    if (c->bev != NULL) {
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    evtimer_del(c->connect_timer);
    c->connected = false;
    c->replied = false;
}

/* The connection is gone or never came up: every request on it is failed
 * (from the loop). `failure` starts or extends the backoff; a quiet close of
 * an idle connection does not. */
static void conn_down(struct auth_client *c, const char *reason, bool failure)
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
            log_warn(COMPONENT, "auth service unavailable", "addr=%s reason=%s retry_ms=%" PRId64,
                     log_quote(q_addr, sizeof(q_addr), c->address),
                     log_quote(q_reason, sizeof(q_reason), reason), c->backoff_ms);
            c->failing = true;
        }
    }
    if (c->live.head == NULL)
        return;
    char msg[REASON_MAX + 64];
    unavailable_message(c, msg, sizeof(msg));
    struct auth_client_request *req;
    while ((req = c->live.head) != NULL) {
        detach_live(c, req);
        fail_later(c, req, AUTH_CLIENT_ERROR, msg);
    }
}

static void protocol_error(struct auth_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void protocol_error(struct auth_client *c, const char *fmt, ...)
{
    char reason[REASON_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    char q_addr[256], q_reason[REASON_MAX + 16];
    log_warn(COMPONENT, "auth protocol error", "addr=%s reason=%s",
             log_quote(q_addr, sizeof(q_addr), c->address),
             log_quote(q_reason, sizeof(q_reason), reason));
    conn_down(c, reason, true);
}

/* The first reply on a connection proves the service works. */
static void note_reply(struct auth_client *c)
{
    if (c->replied)
        return;
    c->replied = true;
    c->backoff_ms = 0;
    c->retry_at = 0;
    if (c->failing) {
        char q_addr[256];
        log_info(COMPONENT, "auth service available again", "addr=%s",
                 log_quote(q_addr, sizeof(q_addr), c->address));
        c->failing = false;
    }
}

static bool parse_request_id(const char *text, uint64_t *out)
{
    if (*text < '1' || *text > '9' || strlen(text) > 19)
        return false;
    uint64_t v = 0;
    for (const char *p = text; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return true;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* OK <id> <user> <userdb fields> for USER, VERIFY and AUTH. */
static bool reply_ok(struct auth_client *c, struct auth_client_request *req,
                     const struct auth_line *line)
{
    detach_live(c, req);
    struct userdb_entry *e = userdb_entry_new(line->fields[2]);
    char *error = NULL;
    bool usable;
    if (!auth_line_read_userdb(line, 3, e, &error)) {
        char reason[REASON_MAX];
        snprintf(reason, sizeof(reason), "bad userdb field in the auth service's reply: %.300s",
                 error);
        usable = finish_error(c, req, AUTH_CLIENT_ERROR, reason);
    } else {
        struct auth_client_reply reply = {
            .status = AUTH_CLIENT_OK, .user = line->fields[2], .userdb = e};
        usable = finish(c, req, &reply);
    }
    free(error);
    userdb_entry_free(e);
    return usable;
}

/* FAIL <id> [user=] [reason=] [temp] */
static bool reply_fail(struct auth_client *c, struct auth_client_request *req,
                       const struct auth_line *line)
{
    detach_live(c, req);
    struct auth_client_reply reply = {
        .status = AUTH_CLIENT_FAIL,
        .user = auth_line_param(line, 2, "user"),
        .reason = auth_line_param(line, 2, "reason"),
        .temporary = auth_line_param(line, 2, "temp") != NULL,
    };
    if (req->kind == REQ_USER || req->kind == REQ_ITERATE) {
        /* Lookups have no "refused": a FAIL is the service failing. */
        reply.status = AUTH_CLIENT_ERROR;
        reply.temporary = true;
        if (reply.reason == NULL || reply.reason[0] == '\0')
            reply.reason = "the auth service failed the lookup";
    }
    return finish(c, req, &reply);
}

static bool reply_not_found(struct auth_client *c, struct auth_client_request *req)
{
    detach_live(c, req);
    struct auth_client_reply reply = {.status = AUTH_CLIENT_NOT_FOUND};
    if (req->kind != REQ_USER) {
        reply.status = AUTH_CLIENT_FAIL; /* VERIFY / AUTH of an unknown user */
        reply.reason = "unknown user";
    }
    return finish(c, req, &reply);
}

static bool reply_challenge(struct auth_client *c, struct auth_client_request *req,
                            const char *challenge)
{
    req->state = REQ_CHALLENGED;
    evtimer_del(req->deadline);
    struct auth_client_reply reply = {.status = AUTH_CLIENT_CONTINUE, .challenge = challenge};
    /* The request stays live: the callback may answer, cancel, or neither. */
    return run_callback(c, req->cb, req->ctx, &reply);
}

static bool reply_done(struct auth_client *c, struct auth_client_request *req)
{
    detach_live(c, req);
    if (req->user_count > 1)
        qsort(req->users, req->user_count, sizeof(char *), compare_names);
    struct auth_client_reply reply = {
        .status = AUTH_CLIENT_OK, .users = req->users, .user_count = req->user_count};
    return finish(c, req, &reply);
}

/* Handles one reply line. False when the connection went down or the
 * client went away: stop reading. */
static bool handle_line(struct auth_client *c, char *text, size_t len)
{
    struct auth_line line;
    struct petrel_error err;
    if (!auth_line_parse(text, len, &line, &err)) {
        protocol_error(c, "unreadable reply: %s", err.message);
        return false;
    }
    const char *verb = line.fields[0];
    bool known = strcmp(verb, "OK") == 0 || strcmp(verb, "FAIL") == 0 ||
                 strcmp(verb, "NOTFOUND") == 0 || strcmp(verb, "CONT") == 0 ||
                 strcmp(verb, "ITEM") == 0 || strcmp(verb, "DONE") == 0;
    if (!known) {
        protocol_error(c, "unknown reply '%.40s'", verb);
        return false;
    }
    if (line.count < 2) {
        protocol_error(c, "%s reply without an id", verb);
        return false;
    }
    const char *id_text = line.fields[1];
    if (strcmp(verb, "FAIL") == 0 && strcmp(id_text, "-") == 0) {
        const char *reason = auth_line_param(&line, 2, "reason");
        protocol_error(c, "the auth service refused our input: %.200s",
                       reason != NULL ? reason : "no reason given");
        return false;
    }
    if (!auth_id_valid(id_text)) {
        protocol_error(c, "%s reply with an invalid id", verb);
        return false;
    }
    note_reply(c);
    uint64_t id;
    struct auth_client_request *req = NULL;
    if (parse_request_id(id_text, &id))
        req = map_find(c, id);
    if (req == NULL)
        return true; /* cancelled, or its deadline passed: the reply is dropped */

    bool lookup = req->kind == REQ_USER || req->kind == REQ_VERIFY || req->kind == REQ_SASL;
    if (strcmp(verb, "OK") == 0 && lookup && line.count >= 3)
        return reply_ok(c, req, &line);
    if (strcmp(verb, "FAIL") == 0)
        return reply_fail(c, req, &line);
    if (strcmp(verb, "NOTFOUND") == 0 && req->kind != REQ_ITERATE)
        return reply_not_found(c, req);
    if (strcmp(verb, "CONT") == 0 && req->kind == REQ_SASL && req->state == REQ_WAITING &&
        line.count >= 3)
        return reply_challenge(c, req, line.fields[2]);
    if (strcmp(verb, "ITEM") == 0 && req->kind == REQ_ITERATE && line.count >= 3) {
        req->users = xgrow(req->users, &req->user_cap, req->user_count + 1, sizeof(char *));
        req->users[req->user_count++] = xstrdup(line.fields[2]);
        evtimer_add(req->deadline, c->timeout); /* progress: the deadline starts again */
        return true;
    }
    if (strcmp(verb, "DONE") == 0 && req->kind == REQ_ITERATE)
        return reply_done(c, req);
    protocol_error(c, "unexpected %s reply (%zu fields) to request %s", verb, line.count, id_text);
    return false;
}

static void conn_read(struct bufferevent *bev, void *arg)
{
    struct auth_client *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (c->bev == bev) {
        size_t eol_len = 0;
        struct evbuffer_ptr lf = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if (lf.pos < 0) {
            if (evbuffer_get_length(in) > AUTH_LINE_MAX)
                protocol_error(c, "reply line longer than %d bytes", AUTH_LINE_MAX);
            return;
        }
        size_t len = (size_t)lf.pos;
        if (len > AUTH_LINE_MAX) {
            protocol_error(c, "reply line longer than %d bytes", AUTH_LINE_MAX);
            return;
        }
        buf_reset(&c->line);
        buf_reserve(&c->line, len + 1);
        evbuffer_remove(in, c->line.data, len + 1); /* the LF's place ends the last field */
        c->line.len = len;
        if (len == 0) {
            protocol_error(c, "empty reply line");
            return;
        }
        if (!handle_line(c, c->line.data, len))
            return;
    }
}

static void conn_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct auth_client *c = arg;
    char reason[REASON_MAX];
    if ((what & BEV_EVENT_CONNECTED) != 0) {
        c->connected = true;
        evtimer_del(c->connect_timer);
        int fd = (int)bufferevent_getfd(c->bev);
        if (c->addr.ss.ss_family != AF_UNIX) {
            /* Requests are small writes: do not hold one back waiting for
             * the acknowledgement of the previous. */
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        return;
    }
    bool busy = c->live.head != NULL;
    if (!c->connected) {
        snprintf(reason, sizeof(reason), "cannot connect to %.200s: %.150s", c->address,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(c, reason, true);
    } else if ((what & BEV_EVENT_EOF) != 0) {
        snprintf(reason, sizeof(reason), "%.200s closed the connection", c->address);
        conn_down(c, reason, busy);
    } else {
        snprintf(reason, sizeof(reason), "connection to %.200s failed: %.150s", c->address,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(c, reason, busy);
    }
}

static void connect_timed_out(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct auth_client *c = arg;
    char reason[REASON_MAX];
    snprintf(reason, sizeof(reason), "connecting to %.200s timed out after %" PRId64 " ms",
             c->address, c->timeout_ms);
    conn_down(c, reason, true);
}

/* Starts connecting. False (the connection down, with backoff) when that
 * failed at once. */
static bool conn_start(struct auth_client *c)
{
    char reason[REASON_MAX];
    c->bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) {
        snprintf(reason, sizeof(reason), "cannot create a connection to %.200s", c->address);
        conn_down(c, reason, true);
        return false;
    }
    c->connected = false;
    c->replied = false;
    bufferevent_setcb(c->bev, conn_read, NULL, conn_event, c);
    /* Reading stops once a line without LF could not be a valid one. */
    bufferevent_setwatermark(c->bev, EV_READ, 0, AUTH_LINE_MAX + 1);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&c->addr.ss, (int)c->addr.len) < 0) {
        snprintf(reason, sizeof(reason), "cannot connect to %.200s: %.150s", c->address,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(c, reason, true);
        return false;
    }
    evtimer_add(c->connect_timer, c->timeout);
    return true;
}

/* Sends the request line in `out` (which is wiped: it may hold a password)
 * or queues the request's failure. */
static void submit(struct auth_client *c, struct auth_client_request *req, struct buf *out,
                   enum auth_client_status too_long_status)
{
    char msg[REASON_MAX + 64];
    if (c->closing) {
        fail_later(c, req, AUTH_CLIENT_ERROR, "auth client closed");
    } else if (out->len - 1 > AUTH_LINE_MAX) {
        snprintf(msg, sizeof(msg), "request longer than the auth protocol's %d-byte line limit",
                 AUTH_LINE_MAX);
        fail_later(c, req, too_long_status, msg);
    } else if (c->bev == NULL && mono_ms() < c->retry_at) {
        unavailable_message(c, msg, sizeof(msg));
        fail_later(c, req, AUTH_CLIENT_ERROR, msg);
    } else if (c->bev == NULL && !conn_start(c)) {
        unavailable_message(c, msg, sizeof(msg));
        fail_later(c, req, AUTH_CLIENT_ERROR, msg);
    } else {
        make_live(c, req);
        bufferevent_write(c->bev, out->data, out->len);
    }
    if (out->data != NULL)
        explicit_bzero(out->data, out->cap);
    buf_free(out);
}

/* Reserves room for a request line whose fields total `bytes` before
 * escaping (which at most doubles them), so that a buffer holding a
 * password never grows: the old block would be freed without a wipe. */
static void reserve_line(struct buf *out, size_t bytes)
{
    buf_reserve(out, 2 * bytes + 128);
}

static size_t len_or_0(const char *s)
{
    return s != NULL ? strlen(s) : 0;
}

static void add_id(struct buf *out, uint64_t id)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, id);
    auth_line_add(out, text);
}

/* ---------- public ---------- */

static bool has_port(const struct net_addr *a)
{
    if (a->ss.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&a->ss)->sin_port != 0;
    if (a->ss.ss_family == AF_INET6)
        return ((const struct sockaddr_in6 *)&a->ss)->sin6_port != 0;
    return true; /* a Unix socket */
}

struct auth_client *auth_client_new(struct event_base *base, const char *addr, int64_t timeout_ms,
                                    struct petrel_error *err)
{
    if (timeout_ms <= 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "auth client timeout must be positive");
        return NULL;
    }
    struct auth_client *c = xcalloc(1, sizeof(*c));
    if (!net_addr_parse(addr, &c->addr, err)) {
        free(c);
        return NULL;
    }
    if (!has_port(&c->addr)) {
        free(c);
        petrel_error_set(err, PETREL_ERR_INVALID, "auth service address '%s' needs a port", addr);
        return NULL;
    }
    c->base = base;
    c->address = xstrdup(addr);
    c->timeout_ms = timeout_ms;
    c->timeout_tv.tv_sec = (time_t)(timeout_ms / 1000);
    c->timeout_tv.tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000;
    /* Every deadline has the same length: libevent keeps such timers in a
     * queue instead of its heap. */
    c->timeout = event_base_init_common_timeout(base, &c->timeout_tv);
    if (c->timeout == NULL)
        c->timeout = &c->timeout_tv;
    c->connect_timer = evtimer_new(base, connect_timed_out, c);
    c->deliver = event_new(base, -1, 0, deliver_failed, c);
    if (c->connect_timer == NULL || c->deliver == NULL)
        petrel_fatal("out of memory creating auth client events");
    c->bucket_count = MAP_MIN_BUCKETS;
    c->buckets = xcalloc(c->bucket_count, sizeof(*c->buckets));
    return c;
}

void auth_client_free(struct auth_client *c)
{
    if (c == NULL || c->closing)
        return;
    c->closing = true;
    c->refs++;
    conn_close(c);
    /* Callbacks may cancel other requests or issue new ones (which fail at
     * once here): take whatever is left until nothing is. */
    for (;;) {
        struct auth_client_request *req = c->live.head;
        if (req != NULL) {
            detach_live(c, req);
        } else if ((req = c->failed.head) != NULL) {
            list_remove(&c->failed, req);
        } else {
            break;
        }
        finish_error(c, req, AUTH_CLIENT_ERROR, "auth client closed");
    }
    event_free(c->connect_timer);
    event_free(c->deliver);
    c->connect_timer = NULL;
    c->deliver = NULL;
    free(c->buckets);
    c->buckets = NULL;
    if (--c->refs == 0)
        client_release(c);
}

const char *auth_client_address(const struct auth_client *c)
{
    return c->address;
}

size_t auth_client_pending(const struct auth_client *c)
{
    return c->live.count + c->failed.count;
}

struct auth_client_request *auth_client_user(struct auth_client *c, const char *username,
                                             auth_client_cb *cb, void *ctx)
{
    struct auth_client_request *req = request_new(c, REQ_USER, cb, ctx);
    struct buf out = {0};
    auth_line_add(&out, "USER");
    add_id(&out, req->id);
    auth_line_add(&out, username != NULL ? username : "");
    auth_line_end(&out);
    submit(c, req, &out, AUTH_CLIENT_ERROR);
    return req;
}

struct auth_client_request *auth_client_verify(struct auth_client *c, const char *username,
                                               const char *password, const char *service,
                                               const char *ip, auth_client_cb *cb, void *ctx)
{
    struct auth_client_request *req = request_new(c, REQ_VERIFY, cb, ctx);
    struct buf out = {0};
    reserve_line(&out, len_or_0(username) + len_or_0(password) + len_or_0(service) + len_or_0(ip));
    auth_line_add(&out, "VERIFY");
    add_id(&out, req->id);
    auth_line_add(&out, username != NULL ? username : "");
    auth_line_add(&out, password != NULL ? password : "");
    if (service != NULL)
        auth_line_add_param(&out, "service", service);
    if (ip != NULL)
        auth_line_add_param(&out, "ip", ip);
    auth_line_end(&out);
    submit(c, req, &out, AUTH_CLIENT_FAIL);
    return req;
}

struct auth_client_request *auth_client_sasl_begin(struct auth_client *c, const char *mech,
                                                   const char *service, const char *ip,
                                                   const char *initial_response, auth_client_cb *cb,
                                                   void *ctx)
{
    struct auth_client_request *req = request_new(c, REQ_SASL, cb, ctx);
    struct buf out = {0};
    reserve_line(&out,
                 len_or_0(mech) + len_or_0(service) + len_or_0(ip) + len_or_0(initial_response));
    auth_line_add(&out, "AUTH");
    add_id(&out, req->id);
    auth_line_add(&out, mech != NULL ? mech : "");
    if (service != NULL)
        auth_line_add_param(&out, "service", service);
    if (ip != NULL)
        auth_line_add_param(&out, "ip", ip);
    if (initial_response != NULL)
        auth_line_add_param(&out, "resp", initial_response);
    auth_line_end(&out);
    submit(c, req, &out, AUTH_CLIENT_FAIL);
    return req;
}

static void abort_exchange(struct auth_client *c, const struct auth_client_request *req);

void auth_client_sasl_continue(struct auth_client_request *req, const char *response_b64)
{
    /* Anything but a request holding a challenge is already answered or
     * about to be (its connection broke, or the client is being freed):
     * nothing to send. */
    if (req == NULL || req->state != REQ_CHALLENGED || req->client->bev == NULL)
        return;
    struct auth_client *c = req->client;
    struct buf out = {0};
    reserve_line(&out, len_or_0(response_b64));
    auth_line_add(&out, "CONT");
    add_id(&out, req->id);
    auth_line_add(&out, response_b64 != NULL ? response_b64 : "");
    auth_line_end(&out);
    if (out.len - 1 > AUTH_LINE_MAX) {
        abort_exchange(c, req); /* or the service keeps the exchange and its slot */
        detach_live(c, req);
        fail_later(c, req, AUTH_CLIENT_FAIL, "SASL response longer than the line limit");
    } else {
        req->state = REQ_WAITING;
        evtimer_add(req->deadline, c->timeout);
        bufferevent_write(c->bev, out.data, out.len);
    }
    explicit_bzero(out.data, out.cap);
    buf_free(&out);
}

static void abort_exchange(struct auth_client *c, const struct auth_client_request *req)
{
    if (c->bev == NULL)
        return; /* auth_client_free() closed the connection: the exchange went with it */
    struct buf out = {0};
    auth_line_add(&out, "CONT");
    add_id(&out, req->id);
    auth_line_add(&out, "*");
    auth_line_end(&out);
    bufferevent_write(c->bev, out.data, out.len);
    buf_free(&out);
}

struct auth_client_request *auth_client_iterate(struct auth_client *c, auth_client_cb *cb,
                                                void *ctx)
{
    struct auth_client_request *req = request_new(c, REQ_ITERATE, cb, ctx);
    struct buf out = {0};
    auth_line_add(&out, "ITERATE");
    add_id(&out, req->id);
    auth_line_end(&out);
    submit(c, req, &out, AUTH_CLIENT_ERROR);
    return req;
}

void auth_client_cancel(struct auth_client_request *req)
{
    if (req == NULL)
        return;
    struct auth_client *c = req->client;
    switch (req->state) {
    case REQ_WAITING:
        detach_live(c, req);
        break;
    case REQ_CHALLENGED:
        /* The service holds the exchange (and one of the connection's
         * request slots) until it gets an answer: "*" ends it, as in IMAP
         * AUTHENTICATE. Its FAIL comes back for an id nobody waits for. */
        abort_exchange(c, req);
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
