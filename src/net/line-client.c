/* The line-protocol client core (line-client.h).
 *
 * Connection: one bufferevent. Lines written while the connect is under
 * way wait in it until the connect completes. The reader takes each
 * LF-terminated line into `line` (the LF's place included, so the owner can
 * split in place) and stops reading once a line without LF could not be a
 * valid one (the read watermark).
 *
 * Requests: live ones (WAITING, HELD) sit in a list in submission order and
 * in an id map (ids come from a counter, so their low bits index the
 * buckets evenly); failed ones in a second list, answered by the `deliver`
 * event. A request leaves every table before its final answer, so an
 * answer callback may cancel or start others. */
#include "net/line-client.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/dlist.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/backoff.h"
#include "net/dial.h"
#include "net/endpoint.h"

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

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define MAP_MIN_BUCKETS 16
#define REASON_MAX 400
#define LOG_FIELDS_MAX 128

struct req_list {
    struct line_request *head;
    struct line_request *tail;
    size_t count;
};

struct line_client {
    struct event_base *base;
    const struct line_client_ops *ops;
    void *owner;
    const char *protocol;
    const char *peer;
    char component[48];
    char *address;
    struct net_dialer *dialer; /* the configured address, resolved at each connect */
    int64_t timeout_ms;
    struct timeval timeout_tv;
    const struct timeval *timeout; /* libevent's common timeout for timeout_tv */
    size_t max_line;
    size_t output_max;
    bool keepalive;
    bool handshake;

    struct bufferevent *bev; /* NULL: no connection */
    bool connected;          /* the connect completed */
    bool up;                 /* line_client_mark_up() on this connection */
    bool keep;               /* line_client_keep_connected() */
    struct event *connect_timer;
    struct event *reconnect_timer;
    struct buf line; /* the reply being handled */

    struct req_list live;   /* WAITING and HELD, also in the map */
    struct req_list failed; /* FAILED, answered by `deliver` */
    struct line_request **buckets;
    size_t bucket_count; /* a power of two */
    struct event *deliver;
    uint64_t last_id;

    struct net_backoff backoff;
    char *last_error;
    bool failing; /* a failure was logged and the peer was not up since */

    bool closing; /* line_client_free() ran or is running */
    unsigned refs;
};

/* ---------- request tables ---------- */

static void list_push(struct req_list *l, struct line_request *r)
{
    DLIST_APPEND(l, r);
    l->count++;
}

static void list_remove(struct req_list *l, struct line_request *r)
{
    DLIST_REMOVE(l, r);
    l->count--;
}

static size_t map_slot(const struct line_client *lc, uint64_t id)
{
    return (size_t)(id & (lc->bucket_count - 1));
}

static void map_grow(struct line_client *lc)
{
    size_t count = lc->bucket_count * 2;
    struct line_request **buckets = xcalloc(count, sizeof(*buckets));
    for (size_t i = 0; i < lc->bucket_count; i++) {
        struct line_request *r = lc->buckets[i];
        while (r != NULL) {
            struct line_request *next = r->map_next;
            size_t slot = (size_t)(r->id & (count - 1));
            r->map_next = buckets[slot];
            buckets[slot] = r;
            r = next;
        }
    }
    free(lc->buckets);
    lc->buckets = buckets;
    lc->bucket_count = count;
}

static void map_remove(struct line_client *lc, struct line_request *req)
{
    struct line_request **p = &lc->buckets[map_slot(lc, req->id)];
    while (*p != NULL && *p != req)
        p = &(*p)->map_next;
    if (*p == req)
        *p = req->map_next;
    req->map_next = NULL;
}

static bool is_live(const struct line_request *req)
{
    return req->state == LINE_REQUEST_WAITING || req->state == LINE_REQUEST_HELD;
}

/* Makes `req` live: waiting for its reply, with its deadline running. */
static void make_live(struct line_client *lc, struct line_request *req)
{
    if (lc->live.count >= lc->bucket_count)
        map_grow(lc);
    size_t slot = map_slot(lc, req->id);
    req->map_next = lc->buckets[slot];
    lc->buckets[slot] = req;
    list_push(&lc->live, req);
    req->state = LINE_REQUEST_WAITING;
    evtimer_add(req->deadline, lc->timeout);
}

