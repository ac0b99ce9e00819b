/* Connection deadlines (deadline.h). */
#include "net/deadline.h"

#include "core/clock.h"
#include "core/xalloc.h"

#include <stddef.h>
#include <stdlib.h>

/* The libevent event lives in the same allocation (event_assign on storage
 * of event_get_struct_event_size()): the HTTP server makes one deadline per
 * request, and a second malloc/free pair per request was measurable. */
struct net_deadline {
    net_deadline_fn *expired;
    void *arg;
    max_align_t ev[]; /* struct event */
};

static struct event *event_of(const struct net_deadline *d)
{
    return (struct event *)d->ev;
}

static void fire(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct net_deadline *d = arg;
    d->expired(d->arg);
}

struct net_deadline *net_deadline_new(struct event_base *base, net_deadline_fn *expired, void *arg)
{
    struct net_deadline *d = xmalloc(sizeof(*d) + event_get_struct_event_size());
    d->expired = expired;
    d->arg = arg;
    if (evtimer_assign(event_of(d), base, fire, d) != 0)
        petrel_fatal("cannot set up a connection timer");
    return d;
}

void net_deadline_arm(struct net_deadline *d, int64_t ms)
{
    struct timeval tv = clock_ms_to_timeval(ms); /* negative: 0 */
    evtimer_add(event_of(d), &tv);
}

void net_deadline_clear(struct net_deadline *d)
{
    if (d != NULL)
        evtimer_del(event_of(d));
}

bool net_deadline_armed(const struct net_deadline *d)
{
    return evtimer_pending(event_of(d), NULL) != 0;
}

void net_deadline_free(struct net_deadline *d)
{
    if (d != NULL) {
        evtimer_del(event_of(d)); /* what event_free does before freeing */
        free(d);
    }
}
