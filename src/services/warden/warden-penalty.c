/* Per-IP failure counts with decay (warden-penalty.h).
 *
 * Entries sit in a sorted map by address and in a list ordered by their
 * last failure: every increment moves its entry to the tail with the
 * current (monotonic) time, so the head is always the stalest entry and
 * the first to decay. Making room is O(1) per evicted entry, which keeps a
 * flood of addresses from turning each increment into a scan. */
#include "services/warden/warden-penalty.h"

#include "core/dlist.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *ip; /* canonical; also the map key */
    unsigned failures;
    int64_t last_ms;
    struct entry *prev, *next; /* by last_ms, oldest first */
};

struct warden_penalty {
    struct warden_penalty_config cfg;
    struct smap *by_ip;
    struct entry *head, *tail;
};

struct warden_penalty *warden_penalty_new(const struct warden_penalty_config *cfg)
{
    struct warden_penalty *p = xcalloc(1, sizeof(*p));
    p->cfg = *cfg;
    if (p->cfg.max_ips < 1)
        p->cfg.max_ips = 1;
    p->by_ip = smap_new();
    return p;
}

static void unlink_entry(struct warden_penalty *p, struct entry *e)
{
    DLIST_REMOVE(p, e);
}

static void append_entry(struct warden_penalty *p, struct entry *e)
{
    DLIST_APPEND(p, e);
}

static void drop(struct warden_penalty *p, struct entry *e)
{
    unlink_entry(p, e);
    smap_remove(p->by_ip, e->ip);
    free(e->ip);
    free(e);
}

void warden_penalty_free(struct warden_penalty *p)
{
    if (p == NULL)
        return;
    while (p->head != NULL)
        drop(p, p->head);
    smap_free(p->by_ip, NULL);
    free(p);
}

/* The canonical text of `ip` in `out`, or `ip` itself when it is not an
 * address (a "user:<name>" key; the protocol layer validates). */
static const char *canonical(const char *ip, char *out, size_t size)
{
    unsigned char addr[16];
    if (inet_pton(AF_INET, ip, addr) == 1 && inet_ntop(AF_INET, addr, out, (socklen_t)size))
        return out;
    if (inet_pton(AF_INET6, ip, addr) == 1) {
        /* An IPv4-mapped address counts as the IPv4 address itself. */
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(addr, mapped, 12) == 0 && inet_ntop(AF_INET, addr + 12, out, (socklen_t)size))
            return out;
        if (inet_ntop(AF_INET6, addr, out, (socklen_t)size))
            return out;
    }
    return ip;
}

static bool decayed(const struct warden_penalty *p, const struct entry *e, int64_t now_ms)
{
    return now_ms - e->last_ms >= p->cfg.decay_ms;
}

unsigned warden_penalty_get(struct warden_penalty *p, const char *ip, int64_t now_ms,
                            enum warden_penalty_lookup *result)
{
    char buf[INET6_ADDRSTRLEN + 8];
    const char *key = canonical(ip, buf, sizeof(buf));
    struct entry *e = smap_get(p->by_ip, key);
    enum warden_penalty_lookup r = WARDEN_PENALTY_HIT;
    unsigned failures = 0;
    if (e == NULL) {
        r = WARDEN_PENALTY_MISS;
    } else if (decayed(p, e, now_ms)) {
        r = WARDEN_PENALTY_EXPIRED;
        drop(p, e);
    } else {
        failures = e->failures;
    }
    if (result != NULL)
        *result = r;
    return failures;
}

unsigned warden_penalty_inc(struct warden_penalty *p, const char *ip, int64_t now_ms)
{
    char buf[INET6_ADDRSTRLEN + 8];
    const char *key = canonical(ip, buf, sizeof(buf));
    struct entry *e = smap_get(p->by_ip, key);
    if (e != NULL && decayed(p, e, now_ms)) {
        drop(p, e);
        e = NULL;
    }
    if (e == NULL) {
        /* Decayed entries first, then the stalest live one. */
        while (p->head != NULL && decayed(p, p->head, now_ms))
            drop(p, p->head);
        while ((int64_t)smap_count(p->by_ip) >= p->cfg.max_ips && p->head != NULL)
            drop(p, p->head);
        e = xcalloc(1, sizeof(*e));
        e->ip = xstrdup(key);
        smap_put(p->by_ip, e->ip, e);
    } else {
        unlink_entry(p, e);
    }
    if (e->failures < WARDEN_PENALTY_MAX_FAILURES)
        e->failures++;
    /* The list stays ordered even if a caller's clock stepped back. */
    e->last_ms = p->tail != NULL && p->tail->last_ms > now_ms ? p->tail->last_ms : now_ms;
    append_entry(p, e);
    return e->failures;
}

size_t warden_penalty_entries(const struct warden_penalty *p)
{
    return smap_count(p->by_ip);
}
