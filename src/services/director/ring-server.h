/* The director's ring-protocol listener (docs/ring-protocol.md), default
 * :9102: accepts login proxies, the monitor and peer directors, runs the
 * VERSION/HELLO/HOST handshake, answers LOOKUPs, counts reported sessions,
 * applies the monitor's BACKEND-FLUSH/BACKEND-UP, and pushes every state
 * change (it observes the director state) to the clients that receive it.
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

/* Binds cfg->ring_listen and subscribes to the state. */
struct ring_server *ring_server_start(struct event_base *base, struct director_state *state,
                                      const struct director_config *cfg,
                                      struct metrics_registry *metrics, struct petrel_error *err);
/* The bound address ("127.0.0.1:9102"). */
const char *ring_server_address(const struct ring_server *srv);
/* Closes the listener; connected clients stay. */
void ring_server_stop_accepting(struct ring_server *srv);
/* Connected clients (all kinds, handshake done or not). */
size_t ring_server_client_count(const struct ring_server *srv);
/* Closes every connection (their sessions end), unsubscribes, frees. */
void ring_server_free(struct ring_server *srv);

#endif
