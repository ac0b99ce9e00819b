/* Connection deadlines (deadline.h). */
#include "net/deadline.h"

#include "core/clock.h"
#include "core/xalloc.h"

#include <stdlib.h>

struct net_deadline {
    struct event *ev;
    net_deadline_fn *expired;
    void *arg;
};

static void fire(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct net_deadline *d = arg;
    d->expired(d->arg);
}

struct net_deadline *net_deadline_new(struct event_base *base, net_deadline_fn *expired, void *arg)
{
    struct net_deadline *d = xcalloc(1, sizeof(*d));
    d->expired = expired;
    d->arg = arg;
    d->ev = evtimer_new(base, fire, d);
    if (d->ev == NULL)
        petrel_fatal("out of memory creating a connection timer");
    return d;
}

void net_deadline_arm(struct net_deadline *d, int64_t ms)
{
    struct timeval tv = clock_ms_to_timeval(ms); /* negative: 0 */
    evtimer_add(d->ev, &tv);
}

void net_deadline_clear(struct net_deadline *d)
{
    if (d != NULL)
        evtimer_del(d->ev);
}

bool net_deadline_armed(const struct net_deadline *d)
{
    return evtimer_pending(d->ev, NULL) != 0;
}

void net_deadline_free(struct net_deadline *d)
{
    if (d != NULL) {
        event_free(d->ev);
        free(d);
    }
}
