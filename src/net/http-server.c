#include "net/http-server.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/dlist.h"
#include "core/json-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/conn-limits.h"
#include "net/conn-slots.h"
#include "net/deadline.h"
#include "net/http-router.h"
#include "net/listener-set.h"
#include "net/sockaddr.h"
#include "net/tls-conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define HTTP_MAX_HEAD (64 * 1024)
#define HTTP_MAX_TARGET (8 * 1024)
#define HTTP_MAX_PARAMS 8
#define HTTP_STREAM_HIGH_WATER (256 * 1024)
#define HTTP_HEAD_READ_TIMEOUT_MS 30000
/* The head timeout (and keep-alive idle) once 3/4 of max_connections are
 * taken, and always for clients outside allowed_nets: nginx shortens its
 * timeouts the same way when connections run short. */
#define HTTP_PRESSED_TIMEOUT_MS 5000
#define HTTP_WRITE_TIMEOUT_S 60
#define HTTP_LINGER_MS 2000
/* The next pipelined request of a connection is not started while more
 * than this of earlier replies waits to be sent: a client that pipelines
 * and never reads holds one reply in memory, not thousands. */
#define HTTP_PIPELINE_OUTPUT_MAX (256 * 1024)
/* Input read ahead of the request being handled: a head fits, pipelined
 * requests beyond wait in the kernel. */
#define HTTP_INPUT_MAX (2 * HTTP_MAX_HEAD)
/* Clients outside allowed_nets only ever get a public route or 403: a
 * couple of connections each, and few in all. */
#define HTTP_OUTSIDER_PER_IP 2
#define HTTP_OUTSIDER_MAX 64
#define HTTP_DEFAULT_PER_IP 128

enum conn_state { CONN_READ_HEAD, CONN_READ_BODY, CONN_HANDLING, CONN_CLOSING };

struct http_conn {
    struct http_server *srv;
    struct bufferevent *bev;
    struct sockaddr_storage peer;
    char peer_ip[64];
    enum conn_state state;
    struct net_deadline *timer; /* head, keep-alive idle, linger */
    struct http_request *req;
    bool close_when_flushed;
    bool head_timer_armed; /* the current request's head has started arriving */
    bool lingering;        /* reply sent, write side shut, draining input */
    bool outsider;         /* outside allowed_nets: public routes or 403 only */
    bool output_wait;      /* reading paused until earlier replies have left */
    struct http_conn *prev;
    struct http_conn *next;
};

struct http_request {
    struct http_server *srv;
    struct http_conn *conn; /* NULL once detached (client gone / timed out) */
    struct buf head_bytes;
    struct http_head head;
    enum http_method method;
    struct http_target target;
    /* The route lookup, done once per request when the head is in (the
     * allow-list, the body limit and the dispatch all need it). */
    enum http_route_result found;
    struct http_route_match match;
    bool query_parsed;
    struct http_query_param query[HTTP_MAX_QUERY_PARAMS];
    size_t query_count;
    struct buf body;
    uint64_t body_remaining;
    size_t body_limit;
    struct http_chunked chunked;
    const struct http_route *route;
    bool dispatched;
    bool answered; /* response fully produced (or abandoned) */
    bool in_cancel;       /* inside the cancel callback: freeing is deferred */
    bool metrics_recorded;
    bool streaming;
    bool chunked_out;
    bool head_only;
    bool keep_alive;
    int status;
    http_cancel_fn cancel;
    void *cancel_ctx;
    http_drain_fn drain;
    void *drain_ctx;
    struct net_deadline *timeout; /* timeout or stream_timeout, once dispatched */
    struct timespec start;
    char **header_copies;
    size_t header_copy_count;
    size_t header_copy_cap;
};

struct http_server {
    struct event_base *base;
    char *name;
    size_t max_body;
    size_t large_body;
    int64_t timeout_ms;
    int64_t stream_timeout_ms;
    int64_t idle_timeout_ms;
    bool token_enabled;
    unsigned char token_digest[32];
    EVP_MD *sha256; /* fetched once: EVP_sha256() would make every digest fetch it */
    struct cidr_list allowed;
    struct conn_limits *limits;
    struct conn_limits *outsider_limits;
    size_t outsider_count;
    SSL_CTX *tls;
    struct metric_family *request_seconds;
    struct http_router router;
    struct cleanup {
        void (*fn)(void *ctx);
        void *ctx;
    } *cleanups;
    size_t cleanup_count;
    size_t cleanup_cap;
    struct net_listener_set *listeners;
    struct conn_slots *slots; /* max_connections: the listeners pause at max */
    struct http_conn *conns;
    size_t in_flight;
    bool stopping;
    time_t date_second;
    char date[64];
};

static void conn_free(struct http_conn *conn);
static void conn_process(struct http_conn *conn);
static void request_finish(struct http_request *req);
static void request_abandon(struct http_request *req, enum http_cancel_reason why);

/* ---------- small helpers ---------- */

