/* The client side of the auth protocol for every component on an event
 * loop (IMAP, POP3, LMTP, backend-plane API, quota-status). One client
 * keeps one connection to `addr` (TCP "host:port" or "unix:/path"),
 * pipelines requests over it by id, connects lazily, reconnects with
 * backoff after a failure and gives each request a deadline. A request
 * whose connection breaks or whose deadline passes gets AUTH_CLIENT_ERROR;
 * requests are never re-sent (a VERIFY may already have counted a failure).
 * Callbacks run on the loop, exactly once per request, unless the request
 * was cancelled. A callback never runs inside the call that issued its
 * request (a failure found at once is reported from the loop), so the
 * caller can store the returned handle before any callback sees it. */
#ifndef PETREL_CLIENTS_AUTH_CLIENT_H
#define PETREL_CLIENTS_AUTH_CLIENT_H

#include "core/error.h"
#include "clients/auth/userdb.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum auth_client_status {
    AUTH_CLIENT_OK,
    AUTH_CLIENT_FAIL,      /* wrong password, not allowed, unknown user at AUTH/VERIFY */
    AUTH_CLIENT_NOT_FOUND, /* USER: no such user */
    AUTH_CLIENT_CONTINUE,  /* AUTH: the server sent a SASL challenge */
    AUTH_CLIENT_ERROR,     /* temporary: connection, timeout, server-side failure */
};

struct auth_client_reply {
    enum auth_client_status status;
    const char *user;                   /* OK: the canonical username */
    const struct userdb_entry *userdb;  /* OK (AUTH, VERIFY, USER); borrowed for the callback */
    const char *challenge;              /* CONTINUE: base64 text */
    const char *reason;                 /* FAIL/ERROR: human-readable, may be NULL */
    bool temporary;                     /* FAIL with `temp`: try again later */
    char **users;                       /* ITERATE OK: sorted usernames (borrowed) */
    size_t user_count;
};

typedef void auth_client_cb(const struct auth_client_reply *reply, void *ctx);

struct auth_client;
struct auth_client_request;

/* `timeout_ms` bounds each request (and the connect). Parses addr now;
 * does not connect yet. */
struct auth_client *auth_client_new(struct event_base *base, const char *addr, int64_t timeout_ms,
                                    struct petrel_error *err);
/* Pending requests get AUTH_CLIENT_ERROR ("auth client closed") first. */
void auth_client_free(struct auth_client *c);
const char *auth_client_address(const struct auth_client *c);
/* Requests waiting for a reply. */
size_t auth_client_pending(const struct auth_client *c);

/* USER lookup: OK with userdb, NOT_FOUND, or ERROR. */
struct auth_client_request *auth_client_user(struct auth_client *c, const char *username,
                                             auth_client_cb *cb, void *ctx);
/* Password check without a session: OK with userdb, FAIL, or ERROR. `ip`
 * (may be NULL) is the end client's address for allow_nets and penalties. */
struct auth_client_request *auth_client_verify(struct auth_client *c, const char *username,
                                               const char *password, const char *service,
                                               const char *ip, auth_client_cb *cb, void *ctx);
/* SASL: starts mechanism `mech` ("PLAIN", "LOGIN") with an optional
 * initial response (base64, "" for an empty one, NULL for none). The
 * callback may get CONTINUE (answer with auth_client_sasl_continue; the
 * request stays alive) before its final OK/FAIL/ERROR. */
struct auth_client_request *auth_client_sasl_begin(struct auth_client *c, const char *mech,
                                                   const char *service, const char *ip,
                                                   const char *initial_response,
                                                   auth_client_cb *cb, void *ctx);
void auth_client_sasl_continue(struct auth_client_request *req, const char *response_b64);
/* Every username, sorted: OK with users/user_count, or ERROR. */
struct auth_client_request *auth_client_iterate(struct auth_client *c, auth_client_cb *cb,
                                                void *ctx);
/* Forgets a pending request: its callback will not run. */
void auth_client_cancel(struct auth_client_request *req);

#endif
