/* Per-address connection counts (conn-limits.h). */
#include "net/conn-limits.h"

#include "core/sorted-map.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct conn_limits {
    int64_t max_per_ip;
    struct cidr_list exempt;
    pthread_mutex_t lock;
    struct smap *counts; /* IP text -> (uintptr_t) connections */
};

struct conn_limits *conn_limits_new(const struct conn_limits_config *cfg)
{
    struct conn_limits *lim = xcalloc(1, sizeof(*lim));
    lim->max_per_ip = cfg->max_per_ip;
    if (cfg->exempt != NULL && cfg->exempt->count > 0) {
        lim->exempt.count = cfg->exempt->count;
        lim->exempt.items = xcalloc(cfg->exempt->count, sizeof(struct cidr));
        memcpy(lim->exempt.items, cfg->exempt->items, cfg->exempt->count * sizeof(struct cidr));
    }
    pthread_mutex_init(&lim->lock, NULL);
    lim->counts = smap_new();
    return lim;
}

void conn_limits_free(struct conn_limits *lim)
{
    if (lim == NULL)
        return;
    smap_free(lim->counts, NULL);
    pthread_mutex_destroy(&lim->lock);
    cidr_list_free(&lim->exempt);
    free(lim);
}

/* The key for `peer`, or false when it is not counted. The same address
 * always gives the same answer, so acquire and release agree. */
static bool counted_key(const struct conn_limits *lim, const struct sockaddr *peer, char *key,
                        size_t size)
{
    if (lim == NULL || lim->max_per_ip <= 0 || peer == NULL ||
        (peer->sa_family != AF_INET && peer->sa_family != AF_INET6))
        return false;
    if (lim->exempt.count > 0 && cidr_list_match(&lim->exempt, peer))
        return false;
    net_addr_format_ip(peer, key, size);
    /* An IPv4 client on a dual-stack socket is the same client. */
    if (strncmp(key, "::ffff:", 7) == 0 && strchr(key + 7, '.') != NULL)
        memmove(key, key + 7, strlen(key + 7) + 1);
    return true;
}

bool conn_limits_acquire(struct conn_limits *lim, const struct sockaddr *peer)
{
    char key[64];
    if (!counted_key(lim, peer, key, sizeof(key)))
        return true;
    pthread_mutex_lock(&lim->lock);
    uintptr_t n = (uintptr_t)smap_get(lim->counts, key);
    bool ok = n < (uintptr_t)lim->max_per_ip;
    if (ok)
        smap_put(lim->counts, key, (void *)(n + 1));
    pthread_mutex_unlock(&lim->lock);
    return ok;
}

void conn_limits_release(struct conn_limits *lim, const struct sockaddr *peer)
{
    char key[64];
    if (!counted_key(lim, peer, key, sizeof(key)))
        return;
    pthread_mutex_lock(&lim->lock);
    uintptr_t n = (uintptr_t)smap_get(lim->counts, key);
    if (n <= 1)
        smap_remove(lim->counts, key);
    else
        smap_put(lim->counts, key, (void *)(n - 1));
    pthread_mutex_unlock(&lim->lock);
}

size_t conn_limits_count(struct conn_limits *lim, const struct sockaddr *peer)
{
    char key[64];
    if (!counted_key(lim, peer, key, sizeof(key)))
        return 0;
    pthread_mutex_lock(&lim->lock);
    uintptr_t n = (uintptr_t)smap_get(lim->counts, key);
    pthread_mutex_unlock(&lim->lock);
    return (size_t)n;
}

int64_t conn_limits_max_per_ip(const struct conn_limits *lim)
{
    return lim != NULL ? lim->max_per_ip : 0;
}