static const char *status_text(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 417:
        return "Expectation Failed";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

static const char *http_date(struct http_server *srv)
{
    time_t now = time(NULL);
    if (now != srv->date_second) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(srv->date, sizeof(srv->date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        srv->date_second = now;
    }
    return srv->date;
}

static void sha256(const EVP_MD *md, const void *data, size_t len, unsigned char out[32])
{
    unsigned int out_len = 32;
    if (EVP_Digest(data, len, out, &out_len, md, NULL) != 1)
        petrel_fatal("EVP_Digest failed");
}

static char *error_json(const char *message)
{
    json_t *obj = json_pack("{s:s}", "error", message);
    if (obj == NULL) /* message was not valid UTF-8 */
        obj = json_pack("{s:s}", "error", "invalid request");
    char *s = json_dump_compact(obj);
    json_decref(obj);
    return s;
}

/* Writes a complete response directly to a connection (used before a
 * request object exists, e.g. for parse errors). Marks it for closing. */
static void conn_send_error_and_close(struct http_conn *conn, int status, const char *message)
{
    char *body = error_json(message);
    struct evbuffer *out = bufferevent_get_output(conn->bev);
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\nDate: %s\r\nConnection: close\r\n\r\n%s",
                        status, status_text(status), strlen(body), http_date(conn->srv), body);
    free(body);
    conn->state = CONN_CLOSING;
    conn->close_when_flushed = true;
    /* Keep reading (and discarding) so the client sees the response rather
     * than a reset caused by unread data; the timer bounds the linger. */
    net_deadline_arm(conn->timer, HTTP_LINGER_MS);
}

/* ---------- server set-up ---------- */

struct http_server *http_server_new(struct event_base *base,
                                    const struct http_server_options *opts)
{
    struct http_server *srv = xcalloc(1, sizeof(*srv));
    srv->base = base;
    srv->name = xstrdup(opts->name != NULL ? opts->name : "http");
    srv->max_body = opts->max_body != 0 ? opts->max_body : 1024 * 1024;
    srv->large_body = opts->large_body != 0 ? opts->large_body : 96 * 1024 * 1024;
    srv->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 30000;
    srv->stream_timeout_ms = opts->stream_timeout_ms > 0 ? opts->stream_timeout_ms : 300000;
    srv->idle_timeout_ms = opts->idle_timeout_ms > 0 ? opts->idle_timeout_ms : 60000;
    srv->listeners = net_listener_set_new(base);
    char slots_key[96];
    snprintf(slots_key, sizeof(slots_key), "%s max_connections", srv->name);
    struct conn_slots_config sc = {
        .max = opts->max_connections != 0 ? opts->max_connections : 4096,
        .full = CONN_SLOTS_PAUSE,
        .listeners = srv->listeners,
        .component = srv->name,
        .limit_key = slots_key,
    };
    srv->slots = conn_slots_new(&sc);
    struct conn_limits_config lc = {
        .max_per_ip = opts->max_connections_per_ip == 0 ? HTTP_DEFAULT_PER_IP
                      : opts->max_connections_per_ip < 0 ? 0
                                                         : opts->max_connections_per_ip,
        .exempt = opts->per_ip_exempt_nets,
    };
    srv->limits = conn_limits_new(&lc);
    struct conn_limits_config olc = {.max_per_ip = HTTP_OUTSIDER_PER_IP, .exempt = NULL};
    srv->outsider_limits = conn_limits_new(&olc);
    srv->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (srv->sha256 == NULL)
        petrel_fatal("SHA256 is not available");
    if (opts->token != NULL && opts->token[0] != '\0') {
        srv->token_enabled = true;
        sha256(srv->sha256, opts->token, strlen(opts->token), srv->token_digest);
    }
    if (opts->allowed_nets != NULL && opts->allowed_nets->count > 0) {
        srv->allowed.count = opts->allowed_nets->count;
        srv->allowed.items = xcalloc(srv->allowed.count, sizeof(struct cidr));
        memcpy(srv->allowed.items, opts->allowed_nets->items,
               srv->allowed.count * sizeof(struct cidr));
    }
    if (opts->tls != NULL) {
        SSL_CTX_up_ref(opts->tls);
        srv->tls = opts->tls;
    }
    if (opts->metrics != NULL) {
        static const char *const labels[] = {"server", "route", "method", "code", NULL};
        srv->request_seconds = metrics_histogram(
            opts->metrics, "petrel_http_request_seconds",
            "Time from a complete HTTP request to its reply, by server, route and status code.",
            labels, metrics_latency_buckets, metrics_latency_bucket_count);
    }
    return srv;
}

void http_server_route(struct http_server *srv, enum http_method method, const char *pattern,
                       unsigned flags, http_handler_fn fn, void *ctx)
{
    /* Function pointers travel through the router as data. */
    union {
        http_handler_fn fn;
        void *ptr;
    } handler;
    memset(&handler, 0, sizeof(handler));
    handler.fn = fn;
    http_router_add(&srv->router, method, pattern, flags, handler.ptr, ctx);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg);
static void conn_read_cb(struct bufferevent *bev, void *arg);
static void conn_write_cb(struct bufferevent *bev, void *arg);
static void conn_timer_cb(void *arg);

/* How long a request head may take to arrive (and a keep-alive connection
 * may stay idle when the server is pressed). */
static int64_t head_timeout_ms(const struct http_conn *conn)
{
    if (conn->outsider || conn_slots_pressed(conn->srv->slots))
        return HTTP_PRESSED_TIMEOUT_MS;
    return HTTP_HEAD_READ_TIMEOUT_MS;
}

static void accept_cb(void *arg, struct net_listener *l, const struct net_accepted *a)
{
    struct http_server *srv = arg;
    evutil_socket_t fd = a->fd;
    const struct sockaddr *sa = a->peer;
    int socklen = a->peer_len;
    struct conn_limits *counted = a->outsider ? srv->outsider_limits : srv->limits;
    if (srv->stopping || (a->outsider && srv->outsider_count >= HTTP_OUTSIDER_MAX)) {
        net_listener_refuse(l, a, NULL);
        return;
    }
    if (!conn_slots_admit(srv->slots, l, a))
        return;
    struct http_conn *conn = xcalloc(1, sizeof(*conn));
    conn->srv = srv;
    conn->outsider = a->outsider;
    if (socklen > 0 && (size_t)socklen <= sizeof(conn->peer))
        memcpy(&conn->peer, sa, (size_t)socklen);
    net_addr_format_ip((struct sockaddr *)&conn->peer, conn->peer_ip, sizeof(conn->peer_ip));
    if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    /* The TLS handshake is bounded by the head timer armed below (a
     * deadline from accept, not pushed back by input). */
    if (srv->tls != NULL) {
        conn->bev = tls_conn_accept(srv->base, fd, srv->tls); /* closes fd on failure */
    } else {
        conn->bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (conn->bev == NULL)
            close(fd);
    }
    if (conn->bev == NULL) {
        conn_limits_release(counted, sa);
        conn_slots_release(srv->slots);
        free(conn);
        return;
    }
    conn->timer = net_deadline_new(srv->base, conn_timer_cb, conn);
    bufferevent_setcb(conn->bev, conn_read_cb, conn_write_cb, conn_event_cb, conn);
    bufferevent_setwatermark(conn->bev, EV_READ, 0, HTTP_INPUT_MAX);
    struct timeval wt = {.tv_sec = HTTP_WRITE_TIMEOUT_S, .tv_usec = 0};
    bufferevent_set_timeouts(conn->bev, NULL, &wt);
    bufferevent_enable(conn->bev, EV_READ | EV_WRITE);
    conn->next = srv->conns;
    if (srv->conns != NULL)
        srv->conns->prev = conn;
    srv->conns = conn;
    if (conn->outsider)
        srv->outsider_count++;
    net_deadline_arm(conn->timer, head_timeout_ms(conn));
}

bool http_server_listen(struct http_server *srv, const char *addr, struct petrel_error *err)
{
    char allowed_key[96], limit_key[96];
    snprintf(allowed_key, sizeof(allowed_key), "%s allowed_nets", srv->name);
    snprintf(limit_key, sizeof(limit_key), "%s max_connections_per_ip", srv->name);
    /* Clients outside allowed_nets are let in as outsiders, a couple per
     * address, for the public routes (health) and a clear 403. */
    struct net_listener_config lcfg = {
        .component = srv->name,
        .allowed_key = allowed_key,
        .limit_key = limit_key,
        .allowed = srv->allowed.count > 0 ? &srv->allowed : NULL,
        .limits = srv->limits,
        .outsider_limits = srv->outsider_limits,
        .accept = accept_cb,
        .arg = srv,
    };
    return net_listener_set_listen(srv->listeners, addr, 0, &lcfg, err);
}

const char *http_server_address(const struct http_server *srv)
{
    return net_listener_set_address(srv->listeners, 0);
}

void http_server_stop_accepting(struct http_server *srv)
{
    srv->stopping = true;
    net_listener_set_stop(srv->listeners);
    /* Idle keep-alive connections go now; busy ones close after their reply. */
    struct http_conn *conn = srv->conns;
    while (conn != NULL) {
        struct http_conn *next = conn->next;
        if (conn->req == NULL && evbuffer_get_length(bufferevent_get_input(conn->bev)) == 0 &&
            evbuffer_get_length(bufferevent_get_output(conn->bev)) == 0)
            conn_free(conn);
        else
            conn->close_when_flushed = true;
        conn = next;
    }
}

void http_server_on_free(struct http_server *srv, void (*fn)(void *ctx), void *ctx)
{
    srv->cleanups = xgrow(srv->cleanups, &srv->cleanup_cap, srv->cleanup_count + 1,
                          sizeof(*srv->cleanups));
    srv->cleanups[srv->cleanup_count].fn = fn;
    srv->cleanups[srv->cleanup_count].ctx = ctx;
    srv->cleanup_count++;
}

void http_server_abandon_all(struct http_server *srv)
{
    struct http_conn *conn = srv->conns;
    while (conn != NULL) {
        struct http_conn *next = conn->next;
        conn->close_when_flushed = true;
        if (conn->req != NULL && conn->req->dispatched)
            request_abandon(conn->req, HTTP_CANCEL_SHUTDOWN);
        conn = next;
    }
}

size_t http_server_in_flight(const struct http_server *srv)
{
    return srv->in_flight;
}

/* ---------- request lifecycle ---------- */

static void request_free(struct http_request *req)
{
    net_deadline_free(req->timeout);
    buf_free(&req->head_bytes);
    buf_free(&req->body);
    http_target_free(&req->target);
    http_query_free(req->query, req->query_count);
    for (size_t i = 0; i < req->header_copy_count; i++)
        free(req->header_copies[i]);
    free(req->header_copies);
    free(req);
}

/* Detaches the request from its connection without freeing it: the
 * connection may go on (or close) while the handler still holds the request. */
static void request_detach(struct http_request *req)
{
    struct http_conn *conn = req->conn;
    if (conn == NULL)
        return;
    conn->req = NULL;
    req->conn = NULL;
    conn->head_timer_armed = false;
    if (!req->keep_alive || conn->srv->stopping)
        conn->close_when_flushed = true;
    if (conn->close_when_flushed) {
        conn->state = CONN_CLOSING;
        if (evbuffer_get_length(bufferevent_get_output(conn->bev)) == 0) {
            conn_free(conn);
            return;
        }
        net_deadline_arm(conn->timer, HTTP_LINGER_MS);
        return;
    }
    conn->state = CONN_READ_HEAD;
    int64_t idle_ms = conn->srv->idle_timeout_ms;
    if (conn_slots_pressed(conn->srv->slots) && idle_ms > HTTP_PRESSED_TIMEOUT_MS)
        idle_ms = HTTP_PRESSED_TIMEOUT_MS;
    net_deadline_arm(conn->timer, idle_ms);
    /* Pipelined requests already buffered are handled from a deferred callback. */
    if (evbuffer_get_length(bufferevent_get_input(conn->bev)) > 0)
        bufferevent_trigger(conn->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

static void record_metrics(struct http_request *req)
{
    struct http_server *srv = req->srv;
    if (srv->request_seconds == NULL || req->metrics_recorded)
        return;
    req->metrics_recorded = true;
    char code[8];
    snprintf(code, sizeof(code), "%d", req->status);
    const char *values[] = {srv->name, req->route != NULL ? req->route->pattern : "unmatched",
                            http_method_name(req->method), code};
    metric_observe(metric_series_get(srv->request_seconds, values), clock_seconds_since(&req->start));
}

/* The response has been fully produced: account for it and let the
 * connection move on. The request is freed unless its handler still owns it
 * (a detached, unanswered request is freed by its handler's reply). */
static void request_finish(struct http_request *req)
{
    if (req->answered)
        return;
    req->answered = true;
    net_deadline_clear(req->timeout);
    record_metrics(req);
    if (req->dispatched)
        req->srv->in_flight--;
    request_detach(req);
    if (!req->in_cancel)
        request_free(req);
}

static void write_head(struct http_request *req, int status, const char *content_type,
                       long long content_length, const char *extra)
{
    struct evbuffer *out = bufferevent_get_output(req->conn->bev);
    req->status = status;
    bool close = !req->keep_alive || req->srv->stopping || req->conn->close_when_flushed;
    if (close)
        req->keep_alive = false;
    /* One formatted block, one buffer append: this runs for every reply. */
    char head[1024];
    int n = snprintf(head, sizeof(head), "HTTP/1.%d %d %s\r\nDate: %s\r\n%s%s%s",
                     req->head.version_minor == 0 ? 0 : 1, status, status_text(status),
                     http_date(req->srv), content_type != NULL ? "Content-Type: " : "",
                     content_type != NULL ? content_type : "", content_type != NULL ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof(head))
        petrel_fatal("response head too long");
    size_t len = (size_t)n;
    if (content_length >= 0)
        n = snprintf(head + len, sizeof(head) - len, "Content-Length: %lld\r\n", content_length);
    else
        n = snprintf(head + len, sizeof(head) - len, "%s",
                     req->chunked_out ? "Transfer-Encoding: chunked\r\n" : "");
    len += (size_t)n;
    const char *ending = close                             ? "Connection: close\r\n\r\n"
                         : req->head.version_minor == 0 ? "Connection: keep-alive\r\n\r\n"
                                                         : "\r\n";
    n = snprintf(head + len, sizeof(head) - len, "%s%s", extra != NULL ? extra : "", ending);
    if (n < 0 || (size_t)n >= sizeof(head) - len)
        petrel_fatal("response head too long");
    len += (size_t)n;
    evbuffer_add(out, head, len);
}

static void reply_full(struct http_request *req, int status, const char *content_type,
                       const void *body, size_t len, const char *extra)
{
    if (req->answered || req->streaming)
        return;
    if (req->conn == NULL) {
        /* Client gone or timed out earlier: the handler's late reply just frees. */
        request_finish(req);
        return;
    }
    write_head(req, status, content_type, (long long)len, extra);
    if (!req->head_only && len > 0)
        evbuffer_add(bufferevent_get_output(req->conn->bev), body, len);
    request_finish(req);
}

void http_reply(struct http_request *req, int status, const char *content_type, const void *body,
                size_t len)
{
    reply_full(req, status, content_type, body, len, NULL);
}

void http_reply_json(struct http_request *req, int status, json_t *body)
{
    char *s = json_dump_compact(body);
    json_decref(body);
    size_t len = strlen(s);
    reply_full(req, status, "application/json", s, len, NULL);
    free(s);
}

void http_reply_error(struct http_request *req, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char *body = error_json(msg);
    reply_full(req, status, "application/json", body, strlen(body), NULL);
    free(body);
}

int http_status_for_error(enum petrel_error_code code)
{
    switch (code) {
    case PETREL_OK:
        return 200;
    case PETREL_ERR_INVALID:
        return 400;
    case PETREL_ERR_NOT_FOUND:
        return 404;
    case PETREL_ERR_EXISTS:
    case PETREL_ERR_CONFLICT:
    case PETREL_ERR_LIMIT:
        return 409;
    case PETREL_ERR_UNSUPPORTED:
        return 501;
    case PETREL_ERR_UNAVAILABLE:
        return 503;
    case PETREL_ERR_PERMISSION:
        return 403;
    case PETREL_ERR_OVER_QUOTA:
        return 507; /* RFC 4918 11.5 Insufficient Storage */
    case PETREL_ERR_IO:
        return 500;
    }
    return 500;
}

void http_reply_petrel_error(struct http_request *req, const struct petrel_error *err)
{
    http_reply_error(req, http_status_for_error(err->code), "%s", err->message);
}

void http_stream_begin(struct http_request *req, int status, const char *content_type)
{
    if (req->answered || req->streaming)
        return;
    req->streaming = true;
    if (req->conn == NULL)
        return;
    req->chunked_out = req->head.version_minor == 1;
    if (!req->chunked_out)
        req->keep_alive = false; /* HTTP/1.0: the close marks the end */
    write_head(req, status, content_type, req->head_only ? 0 : -1, NULL);
}

void http_stream_write(struct http_request *req, const void *data, size_t len)
{
    if (!req->streaming || req->answered || req->conn == NULL || len == 0 || req->head_only)
        return;
    struct evbuffer *out = bufferevent_get_output(req->conn->bev);
    if (req->chunked_out) {
        evbuffer_add_printf(out, "%zx\r\n", len);
        evbuffer_add(out, data, len);
        evbuffer_add(out, "\r\n", 2);
    } else {
        evbuffer_add(out, data, len);
    }
}

bool http_stream_writable(const struct http_request *req)
{
    if (req->conn == NULL)
        return false;
    return evbuffer_get_length(bufferevent_get_output(req->conn->bev)) < HTTP_STREAM_HIGH_WATER;
}

void http_stream_on_drain(struct http_request *req, http_drain_fn fn, void *ctx)
{
    req->drain = fn;
    req->drain_ctx = ctx;
}

bool http_stream_started(const struct http_request *req)
{
    return req->streaming;
}

void http_stream_end(struct http_request *req)
{
    if (req->answered)
        return;
    if (!req->streaming)
        http_stream_begin(req, 200, "application/octet-stream");
    if (req->conn == NULL) {
        request_finish(req);
        return;
    }
    if (req->chunked_out && !req->head_only)
        evbuffer_add(bufferevent_get_output(req->conn->bev), "0\r\n\r\n", 5);
    request_finish(req);
}

/* The request can no longer be answered normally (client gone, timeout,
 * shutdown). With a cancel callback the handler is told and the request is
 * finished once it returns; without one the request stays alive, detached,
 * until the handler replies. */
static void request_abandon(struct http_request *req, enum http_cancel_reason why)
{
    if (req->answered)
        return;
    if (req->conn != NULL && why != HTTP_CANCEL_CLIENT_GONE && !req->streaming) {
        /* Tell the client what happened: the response has not started. */
        int status = why == HTTP_CANCEL_TIMEOUT ? 504 : 503;
        char *body = error_json(why == HTTP_CANCEL_TIMEOUT ? "request timed out"
                                                           : "server is shutting down");
        req->keep_alive = false;
        write_head(req, status, "application/json", (long long)strlen(body), NULL);
        evbuffer_add(bufferevent_get_output(req->conn->bev), body, strlen(body));
        free(body);
    }
    if (req->status == 0)
        req->status = why == HTTP_CANCEL_TIMEOUT ? 504 : 499;
    if (req->cancel == NULL) {
        req->keep_alive = false;
        record_metrics(req);
        request_detach(req);
        return;
    }
    http_cancel_fn fn = req->cancel;
    req->cancel = NULL;
    req->in_cancel = true;
    fn(req, why, req->cancel_ctx);
    req->in_cancel = false;
    if (!req->answered) {
        if (req->streaming && req->conn != NULL && req->chunked_out && !req->head_only) {
            req->keep_alive = false;
            evbuffer_add(bufferevent_get_output(req->conn->bev), "0\r\n\r\n", 5);
        }
        request_finish(req); /* frees: in_cancel is clear again */
        return;
    }
    request_free(req);
}

static void request_timeout_cb(void *arg)
{
    struct http_request *req = arg;
    log_warn(req->srv->name, "request timed out", "path=%s peer=%s", req->target.path,
             req->conn != NULL ? req->conn->peer_ip : "-");
    request_abandon(req, HTTP_CANCEL_TIMEOUT);
}

/* ---------- connection handling ---------- */

static void conn_free(struct http_conn *conn)
{
    struct http_server *srv = conn->srv;
    struct http_request *req = conn->req;
    if (req != NULL) {
        conn->req = NULL;
        req->conn = NULL;
        if (req->dispatched) {
            request_abandon(req, HTTP_CANCEL_CLIENT_GONE);
        } else {
            request_free(req);
        }
    }
    DLIST_UNLINK(srv->conns, conn);
    if (conn->outsider)
        srv->outsider_count--;
    conn_limits_release(conn->outsider ? srv->outsider_limits : srv->limits,
                        (const struct sockaddr *)&conn->peer);
    net_deadline_free(conn->timer);
    bufferevent_free(conn->bev);
    free(conn);
    conn_slots_release(srv->slots);
}

static bool authorized(struct http_server *srv, struct http_request *req)
{
    const struct http_header *h = http_head_find(&req->head, "Authorization");
    if (h == NULL || h->value.len < 7 || strncasecmp(h->value.ptr, "Bearer ", 7) != 0)
        return false;
    const char *tok = h->value.ptr + 7;
    size_t len = h->value.len - 7;
    while (len > 0 && *tok == ' ') {
        tok++;
        len--;
    }
    unsigned char digest[32];
    sha256(srv->sha256, tok, len, digest);
    /* Digests have a fixed length, so the comparison time says nothing about the token. */
    return CRYPTO_memcmp(digest, srv->token_digest, sizeof(digest)) == 0;
}

/* The allow-list and the token, decided from the head alone, before any
 * body is read: a client outside allowed_nets, or one without the token,
 * must not make us buffer up to large_body (96 MB) for a 403. True when
 * the request was refused (and answered). */
static bool access_refused(struct http_conn *conn, struct http_request *req)
{
    struct http_server *srv = conn->srv;
    const struct http_route *match = req->found == HTTP_ROUTE_FOUND ? req->match.route : NULL;
    bool is_public = match != NULL && (match->flags & HTTP_ROUTE_PUBLIC) != 0;
    if (match == NULL && req->found == HTTP_ROUTE_WRONG_METHOD) {
        /* A wrong method on a public path is answered 405 like the right one
         * would be answered: without asking for credentials. */
        static const enum http_method probe[] = {HTTP_GET, HTTP_POST, HTTP_PUT, HTTP_PATCH,
                                                 HTTP_DELETE};
        struct http_route_match other;
        for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]) && !is_public; i++) {
            if (http_router_match(&srv->router, probe[i], req->target.segments, req->target.segment_count,
                                  &other, NULL, 0) == HTTP_ROUTE_FOUND)
                is_public = (other.route->flags & HTTP_ROUTE_PUBLIC) != 0;
        }
    }
    if (is_public)
        return false;
    req->route = match; /* so refused requests are counted under their route */
    bool body_follows =
        req->head.chunked || (req->head.has_content_length && req->head.content_length > 0);
    if (srv->allowed.count > 0 &&
        !cidr_list_match(&srv->allowed, (const struct sockaddr *)&conn->peer)) {
        log_warn(srv->name, "client not in allowed networks", "peer=%s path=%s", conn->peer_ip,
                 req->target.path);
        if (body_follows)
            req->keep_alive = false; /* the body is left unread */
        http_reply_error(req, 403, "client address %s is not allowed", conn->peer_ip);
        return true;
    }
    if (srv->token_enabled && !authorized(srv, req)) {
        static const char unauthorized[] = "{\"error\":\"missing or invalid bearer token\"}";
        if (body_follows)
            req->keep_alive = false;
        reply_full(req, 401, "application/json", unauthorized, sizeof(unauthorized) - 1,
                   "WWW-Authenticate: Bearer\r\n");
        return true;
    }
    return false;
}

