/* Host name lookups on an event loop, never blocking it: libevent's evdns
 * (/etc/hosts first, then the servers of /etc/resolv.conf). A client that
 * dials a configured endpoint resolves its name at every connect, so a
 * changed DNS record is followed at the next reconnect
 * (docs/decisions.md, "Host names"). One lookup at a time per resolver:
 * each client has one connection attempt in progress at most. */
#ifndef PETREL_NET_RESOLVE_H
#define PETREL_NET_RESOLVE_H

#include "net/endpoint.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

struct net_resolver;

enum net_resolve_status {
    NET_RESOLVE_FAILED,  /* answered at once: `error` says why */
    NET_RESOLVE_DONE,    /* answered at once: *out holds the address */
    NET_RESOLVE_PENDING, /* the callback answers later, from the loop */
};

/* The answer of a pending lookup: `addr` (with the endpoint's port) or
 * NULL and `error` ("cannot resolve 'name': reason"). */
typedef void net_resolve_cb(const struct net_addr *addr, const char *error, void *arg);

/* A resolver on `base`; the DNS state is made on the first host name. */
struct net_resolver *net_resolver_new(struct event_base *base);
/* Cancels a pending lookup (its callback does not run) and frees. What
 * evdns still holds is released by deferred callbacks on `base`: the
 * loop's owner runs net_loop_drain() (loop-drain.h) before
 * event_base_free(). */
void net_resolver_free(struct net_resolver *r);

/* Starts resolving `ep`. A literal endpoint (IP address, Unix socket) and
 * a name found in /etc/hosts answer before returning (DONE/FAILED, the
 * callback is not called); otherwise PENDING, and `cb` runs once, unless
 * net_resolve_cancel() comes first. A pending lookup is cancelled first. */
enum net_resolve_status net_resolve_start(struct net_resolver *r, const struct net_endpoint *ep,
                                          struct net_addr *out, char *error, size_t error_size,
                                          net_resolve_cb *cb, void *arg);
/* Drops the pending lookup, if any: its callback will not run. */
void net_resolve_cancel(struct net_resolver *r);

#endif
