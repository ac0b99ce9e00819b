/* The peer list (director-peers.h): a small array sorted by (address
 * family, address bytes, port). */
#include "services/director/director-peers.h"

#include "core/xalloc.h"
#include "services/director/director-config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct director_peers {
    struct director_peer *items;
    size_t count;
    size_t cap;
    size_t max;
    char self[64];
    struct director_peer me; /* self, parsed (for the ring order) */
};

static void format_addr(const char *ip, unsigned port, char out[64])
{
    if (strchr(ip, ':') != NULL)
        snprintf(out, 64, "[%s]:%u", ip, port);
    else
        snprintf(out, 64, "%s:%u", ip, port);
}

bool director_peer_addr_canonical(const char *text, char out[64])
{
    char ip[46];
    unsigned port;
    if (!director_parse_addr(text, ip, &port))
        return false;
    format_addr(ip, port, out);
    return true;
}

struct director_peers *director_peers_new(const char *self, size_t max_peers)
{
    struct director_peers *peers = xcalloc(1, sizeof(*peers));
    peers->max = max_peers;
    if (!director_peer_addr_canonical(self, peers->self))
        snprintf(peers->self, sizeof(peers->self), "%s", self);
    if (!director_parse_addr(peers->self, peers->me.ip, &peers->me.port))
        snprintf(peers->me.ip, sizeof(peers->me.ip), "127.0.0.1");
    snprintf(peers->me.addr, sizeof(peers->me.addr), "%s", peers->self);
    return peers;
}

void director_peers_free(struct director_peers *peers)
{
    if (peers == NULL)
        return;
    free(peers->items);
    free(peers);
}

size_t director_peers_count(const struct director_peers *peers)
{
    return peers->count;
}

const struct director_peer *director_peers_at(const struct director_peers *peers, size_t i)
{
    return i < peers->count ? &peers->items[i] : NULL;
}

/* Ring order: (family, address bytes, port). */
static int peer_cmp(const struct director_peer *a, const struct director_peer *b)
{
    unsigned char ka[17] = {0}, kb[17] = {0};
    ka[0] = strchr(a->ip, ':') != NULL ? 6 : 4;
    kb[0] = strchr(b->ip, ':') != NULL ? 6 : 4;
    inet_pton(ka[0] == 4 ? AF_INET : AF_INET6, a->ip, ka + 1);
    inet_pton(kb[0] == 4 ? AF_INET : AF_INET6, b->ip, kb + 1);
    int c = memcmp(ka, kb, sizeof(ka));
    if (c != 0)
        return c;
    return a->port < b->port ? -1 : a->port > b->port ? 1 : 0;
}

size_t director_peers_self_index(const struct director_peers *peers)
{
    size_t i = 0;
    while (i < peers->count && peer_cmp(&peers->items[i], &peers->me) < 0)
        i++;
    return i;
}

void director_peers_neighbours(const struct director_peers *peers,
                               const struct director_peer **left,
                               const struct director_peer **right)
{
    *left = *right = NULL;
    if (peers->count == 0)
        return;
    size_t at = director_peers_self_index(peers); /* peers before self: 0..at-1 */
    *left = &peers->items[at > 0 ? at - 1 : peers->count - 1];
    *right = &peers->items[at < peers->count ? at : 0];
}

const struct director_peer *director_peers_find(const struct director_peers *peers,
                                                const char *addr)
{
    for (size_t i = 0; i < peers->count; i++) {
        if (strcmp(peers->items[i].addr, addr) == 0)
            return &peers->items[i];
    }
    return NULL;
}

static struct director_peer *find(struct director_peers *peers, const char *canonical)
{
    for (size_t i = 0; i < peers->count; i++) {
        if (strcmp(peers->items[i].addr, canonical) == 0)
            return &peers->items[i];
    }
    return NULL;
}

bool director_peers_add(struct director_peers *peers, const char *addr, bool permanent,
                        struct petrel_error *err)
{
    struct director_peer p;
    memset(&p, 0, sizeof(p));
    if (!director_parse_addr(addr, p.ip, &p.port))
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "addr must be <ip>:<port> or [<ip6>]:<port>, found '%.64s'", addr);
    format_addr(p.ip, p.port, p.addr);
    if (strcmp(p.addr, peers->self) == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "%s is this director itself", p.addr);
    struct director_peer *known = find(peers, p.addr);
    if (known != NULL) {
        known->permanent = known->permanent || permanent;
        return true;
    }
    if (peers->count >= peers->max)
        return petrel_error_set(err, PETREL_ERR_UNAVAILABLE, "too many peers (limit %zu)",
                                peers->max);
    p.permanent = permanent;
    peers->items = xgrow(peers->items, &peers->cap, peers->count + 1, sizeof(*peers->items));
    size_t at = 0;
    while (at < peers->count && peer_cmp(&peers->items[at], &p) < 0)
        at++;
    memmove(peers->items + at + 1, peers->items + at, (peers->count - at) * sizeof(p));
    peers->items[at] = p;
    peers->count++;
    return true;
}

bool director_peers_remove(struct director_peers *peers, const char *addr, struct petrel_error *err)
{
    char canonical[64];
    if (!director_peer_addr_canonical(addr, canonical))
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "addr must be <ip>:<port> or [<ip6>]:<port>, found '%.64s'", addr);
    struct director_peer *p = find(peers, canonical);
    if (p == NULL)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "peer not found: %s", canonical);
    size_t i = (size_t)(p - peers->items);
    memmove(peers->items + i, peers->items + i + 1, (peers->count - i - 1) * sizeof(*p));
    peers->count--;
    return true;
}