void line_client_detach(struct line_client *lc, struct line_request *req)
{
    PETREL_ASSERT(is_live(req));
    map_remove(lc, req);
    list_remove(&lc->live, req);
    evtimer_del(req->deadline);
    req->state = LINE_REQUEST_ANSWERING;
}

struct line_request *line_client_find(const struct line_client *lc, uint64_t id)
{
    for (struct line_request *r = lc->buckets[map_slot(lc, id)]; r != NULL; r = r->map_next) {
        if (r->id == id)
            return r;
    }
    return NULL;
}

static void deadline_passed(evutil_socket_t fd, short what, void *arg);

void line_request_init(struct line_client *lc, struct line_request *req)
{
    /* Inside line_client_free() callbacks may still start requests (they
     * fail at once); after it, the client is gone. */
    PETREL_ASSERT(lc->deliver != NULL);
    memset(req, 0, sizeof(*req));
    req->client = lc;
    req->id = ++lc->last_id;
    req->state = LINE_REQUEST_NEW;
    req->deadline = evtimer_new(lc->base, deadline_passed, req);
    if (req->deadline == NULL)
        petrel_fatal("out of memory creating a %s request timer", lc->protocol);
}

void line_request_cleanup(struct line_request *req)
{
    event_free(req->deadline);
    req->deadline = NULL;
    free(req->error);
    req->error = NULL;
}

enum line_request_state line_request_state(const struct line_request *req)
{
    return req->state;
}

void line_request_touch(struct line_request *req)
{
    PETREL_ASSERT(is_live(req));
    req->state = LINE_REQUEST_WAITING;
    evtimer_add(req->deadline, req->client->timeout);
}

void line_request_hold(struct line_request *req)
{
    PETREL_ASSERT(is_live(req));
    req->state = LINE_REQUEST_HELD;
    evtimer_del(req->deadline);
}

void line_client_fail_later(struct line_client *lc, struct line_request *req, const char *reason)
{
    if (is_live(req))
        line_client_detach(lc, req);
    req->state = LINE_REQUEST_FAILED;
    free(req->error);
    req->error = xstrdup(reason);
    evtimer_del(req->deadline);
    list_push(&lc->failed, req);
    event_active(lc->deliver, EV_TIMEOUT, 1);
}

bool line_client_cancel(struct line_client *lc, struct line_request *req)
{
    switch (req->state) {
    case LINE_REQUEST_WAITING:
    case LINE_REQUEST_HELD:
        line_client_detach(lc, req);
        return true;
    case LINE_REQUEST_FAILED:
        list_remove(&lc->failed, req);
        return true;
    case LINE_REQUEST_NEW:
        return true;
    case LINE_REQUEST_ANSWERING:
        break;
    }
    return false; /* inside its own final callback: freed when that returns */
}

size_t line_client_pending(const struct line_client *lc)
{
    return lc->live.count + lc->failed.count;
}

/* ---------- references ---------- */

/* The last of the client. The reply line lives until here: a callback that
 * frees the client may still read the reply it was given. */
static void client_release(struct line_client *lc)
{
    lc->ops->release(lc->owner);
    buf_free(&lc->line);
    free(lc->buckets);
    free(lc->address);
    net_dialer_free(lc->dialer);
    free(lc->last_error);
    free(lc);
}

void line_client_hold(struct line_client *lc)
{
    lc->refs++;
}

bool line_client_drop(struct line_client *lc)
{
    bool usable = !lc->closing;
    if (--lc->refs == 0 && lc->closing)
        client_release(lc);
    return usable;
}

bool line_client_closing(const struct line_client *lc)
{
    return lc->closing;
}

const char *line_client_address(const struct line_client *lc)
{
    return lc->address;
}

/* Answers `req` (out of every table) through the owner. */
static bool fail_now(struct line_client *lc, struct line_request *req, const char *reason)
{
    req->state = LINE_REQUEST_ANSWERING;
    return lc->ops->fail(lc->owner, req, reason);
}

static void deliver_failed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct line_client *lc = arg;
    struct line_request *req;
    while ((req = lc->failed.head) != NULL) {
        list_remove(&lc->failed, req);
        char *error = req->error;
        req->error = NULL;
        bool usable = fail_now(lc, req, error);
        free(error);
        if (!usable)
            return;
    }
}

