/* The warden's session registry (warden-registry.h).
 *
 * Every session sits in three places: the id map, its user's list and its
 * owner's list (both intrusive, so removal is O(1) after the O(log n) id
 * lookup). Users keep per-service counts, and the registry keeps totals
 * per service, so counts without a user grouping cost O(1) (a service
 * filter) or O(users) at most. Instances keep their owners, which is how a
 * HELLO with a new boot id finds the sessions of the old one.
 *
 * Listing sorts each user's sessions on the way out (a user has a handful);
 * users come from the sorted user map. */
#include "services/warden/warden-registry.h"

#include "core/dlist.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

#define SERVICE_COUNT 4

struct wuser;
struct winstance;

struct wsession {
    char *id;
    char *ip;
    int service; /* index into warden_services */
    int64_t connected_at;
    struct wuser *user;
    struct warden_owner *owner;
    struct wsession *user_prev, *user_next;
    struct wsession *owner_prev, *owner_next;
};

struct wuser {
    char *name;
    struct wsession *head;
    size_t count;
    size_t by_service[SERVICE_COUNT];
};

struct winstance {
    char *name;
    char *boot_id; /* the current boot: the last HELLO's */
    struct warden_owner *owners;
};

struct warden_owner {
    struct winstance *instance;
    char *boot_id;
    struct wsession *head;
    size_t count;
    struct warden_owner *prev, *next; /* in instance->owners */
};

struct warden_registry {
    size_t max_sessions;
    size_t count;
    size_t by_service[SERVICE_COUNT];
    struct smap *by_id;     /* id -> wsession */
    struct smap *users;     /* name -> wuser */
    struct smap *instances; /* name -> winstance */
};

static int service_index(const char *service)
{
    for (int i = 0; i < SERVICE_COUNT; i++) {
        if (strcmp(warden_services[i], service) == 0)
            return i;
    }
    return -1;
}

struct warden_registry *warden_registry_new(size_t max_sessions)
{
    struct warden_registry *reg = xcalloc(1, sizeof(*reg));
    reg->max_sessions = max_sessions;
    reg->by_id = smap_new();
    reg->users = smap_new();
    reg->instances = smap_new();
    return reg;
}

size_t warden_registry_sessions(const struct warden_registry *reg)
{
    return reg->count;
}

/* ---------- links ---------- */

static void user_link(struct warden_registry *reg, struct wsession *s, const char *name)
{
    struct wuser *u = smap_get(reg->users, name);
    if (u == NULL) {
        u = xcalloc(1, sizeof(*u));
        u->name = xstrdup(name);
        smap_put(reg->users, name, u);
    }
    s->user = u;
    DLIST_PUSH_AT(u->head, s, user_prev, user_next);
    u->count++;
    u->by_service[s->service]++;
}

static void user_unlink(struct warden_registry *reg, struct wsession *s)
{
    struct wuser *u = s->user;
    DLIST_UNLINK_AT(u->head, s, user_prev, user_next);
    u->count--;
    u->by_service[s->service]--;
    s->user = NULL;
    if (u->count == 0) {
        smap_remove(reg->users, u->name);
        free(u->name);
        free(u);
    }
}

static void owner_link(struct warden_owner *o, struct wsession *s)
{
    s->owner = o;
    DLIST_PUSH_AT(o->head, s, owner_prev, owner_next);
    o->count++;
}

static void owner_unlink(struct wsession *s)
{
    struct warden_owner *o = s->owner;
    DLIST_UNLINK_AT(o->head, s, owner_prev, owner_next);
    o->count--;
    s->owner = NULL;
}

static void session_remove(struct warden_registry *reg, struct wsession *s)
{
    smap_remove(reg->by_id, s->id);
    user_unlink(reg, s);
    owner_unlink(s);
    reg->count--;
    reg->by_service[s->service]--;
    free(s->id);
    free(s->ip);
    free(s);
}

/* Removes every session of `o`; returns how many. */
static size_t owner_reap(struct warden_registry *reg, struct warden_owner *o)
{
    size_t n = 0;
    while (o->head != NULL) {
        session_remove(reg, o->head);
        n++;
    }
    return n;
}

/* ---------- owners ---------- */

