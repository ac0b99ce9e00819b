/* Bytes both ways between two connections, once a proxy has set them up
 * (the login proxy after it logged in to the backend for the client).
 *
 * A plain socket is driven directly: one recv() of up to 64 KiB and one
 * send() per chunk, with no event changes while the other side keeps up;
 * only what a socket does not take is queued (no memory held while idle).
 * A TLS connection (any bufferevent with a filter or an SSL under it) is
 * read and written through its bufferevent, whose buffers are handed on
 * chain by chain without a copy. Back-pressure: a side stops being read
 * while the other has `high_water` bytes or more queued unsent, and is read
 * again once that queue is down to half of it; so a side that stops
 * reading costs the relay at most about high_water (plus one read) per
 * direction, and the sender is held back by TCP instead.
 *
 * The end: an EOF or an error on one side, `idle_ms` without a byte in
 * either direction, or net_relay_stop(). The side that ended is closed at
 * once; what is still queued for the other side is sent to it first (for
 * at most `linger_ms`; what that side sends meanwhile is dropped), then a
 * FIN follows it, and `done` is called once, from the loop, with how it
 * ended and the byte counts. The connection then lingers on without the
 * relay until the peer's EOF, reading and dropping what it sends (a few
 * wake-ups at most), so that its last bytes do not meet a reset. The relay
 * owns both bufferevents from net_relay_start() on and frees them.
 *
 * A side that is not being read (its peer's queue is full) is not watched
 * for EOF either: a peer that never reads holds both still, and only
 * `idle_ms` ends that, so a proxy sets it. */
#ifndef PETREL_NET_RELAY_H
#define PETREL_NET_RELAY_H

#include <event2/bufferevent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct net_relay;

struct net_relay_config {
    size_t high_water; /* bytes queued for a side before the other is no longer read; > 0 */
    int64_t idle_ms;   /* no byte either way this long ends the relay; 0: never */
    int64_t linger_ms; /* the most a closing side's last bytes are waited for; > 0 */
};

enum net_relay_end {
    NET_RELAY_CLIENT_CLOSED,  /* EOF from the client */
    NET_RELAY_BACKEND_CLOSED, /* EOF from the backend */
    NET_RELAY_CLIENT_ERROR,   /* a read or write error on the client's side */
    NET_RELAY_BACKEND_ERROR,  /* the same on the backend's side */
    NET_RELAY_IDLE,           /* idle_ms passed without a byte */
    NET_RELAY_STOPPED,        /* net_relay_stop() */
};

struct net_relay_stats {
    uint64_t to_backend; /* bytes read from the client */
    uint64_t to_client;  /* bytes read from the backend */
};

typedef void net_relay_done_fn(void *arg, enum net_relay_end end,
                               const struct net_relay_stats *stats);

/* Takes both bufferevents (on one loop; any callbacks they had are
 * replaced; a plain socket's bufferevent is freed at once and its
 * descriptor, which must be non-blocking, kept; input already buffered on
 * either is relayed at once, output not yet sent is sent first) and starts
 * relaying. Never fails. */
struct net_relay *net_relay_start(struct bufferevent *client, struct bufferevent *backend,
                                  const struct net_relay_config *cfg, net_relay_done_fn *done,
                                  void *arg);

/* Ends the relay (an operator's kick, the server going away): nothing more
 * is read, the backend is closed at once, `farewell` (may be NULL) is
 * queued for the client after what is already queued, and the client is
 * closed once that has left or linger_ms passed; then `done` with
 * NET_RELAY_STOPPED. A second call, or one after the end began, does
 * nothing. */
void net_relay_stop(struct net_relay *r, const char *farewell, size_t len);

/* Ends the relay at once, for an owner torn down after its loop stopped
 * (a relay still lingering past shutdown_timeout): both connections are
 * closed now, nothing queued is sent and `done` is never called. A relay
 * already finished is freed by its queued end, which skips `done`. */
void net_relay_abort(struct net_relay *r);

/* Bytes the relay holds unsent in both directions (the back-pressure
 * bound's subject). */
size_t net_relay_buffered(const struct net_relay *r);

/* The name of an end for logs and metric labels: "client_closed", ... */
const char *net_relay_end_name(enum net_relay_end end);

#endif