static void dispatch(struct http_conn *conn, struct http_request *req)
{
    struct http_server *srv = conn->srv;
    conn->state = CONN_HANDLING;
    net_deadline_clear(conn->timer);
    req->start = clock_mono_now();

    const struct http_route *match = req->found == HTTP_ROUTE_FOUND ? req->match.route : NULL;
    bool path_known = req->found == HTTP_ROUTE_WRONG_METHOD;
    req->route = match; /* so even refused requests are counted under their route */
    /* access_refused() ran on the head already. */
    if (match == NULL) {
        if (path_known) {
            char allow[128];
            struct http_route_match unused;
            http_router_match(&srv->router, req->method, req->target.segments,
                              req->target.segment_count, &unused, allow, sizeof(allow));
            char extra[160];
            snprintf(extra, sizeof(extra), "Allow: %s\r\n", allow);
            char *body = error_json("method not allowed");
            req->status = 405;
            reply_full(req, 405, "application/json", body, strlen(body), extra);
            free(body);
        } else {
            http_reply_error(req, 404, "no such endpoint: %s", req->target.path);
        }
        return;
    }
    req->route = match;
    req->dispatched = true;
    srv->in_flight++;
    req->timeout = net_deadline_new(srv->base, request_timeout_cb, req);
    net_deadline_arm(req->timeout, (match->flags & HTTP_ROUTE_STREAM) != 0 ? srv->stream_timeout_ms
                                                                           : srv->timeout_ms);
    union {
        void *ptr;
        http_handler_fn fn;
    } handler;
    handler.ptr = match->handler;
    handler.fn(req, match->ctx);
}