static void instance_free_if_unused(struct warden_registry *reg, struct winstance *inst)
{
    if (inst->owners != NULL)
        return;
    smap_remove(reg->instances, inst->name);
    free(inst->name);
    free(inst->boot_id);
    free(inst);
}

struct warden_owner *warden_registry_attach(struct warden_registry *reg, const char *instance,
                                            const char *boot_id, size_t *reaped)
{
    size_t n = 0;
    struct winstance *inst = smap_get(reg->instances, instance);
    if (inst == NULL) {
        inst = xcalloc(1, sizeof(*inst));
        inst->name = xstrdup(instance);
        inst->boot_id = xstrdup(boot_id);
        smap_put(reg->instances, instance, inst);
    } else if (strcmp(inst->boot_id, boot_id) != 0) {
        /* A new process of the instance: whatever the old one registered
         * is stale, also on connections that have not been seen to close. */
        for (struct warden_owner *o = inst->owners; o != NULL; o = o->next)
            n += owner_reap(reg, o);
        free(inst->boot_id);
        inst->boot_id = xstrdup(boot_id);
    }
    struct warden_owner *o = xcalloc(1, sizeof(*o));
    o->instance = inst;
    o->boot_id = xstrdup(boot_id);
    o->next = inst->owners;
    if (inst->owners != NULL)
        inst->owners->prev = o;
    inst->owners = o;
    if (reaped != NULL)
        *reaped = n;
    return o;
}

size_t warden_registry_detach(struct warden_registry *reg, struct warden_owner *o)
{
    if (o == NULL)
        return 0;
    size_t n = owner_reap(reg, o);
    struct winstance *inst = o->instance;
    DLIST_UNLINK(inst->owners, o);
    instance_free_if_unused(reg, inst);
    free(o->boot_id);
    free(o);
    return n;
}

const char *warden_owner_instance(const struct warden_owner *owner)
{
    return owner->instance->name;
}

size_t warden_owner_sessions(const struct warden_owner *owner)
{
    return owner->count;
}

/* ---------- connect / disconnect ---------- */

bool warden_registry_connect(struct warden_registry *reg, struct warden_owner *owner,
                             const struct warden_session_info *info, struct petrel_error *err)
{
    int service = service_index(info->service);
    PETREL_ASSERT(service >= 0);
    if (strcmp(owner->boot_id, owner->instance->boot_id) != 0)
        return petrel_error_set(err, PETREL_ERR_CONFLICT,
                                "instance %s has said HELLO with a newer boot id since this "
                                "connection did (a restarted process, or two processes with one "
                                "instance name)",
                                owner->instance->name);
    struct wsession *s = smap_get(reg->by_id, info->id);
    if (s != NULL) {
        if (s->owner->instance != owner->instance)
            return petrel_error_set(err, PETREL_ERR_CONFLICT,
                                    "session id %s is registered by another instance", info->id);
        /* The same session sent again (after a reconnect): take it over
         * and refresh its fields. */
        user_unlink(reg, s);
        owner_unlink(s);
        reg->by_service[s->service]--;
        free(s->ip);
    } else {
        if (reg->count >= reg->max_sessions)
            return petrel_error_set(err, PETREL_ERR_UNAVAILABLE,
                                    "session registry full (max_sessions %zu)", reg->max_sessions);
        s = xcalloc(1, sizeof(*s));
        s->id = xstrdup(info->id);
        smap_put(reg->by_id, s->id, s);
        reg->count++;
    }
    s->ip = xstrdup(info->ip != NULL ? info->ip : "");
    s->service = service;
    s->connected_at = info->connected_at;
    reg->by_service[service]++;
    user_link(reg, s, info->user);
    owner_link(owner, s);
    return true;
}

bool warden_registry_disconnect(struct warden_registry *reg, const char *id)
{
    struct wsession *s = smap_get(reg->by_id, id);
    if (s == NULL)
        return false;
    session_remove(reg, s);
    return true;
}

/* ---------- queries ---------- */

static int compare_sessions(const void *a, const void *b)
{
    const struct wsession *x = *(const struct wsession *const *)a;
    const struct wsession *y = *(const struct wsession *const *)b;
    if (x->connected_at != y->connected_at)
        return x->connected_at < y->connected_at ? -1 : 1;
    return strcmp(x->id, y->id);
}