static void deadline_passed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct line_request *req = arg;
    struct line_client *lc = req->client;
    line_client_detach(lc, req);
    char reason[REASON_MAX];
    snprintf(reason, sizeof(reason), "%s %.200s did not answer within %" PRId64 " ms", lc->peer,
             lc->address, lc->timeout_ms);
    fail_now(lc, req, reason);
}

/* ---------- the connection ---------- */

static void unavailable_message(const struct line_client *lc, char *dst, size_t size)
{
    snprintf(dst, size, "%s unavailable: %.300s", lc->peer,
             lc->last_error != NULL ? lc->last_error : "not connected");
}

static const char *log_fields(struct line_client *lc, char *dst, size_t size)
{
    dst[0] = '\0';
    if (lc->ops->log_fields != NULL)
        lc->ops->log_fields(lc->owner, dst, size);
    return dst;
}

/* Closes the connection, if any, without answering anybody. */
static void conn_close(struct line_client *lc)
{
    if (lc->bev != NULL) {
        net_dialer_cancel(lc->dialer);
        bufferevent_free(lc->bev);
        lc->bev = NULL;
    }
    evtimer_del(lc->connect_timer);
    lc->connected = false;
    lc->up = false;
}

static void schedule_reconnect(struct line_client *lc)
{
    if (lc->closing || !lc->keep || lc->bev != NULL)
        return;
    int64_t wait = net_backoff_remaining(&lc->backoff, clock_mono_ms());
    if (wait < BACKOFF_MIN_MS)
        wait = BACKOFF_MIN_MS;
    struct timeval tv = clock_ms_to_timeval(wait);
    evtimer_add(lc->reconnect_timer, &tv);
}

/* The connection is gone or never came up: every request on it is failed
 * (from the loop). `failure` starts or extends the backoff; a quiet close
 * of an idle connection does not. */
static void conn_down(struct line_client *lc, const char *reason, bool failure)
{
    conn_close(lc);
    free(lc->last_error);
    lc->last_error = xstrdup(reason);
    if (failure) {
        int64_t wait = net_backoff_failed(&lc->backoff, clock_mono_ms());
        if (!lc->failing) {
            char q_addr[256], q_reason[REASON_MAX], msg[64], extra[LOG_FIELDS_MAX];
            snprintf(msg, sizeof(msg), "%s unavailable", lc->peer);
            log_warn(lc->component, msg, "addr=%s reason=%s retry_ms=%" PRId64 "%s",
                     log_quote(q_addr, sizeof(q_addr), lc->address),
                     log_quote(q_reason, sizeof(q_reason), reason), wait,
                     log_fields(lc, extra, sizeof(extra)));
            lc->failing = true;
        }
    }
    if (lc->live.head != NULL) {
        char msg[REASON_MAX + 64];
        unavailable_message(lc, msg, sizeof(msg));
        while (lc->live.head != NULL)
            line_client_fail_later(lc, lc->live.head, msg);
    }
    schedule_reconnect(lc);
}

