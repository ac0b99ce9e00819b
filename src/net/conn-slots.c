/* max_connections admission (conn-slots.h). */
#include "net/conn-slots.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct conn_slots {
    size_t max;
    enum conn_slots_full full;
    struct net_listener_set *listeners;
    char *component;
    char *limit_key;
    char *busy_reply;
    /* Atomic, not under a lock: the HTTP server asks whether the slots
     * are pressed on every request, and workers give slots back from
     * their own loops. */
    _Atomic size_t used;
};

static char *dup_or_null(const char *s)
{
    return s != NULL ? xstrdup(s) : NULL;
}

struct conn_slots *conn_slots_new(const struct conn_slots_config *cfg)
{
    struct conn_slots *s = xcalloc(1, sizeof(*s));
    s->max = cfg->max;
    s->full = cfg->full;
    s->listeners = cfg->listeners;
    s->component = xstrdup(cfg->component != NULL ? cfg->component : "net");
    s->limit_key = xstrdup(cfg->limit_key != NULL ? cfg->limit_key : "max_connections");
    s->busy_reply = dup_or_null(cfg->busy_reply);
    return s;
}

void conn_slots_free(struct conn_slots *s)
{
    if (s == NULL)
        return;
    free(s->component);
    free(s->limit_key);
    free(s->busy_reply);
    free(s);
}

/* True when the slot was taken; *now_full whether that took the last one. */
static bool take(struct conn_slots *s, bool *now_full)
{
    size_t cur = atomic_load(&s->used);
    do {
        if (s->max != 0 && cur >= s->max) {
            *now_full = true;
            return false;
        }
    } while (!atomic_compare_exchange_weak(&s->used, &cur, cur + 1));
    *now_full = s->max != 0 && cur + 1 >= s->max;
    return true;
}

bool conn_slots_acquire(struct conn_slots *s)
{
    bool now_full;
    if (!take(s, &now_full))
        return false;
    if (now_full && s->full == CONN_SLOTS_PAUSE && s->listeners != NULL)
        net_listener_set_enabled(s->listeners, false);
    return true;
}

void conn_slots_refuse(struct conn_slots *s, struct net_listener *l, const struct net_accepted *a)
{
    unsigned skipped = 0;
    if (net_listener_log_refusal(l, &skipped)) {
        char ip[64], msg[160];
        net_addr_format_ip(a->peer, ip, sizeof(ip));
        snprintf(msg, sizeof(msg), "connection refused: %s reached", s->limit_key);
        log_warn(s->component, msg, "peer=%s limit=%zu refusals_not_logged=%u", ip, s->max,
                 skipped);
    }
    net_listener_refuse(l, a, s->busy_reply);
}

bool conn_slots_admit(struct conn_slots *s, struct net_listener *l, const struct net_accepted *a)
{
    if (conn_slots_acquire(s))
        return true;
    /* Under CONN_SLOTS_PAUSE this is a connection accepted in the same
     * batch as the one that filled the slots. */
    conn_slots_refuse(s, l, a);
    return false;
}

void conn_slots_release(struct conn_slots *s)
{
    size_t cur = atomic_load(&s->used);
    while (cur > 0 && !atomic_compare_exchange_weak(&s->used, &cur, cur - 1))
        ;
    size_t now = cur > 0 ? cur - 1 : 0;
    bool below = s->max == 0 || now < s->max;
    if (below && s->full == CONN_SLOTS_PAUSE && s->listeners != NULL &&
        net_listener_set_paused(s->listeners) && !net_listener_set_stopped(s->listeners))
        net_listener_set_enabled(s->listeners, true);
}

size_t conn_slots_used(const struct conn_slots *s)
{
    return atomic_load_explicit(&((struct conn_slots *)s)->used, memory_order_relaxed);
}

size_t conn_slots_max(const struct conn_slots *s)
{
    return s->max;
}

bool conn_slots_pressed(const struct conn_slots *s)
{
    return s->max != 0 && conn_slots_used(s) * 4 >= s->max * 3;
}