static void conn_read_head(struct http_conn *conn)
{
    struct http_server *srv = conn->srv;
    struct evbuffer *in = bufferevent_get_input(conn->bev);
    size_t avail = evbuffer_get_length(in);
    if (avail == 0)
        return;
    if (!conn->head_timer_armed) {
        /* First bytes of a request: head and body must arrive in time. */
        conn->head_timer_armed = true;
        net_deadline_arm(conn->timer, head_timeout_ms(conn));
    }
    size_t look = avail < HTTP_MAX_HEAD ? avail : HTTP_MAX_HEAD;
    const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
    struct http_head head;
    size_t head_len = 0;
    struct http_parse_error perr = {0, NULL};
    enum http_parse_result r =
        http_parse_head(data, look, HTTP_MAX_HEAD, HTTP_MAX_TARGET, &head, &head_len, &perr);
    if (r == HTTP_PARSE_INCOMPLETE)
        return;
    if (r == HTTP_PARSE_ERROR) {
        log_debug(srv->name, "bad request", "peer=%s status=%d reason=\"%s\"", conn->peer_ip,
                  perr.status, perr.reason);
        evbuffer_drain(in, avail);
        conn_send_error_and_close(conn, perr.status, perr.reason);
        return;
    }
    struct http_request *req = xcalloc(1, sizeof(*req));
    req->srv = srv;
    req->conn = conn;
    conn->req = req;
    buf_append(&req->head_bytes, data, head_len);
    /* Keep the parse, pointing its slices at our own copy of the bytes so
     * they live as long as the request. */
    req->head = head;
    http_head_rebase(&req->head, data, req->head_bytes.data);
    evbuffer_drain(in, head_len);
    req->method = req->head.method;
    req->head_only = req->method == HTTP_HEAD;
    req->keep_alive = req->head.keep_alive && !conn->outsider;
    req->start = clock_mono_now();
    if (!http_target_parse(req->head.target.ptr, req->head.target.len, &req->target)) {
        req->keep_alive = false;
        http_reply_error(req, 400, "invalid request path");
        return;
    }
    req->found = http_router_match(&srv->router, req->method, req->target.segments,
                                   req->target.segment_count, &req->match, NULL, 0);
    if (access_refused(conn, req))
        return;
    /* Routes that take whole messages (bulk import) have their own limit. */
    req->body_limit = srv->max_body;
    if (req->found == HTTP_ROUTE_FOUND && (req->match.route->flags & HTTP_ROUTE_LARGE_BODY) != 0)
        req->body_limit = srv->large_body;
    /* An outsider reaches only the public routes, which take no body: it
     * must not make us hold max_body on each of its connections for a 405. */
    if (conn->outsider)
        req->body_limit = 0;
    if (req->head.has_content_length && req->head.content_length > req->body_limit) {
        req->keep_alive = false;
        http_reply_error(req, 413, "request body larger than %zu bytes", req->body_limit);
        return;
    }
    bool has_body = req->head.chunked || (req->head.has_content_length && req->head.content_length > 0);
    if (!has_body) {
        dispatch(conn, req);
        return;
    }
    req->body_remaining = req->head.has_content_length ? req->head.content_length : 0;
    conn->state = CONN_READ_BODY;
    if (req->head.expect_continue)
        evbuffer_add(bufferevent_get_output(conn->bev), "HTTP/1.1 100 Continue\r\n\r\n", 25);
}

