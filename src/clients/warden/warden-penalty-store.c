/* The warden-backed auth penalty store (warden-penalty-store.h). */
#include "clients/warden/warden-penalty-store.h"

#include "core/xalloc.h"
#include "clients/warden/warden-client.h"

#include <stdio.h>
#include <stdlib.h>

struct warden_store {
    struct warden_client *client;
    struct auth_penalty_store local; /* answers when the warden cannot */
};

/* A get waiting for the warden. */
struct get_call {
    struct warden_store *store;
    auth_penalty_get_cb *cb;
    void *ctx;
    int64_t now_ms;
    char ip[64];
};

static void local_count(unsigned failures, void *ctx)
{
    *(unsigned *)ctx = failures;
}

static void got(const struct warden_client_reply *reply, void *arg)
{
    struct get_call *call = arg;
    if (reply->status == WARDEN_CLIENT_OK) {
        /* This instance's own failures are counted locally at once, while
         * their PENALTY-INC may still be on its way: the larger count wins,
         * so a burst of parallel attempts cannot slip under the limit. */
        unsigned mine = 0;
        struct auth_penalty_store *local = &call->store->local;
        local->ops->get(local->store, call->ip, call->now_ms, local_count, &mine);
        call->cb(reply->failures > mine ? reply->failures : mine, call->ctx);
    } else {
        struct auth_penalty_store *local = &call->store->local;
        local->ops->get(local->store, call->ip, call->now_ms, call->cb, call->ctx);
    }
    free(call);
}

static void store_get(void *store, const char *ip, int64_t now_ms, auth_penalty_get_cb *cb,
                      void *ctx)
{
    struct warden_store *s = store;
    struct get_call *call = xcalloc(1, sizeof(*call));
    call->store = s;
    call->cb = cb;
    call->ctx = ctx;
    call->now_ms = now_ms;
    snprintf(call->ip, sizeof(call->ip), "%s", ip);
    /* The callback never runs inside this call (warden-client.h), and runs
     * exactly once: the request is never cancelled. */
    warden_client_penalty_get(s->client, ip, got, call);
}

static void store_inc(void *store, const char *ip, int64_t now_ms)
{
    struct warden_store *s = store;
    s->local.ops->inc(s->local.store, ip, now_ms);
    warden_client_penalty_inc(s->client, ip);
}

static void store_free(void *store)
{
    struct warden_store *s = store;
    /* Pending gets are answered (from the local store) while it exists. */
    warden_client_free(s->client);
    s->local.ops->free(s->local.store);
    free(s);
}

static const struct auth_penalty_store_ops warden_ops = {
    .get = store_get,
    .inc = store_inc,
    .free = store_free,
};

struct auth_penalty_store warden_penalty_store_new(struct event_base *base, const char *addr,
                                                   const char *instance,
                                                   const struct auth_penalty_config *cfg,
                                                   struct petrel_error *err)
{
    struct auth_penalty_store out = {NULL, NULL};
    struct warden_client *client =
        warden_client_new(base, addr, instance, WARDEN_PENALTY_STORE_TIMEOUT_MS, err);
    if (client == NULL)
        return out;
    struct warden_store *s = xcalloc(1, sizeof(*s));
    s->client = client;
    s->local = auth_penalty_local_store(cfg);
    out.ops = &warden_ops;
    out.store = s;
    return out;
}
