/* What the login proxy's IMAP and POP3 fronts share once the client has
 * said who it is (docs/login-proxy.md):
 *
 *   - the hub: one client of the directors' ring port for every front
 *     (clients/ring/director-client.h), the backend TLS context, and the
 *     relayed sessions indexed by user and by backend, which the ring's
 *     pushes act on: USER-KICKED ends
 *     the user's relayed sessions, USER-MOVED ends them on the old backend,
 *     RING-CHANGE flush/down ends the sessions on that backend;
 *   - the password check with retries (mail_proxy_auth): a temporary
 *     failure of the auth service, or its connection failing, is tried
 *     again up to login.transient_retries times, 150 ms apart;
 *   - the session after the check (mail_proxy): the director's answer for
 *     the user (tag from the userdb's `director_tag`), the per-user count
 *     and the warden registration of the client's real address, the
 *     backend dial (plain or TLS), the protocol's backend dialogue (an ops
 *     table: imap-proxy-login.h, pop3-proxy-login.h), retries of that
 *     set-up, then the byte relay (net/relay.h) through
 *     mail_session_io_relay(), with SESSION-START/END to the directors.
 *
 * Every phase is timed in petrel_login_phase_seconds and every outcome
 * counted in petrel_login_result_total (protocols/common/login-metrics.h).
 * Everything runs on the loop the hub was made on. */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_PROXY_H
#define PETREL_PROTOCOLS_COMMON_MAIL_PROXY_H

#include "clients/auth/auth-client.h"
#include "clients/ring/director-client.h"
#include "clients/warden/warden-client.h"
#include "core/buf.h"
#include "core/error.h"
#include "core/metrics.h"
#include "protocols/common/login-metrics.h"
#include "protocols/common/mail-proxy-login.h"
#include "protocols/common/mail-session-io.h"

#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The pause between two tries of a step that failed for a while. */
#define MAIL_PROXY_RETRY_MS 150

struct mail_proxy_hub_config {
    const char *const *directors; /* ring ports, NULL-terminated */
    const char *name;             /* the ring HELLO name ("login@host") */
    const char *ring_secret;      /* NULL or "": no AUTH */
    int64_t director_timeout_ms;
    int transient_retries; /* < 0: none */
    SSL_CTX *backend_tls;  /* borrowed; NULL: plain */
    int64_t backend_timeout_ms;
    int64_t idle_timeout_ms; /* the relay's */
};

struct mail_proxy_hub;

/* Connects to the directors. NULL with err for a bad configuration. */
struct mail_proxy_hub *mail_proxy_hub_new(struct event_base *base,
                                          const struct mail_proxy_hub_config *cfg,
                                          struct petrel_error *err);
/* The hub's director client (the LMTP front shares it). */
struct director_client *mail_proxy_hub_directors(struct mail_proxy_hub *hub);
/* Sessions being set up or relayed. */
size_t mail_proxy_hub_sessions(const struct mail_proxy_hub *hub);
/* Every session must be gone (the fronts free theirs first). */
void mail_proxy_hub_free(struct mail_proxy_hub *hub);

/* What a protocol hands the hub. */
struct mail_proxy_protocol {
    const char *name;                 /* "imap", "pop3": metric label and warden service */
    char sid_prefix;                  /* keeps ring session ids of two fronts apart */
    enum ring_session_protocol plain; /* SESSION-START protocol without TLS ... */
    enum ring_session_protocol tls;   /* ... and with */
    /* The backend dialogue (mail-proxy-login.h). */
    void *(*dialogue_new)(const struct mail_proxy_login_params *params);
    void (*dialogue_line)(void *d, const char *line, size_t len, struct buf *out,
                          struct mail_proxy_login_result *result);
    void (*dialogue_free)(void *d);
};

/* One front of the hub (one per protocol). */
struct mail_proxy_front;

/* `backend_port`: 0 takes the port of the director's answer. */
struct mail_proxy_front *mail_proxy_front_new(struct mail_proxy_hub *hub,
                                              const struct mail_proxy_protocol *proto,
                                              int64_t backend_port, struct metrics_registry *reg);