void line_client_protocol_error(struct line_client *lc, const char *fmt, ...)
{
    char reason[REASON_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    char q_addr[256], q_reason[REASON_MAX + 16], msg[64];
    snprintf(msg, sizeof(msg), "%s protocol error", lc->protocol);
    log_warn(lc->component, msg, "addr=%s reason=%s",
             log_quote(q_addr, sizeof(q_addr), lc->address),
             log_quote(q_reason, sizeof(q_reason), reason));
    conn_down(lc, reason, true);
}

bool line_client_is_open(const struct line_client *lc)
{
    return lc->bev != NULL;
}

bool line_client_is_up(const struct line_client *lc)
{
    return lc->up;
}

bool line_client_mark_up(struct line_client *lc)
{
    if (lc->up)
        return false;
    lc->up = true;
    net_backoff_reset(&lc->backoff);
    if (!lc->failing)
        return false;
    char q_addr[256], msg[64], extra[LOG_FIELDS_MAX];
    snprintf(msg, sizeof(msg), "%s available again", lc->peer);
    log_info(lc->component, msg, "addr=%s%s", log_quote(q_addr, sizeof(q_addr), lc->address),
             log_fields(lc, extra, sizeof(extra)));
    lc->failing = false;
    return true;
}

bool line_client_write(struct line_client *lc, const char *data, size_t len)
{
    if (lc->bev == NULL)
        return false;
    if (lc->output_max > 0 &&
        evbuffer_get_length(bufferevent_get_output(lc->bev)) > lc->output_max) {
        char reason[128];
        snprintf(reason, sizeof(reason), "the %s is not reading its input", lc->peer);
        conn_down(lc, reason, true);
        return false;
    }
    bufferevent_write(lc->bev, data, len);
    return true;
}

static void conn_read(struct bufferevent *bev, void *arg)
{
    struct line_client *lc = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (lc->bev == bev) {
        size_t eol_len = 0;
        struct evbuffer_ptr lf = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if (lf.pos < 0) {
            if (evbuffer_get_length(in) > lc->max_line)
                line_client_protocol_error(lc, "reply line longer than %zu bytes", lc->max_line);
            return;
        }
        size_t len = (size_t)lf.pos;
        if (len > lc->max_line) {
            line_client_protocol_error(lc, "reply line longer than %zu bytes", lc->max_line);
            return;
        }
        buf_reset(&lc->line);
        buf_reserve(&lc->line, len + 1);
        evbuffer_remove(in, lc->line.data, len + 1); /* the LF's place ends the last field */
        lc->line.len = len;
        line_client_hold(lc);
        bool go_on = lc->ops->line(lc->owner, lc->line.data, len);
        bool usable = line_client_drop(lc);
        if (!go_on || !usable)
            return;
    }
}

static void conn_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct line_client *lc = arg;
    char reason[REASON_MAX];
    if ((what & BEV_EVENT_CONNECTED) != 0) {
        lc->connected = true;
        evtimer_del(lc->connect_timer);
        int fd = (int)bufferevent_getfd(lc->bev);
        if (!net_dialer_is_unix(lc->dialer)) {
            /* Requests are small writes: do not hold one back waiting for
             * the acknowledgement of the previous. */
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            if (lc->keepalive)
                setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        }
        return;
    }
    if (!lc->connected) {
        const char *dns = net_dialer_error(lc->dialer);
        snprintf(reason, sizeof(reason), "cannot connect to %.200s: %.150s", lc->address,
                 dns != NULL ? dns : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(lc, reason, true);
    } else if ((what & BEV_EVENT_EOF) != 0) {
        snprintf(reason, sizeof(reason), "%.200s closed the connection", lc->address);
        /* With a handshake, closed before accepting it: as good as refused. */
        conn_down(lc, reason, (lc->handshake && !lc->up) || lc->live.head != NULL);
    } else {
        snprintf(reason, sizeof(reason), "connection to %.200s failed: %.150s", lc->address,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(lc, reason, true);
    }
}

static void connect_timed_out(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct line_client *lc = arg;
    char reason[REASON_MAX];
    snprintf(reason, sizeof(reason), "connecting to %.200s timed out after %" PRId64 " ms",
             lc->address, lc->timeout_ms);
    conn_down(lc, reason, true);
}

/* Starts connecting and lets the owner queue its first lines. False (the
 * connection down, with backoff) when that failed at once. */
static bool conn_start(struct line_client *lc)
{
    char reason[REASON_MAX];
    evtimer_del(lc->reconnect_timer);
    lc->bev = bufferevent_socket_new(lc->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (lc->bev == NULL) {
        snprintf(reason, sizeof(reason), "cannot create a connection to %.200s", lc->address);
        conn_down(lc, reason, true);
        return false;
    }
    lc->connected = false;
    lc->up = false;
    bufferevent_setcb(lc->bev, conn_read, NULL, conn_event, lc);
    /* Reading stops once a line without LF could not be a valid one. */
    bufferevent_setwatermark(lc->bev, EV_READ, 0, lc->max_line + 1);
    bufferevent_enable(lc->bev, EV_READ | EV_WRITE);
    if (!net_dialer_connect(lc->dialer, lc->bev)) {
        const char *dns = net_dialer_error(lc->dialer);
        snprintf(reason, sizeof(reason), "cannot connect to %.200s: %.150s", lc->address,
                 dns != NULL ? dns : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_down(lc, reason, true);
        return false;
    }
    evtimer_add(lc->connect_timer, lc->timeout);
    if (lc->ops->opened != NULL)
        lc->ops->opened(lc->owner);
    return true;
}

bool line_client_ensure(struct line_client *lc)
{
    if (lc->closing)
        return false;
    if (lc->bev != NULL)
        return true;
    if (net_backoff_remaining(&lc->backoff, clock_mono_ms()) > 0) {
        schedule_reconnect(lc);
        return false;
    }
    return conn_start(lc);
}

static void reconnect_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct line_client *lc = arg;
    if (lc->bev == NULL && lc->keep)
        conn_start(lc);
}

void line_client_keep_connected(struct line_client *lc, bool keep)
{
    lc->keep = keep;
    if (!keep && lc->reconnect_timer != NULL)
        evtimer_del(lc->reconnect_timer);
}

void line_client_submit(struct line_client *lc, struct line_request *req, const char *data,
                        size_t len)
{
    char msg[REASON_MAX + 64];
    if (lc->closing) {
        snprintf(msg, sizeof(msg), "%s client closed", lc->protocol);
        line_client_fail_later(lc, req, msg);
    } else if (!line_client_ensure(lc) || !line_client_write(lc, data, len)) {
        unavailable_message(lc, msg, sizeof(msg));
        line_client_fail_later(lc, req, msg);
    } else {
        make_live(lc, req);
    }
}

/* ---------- life cycle ---------- */

struct line_client *line_client_new(struct event_base *base, const struct line_client_config *cfg,
                                    const struct line_client_ops *ops, void *owner,
                                    struct petrel_error *err)
{
    if (cfg->timeout_ms <= 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "%s client timeout must be positive",
                         cfg->protocol);
        return NULL;
    }
    if (cfg->address == NULL) {
        petrel_error_set(err, PETREL_ERR_INVALID, "no %s address", cfg->peer);
        return NULL;
    }
    struct net_endpoint ep;
    if (!net_endpoint_parse(cfg->address,
                            NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK | NET_ENDPOINT_PORT_NONZERO,
                            0, &ep, err))
        return NULL;
    struct line_client *lc = xcalloc(1, sizeof(*lc));
    lc->dialer = net_dialer_new(base, &ep);
    lc->base = base;
    lc->ops = ops;
    lc->owner = owner;
    lc->protocol = cfg->protocol;
    lc->peer = cfg->peer;
    snprintf(lc->component, sizeof(lc->component), "%s-client", cfg->protocol);
    lc->address = xstrdup(cfg->address);
    lc->timeout_ms = cfg->timeout_ms;
    lc->max_line = cfg->max_line;
    lc->output_max = cfg->output_max;
    lc->keepalive = cfg->keepalive;
    net_backoff_init(&lc->backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
    lc->handshake = cfg->handshake;
    lc->timeout_tv = clock_ms_to_timeval(cfg->timeout_ms);
    /* Every deadline has the same length: libevent keeps such timers in a
     * queue instead of its heap. */
    lc->timeout = event_base_init_common_timeout(base, &lc->timeout_tv);
    if (lc->timeout == NULL)
        lc->timeout = &lc->timeout_tv;
    lc->connect_timer = evtimer_new(base, connect_timed_out, lc);
    lc->reconnect_timer = evtimer_new(base, reconnect_cb, lc);
    lc->deliver = event_new(base, -1, 0, deliver_failed, lc);
    if (lc->connect_timer == NULL || lc->reconnect_timer == NULL || lc->deliver == NULL)
        petrel_fatal("out of memory creating %s client events", cfg->protocol);
    lc->bucket_count = MAP_MIN_BUCKETS;
    lc->buckets = xcalloc(lc->bucket_count, sizeof(*lc->buckets));
    return lc;
}

void line_client_free(struct line_client *lc)
{
    if (lc == NULL || lc->closing)
        return;
    lc->closing = true;
    lc->refs++;
    conn_close(lc);
    /* Callbacks may cancel other requests or start new ones (which fail at
     * once here): take whatever is left until nothing is. */
    char msg[64];
    snprintf(msg, sizeof(msg), "%s client closed", lc->protocol);
    for (;;) {
        struct line_request *req = lc->live.head;
        if (req != NULL)
            line_client_detach(lc, req);
        else if ((req = lc->failed.head) != NULL)
            list_remove(&lc->failed, req);
        else
            break;
        fail_now(lc, req, msg);
    }
    event_free(lc->connect_timer);
    event_free(lc->reconnect_timer);
    event_free(lc->deliver);
    lc->connect_timer = NULL;
    lc->reconnect_timer = NULL;
    lc->deliver = NULL;
    if (--lc->refs == 0)
        client_release(lc);
}
