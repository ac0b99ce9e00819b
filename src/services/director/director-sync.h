/* Peer synchronisation: the ring of directors (docs/ring-protocol.md,
 * "Peer directors"; docs/director.md, "The ring of directors").
 *
 * - Links: this director dials its left and right neighbours in the ring
 *   order of (address, port) over itself and its known peers
 *   (director-peers.h), each with a reconnecting dial loop
 *   (director-link.h). director_sync_refresh() re-derives them after the
 *   peer list changed.
 * - Forwarding: every change made here (observer, `local`) is sent to both
 *   neighbours as RING-CHANGE / USER-MOVED / USER-KICKED with this
 *   director's origin and sequence number. A change received from a peer
 *   (director_sync_receive, fed by the ring server) is dropped when its
 *   origin is this director or its seq is not above that origin's
 *   watermark; otherwise it is applied through the director state and
 *   forwarded unchanged to the neighbours other than the sender.
 * - Convergence: the handshake a peer sends on each link carries its whole
 *   backend set (HOST) and its user mappings (USER); each backend is merged
 *   by last-writer-wins on director_sync_host_cmp, users only where this
 *   director has no live mapping. A merge that changes a backend is applied
 *   as a local change, so it is forwarded like one.
 * - Tombstones: a neighbour whose link drops or whose dial fails; cleared
 *   when its link connects again or it leaves the ring.
 *
 * Borrows the state and the peer list (both outlive it). Single-threaded. */
#ifndef PETREL_SERVICES_DIRECTOR_SYNC_H
#define PETREL_SERVICES_DIRECTOR_SYNC_H

#include "services/director/director-config.h"
#include "services/director/director-peers.h"
#include "services/director/director-state.h"
#include "services/director/director-tombstones.h"
#include "clients/ring/ring-protocol.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

struct director_sync;

/* Link role of a member: which neighbour it is. */
enum director_link_role {
    DIRECTOR_ROLE_NONE,
    DIRECTOR_ROLE_LEFT,
    DIRECTOR_ROLE_RIGHT,
    DIRECTOR_ROLE_BOTH
};

struct director_link_info {
    enum director_link_role role; /* NONE: not a neighbour (no link) */
    bool connected;
    int64_t since_ms; /* connected since (unix ms), 0 while reconnecting */
};

/* Subscribes to the state and dials the neighbours at once. The links
 * authenticate with `secret` (copied; NULL or "" = they dial anonymously,
 * director-link.h). */
struct director_sync *director_sync_new(struct event_base *base, struct director_state *state,
                                        struct director_peers *peers,
                                        const struct director_config *cfg, const char *secret);
/* Closes the links, unsubscribes, frees. */
void director_sync_free(struct director_sync *sync);

/* The peer list changed (POST/DELETE ring): re-derives the neighbours,
 * starts and stops links, clears the tombstones of members that are no
 * longer neighbours. Watermarks stay (a member that comes back must not
 * have its old changes applied twice). */
void director_sync_refresh(struct director_sync *sync);

/* A RING-CHANGE, USER-MOVED or USER-KICKED from the peer director named
 * `sender` (its HELLO name). Returns false with a reason for a change that
 * could not be applied (it is still forwarded: other directors may know
 * the backend). */
bool director_sync_receive(struct director_sync *sync, const char *sender,
                           const struct ring_msg *msg, struct petrel_error *err);

/* The watermark (highest seq processed) of origin `addr`; 0 for none. */
uint64_t director_sync_watermark(const struct director_sync *sync, const char *addr);
/* The link to member `addr`. */
void director_sync_link_info(const struct director_sync *sync, const char *addr,
                             struct director_link_info *out);
const struct director_tombstones *director_sync_tombstones(const struct director_sync *sync);

/* Last-writer-wins order of two views of one backend: by last_updown_change,
 * then flush above up, then vhosts, port and tag. > 0 when `a` wins. Equal
 * (0) means the same backend. Every director orders alike, so merging in
 * any order converges. */
int director_sync_host_cmp(const struct ring_host *a, const struct ring_host *b);

#endif