void mail_proxy_front_free(struct mail_proxy_front *f);
/* The front's petrel_login_* series. */
const struct login_metrics *mail_proxy_front_metrics(const struct mail_proxy_front *f);

/* ---------- the password check ---------- */

struct mail_proxy_auth;

/* The final answer (never CONTINUE); `reply` is valid for the call. After
 * a temporary failure with the retries used up, reply->status is
 * AUTH_CLIENT_ERROR and `unavailable` was counted. */
typedef void mail_proxy_auth_fn(void *arg, const struct auth_client_reply *reply);

/* Checks `password` for `user` from `ip` with the auth service (VERIFY),
 * trying a temporary failure again. `done` runs once, from the loop. */
struct mail_proxy_auth *mail_proxy_auth_start(struct mail_proxy_front *f, struct auth_client *auth,
                                              const char *user, const char *password,
                                              const char *ip, mail_proxy_auth_fn *done, void *arg);
/* Forgets a check: `done` is not called. NULL is ignored. */
void mail_proxy_auth_cancel(struct mail_proxy_auth *a);

/* The userdb's extra field naming the user's backend group. */
const char *mail_proxy_director_tag(const struct userdb_entry *u);

/* ---------- the proxied session ---------- */

enum mail_proxy_outcome {
    MAIL_PROXY_OK,          /* logged in at the backend: reply, then mail_proxy_relay() */
    MAIL_PROXY_REJECTED,    /* the backend said no: `text` is its answer */
    MAIL_PROXY_UNAVAILABLE, /* no backend now (retries used up): a temporary failure */
    MAIL_PROXY_TOO_MANY,    /* the user's max_connections_per_user is reached */
};

struct mail_proxy;

struct mail_proxy_callbacks {
    /* The set-up ended; `text` (valid for the call) is the backend's answer
     * after the tag/status for OK and REJECTED. The session stays
     * pre-login except after OK. */
    void (*done)(void *arg, enum mail_proxy_outcome outcome, const char *text);
    /* The relay ended (client, backend, idle, a ring push, shutdown) after
     * moving `stats` bytes: the owner frees the session now
     * (mail_proxy_free, then mail_session_io_free). */
    void (*ended)(void *arg, const struct net_relay_stats *stats);
};

struct mail_proxy_request {
    struct mail_session_io *io;   /* the client's connection */
    struct warden_client *warden; /* NULL: no registration */
    const char *login_name;       /* what the client logged in as (the backend checks it) */
    const char *user;             /* the canonical name from the auth service */
    const char *password;         /* copied, wiped once the backend said yes or no */
    const char *tag;              /* director tag, NULL or "" for none */
};

/* Starts the set-up. `cb->done` is called once, never from inside this call. */
struct mail_proxy *mail_proxy_start(struct mail_proxy_front *f,
                                    const struct mail_proxy_request *req,
                                    const struct mail_proxy_callbacks *cb, void *arg);
/* After done(OK) and the owner's reply: the client's connection is relayed
 * to the backend from now on (cb->ended at its end). */
void mail_proxy_relay(struct mail_proxy *p);
/* True while relaying. */
bool mail_proxy_relaying(const struct mail_proxy *p);
/* Ends a relay with `farewell` (a whole line with CRLF, may be NULL) to
 * the client, e.g. at server shutdown; cb->ended follows from the loop. */
void mail_proxy_stop(struct mail_proxy *p, const char *farewell);
/* Cancels a set-up in progress or forgets an ended relay; NULL is ignored.
 * Never called while relaying (stop first and wait for cb->ended). */
void mail_proxy_free(struct mail_proxy *p);

/* The ring session id of a connection: `prefix` then the session id, when
 * that is a valid ring id (pure, for the tests). False otherwise. */
bool mail_proxy_session_id(char prefix, const char *io_id, char *out, size_t size);
/* The port of "ip:port" / "[v6]:port" (0 when none; pure). */
unsigned mail_proxy_peer_port(const char *peer);

#endif
