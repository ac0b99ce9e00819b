/* The director's state: the backend registry, the hash ring built from it,
 * the user table and the sessions login proxies report — and the only way
 * to change them. The admin API, the ring server (login and monitor
 * clients) and, later, peer synchronisation all go through these
 * functions, so a change has the same effect wherever it comes from.
 *
 * Every change function takes `from`: NULL for a change made here (an admin
 * call, a monitor report), which gets this director's address as origin and
 * the next number of its own sequence; or the origin and sequence number of
 * a change received from a peer director. After applying a change the state
 * tells every observer (ring server, peer sync) what changed and where it
 * came from; a change that changes nothing is not announced.
 *
 * Single-threaded: call from the event loop only. Time comes from the clock
 * given at creation (unix milliseconds), so tests can drive it. */
#ifndef PETREL_SERVICES_DIRECTOR_STATE_H
#define PETREL_SERVICES_DIRECTOR_STATE_H

#include "core/buf.h"
#include "core/error.h"
#include "services/director/director-backends.h"
#include "services/director/director-users.h"
#include "clients/ring/ring-protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct director_state_config {
    const char *self;        /* this director's ring address, "<ip>:<port>" (copied) */
    int64_t user_expire_ms;  /* a mapping lives this long after its last session */
    int64_t kill_timeout_ms; /* longest wait for a moved user's old sessions to end */
    size_t max_users;
    size_t max_backends;
    uint32_t max_vhosts;
    size_t max_username; /* bytes; longer names are bad requests */
    size_t max_tag;
};

/* Unix time in milliseconds. */
typedef int64_t (*director_clock_fn)(void *ctx);

/* Where a change came from. */
struct director_change {
    bool local;         /* made on this director */
    const char *origin; /* ring address of the director that made it */
    uint64_t seq;       /* its number in the origin's sequence */
};

/* Callbacks (any may be NULL). Pointers are valid during the call only; a
 * removed backend (RING_CHANGE_DOWN) is freed right after. Observers must
 * not change the state from a callback. */
struct director_observer {
    void (*backend_changed)(const struct director_backend *b, enum ring_change change,
                            const struct director_change *from, void *ctx);
    void (*user_moved)(const char *user, uint32_t hash, const struct director_backend *to,
                       const struct director_change *from, void *ctx);
    void (*user_kicked)(const char *user, uint32_t hash, const struct director_change *from,
                        void *ctx);
    void *ctx;
};

struct director_state;
struct director_session;

/* clock NULL: the real clock. */
struct director_state *director_state_new(const struct director_state_config *cfg,
                                          director_clock_fn clock, void *clock_ctx);
void director_state_free(struct director_state *st);

/* Observers are kept by pointer: `obs` must outlive the subscription. */
void director_state_subscribe(struct director_state *st, const struct director_observer *obs);
void director_state_unsubscribe(struct director_state *st, const struct director_observer *obs);

const char *director_state_self(const struct director_state *st);
/* Sets this director's ring address (known once the ring port is bound). */
void director_state_set_self(struct director_state *st, const char *self);
/* The last sequence number given to a local change (0: none yet). */
uint64_t director_state_local_seq(const struct director_state *st);
/* Local changes are numbered base + 1, base + 2, ... (default base 0). The
 * director starts its sequence at its start time in microseconds so that a
 * restarted director's numbers stay above the watermarks its peers kept
 * from its previous run. Call before the first change. */
void director_state_set_seq_base(struct director_state *st, uint64_t base);
int64_t director_state_now_ms(const struct director_state *st);
const struct director_state_config *director_state_config(const struct director_state *st);

/* ---------- backends ---------- */

const struct director_backends *director_state_backends(const struct director_state *st);

/* Adds an `up` backend. vhosts above max_vhosts, a tag above max_tag or a
 * bad ip/port: PETREL_ERR_INVALID; an existing ip: PETREL_ERR_EXISTS. */
bool director_state_backend_add(struct director_state *st, const char *ip, unsigned port,
                                const char *tag, uint32_t vhosts,
                                const struct director_change *from, struct petrel_error *err);
/* Removes it and drops the mappings to it (RING-CHANGE down). Unknown ip:
 * PETREL_ERR_NOT_FOUND. */
bool director_state_backend_remove(struct director_state *st, const char *ip,
                                   const struct director_change *from, struct petrel_error *err);
/* Marks it up or flush (down), stamping last_updown_change; mappings stay
 * (a lookup re-routes a user whose backend is not up). */
bool director_state_backend_set_state(struct director_state *st, const char *ip,
                                      enum ring_backend_state state,
                                      const struct director_change *from, struct petrel_error *err);
