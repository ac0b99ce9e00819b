/* max_connections of one server: the count of its open connections and
 * what happens to a connection that arrives when every slot is taken.
 *
 * Two answers, chosen per server:
 *   - CONN_SLOTS_REFUSE: the new connection gets the server's busy reply
 *     ("* BYE Too many connections", "421 4.3.2 ...") and is closed, so a
 *     mail client reports a clear temporary error (Dovecot and Postfix
 *     answer this way); never a plain-text reply on an implicit-TLS port;
 *   - CONN_SLOTS_PAUSE: the listeners stop accepting at max and resume when
 *     a slot frees (nginx disables accept events at worker_connections,
 *     HAProxy marks a listener full at maxconn): new connections wait in
 *     the kernel's backlog instead of being turned away.
 * Refusals are logged at most once a second per listener (listener.h).
 *
 * The count is thread-safe (IMAP workers release from their own loops);
 * CONN_SLOTS_PAUSE touches the listeners and so needs every acquire and
 * release on the listeners' loop thread. */
#ifndef PETREL_NET_CONN_SLOTS_H
#define PETREL_NET_CONN_SLOTS_H

#include "net/listener.h"
#include "net/listener-set.h"

#include <stdbool.h>
#include <stddef.h>

enum conn_slots_full { CONN_SLOTS_REFUSE, CONN_SLOTS_PAUSE };

struct conn_slots_config {
    size_t max; /* 0: no limit */
    enum conn_slots_full full;
    /* CONN_SLOTS_PAUSE: the listeners paused at max (borrowed). */
    struct net_listener_set *listeners;
    const char *component;  /* log component */
    const char *limit_key;  /* named in the refusal: "imap.max_connections" */
    const char *busy_reply; /* CONN_SLOTS_REFUSE: written to a refused peer; may be NULL */
};

struct conn_slots;

/* `cfg` is copied with its strings. */
struct conn_slots *conn_slots_new(const struct conn_slots_config *cfg);
void conn_slots_free(struct conn_slots *s); /* NULL is ignored */

/* At accept, past the listener's own checks: true when the connection took
 * a slot (matched by exactly one conn_slots_release()). False when every
 * slot is taken: the connection has been refused (busy reply, the
 * per-address count given back, the descriptor closed, a log line). Under
 * CONN_SLOTS_PAUSE, taking the last slot pauses the listeners. */
bool conn_slots_admit(struct conn_slots *s, struct net_listener *l, const struct net_accepted *a);
/* A slot without the refusal: false (nothing counted) when full. For an
 * owner that makes room itself first (line-server closes its oldest
 * connection that sent nothing). */
bool conn_slots_acquire(struct conn_slots *s);
/* Refuses `a` as conn_slots_admit() does when full. */
void conn_slots_refuse(struct conn_slots *s, struct net_listener *l, const struct net_accepted *a);
/* Gives a slot back; under CONN_SLOTS_PAUSE the listeners resume below max
 * (unless they were stopped). */
void conn_slots_release(struct conn_slots *s);

size_t conn_slots_used(const struct conn_slots *s);
size_t conn_slots_max(const struct conn_slots *s);
/* At least 3/4 of the slots are taken: owners shorten pre-login and idle
 * timeouts so waiting connections make room sooner (nginx's
 * reusable-connection drain does the same when connections run short). */
bool conn_slots_pressed(const struct conn_slots *s);

#endif