static void conn_read_body(struct http_conn *conn)
{
    struct http_request *req = conn->req;
    struct evbuffer *in = bufferevent_get_input(conn->bev);
    size_t avail = evbuffer_get_length(in);
    if (!req->head.chunked) {
        size_t take = avail < req->body_remaining ? avail : (size_t)req->body_remaining;
        if (take > 0) {
            buf_reserve(&req->body, take);
            evbuffer_remove(in, req->body.data + req->body.len, take);
            req->body.len += take;
            req->body.data[req->body.len] = '\0';
            req->body_remaining -= take;
        }
        if (req->body_remaining == 0)
            dispatch(conn, req);
        return;
    }
    while (avail > 0) {
        size_t look = avail < 65536 ? avail : 65536;
        const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
        size_t used = 0;
        struct http_parse_error perr = {0, NULL};
        enum http_parse_result r =
            http_chunked_decode(&req->chunked, data, look, &used, &req->body, req->body_limit, &perr);
        evbuffer_drain(in, used);
        avail -= used;
        if (r == HTTP_PARSE_OK) {
            dispatch(conn, req);
            return;
        }
        if (r == HTTP_PARSE_ERROR) {
            req->keep_alive = false;
            if (perr.status == 413)
                http_reply_error(req, 413, "request body larger than %zu bytes", req->body_limit);
            else
                http_reply_error(req, perr.status, "%s", perr.reason);
            return;
        }
        if (used == 0)
            break;
    }
}

