/* Closing a connection after its last reply has left: the drain of one
 * connection, for the servers that answer a goodbye ("421 ... shutting
 * down", "* BYE") and then close.
 *
 * The owner stops reading and starts a linger; `done` then runs once, from
 * a timer (never inside the owner's own call chain, so callers up the
 * stack never touch a freed connection), as soon as nothing is pending or
 * after NET_LINGER_GRACE_MS, whichever comes first: a client that reads
 * nothing more cannot keep a closing connection. What is pending is the
 * output on the bufferevent and, under a STARTTLS filter, on the socket
 * bufferevent below it (net_output_pending()), unless the owner counts it
 * itself (bytes it holds back). */
#ifndef PETREL_NET_LINGER_H
#define PETREL_NET_LINGER_H

#include <event2/bufferevent.h>
#include <stddef.h>

#define NET_LINGER_GRACE_MS 5000

/* Bytes queued for the peer on `bev` and on the bufferevent under it (a
 * TLS filter hands its ciphertext to the socket bufferevent below). */
size_t net_output_pending(struct bufferevent *bev);

typedef size_t net_linger_pending_fn(void *arg);
typedef void net_linger_done_fn(void *arg);

struct net_linger;

/* Starts lingering on `bev`'s loop. `pending` NULL: net_output_pending(bev).
 * `done` may free the connection and the linger. */
struct net_linger *net_linger_start(struct bufferevent *bev, net_linger_pending_fn *pending,
                                    net_linger_done_fn *done, void *arg);
/* Stops it (done is not called); NULL is ignored. */
void net_linger_free(struct net_linger *l);

#endif
