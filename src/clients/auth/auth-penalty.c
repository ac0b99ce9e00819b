#include "clients/auth/auth-penalty.h"

#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <stdint.h>
#include <stdlib.h>

struct ip_failures {
    unsigned count;
    int64_t last_ms;
};

struct local_store {
    struct auth_penalty_config cfg;
    struct smap *by_ip;
};

int64_t auth_penalty_delay_ms(const struct auth_penalty_config *cfg, unsigned failures)
{
    if (failures == 0 || cfg->failure_delay_ms <= 0)
        return 0;
    int64_t delay = cfg->failure_delay_ms;
    for (unsigned i = 1; i < failures && delay < cfg->max_delay_ms; i++) {
        if (delay > INT64_MAX / 2)
            return cfg->max_delay_ms; /* doubling would overflow: the cap is below */
        delay *= 2;
    }
    return delay < cfg->max_delay_ms ? delay : cfg->max_delay_ms;
}

static struct ip_failures *live_entry(struct local_store *s, const char *ip, int64_t now_ms)
{
    struct ip_failures *f = smap_get(s->by_ip, ip);
    if (f != NULL && now_ms - f->last_ms >= s->cfg.decay_ms) {
        free(smap_remove(s->by_ip, ip));
        f = NULL;
    }
    return f;
}

static void local_get(void *store, const char *ip, int64_t now_ms, auth_penalty_get_cb *cb,
                      void *ctx)
{
    struct ip_failures *f = live_entry(store, ip, now_ms);
    cb(f == NULL ? 0 : f->count, ctx);
}

/* Bounds memory under an attack from many addresses: drop every entry
 * that has decayed; when all are fresh, drop the stalest one. */
static void make_room(struct local_store *s, int64_t now_ms)
{
    const char *key = NULL;
    char *stalest_key = NULL;
    int64_t stalest = INT64_MAX;
    struct ip_failures *f = smap_seek(s->by_ip, "", false, &key);
    while (f != NULL) {
        const char *next_key = NULL;
        struct ip_failures *next = smap_seek(s->by_ip, key, true, &next_key);
        if (now_ms - f->last_ms >= s->cfg.decay_ms) {
            /* The key lives in the node being removed: copy it first. */
            char *doomed = xstrdup(key);
            free(smap_remove(s->by_ip, doomed));
            free(doomed);
        } else if (f->last_ms < stalest) {
            stalest = f->last_ms;
            free(stalest_key);
            stalest_key = xstrdup(key);
        }
        f = next;
        key = next_key;
    }
    if ((int64_t)smap_count(s->by_ip) >= s->cfg.max_tracked_ips && stalest_key != NULL)
        free(smap_remove(s->by_ip, stalest_key));
    free(stalest_key);
}

static void local_inc(void *store, const char *ip, int64_t now_ms)
{
    struct local_store *s = store;
    struct ip_failures *f = live_entry(s, ip, now_ms);
    if (f == NULL) {
        if ((int64_t)smap_count(s->by_ip) >= s->cfg.max_tracked_ips)
            make_room(s, now_ms);
        f = xcalloc(1, sizeof(*f));
        smap_put(s->by_ip, ip, f);
    }
    if (f->count < 64)
        f->count++;
    f->last_ms = now_ms;
}

static void local_free(void *store)
{
    struct local_store *s = store;
    smap_free(s->by_ip, free);
    free(s);
}

static const struct auth_penalty_store_ops local_ops = {
    .get = local_get,
    .inc = local_inc,
    .free = local_free,
};

struct auth_penalty_store auth_penalty_local_store(const struct auth_penalty_config *cfg)
{
    struct local_store *s = xcalloc(1, sizeof(*s));
    s->cfg = *cfg;
    if (s->cfg.max_tracked_ips <= 0)
        s->cfg.max_tracked_ips = 1;
    s->by_ip = smap_new();
    struct auth_penalty_store store = {&local_ops, s};
    return store;
}
