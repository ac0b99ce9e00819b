/* The storage API's change notification (mail-storage.h "change
 * notification"): a hub is what the watches of one event loop share; each
 * listed driver keeps its own part of it (an inotify instance for
 * maildir), made with the hub, so a loop's descriptors are all there from
 * its start and a session's first SELECT opens none that outlive it.
 * Watches are the driver's. */
#include "storage/mail-storage-private.h"

#include "core/xalloc.h"

#include <stdlib.h>

/* Drivers with a part in one hub (more than the drivers there are). */
#define HUB_DRIVERS_MAX 4

struct mailbox_watch_hub {
    struct event_base *base;
    bool native;
    struct {
        const struct mail_storage_vfuncs *v;
        void *state;
    } drivers[HUB_DRIVERS_MAX];
    size_t driver_count;
};


void mailbox_watch_hub_free(struct mailbox_watch_hub *hub)
{
    if (hub == NULL)
        return;
    for (size_t i = 0; i < hub->driver_count; i++)
        hub->drivers[i].v->watch_hub_free(hub->drivers[i].state);
    free(hub);
}

/* The part of `hub` for driver `v`, made on first use. */
static void *hub_part(struct mailbox_watch_hub *hub, const struct mail_storage_vfuncs *v)
{
    for (size_t i = 0; i < hub->driver_count; i++) {
        if (hub->drivers[i].v == v)
            return hub->drivers[i].state;
    }
    if (hub->driver_count >= HUB_DRIVERS_MAX)
        abort(); /* more drivers than HUB_DRIVERS_MAX: raise it */
    void *state = v->watch_hub_new(hub->base, hub->native);
    hub->drivers[hub->driver_count].v = v;
    hub->drivers[hub->driver_count].state = state;
    hub->driver_count++;
    return state;
}

struct mailbox_watch_hub *mailbox_watch_hub_new(struct event_base *base, bool native)
{
    struct mailbox_watch_hub *hub = xcalloc(1, sizeof(*hub));
    hub->base = base;
    hub->native = native;
    for (size_t i = 0; mail_storage_driver_at(i) != NULL; i++)
        hub_part(hub, mail_storage_driver_at(i));
    return hub;
}

static struct mailbox_watch *watch_new(struct mailbox_watch_hub *hub, struct mailbox *box,
                                       void (*fn)(void *ctx), void *ctx, bool native_only,
                                       struct petrel_error *err)
{
    const struct mail_storage_vfuncs *v = mailbox_common(box)->user->storage->v;
    struct mailbox_watch *w = v->watch_new(hub_part(hub, v), box, fn, ctx, native_only, err);
    if (w != NULL)
        ((struct mailbox_watch_common *)(void *)w)->v = v;
    return w;
}

struct mailbox_watch *mailbox_watch_new(struct mailbox_watch_hub *hub, struct mailbox *box,
                                        void (*fn)(void *ctx), void *ctx, struct petrel_error *err)
{
    return watch_new(hub, box, fn, ctx, false, err);
}

struct mailbox_watch *mailbox_watch_new_native(struct mailbox_watch_hub *hub, struct mailbox *box,
                                               void (*fn)(void *ctx), void *ctx)
{
    return watch_new(hub, box, fn, ctx, true, NULL);
}

static const struct mail_storage_vfuncs *watch_v(const struct mailbox_watch *watch)
{
    return ((const struct mailbox_watch_common *)(const void *)watch)->v;
}

bool mailbox_watch_take_changed(struct mailbox_watch *watch)
{
    return watch_v(watch)->watch_take_changed(watch);
}

bool mailbox_watch_is_native(const struct mailbox_watch *watch)
{
    return watch_v(watch)->watch_is_native(watch);
}

bool mailbox_watch_lost(struct mailbox_watch *watch)
{
    return watch_v(watch)->watch_lost(watch);
}

void mailbox_watch_free(struct mailbox_watch *watch)
{
    if (watch != NULL)
        watch_v(watch)->watch_free(watch);
}
