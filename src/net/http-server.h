/* HTTP/1.1 server for Petrel's JSON APIs (backend-plane API, director admin
 * API, telemetry), on one libevent event_base.
 *
 * At accept (net/listener.h): a client outside `allowed_nets` is let in
 * only as an "outsider", at most 2 connections per address and 64 in all,
 * with a 5 s head timeout and no keep-alive, to reach the public routes
 * or get its 403; at most max_connections_per_ip connections per address;
 * accepting pauses briefly when descriptors run out, and while
 * max_connections are open. Once 3/4 of max_connections are open, heads
 * must arrive (and keep-alive connections idle at most) within 5 s instead
 * of 30 s. A pipelined request is not started while more than 256 KiB of
 * earlier replies wait to be sent; input is read at most 128 KiB ahead.
 *
 * What every request gets before its handler runs, in this order:
 *   1. parsing with bounded head, target and body sizes (431/414/413), JSON
 *      error bodies for every failure;
 *   2. unless the route is public: the CIDR allow-list (403), then the bearer
 *      token compared in constant time (401);
 *   3. routing by path then method (404 unknown path, 405 known path with the
 *      wrong method, with an Allow header);
 *   4. a timeout (30 s by default, 5 min for stream routes): an unanswered
 *      request gets 504 and its handler's cancel callback.
 *
 * Ownership: the server owns each struct http_request. A handler answers
 * exactly once with http_reply*() or a stream (begin/write/end), at once or
 * later from another event. If the client goes away or the timeout fires
 * first, the cancel callback (if set) runs and the request is freed after it
 * returns: the handler must not touch it again. */
#ifndef PETREL_NET_HTTP_SERVER_H
#define PETREL_NET_HTTP_SERVER_H

#include "core/error.h"
#include "core/metrics.h"
#include "net/cidr.h"
#include "net/http-parser.h"

#include <event2/event.h>
#include <jansson.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_server;
struct http_request;

struct http_server_options {
    const char *name;            /* metrics label and log component, e.g. "backend-api" */
    size_t max_body;             /* default 1 MiB */
    size_t large_body;           /* HTTP_ROUTE_LARGE_BODY routes, default 96 MiB */
    int64_t timeout_ms;          /* default 30 s */
    int64_t stream_timeout_ms;   /* default 5 min */
    int64_t idle_timeout_ms;     /* keep-alive idle, default 60 s */
    size_t max_connections;      /* default 4096 */
    /* Connections from one address (net/conn-limits.h): 0 the default
     * (128), negative no cap. */
    int64_t max_connections_per_ip;
    const struct cidr_list *per_ip_exempt_nets; /* not capped; may be NULL */
    const char *token;           /* bearer token; NULL or "" disables token auth */
    const struct cidr_list *allowed_nets; /* NULL or empty: every client allowed */
    SSL_CTX *tls;                /* NULL: plain HTTP; the server takes a reference */
    struct metrics_registry *metrics; /* may be NULL */
};

typedef void (*http_handler_fn)(struct http_request *req, void *ctx);

enum http_cancel_reason { HTTP_CANCEL_CLIENT_GONE, HTTP_CANCEL_TIMEOUT, HTTP_CANCEL_SHUTDOWN };
typedef void (*http_cancel_fn)(struct http_request *req, enum http_cancel_reason why, void *ctx);
typedef void (*http_drain_fn)(struct http_request *req, void *ctx);

/* Route flags. */
#define HTTP_ROUTE_PUBLIC 0x1u /* no allow-list and no token check */
#define HTTP_ROUTE_STREAM 0x2u /* streamed reply: the long timeout applies */
#define HTTP_ROUTE_LARGE_BODY 0x4u /* takes whole messages: the large body limit applies */

struct http_server *http_server_new(struct event_base *base,
                                    const struct http_server_options *opts);
/* Binds and starts accepting on `addr` ("ip:port", "[ip6]:port", "unix:/path").
 * May be called several times. Error text: "cannot listen on ADDR: reason". */
bool http_server_listen(struct http_server *srv, const char *addr, struct petrel_error *err);
/* The bound address of the first listener ("127.0.0.1:9105"); "" when none. */
const char *http_server_address(const struct http_server *srv);
/* Adds a route. `pattern` segments like "{name}" match one non-empty
 * segment (percent-decoded, available via http_request_param). GET routes
 * also answer HEAD. */
void http_server_route(struct http_server *srv, enum http_method method, const char *pattern,
                       unsigned flags, http_handler_fn fn, void *ctx);
/* Registers `fn(ctx)` to run when the server is freed (route contexts). */
void http_server_on_free(struct http_server *srv, void (*fn)(void *ctx), void *ctx);
/* Stops accepting and closes idle connections; in-flight requests finish. */
void http_server_stop_accepting(struct http_server *srv);
/* Answers every in-flight request 503 "server is shutting down" (their
 * cancel callbacks run) and closes connections once flushed. */
void http_server_abandon_all(struct http_server *srv);
/* Number of requests whose handler has not finished. */
size_t http_server_in_flight(const struct http_server *srv);
/* Cancels every in-flight request (HTTP_CANCEL_SHUTDOWN), closes all
 * connections and frees the server. */
void http_server_free(struct http_server *srv);

/* Request accessors (valid until the reply). */
enum http_method http_request_method(const struct http_request *req);
/* Decoded path without the query ("/api/backend/health"). */
const char *http_request_path(const struct http_request *req);
/* A "{name}" path parameter, or NULL. */
const char *http_request_param(const struct http_request *req, const char *name);
/* A decoded query parameter, or NULL. */
const char *http_request_query(const struct http_request *req, const char *name);
/* Request header value as a fresh NUL-terminated copy owned by the request, or NULL. */
const char *http_request_header(struct http_request *req, const char *name);
const char *http_request_body(const struct http_request *req, size_t *len);
/* The client's address (IP only, "127.0.0.1"). */
const char *http_request_peer_ip(const struct http_request *req);
const struct sockaddr *http_request_peer(const struct http_request *req);
/* Parses the body as a JSON object ({} when empty); on failure replies 400
 * and returns NULL. Caller decrefs the result. */
json_t *http_request_json(struct http_request *req);
void http_request_set_cancel(struct http_request *req, http_cancel_fn fn, void *ctx);
struct event_base *http_request_base(const struct http_request *req);

/* Replies. Each finishes the request. */
void http_reply(struct http_request *req, int status, const char *content_type, const void *body,
                size_t len);
/* Sends `body` as JSON and decrefs it (steals the reference). */
void http_reply_json(struct http_request *req, int status, json_t *body);
/* {"error": "<message>"} */
void http_reply_error(struct http_request *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Maps a petrel_error code to a status (invalid 400, not_found 404, exists
 * 409, conflict 409, unsupported 501, unavailable 503, permission 403, io 500). */
int http_status_for_error(enum petrel_error_code code);
void http_reply_petrel_error(struct http_request *req, const struct petrel_error *err);

/* Streaming (chunked transfer encoding). */
void http_stream_begin(struct http_request *req, int status, const char *content_type);
void http_stream_write(struct http_request *req, const void *data, size_t len);
/* True while the connection's pending output is below the high-water mark;
 * producers stop writing when false and resume from the drain callback. */
bool http_stream_writable(const struct http_request *req);
void http_stream_on_drain(struct http_request *req, http_drain_fn fn, void *ctx);
void http_stream_end(struct http_request *req);
bool http_stream_started(const struct http_request *req);

#endif
