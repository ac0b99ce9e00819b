/* Host name lookups with evdns (resolve.h). */
#include "net/resolve.h"

#include "core/xalloc.h"

#include <event2/dns.h>
#include <event2/util.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One lookup handed to evdns. evdns answers a cancelled lookup later, so
 * this outlives the cancel: `r` is NULL then and the answer is dropped. */
struct pending {
    struct net_resolver *r;
    struct evdns_getaddrinfo_request *req;
    char host[NET_HOST_MAX + 1];
    uint16_t port;
    bool starting; /* inside evdns_getaddrinfo: the answer is kept, not called back */
    bool answered;
    bool ok;
    struct net_addr addr;
    char error[280];
};

struct net_resolver {
    struct event_base *base;
    struct evdns_base *dns;
    struct pending *pending;
    net_resolve_cb *cb;
    void *arg;
};

struct net_resolver *net_resolver_new(struct event_base *base)
{
    struct net_resolver *r = xcalloc(1, sizeof(*r));
    r->base = base;
    return r;
}

void net_resolve_cancel(struct net_resolver *r)
{
    struct pending *p = r->pending;
    if (p == NULL)
        return;
    r->pending = NULL;
    p->r = NULL;
    if (p->req != NULL)
        evdns_getaddrinfo_cancel(p->req); /* answers (and frees p) from the loop */
}

void net_resolver_free(struct net_resolver *r)
{
    if (r == NULL)
        return;
    net_resolve_cancel(r);
    /* Fails what evdns still holds; the failed answers (which free a
     * cancelled lookup's struct pending) run from the loop, deferred. */
    if (r->dns != NULL)
        evdns_base_free(r->dns, 1);
    free(r);
}

static void on_answer(int result, struct evutil_addrinfo *res, void *arg)
{
    struct pending *p = arg;
    p->answered = true;
    if (result == 0 && res != NULL)
        p->ok = net_addr_pick(res, p->port, &p->addr);
    if (!p->ok)
        snprintf(p->error, sizeof(p->error), "cannot resolve '%.200s': %s", p->host,
                 result != 0 ? evutil_gai_strerror(result) : "no IPv4 or IPv6 address");
    if (res != NULL)
        evutil_freeaddrinfo(res);
    if (p->starting)
        return; /* net_resolve_start answers */
    struct net_resolver *r = p->r;
    if (r == NULL) { /* cancelled */
        free(p);
        return;
    }
    r->pending = NULL;
    net_resolve_cb *cb = r->cb;
    void *cb_arg = r->arg;
    struct net_addr addr = p->addr;
    char error[sizeof(p->error)];
    memcpy(error, p->error, sizeof(error));
    bool ok = p->ok;
    free(p);
    cb(ok ? &addr : NULL, ok ? NULL : error, cb_arg);
}

enum net_resolve_status net_resolve_start(struct net_resolver *r, const struct net_endpoint *ep,
                                          struct net_addr *out, char *error, size_t error_size,
                                          net_resolve_cb *cb, void *arg)
{
    net_resolve_cancel(r);
    if (ep->literal) {
        *out = ep->addr;
        return NET_RESOLVE_DONE;
    }
    if (r->dns == NULL) {
        r->dns = evdns_base_new(r->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                             EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        if (r->dns == NULL) {
            snprintf(error, error_size, "cannot resolve '%.200s': no DNS resolver", ep->host);
            return NET_RESOLVE_FAILED;
        }
    }
    struct pending *p = xcalloc(1, sizeof(*p));
    p->r = r;
    snprintf(p->host, sizeof(p->host), "%s", ep->host);
    p->port = ep->port;
    p->starting = true;
    struct evutil_addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    p->req = evdns_getaddrinfo(r->dns, p->host, NULL, &hints, on_answer, p);
    p->starting = false;
    if (p->answered) { /* /etc/hosts, or a failure before any query */
        enum net_resolve_status st = p->ok ? NET_RESOLVE_DONE : NET_RESOLVE_FAILED;
        if (p->ok)
            *out = p->addr;
        else
            snprintf(error, error_size, "%s", p->error);
        free(p);
        return st;
    }
    r->pending = p;
    r->cb = cb;
    r->arg = arg;
    return NET_RESOLVE_PENDING;
}
