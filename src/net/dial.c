/* Dialing an endpoint with a bufferevent (dial.h). */
#include "net/dial.h"

#include "core/xalloc.h"
#include "net/resolve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct net_dialer {
    struct net_endpoint ep;
    struct net_resolver *resolver;
    struct bufferevent *bev; /* waiting for its lookup */
    char error[280];
};

struct net_dialer *net_dialer_new(struct event_base *base, const struct net_endpoint *ep)
{
    struct net_dialer *d = xcalloc(1, sizeof(*d));
    d->ep = *ep;
    d->resolver = net_resolver_new(base);
    return d;
}

void net_dialer_free(struct net_dialer *d)
{
    if (d != NULL)
        net_resolver_free(d->resolver);
    free(d);
}

void net_dialer_cancel(struct net_dialer *d)
{
    if (d != NULL && d->bev != NULL) {
        net_resolve_cancel(d->resolver);
        d->bev = NULL;
    }
}

const char *net_dialer_error(const struct net_dialer *d)
{
    return d->error[0] != '\0' ? d->error : NULL;
}

bool net_dialer_is_unix(const struct net_dialer *d)
{
    return d->ep.kind == NET_ENDPOINT_UNIX;
}

static void on_resolved(const struct net_addr *addr, const char *error, void *arg)
{
    struct net_dialer *d = arg;
    struct bufferevent *bev = d->bev;
    d->bev = NULL;
    if (addr == NULL) {
        snprintf(d->error, sizeof(d->error), "%s", error);
        bufferevent_trigger_event(bev, BEV_EVENT_ERROR, 0);
    } else if (bufferevent_socket_connect(bev, (const struct sockaddr *)&addr->ss, (int)addr->len) <
               0) {
        bufferevent_trigger_event(bev, BEV_EVENT_ERROR, 0);
    }
}

bool net_dialer_connect(struct net_dialer *d, struct bufferevent *bev)
{
    net_dialer_cancel(d);
    d->error[0] = '\0';
    struct net_addr addr;
    switch (
        net_resolve_start(d->resolver, &d->ep, &addr, d->error, sizeof(d->error), on_resolved, d)) {
    case NET_RESOLVE_FAILED:
        return false;
    case NET_RESOLVE_PENDING:
        d->bev = bev;
        return true;
    case NET_RESOLVE_DONE:
        break;
    }
    return bufferevent_socket_connect(bev, (const struct sockaddr *)&addr.ss, (int)addr.len) == 0;
}
