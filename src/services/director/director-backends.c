/* The backend registry (director-backends.h): a pointer array kept sorted by
 * (address family, address bytes, port); lookups by ip are binary searches
 * over the parsed address. */
#include "services/director/director-backends.h"

#include "core/xalloc.h"
#include "services/director/ring-hash.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct director_backends {
    struct director_backend **items;
    size_t count;
    size_t cap;
    size_t max;
};

/* (family, bytes): IPv4 sorts before IPv6. */
static bool addr_key(const char *ip, unsigned char key[17])
{
    memset(key, 0, 17);
    if (inet_pton(AF_INET, ip, key + 1) == 1) {
        key[0] = 4;
        return true;
    }
    if (strchr(ip, ':') != NULL && inet_pton(AF_INET6, ip, key + 1) == 1) {
        key[0] = 6;
        return true;
    }
    return false;
}

bool director_ip_canonical(const char *ip, char out[DIRECTOR_IP_MAX])
{
    unsigned char key[17];
    if (!addr_key(ip, key))
        return false;
    return inet_ntop(key[0] == 4 ? AF_INET : AF_INET6, key + 1, out, DIRECTOR_IP_MAX) != NULL;
}

struct director_backends *director_backends_new(size_t max_backends)
{
    struct director_backends *reg = xcalloc(1, sizeof(*reg));
    reg->max = max_backends;
    return reg;
}

static void backend_free(struct director_backend *b)
{
    free(b->tag);
    free(b->points);
    free(b);
}

void director_backends_free(struct director_backends *reg)
{
    if (reg == NULL)
        return;
    for (size_t i = 0; i < reg->count; i++)
        backend_free(reg->items[i]);
    free(reg->items);
    free(reg);
}

size_t director_backends_count(const struct director_backends *reg)
{
    return reg->count;
}

struct director_backend *director_backends_at(const struct director_backends *reg, size_t i)
{
    return i < reg->count ? reg->items[i] : NULL;
}

/* Index of the first backend whose address is >= key; *found when equal. */
static size_t search(const struct director_backends *reg, const unsigned char key[17], bool *found)
{
    size_t lo = 0, hi = reg->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        unsigned char k[17];
        addr_key(reg->items[mid]->ip, k);
        if (memcmp(k, key, 17) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    if (lo < reg->count) {
        unsigned char k[17];
        addr_key(reg->items[lo]->ip, k);
        *found = memcmp(k, key, 17) == 0;
    }
    return lo;
}

struct director_backend *director_backends_find(const struct director_backends *reg, const char *ip)
{
    unsigned char key[17];
    if (!addr_key(ip, key))
        return NULL;
    bool found;
    size_t i = search(reg, key, &found);
    return found ? reg->items[i] : NULL;
}

struct director_backend *director_backends_add(struct director_backends *reg, const char *ip,
                                               unsigned port, const char *tag, uint32_t vhosts,
                                               int64_t now, struct petrel_error *err)
{
    unsigned char key[17];
    if (!addr_key(ip, key)) {
        petrel_error_set(err, PETREL_ERR_INVALID, "ip '%.64s' is not an IP address", ip);
        return NULL;
    }
    if (port == 0 || port > 65535) {
        petrel_error_set(err, PETREL_ERR_INVALID, "port must be 1..65535");
        return NULL;
    }
    bool found;
    size_t at = search(reg, key, &found);
    if (found) {
        petrel_error_set(err, PETREL_ERR_EXISTS, "backend exists: %s", reg->items[at]->ip);
        return NULL;
    }
    if (reg->count >= reg->max) {
        petrel_error_set(err, PETREL_ERR_CONFLICT, "too many backends (limit %zu)", reg->max);
        return NULL;
    }
    struct director_backend *b = xcalloc(1, sizeof(*b));
    director_ip_canonical(ip, b->ip);
    b->port = port;
    b->tag = xstrdup(tag != NULL ? tag : "");
    b->state = RING_STATE_UP;
    b->last_updown_change = now;
    director_backend_set_vhosts(b, vhosts);
    reg->items = xgrow(reg->items, &reg->cap, reg->count + 1, sizeof(*reg->items));
    memmove(reg->items + at + 1, reg->items + at, (reg->count - at) * sizeof(*reg->items));
    reg->items[at] = b;
    reg->count++;
    return b;
}

void director_backends_remove(struct director_backends *reg, struct director_backend *b)
{
    for (size_t i = 0; i < reg->count; i++) {
        if (reg->items[i] == b) {
            memmove(reg->items + i, reg->items + i + 1, (reg->count - i - 1) * sizeof(*reg->items));
            reg->count--;
            backend_free(b);
            return;
        }
    }
}

void director_backend_set_vhosts(struct director_backend *b, uint32_t vhosts)
{
    free(b->points);
    b->points = vhosts > 0 ? xcalloc(vhosts, sizeof(uint32_t)) : NULL;
    b->vhosts = vhosts;
    ring_hash_points(b->ip, vhosts, b->points);
}

void director_backend_set_tag(struct director_backend *b, const char *tag)
{
    free(b->tag);
    b->tag = xstrdup(tag);
}

void director_backend_address(const struct director_backend *b, char *out, size_t size)
{
    if (strchr(b->ip, ':') != NULL)
        snprintf(out, size, "[%s]:%u", b->ip, b->port);
    else
        snprintf(out, size, "%s:%u", b->ip, b->port);
}