static size_t list_user(const struct wuser *u, int service, warden_session_visit *visit, void *ctx)
{
    size_t n = service < 0 ? u->count : u->by_service[service];
    if (n == 0)
        return 0;
    struct wsession **sorted = xcalloc(n, sizeof(*sorted));
    size_t k = 0;
    for (struct wsession *s = u->head; s != NULL; s = s->user_next) {
        if (service < 0 || s->service == service)
            sorted[k++] = s;
    }
    PETREL_ASSERT(k == n);
    qsort(sorted, n, sizeof(*sorted), compare_sessions);
    for (size_t i = 0; i < n; i++) {
        struct warden_session_info info = {
            .id = sorted[i]->id,
            .user = u->name,
            .ip = sorted[i]->ip,
            .service = warden_services[sorted[i]->service],
            .connected_at = sorted[i]->connected_at,
        };
        visit(&info, ctx);
    }
    free(sorted);
    return n;
}

/* The service filter as an index: -1 for any, -2 for an unknown name
 * (which matches nothing). */
static int filter_service(const char *service)
{
    if (service == NULL || service[0] == '\0')
        return -1;
    int i = service_index(service);
    return i >= 0 ? i : -2;
}

size_t warden_registry_list(const struct warden_registry *reg, const char *service,
                            const char *user, warden_session_visit *visit, void *ctx)
{
    int svc = filter_service(service);
    if (svc == -2)
        return 0;
    if (user != NULL && user[0] != '\0') {
        const struct wuser *u = smap_get(reg->users, user);
        return u != NULL ? list_user(u, svc, visit, ctx) : 0;
    }
    size_t n = 0;
    const char *key = NULL;
    const struct wuser *u = smap_seek(reg->users, "", false, &key);
    while (u != NULL) {
        n += list_user(u, svc, visit, ctx);
        u = smap_seek(reg->users, key, true, &key);
    }
    return n;
}

static uint64_t user_matching(const struct wuser *u, int svc)
{
    return svc < 0 ? u->count : u->by_service[svc];
}

uint64_t warden_registry_count(const struct warden_registry *reg, enum warden_count_by by,
                               const char *service, const char *user, warden_count_visit *item,
                               void *ctx)
{
    int svc = filter_service(service);
    if (svc == -2)
        return 0;
    const struct wuser *only = NULL;
    if (user != NULL && user[0] != '\0') {
        only = smap_get(reg->users, user);
        if (only == NULL)
            return 0;
    }
    uint64_t total = 0;
    switch (by) {
    case WARDEN_BY_NONE:
        if (only != NULL)
            return user_matching(only, svc);
        return svc < 0 ? reg->count : reg->by_service[svc];
    case WARDEN_BY_PROTOCOL:
        for (int i = 0; i < SERVICE_COUNT; i++) {
            if (svc >= 0 && i != svc)
                continue;
            uint64_t n = only != NULL ? only->by_service[i] : reg->by_service[i];
            if (n > 0 && item != NULL)
                item(warden_services[i], n, ctx);
            total += n;
        }
        return total;
    case WARDEN_BY_USER:
        if (only != NULL) {
            uint64_t n = user_matching(only, svc);
            if (n > 0 && item != NULL)
                item(only->name, n, ctx);
            return n;
        }
        break;
    }
    const char *key = NULL;
    const struct wuser *u = smap_seek(reg->users, "", false, &key);
    while (u != NULL) {
        uint64_t n = user_matching(u, svc);
        if (n > 0 && item != NULL)
            item(u->name, n, ctx);
        total += n;
        u = smap_seek(reg->users, key, true, &key);
    }
    return total;
}

/* ---------- free ---------- */

void warden_registry_free(struct warden_registry *reg)
{
    if (reg == NULL)
        return;
    for (;;) {
        const char *key = NULL;
        struct winstance *inst = smap_seek(reg->instances, "", false, &key);
        if (inst == NULL)
            break;
        /* Detaching the last owner frees the instance. */
        while (inst->owners->next != NULL)
            warden_registry_detach(reg, inst->owners);
        warden_registry_detach(reg, inst->owners);
    }
    PETREL_ASSERT(reg->count == 0);
    smap_free(reg->by_id, NULL);
    smap_free(reg->users, NULL);
    smap_free(reg->instances, NULL);
    free(reg);
}
