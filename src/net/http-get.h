/* A minimal asynchronous HTTP/1.1 GET client (the director's topology
 * check fetches a peer's GET /api/director/ring with it): one request with
 * an optional bearer token, Connection: close, read to EOF. Bounded: the answer may
 * be at most max_bytes (head and body); the whole exchange at most
 * timeout_ms. Plain HTTP only (the admin APIs it talks to have no TLS). */
#ifndef PETREL_NET_HTTP_GET_H
#define PETREL_NET_HTTP_GET_H

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

struct http_get;

/* status: the HTTP status (0 when there was none: `error` says why); body
 * (NUL-terminated, len bytes) valid during the call. The request frees
 * itself after the callback. */
typedef void (*http_get_fn)(int status, const char *body, size_t len, const char *error,
                                     void *ctx);

/* `addr` "<ip>:<port>" / "[<ip6>]:<port>"; `token` "" sends none. The
 * callback always runs exactly once, never before this returns, unless the
 * request is cancelled. */
struct http_get *http_get_start(struct event_base *base, const char *addr,
                                                  const char *path, const char *token,
                                                  int64_t timeout_ms, size_t max_bytes,
                                                  http_get_fn fn, void *ctx);
/* Abandons the request: no callback, freed now. */
void http_get_cancel(struct http_get *get);

#endif
