/* A login proxy's client of the directors' ring port (docs/ring-protocol.md,
 * kind `login`): which backend serves a user (LOOKUP), the proxied sessions
 * (SESSION-START/END) and the directors' pushes (USER-KICKED, USER-MOVED,
 * RING-CHANGE).
 *
 * One client keeps a connection to every configured director (each a
 * line-client with its backoff, reconnected by itself), authenticated with
 * the ring secret when one is given, so pushes keep arriving while any
 * director lives and a lookup never waits for a dial. Lookups are
 * multiplexed: many in flight on one connection, matched by id.
 *   - A lookup goes to the first director that has finished its handshake;
 *     when none has, it waits for one. When its director fails before
 *     answering, it goes to the next live one. It fails only when its
 *     deadline (`timeout_ms` from the call) passes first: "no director
 *     answered".
 *   - Sessions are announced on one connection, the primary (the first
 *     director to finish its handshake); when the primary goes down they
 *     are announced again on the next live director, and on the primary's
 *     own reconnect (a director forgets a connection's sessions when it
 *     closes), so petrel_director_backend_sessions counts each proxied
 *     session once.
 *   - Pushes from every director are passed on; a kick or move may arrive
 *     once per director (the ring forwards it to each), and acting on it
 *     twice does nothing more.
 * Everything runs on the loop of `base`; callbacks may call back into the
 * client but must not free it. */
#ifndef PETREL_CLIENTS_RING_DIRECTOR_CLIENT_H
#define PETREL_CLIENTS_RING_DIRECTOR_CLIENT_H

#include "clients/ring/ring-protocol.h"
#include "core/error.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct director_client;
struct director_lookup;

struct director_client_config {
    const char *const *addresses; /* ring ports ("host:port"), NULL-terminated, 1..16 */
    const char *name;             /* HELLO name, e.g. "login@host" */
    const char *secret;           /* the ring secret; NULL or "": no AUTH */
    int64_t timeout_ms;           /* connect, handshake, and each lookup's deadline */
};

/* Pushes from the directors. Any may be NULL. Pointers are valid for the
 * call only. */
struct director_client_events {
    void (*user_kicked)(void *arg, const char *user);
    void (*user_moved)(void *arg, const char *user, const char *ip, unsigned port);
    void (*backend_change)(void *arg, enum ring_change change, const struct ring_host *host);
};

struct director_lookup_result {
    bool ok;
    const char *ip;            /* ok: the backend */
    unsigned port;             /* ok */
    enum ring_outcome outcome; /* sticky/assigned, or killing/no_backends/bad_request */
    uint32_t retry_ms;         /* killing: when to ask again */
    const char *error;         /* !ok: what went wrong ("no director answered ...") */
};

typedef void director_lookup_fn(void *arg, const struct director_lookup_result *result);

/* Starts connecting to every director. NULL with err set for a bad address
 * or configuration. `events` is copied; `arg` is passed to it. */
struct director_client *director_client_new(struct event_base *base,
                                            const struct director_client_config *cfg,
                                            const struct director_client_events *events, void *arg,
                                            struct petrel_error *err);
/* Fails every lookup in flight ("director client closed", from inside the
 * call) and closes the connections. NULL is ignored. */
void director_client_free(struct director_client *dc);

/* Asks which backend serves `user` (`tag`: the user's backend group, NULL
 * or "" for none). `done` is called exactly once, never from inside this
 * call; the handle is valid until then. */
struct director_lookup *director_client_lookup(struct director_client *dc, const char *user,
                                               const char *tag, director_lookup_fn *done,
                                               void *arg);
/* Forgets a lookup whose answer is no longer wanted: `done` is not called. */
void director_lookup_cancel(struct director_lookup *lookup);

/* Records a proxied session (`sid` unique among this client's open
 * sessions, a ring id: 1..32 of [A-Za-z0-9_.-]) and announces it. False for
 * a bad or duplicate sid or field. */
bool director_client_session_start(struct director_client *dc, const char *sid, const char *user,
                                   const char *backend_ip, enum ring_session_protocol protocol);
/* Ends a session recorded by director_client_session_start (unknown sids
 * are ignored). */
void director_client_session_end(struct director_client *dc, const char *sid);

/* Directors whose handshake is done. */
size_t director_client_ready(const struct director_client *dc);
/* Sessions recorded. */
size_t director_client_sessions(const struct director_client *dc);

#endif