static void conn_process(struct http_conn *conn)
{
    /* Handles as many buffered requests as possible; stops while a handler
     * is busy (pipelined requests wait in the input buffer). */
    for (;;) {
        enum conn_state before = conn->state;
        struct http_request *before_req = conn->req;
        size_t before_len = evbuffer_get_length(bufferevent_get_input(conn->bev));
        switch (conn->state) {
        case CONN_READ_HEAD:
            if (before_len > 0 &&
                evbuffer_get_length(bufferevent_get_output(conn->bev)) > HTTP_PIPELINE_OUTPUT_MAX) {
                /* Earlier replies have not left: the next request waits
                 * (and the client's further input in the kernel) until
                 * conn_write_cb sees the output drained. */
                conn->output_wait = true;
                bufferevent_disable(conn->bev, EV_READ);
                return;
            }
            conn_read_head(conn);
            break;
        case CONN_READ_BODY:
            conn_read_body(conn);
            break;
        case CONN_HANDLING:
            return;
        case CONN_CLOSING:
            evbuffer_drain(bufferevent_get_input(conn->bev),
                           evbuffer_get_length(bufferevent_get_input(conn->bev)));
            return;
        }
        if (conn->state == before && conn->req == before_req &&
            evbuffer_get_length(bufferevent_get_input(conn->bev)) == before_len)
            return; /* no progress: wait for more bytes */
        if (conn->state == CONN_CLOSING || conn->state == CONN_HANDLING)
            return;
    }
}

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_process(arg);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
    struct http_conn *conn = arg;
    if (evbuffer_get_length(bufferevent_get_output(bev)) != 0)
        return;
    if (conn->close_when_flushed && conn->req == NULL) {
        evutil_socket_t fd = bufferevent_getfd(bev);
        if (conn->srv->tls == NULL && fd >= 0 && !conn->lingering) {
            /* Half-close and keep discarding input until the client closes (or
             * the linger timer fires): closing with unread bytes would reset
             * the connection and could destroy the reply in flight (413). */
            conn->lingering = true;
            shutdown(fd, SHUT_WR);
            return;
        }
        conn_free(conn);
        return;
    }
    if (conn->output_wait) {
        conn->output_wait = false;
        bufferevent_enable(bev, EV_READ);
        conn_process(conn);
        return;
    }
    struct http_request *req = conn->req;
    if (req != NULL && req->streaming && req->drain != NULL && !req->answered)
        req->drain(req, req->drain_ctx);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct http_conn *conn = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        conn_free(conn);
}

