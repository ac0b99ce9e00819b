/* The director's ring-protocol listener (docs/ring-protocol.md), default
 * :9102: accepts login proxies, the monitor and peer directors, runs the
 * VERSION/AUTH/HELLO/HOST handshake (a client proves the ring secret
 * before anything else is taken), answers LOOKUPs, counts reported sessions,
 * applies the monitor's BACKEND-FLUSH/BACKEND-UP, and pushes every state
 * change (it observes the director state) to the login and monitor clients
 * that receive it. A peer director's connection gets HOST and USER lines in
 * its handshake; its changes go to the peer handler (director-sync.h), and
 * it receives no pushes (changes reach peers over the links they dial).
 *
 * The server borrows the state and the configuration; both must outlive it.
 * Lookup latencies go to petrel_director_lookup_seconds{outcome}. */
#ifndef PETREL_SERVICES_DIRECTOR_RING_SERVER_H
#define PETREL_SERVICES_DIRECTOR_RING_SERVER_H

#include "core/error.h"
#include "core/metrics.h"
#include "services/director/director-config.h"
#include "services/director/director-state.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

struct ring_server;

/* Binds cfg->ring_listen and subscribes to the state. `secret` (copied)
 * is the ring secret clients must prove (ring-auth.h); NULL or "" turns
 * authentication off (only with cfg->ring_allow_unauthenticated, which
 * the caller checks). With a secret, cfg->ring_allow_unauthenticated still
 * lets clients that skip AUTH in (a migration setting). */
struct ring_server *ring_server_start(struct event_base *base, struct director_state *state,
                                      const struct director_config *cfg, const char *secret,
                                      struct metrics_registry *metrics, struct petrel_error *err);
/* Receives the RING-CHANGE, USER-MOVED and USER-KICKED lines peer
 * directors send (`sender` is the peer's HELLO name); false with err when
 * the change could not be applied (the peer gets ERROR with the reason). */
typedef bool (*ring_peer_change_fn)(const char *sender, const struct ring_msg *msg,
                                    struct petrel_error *err, void *ctx);
/* Enables peer synchronisation: without a handler, directors' changes are
 * answered "ERROR peer synchronisation is not enabled on this director". */
void ring_server_set_peer_handler(struct ring_server *srv, ring_peer_change_fn fn, void *ctx);

/* The bound address ("127.0.0.1:9102"). */
const char *ring_server_address(const struct ring_server *srv);
/* Closes the listener; connected clients stay. */
void ring_server_stop_accepting(struct ring_server *srv);
/* Connected clients (all kinds, handshake done or not). */
size_t ring_server_client_count(const struct ring_server *srv);
/* Closes every connection (their sessions end), unsubscribes, frees. */
void ring_server_free(struct ring_server *srv);

#endif
