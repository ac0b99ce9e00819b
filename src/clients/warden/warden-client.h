/* The client side of the warden protocol (docs/warden-protocol.md) for every
 * component on an event loop: IMAP, POP3 and submission register their
 * sessions; the backend-plane API lists and counts them; auth asks for and
 * raises per-IP failure counts.
 *
 * One client keeps one connection to `addr` (TCP "host:port" or
 * "unix:/path"), connects lazily, reconnects with backoff (100 ms doubling
 * to 5 s) and starts every connection with HELLO naming its `instance`
 * (for example "imap@mail1:0.0.0.0:143"; stable across restarts, unique
 * among live processes) and a boot id chosen when the client is created.
 *
 * Sessions: warden_client_session_connect() records the session in the
 * client's own table and sends CONNECT; the warden may be down or not yet
 * connected, which is fine: after every (re)connect the client re-sends
 * CONNECT for every session in its table, so a restarted warden fills up
 * again. The warden drops a connection's sessions when the connection
 * closes (the process died) and an instance's sessions of an older boot
 * id when the instance says HELLO again. Registration is advisory: it
 * never blocks or fails the caller's session.
 *
 * Requests with an answer (LIST, COUNT, PENALTY-GET) take a callback that
 * runs on the loop exactly once, unless cancelled, and never inside the
 * call that issued the request, so the returned handle can be stored first.
 * A request whose connection breaks or whose deadline (`timeout_ms`)
 * passes gets WARDEN_CLIENT_ERROR; requests are never re-sent.
 * CONNECT, DISCONNECT and PENALTY-INC are fire-and-forget; the warden
 * answers only an error, which is logged. */
#ifndef PETREL_CLIENTS_WARDEN_CLIENT_H
#define PETREL_CLIENTS_WARDEN_CLIENT_H

#include "core/error.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct warden_client;
struct warden_client_request;
struct warden_client_session;

enum warden_client_status {
    WARDEN_CLIENT_OK,
    WARDEN_CLIENT_ERROR, /* connection, timeout, or the warden refused the request */
};

/* One registered session as LIST returns it. */
struct warden_session_info {
    const char *id;
    const char *user;
    const char *ip; /* "" when the session has no IP (a Unix socket client) */
    const char *service;
    int64_t connected_at; /* Unix time, seconds */
};

/* One group of a COUNT answer. */
struct warden_count_item {
    const char *key; /* the service or the user */
    uint64_t count;
};

struct warden_client_reply {
    enum warden_client_status status;
    const char *error; /* ERROR: human-readable reason */
    /* LIST: every matching session (borrowed for the callback) */
    const struct warden_session_info *sessions;
    size_t session_count;
    /* COUNT: total, and the groups when grouped (sorted by key) */
    uint64_t total;
    const struct warden_count_item *items;
    size_t item_count;
    /* PENALTY-GET: failures counted for the IP (0 when none or decayed) */
    unsigned failures;
};

typedef void warden_client_cb(const struct warden_client_reply *reply, void *ctx);

/* Parses `addr` now; does not connect yet. `instance` names the process's
 * component for stale-session cleanup (1..128 bytes, no control bytes).
 * `timeout_ms` bounds the connect and each request. */
struct warden_client *warden_client_new(struct event_base *base, const char *addr,
                                        const char *instance, int64_t timeout_ms,
                                        struct petrel_error *err);
/* Pending requests get WARDEN_CLIENT_ERROR ("warden client closed") first.
 * Session handles must have been disconnected before; any left are freed
 * here (with a warning), so their owners must not use them again. */
void warden_client_free(struct warden_client *c);
const char *warden_client_address(const struct warden_client *c);
/* The boot id sent in HELLO (16 hex digits). */
const char *warden_client_boot_id(const struct warden_client *c);
/* Sessions in the client's table. */
size_t warden_client_session_count(const struct warden_client *c);
/* True while a connection to the warden is up and said HELLO. */
bool warden_client_connected(const struct warden_client *c);

/* ---------- sessions ---------- */

/* Registers a session: `user` (canonical name), `ip` (the end client's
 * address; NULL, "" or anything that is not an IP address, such as a Unix
 * socket peer, registers the session without one), `service` ("imap", "pop3", "submission",
 * "lmtp"), `connected_at` (Unix time of the connection, seconds). Returns
 * the handle (never NULL); its id is unique across instances
 * ("<boot id>-<counter>"). Never fails: an unusable field is reported by
 * the warden and logged, and the session simply is not listed. */
struct warden_client_session *warden_client_session_connect(struct warden_client *c,
                                                            const char *user, const char *ip,
                                                            const char *service,
                                                            int64_t connected_at);
/* The session's id. */
const char *warden_client_session_id(const struct warden_client_session *s);
/* Sends DISCONNECT and frees the handle (NULL is ignored). */
void warden_client_session_disconnect(struct warden_client_session *s);

/* ---------- queries ---------- */

/* LIST: sessions matching `service` and `user` (NULL or "" = any), sorted
 * by user, then connected_at, then id. */
struct warden_client_request *warden_client_list(struct warden_client *c, const char *service,
                                                 const char *user, warden_client_cb *cb, void *ctx);
/* COUNT: `by` NULL/"" (total only), "protocol" or "user"; filters as LIST. */
struct warden_client_request *warden_client_count(struct warden_client *c, const char *by,
                                                  const char *service, const char *user,
                                                  warden_client_cb *cb, void *ctx);
/* PENALTY-GET: failures of `ip` (or of "user:<user>") that have not
 * decayed yet. */
struct warden_client_request *warden_client_penalty_get(struct warden_client *c, const char *ip,
                                                        warden_client_cb *cb, void *ctx);
/* PENALTY-INC: one more failure for `ip` (fire-and-forget; dropped while
 * the warden is unreachable). */
void warden_client_penalty_inc(struct warden_client *c, const char *ip);
/* Forgets a pending request: its callback will not run. */
void warden_client_cancel(struct warden_client_request *req);

#endif