static void conn_timer_cb(void *arg)
{
    struct http_conn *conn = arg;
    size_t pending = evbuffer_get_length(bufferevent_get_input(conn->bev));
    if (conn->state == CONN_CLOSING || conn->req == NULL) {
        if (conn->state == CONN_READ_HEAD && pending > 0) {
            conn_send_error_and_close(conn, 408, "request not received in time");
            return;
        }
        conn_free(conn);
        return;
    }
    if (conn->state == CONN_READ_BODY) {
        struct http_request *req = conn->req;
        req->keep_alive = false;
        http_reply_error(req, 408, "request body not received in time");
    }
}

/* ---------- accessors ---------- */

enum http_method http_request_method(const struct http_request *req)
{
    return req->method;
}

const char *http_request_path(const struct http_request *req)
{
    return req->target.path;
}

const char *http_request_param(const struct http_request *req, const char *name)
{
    for (size_t i = 0; i < req->match.param_count; i++) {
        if (strcmp(req->match.names[i], name) == 0)
            return req->match.values[i];
    }
    return NULL;
}

const char *http_request_query(const struct http_request *req, const char *name)
{
    struct http_request *mut = (struct http_request *)req;
    if (!mut->query_parsed) {
        mut->query_parsed = true;
        mut->query_count =
            http_query_parse(mut->target.raw_query, mut->query, HTTP_MAX_QUERY_PARAMS);
    }
    for (size_t i = 0; i < req->query_count; i++) {
        if (strcmp(req->query[i].key, name) == 0)
            return req->query[i].value;
    }
    return NULL;
}

