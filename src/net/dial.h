/* Dialing a configured endpoint with a bufferevent: an IP address or a
 * Unix socket is connected at once, a host name once net/resolve.h has
 * looked it up on the loop (at every connect, so a reconnect follows a
 * changed DNS record). The clients that keep a connection to a service
 * (line-client, the director's and the monitor's ring links) use it. */
#ifndef PETREL_NET_DIAL_H
#define PETREL_NET_DIAL_H

#include "net/endpoint.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdbool.h>

struct net_dialer;

/* A dialer of `ep` (copied) on `base`. */
struct net_dialer *net_dialer_new(struct event_base *base, const struct net_endpoint *ep);
/* Cancels a lookup in progress and frees; NULL is ignored. */
void net_dialer_free(struct net_dialer *d);

/* Connects `bev` (made with fd -1, its callbacks set): data written before
 * the connection is up waits in its output buffer. The outcome reaches
 * bev's event callback: BEV_EVENT_CONNECTED, or BEV_EVENT_ERROR for a
 * refused connection or a failed lookup (net_dialer_error() then says
 * which name could not be resolved). False, with no callback to come,
 * when it failed at once: net_dialer_error() says why, or NULL for a socket
 * error (EVUTIL_SOCKET_ERROR). */
bool net_dialer_connect(struct net_dialer *d, struct bufferevent *bev);
/* Drops a lookup in progress: call before freeing the bev it was for. */
void net_dialer_cancel(struct net_dialer *d);
/* Why the last connect failed when the lookup did; NULL otherwise. */
const char *net_dialer_error(const struct net_dialer *d);
/* True for a Unix socket endpoint (no TCP options apply). */
bool net_dialer_is_unix(const struct net_dialer *d);

#endif