/* Marks it flush and drops every mapping to it; *users_flushed (may be
 * NULL) gets the number dropped. */
bool director_state_backend_flush(struct director_state *st, const char *ip,
                                  const struct director_change *from, size_t *users_flushed,
                                  struct petrel_error *err);
bool director_state_backend_set_vhosts(struct director_state *st, const char *ip, uint32_t vhosts,
                                       const struct director_change *from,
                                       struct petrel_error *err);
/* Applies a RING-CHANGE as a peer sends it: up/flush insert or update the
 * backend with exactly these fields, down removes it (an unknown ip is not
 * an error: it is gone already). */
bool director_state_apply_ring_change(struct director_state *st, enum ring_change change,
                                      const struct ring_host *host,
                                      const struct director_change *from, struct petrel_error *err);

/* The backend as the ring protocol describes it (HOST, RING-CHANGE); the
 * strings point into `b`. */
void director_backend_ring_host(const struct director_backend *b, struct ring_host *h);
/* The ring lines that announce a change of the state (what peers and ring
 * clients are told), appended to `out`, stamped with the change's origin
 * and sequence number. */
void director_write_ring_change(struct buf *out, const struct director_backend *b,
                                enum ring_change change, const struct director_change *from);
void director_write_user_moved(struct buf *out, const char *user, uint32_t hash,
                               const struct director_backend *to,
                               const struct director_change *from);
void director_write_user_kicked(struct buf *out, const char *user, uint32_t hash,
                                const struct director_change *from);

/* A stable, order-independent SHA-256 (64 hex digits) over every backend's
 * ip, port, tag, vhosts and up flag: equal on directors that agree. */
void director_state_backend_set_hash(const struct director_state *st, char out[65]);

/* ---------- users ---------- */

struct director_lookup {
    enum ring_outcome outcome;
    uint32_t hash;                          /* 0 for bad_request */
    const struct director_backend *backend; /* sticky / assigned */
    uint32_t retry_ms;                      /* killing */
    const char *error;                      /* bad_request: why (static text) */
};

/* Routes `user` (len bytes) of `tag` ("" untagged): an existing mapping to
 * a backend of that tag that is up (sticky; killing while a move waits for
 * old sessions), else the hash ring (assigned; the new mapping replaces
 * one to another tag's backend). `record`: store the assignment
 * and refresh the mapping (a login's lookup); false answers without
 * changing anything (an operator's map?user=). */
void director_state_lookup(struct director_state *st, const char *user, size_t len, const char *tag,
                           bool record, struct director_lookup *out);

/* Moves `user` to the backend `ip` (port 0: any; otherwise it must match):
 * the mapping overrides the hash. When the user has sessions on another
 * backend the mapping is weak and lookups answer killing until those end
 * or kill_timeout passes. Errors: unknown backend (PETREL_ERR_NOT_FOUND),
 * backend not up (PETREL_ERR_CONFLICT), bad user (PETREL_ERR_INVALID),
 * table full (PETREL_ERR_UNAVAILABLE). */
bool director_state_user_move(struct director_state *st, const char *user, const char *ip,
                              unsigned port, const struct director_change *from,
                              struct petrel_error *err);
/* Announces a kick (login proxies end the user's sessions). */
bool director_state_user_kick(struct director_state *st, const char *user,
                              const struct director_change *from, struct petrel_error *err);

/* Merges a mapping a peer director knows (its handshake USER line): when
 * this director has no live mapping for `hash` and the peer's has not
 * expired (`expires_at_s`, unix seconds, any value), maps it to the backend `ip` (the port must
 * match) for this director's user_expire; nothing is announced. False (and
 * nothing changes) for an unknown backend or a full table; true also when
 * a mapping existed. */
bool director_state_user_merge(struct director_state *st, uint32_t hash, const char *ip,
                               unsigned port, int64_t expires_at_s);

const struct director_users *director_state_users(const struct director_state *st);
/* Drops expired mappings; returns how many. Run periodically. */
size_t director_state_expire(struct director_state *st);

/* ---------- sessions (reported by login proxies) ---------- */

/* Counts a session of `user` on the backend `ip`. Errors: unknown backend
 * (PETREL_ERR_NOT_FOUND), bad user (PETREL_ERR_INVALID), table full
 * (PETREL_ERR_UNAVAILABLE). The caller ends it with session_end. */
struct director_session *director_state_session_start(struct director_state *st, const char *user,
                                                      const char *ip,
                                                      enum ring_session_protocol proto,
                                                      struct petrel_error *err);
void director_state_session_end(struct director_state *st, struct director_session *s);
/* Sessions reported and not ended, over all backends. */
size_t director_state_session_count(const struct director_state *st);

#endif
