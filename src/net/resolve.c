/* Host name lookups with evdns (resolve.h). */
#include "net/resolve.h"

#include "core/xalloc.h"

#include <event2/dns.h>
#include <event2/util.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The evdns state of one resolver. A lookup's answer reads it, and evdns
 * answers a cancelled lookup later, from the loop: the state lives until
 * the resolver and every lookup started on it are done with it. */
struct dns_state {
    struct evdns_base *dns;
    unsigned refs;
};

/* One lookup handed to evdns. evdns answers a cancelled lookup later, so
 * this outlives the cancel: `r` is NULL then and the answer is dropped. */
struct pending {
    struct net_resolver *r;
    struct dns_state *state; /* a reference, dropped with the pending */
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
    struct dns_state *state; /* made at the first host name; a reference */
    struct pending *pending;
    net_resolve_cb *cb;
    void *arg;
};

/* Drops a reference; the last one frees the evdns state. A probe of a name
 * server marked down is cancelled first, while that name server exists (a
 * cancelled probe's deferred answer touches nothing; failed by
 * evdns_base_free() instead, its answer would use the freed name server).
 * No lookup of ours is left on it by then. */
static void dns_state_unref(struct dns_state *st)
{
    if (st == NULL || --st->refs > 0)
        return;
    evdns_base_clear_nameservers_and_suspend(st->dns);
    evdns_base_free(st->dns, 1);
    free(st);
}

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
    dns_state_unref(r->state);
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
    if (r == NULL) { /* cancelled; evdns reads its state no more after this */
        dns_state_unref(p->state);
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
    dns_state_unref(p->state); /* the resolver holds another */
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
    if (r->state == NULL) {
        struct evdns_base *dns = evdns_base_new(r->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                                             EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        if (dns == NULL) {
            snprintf(error, error_size, "cannot resolve '%.200s': no DNS resolver", ep->host);
            return NET_RESOLVE_FAILED;
        }
        r->state = xcalloc(1, sizeof(*r->state));
        r->state->dns = dns;
        r->state->refs = 1;
    }
    struct pending *p = xcalloc(1, sizeof(*p));
    p->r = r;
    p->state = r->state;
    r->state->refs++;
    snprintf(p->host, sizeof(p->host), "%s", ep->host);
    p->port = ep->port;
    p->starting = true;
    struct evutil_addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    p->req = evdns_getaddrinfo(r->state->dns, p->host, NULL, &hints, on_answer, p);
    p->starting = false;
    if (p->answered) { /* /etc/hosts, or a failure before any query */
        enum net_resolve_status st = p->ok ? NET_RESOLVE_DONE : NET_RESOLVE_FAILED;
        if (p->ok)
            *out = p->addr;
        else
            snprintf(error, error_size, "%s", p->error);
        dns_state_unref(p->state);
        free(p);
        return st;
    }
    r->pending = p;
    r->cb = cb;
    r->arg = arg;
    return NET_RESOLVE_PENDING;
}
