/* One outbound link to a peer director (docs/ring-protocol.md, "Peer
 * directors"): a persistent, reconnecting dial loop. It connects to the
 * peer's ring port, sends VERSION and `HELLO director <self>`, reads the
 * peer's handshake (HOST and USER lines, DONE) and hands each line to the
 * callbacks, then stays connected and carries this director's forwarded
 * changes to the peer (director_link_send). When the connection drops, the
 * dial fails or the handshake does not finish within the timeout, it waits
 * (backoff from reconnect_min doubling to reconnect_max) and dials again.
 *
 * A connected link sends `PING` after ping_interval_ms without a line from
 * the peer and drops the connection when no answer comes within the
 * handshake timeout (a peer gone silent: a partition, not a crash).
 *
 * With a secret the link answers the peer's challenge (AUTH, ring-auth.h)
 * and requires the peer's AUTH-OK proof before it takes any handshake line;
 * a peer that offers no challenge or proves another secret is refused (and
 * redialled like any failure). Without one it sends HELLO anonymously.
 *
 * Lines sent while the link is not connected are dropped: the next
 * handshake resynchronises (each side dials the other, so each receives
 * the other's full state). A peer that does not read (queued output over
 * max_output) is disconnected and redialled. Single-threaded (event loop). */
#ifndef PETREL_SERVICES_DIRECTOR_LINK_H
#define PETREL_SERVICES_DIRECTOR_LINK_H

#include "clients/ring/ring-protocol.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct director_link_config {
    const char *self;   /* this director's ring address (HELLO name), copied */
    const char *secret; /* the ring secret, copied; NULL or "" = dial anonymously */
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
    int64_t handshake_timeout_ms; /* connect + handshake, and the wait for a PONG */
    int64_t ping_interval_ms;     /* a connected link sends PING after this much quiet */
    size_t max_line;
    size_t max_output;
};

struct director_link;

struct director_link_callbacks {
    /* One HOST or USER line of the peer's handshake (msg valid during the call). */
    void (*handshake_line)(struct director_link *link, const struct ring_msg *msg, void *ctx);
    /* The handshake finished (DONE): the link is connected. */
    void (*connected)(struct director_link *link, void *ctx);
    /* A dial failed or a connected link dropped; a redial is scheduled. */
    void (*lost)(struct director_link *link, const char *why, void *ctx);
    void *ctx;
};

/* Starts dialling `addr` ("<ip>:<port>", canonical; copied) at once.
 * `cb` is copied. */
struct director_link *director_link_new(struct event_base *base, const char *addr,
                                        const struct director_link_config *cfg,
                                        const struct director_link_callbacks *cb);
/* Closes the connection and cancels the dial loop. No callback runs. */
void director_link_free(struct director_link *link);

const char *director_link_addr(const struct director_link *link);
/* Handshake done and connection open. */
bool director_link_connected(const struct director_link *link);
/* Unix ms when the link last became connected (0 while not connected). */
int64_t director_link_since_ms(const struct director_link *link);
/* Queues `len` bytes (whole lines) to the peer; dropped unless connected. */
void director_link_send(struct director_link *link, const char *data, size_t len);

#endif