const char *http_request_header(struct http_request *req, const char *name)
{
    const struct http_header *h = http_head_find(&req->head, name);
    if (h == NULL)
        return NULL;
    char *copy = xstrndup(h->value.ptr, h->value.len);
    req->header_copies = xgrow(req->header_copies, &req->header_copy_cap,
                               req->header_copy_count + 1, sizeof(char *));
    req->header_copies[req->header_copy_count++] = copy;
    return copy;
}

const char *http_request_body(const struct http_request *req, size_t *len)
{
    if (len != NULL)
        *len = req->body.len;
    return buf_cstr(&req->body);
}

const char *http_request_peer_ip(const struct http_request *req)
{
    return req->conn != NULL ? req->conn->peer_ip : "";
}

const struct sockaddr *http_request_peer(const struct http_request *req)
{
    return req->conn != NULL ? (const struct sockaddr *)&req->conn->peer : NULL;
}

json_t *http_request_json(struct http_request *req)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    json_t *obj = json_parse_object(buf_cstr(&req->body), req->body.len, &err);
    if (obj == NULL)
        http_reply_error(req, 400, "%s", err.message);
    return obj;
}

void http_request_set_cancel(struct http_request *req, http_cancel_fn fn, void *ctx)
{
    req->cancel = fn;
    req->cancel_ctx = ctx;
}

struct event_base *http_request_base(const struct http_request *req)
{
    return req->srv->base;
}

void http_server_free(struct http_server *srv)
{
    if (srv == NULL)
        return;
    srv->stopping = true;
    net_listener_set_stop(srv->listeners);
    while (srv->conns != NULL) {
        struct http_conn *conn = srv->conns;
        if (conn->req != NULL && conn->req->dispatched) {
            struct http_request *req = conn->req;
            request_abandon(req, HTTP_CANCEL_SHUTDOWN);
        }
        if (srv->conns == conn)
            conn_free(conn);
    }
    http_router_free(&srv->router);
    for (size_t i = srv->cleanup_count; i > 0; i--)
        srv->cleanups[i - 1].fn(srv->cleanups[i - 1].ctx);
    free(srv->cleanups);
    cidr_list_free(&srv->allowed);
    conn_limits_free(srv->limits);
    conn_limits_free(srv->outsider_limits);
    conn_slots_free(srv->slots);
    net_listener_set_free(srv->listeners);
    EVP_MD_free(srv->sha256);
    if (srv->tls != NULL)
        SSL_CTX_free(srv->tls);
    free(srv->name);
    free(srv);
}
