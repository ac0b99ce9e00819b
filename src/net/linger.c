/* Close after the output has left (linger.h). */
#include "net/linger.h"

#include "core/clock.h"
#include "core/xalloc.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdlib.h>

#define POLL_MS 10

struct net_linger {
    struct bufferevent *bev;
    struct event *timer;
    net_linger_pending_fn *pending;
    net_linger_done_fn *done;
    void *arg;
    int64_t polls_left;
};

size_t net_output_pending(struct bufferevent *bev)
{
    size_t n = evbuffer_get_length(bufferevent_get_output(bev));
    struct bufferevent *under = bufferevent_get_underlying(bev);
    if (under != NULL)
        n += evbuffer_get_length(bufferevent_get_output(under));
    return n;
}

static void poll_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct net_linger *l = arg;
    size_t left = l->pending != NULL ? l->pending(l->arg) : net_output_pending(l->bev);
    if (left > 0 && l->polls_left-- > 0) {
        struct timeval tick = clock_ms_to_timeval(POLL_MS);
        evtimer_add(l->timer, &tick);
        return;
    }
    l->done(l->arg);
}

struct net_linger *net_linger_start(struct bufferevent *bev, net_linger_pending_fn *pending,
                                    net_linger_done_fn *done, void *arg)
{
    struct net_linger *l = xcalloc(1, sizeof(*l));
    l->bev = bev;
    l->pending = pending;
    l->done = done;
    l->arg = arg;
    l->polls_left = NET_LINGER_GRACE_MS / POLL_MS;
    l->timer = evtimer_new(bufferevent_get_base(bev), poll_cb, l);
    if (l->timer == NULL)
        petrel_fatal("out of memory creating a linger timer");
    event_active(l->timer, EV_TIMEOUT, 0); /* first look from the loop, not from here */
    return l;
}

void net_linger_free(struct net_linger *l)
{
    if (l != NULL) {
        event_free(l->timer);
        free(l);
    }
}
