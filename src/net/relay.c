/* Bytes both ways between two connections (see relay.h). */
#include "net/relay.h"

#include "core/xalloc.h"

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <stdlib.h>
#include <sys/time.h>

struct side {
    struct bufferevent *bev; /* NULL once closed */
    bool paused;             /* not read: the other side's queue is full */
};

struct net_relay {
    struct side client;
    struct side backend;
    struct net_relay_config cfg;
    net_relay_done_fn *done;
    void *arg;
    struct net_relay_stats stats;
    struct event *timer;  /* idle, then linger */
    struct event *finish; /* calls done from the loop */
    int64_t last_activity_ms;
    bool ending;
    enum net_relay_end end;
};

static int64_t now_ms(struct net_relay *r)
{
    struct timeval tv;
    event_base_gettimeofday_cached(
        bufferevent_get_base(r->client.bev != NULL ? r->client.bev : r->backend.bev), &tv);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void arm(struct event *ev, int64_t ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

static struct side *other(struct net_relay *r, struct side *s)
{
    return s == &r->client ? &r->backend : &r->client;
}

static void close_side(struct side *s)
{
    if (s->bev != NULL)
        bufferevent_free(s->bev);
    s->bev = NULL;
}

/* Both sides are done: `done` runs from the loop, never inside a call of
 * ours. */
static void finish(struct net_relay *r)
{
    close_side(&r->client);
    close_side(&r->backend);
    evtimer_del(r->timer);
    event_active(r->finish, 0, 0);
}

static void finish_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct net_relay *r = arg;
    net_relay_done_fn *done = r->done;
    void *done_arg = r->arg;
    enum net_relay_end end = r->end;
    struct net_relay_stats stats = r->stats;
    event_free(r->timer);
    event_free(r->finish);
    free(r);
    done(done_arg, end, &stats);
}

/* The relay ends: `gone` (may be NULL) is closed now, the other side gets
 * what is queued for it, for at most linger_ms. */
static void end_relay(struct net_relay *r, enum net_relay_end why, struct side *gone)
{
    if (r->ending)
        return;
    r->ending = true;
    r->end = why;
    if (r->client.bev != NULL)
        bufferevent_disable(r->client.bev, EV_READ);
    if (r->backend.bev != NULL)
        bufferevent_disable(r->backend.bev, EV_READ);
    struct side *keep = gone != NULL ? other(r, gone) : &r->client;
    close_side(other(r, keep));
    if (keep->bev == NULL || evbuffer_get_length(bufferevent_get_output(keep->bev)) == 0) {
        finish(r);
        return;
    }
    /* The write callback now runs once the output is empty. */
    bufferevent_setwatermark(keep->bev, EV_WRITE, 0, 0);
    evtimer_del(r->timer);
    arm(r->timer, r->cfg.linger_ms);
}

static void relay_input(struct net_relay *r, struct side *from)
{
    struct side *to = other(r, from);
    struct evbuffer *in = bufferevent_get_input(from->bev);
    size_t n = evbuffer_get_length(in);
    if (n == 0)
        return;
    if (r->ending || to->bev == NULL) {
        evbuffer_drain(in, n);
        return;
    }
    if (from == &r->client)
        r->stats.to_backend += n;
    else
        r->stats.to_client += n;
    struct evbuffer *out = bufferevent_get_output(to->bev);
    bool was_empty = evbuffer_get_length(out) == 0;
    evbuffer_add_buffer(out, in);
    /* A plain socket with nothing queued takes the bytes now: no write
     * event to arm and no loop pass before they leave (a TLS connection
     * must go through its bufferevent, which encrypts). What the socket
     * does not take waits in `out` as before. */
    if (was_empty && bufferevent_get_underlying(to->bev) == NULL &&
        bufferevent_openssl_get_ssl(to->bev) == NULL)
        evbuffer_write(out, bufferevent_getfd(to->bev));
    r->last_activity_ms = now_ms(r);
    if (evbuffer_get_length(out) >= r->cfg.high_water && !from->paused) {
        bufferevent_disable(from->bev, EV_READ);
        from->paused = true;
    }
}

static void client_read(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct net_relay *r = arg;
    relay_input(r, &r->client);
}

static void backend_read(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct net_relay *r = arg;
    relay_input(r, &r->backend);
}

/* `to`'s output went down to its low watermark: read its sender again, or
 * (ending) the last bytes have left. */
static void drained(struct net_relay *r, struct side *to)
{
    if (r->ending) {
        if (evbuffer_get_length(bufferevent_get_output(to->bev)) == 0)
            finish(r);
        return;
    }
    struct side *from = other(r, to);
    if (from->paused && from->bev != NULL) {
        from->paused = false;
        bufferevent_enable(from->bev, EV_READ);
    }
}

static void client_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct net_relay *r = arg;
    drained(r, &r->client);
}

static void backend_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct net_relay *r = arg;
    drained(r, &r->backend);
}

static void side_event(struct net_relay *r, struct side *s, short what)
{
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    bool client = s == &r->client;
    if (r->ending) {
        /* The side being flushed went away: nothing more to wait for. */
        close_side(s);
        finish(r);
        return;
    }
    relay_input(r, s); /* what arrived with the EOF still goes across */
    enum net_relay_end why;
    if (what & BEV_EVENT_ERROR)
        why = client ? NET_RELAY_CLIENT_ERROR : NET_RELAY_BACKEND_ERROR;
    else
        why = client ? NET_RELAY_CLIENT_CLOSED : NET_RELAY_BACKEND_CLOSED;
    end_relay(r, why, s);
}

static void client_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct net_relay *r = arg;
    side_event(r, &r->client, what);
}

static void backend_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct net_relay *r = arg;
    side_event(r, &r->backend, what);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct net_relay *r = arg;
    if (r->ending) { /* the linger ran out */
        finish(r);
        return;
    }
    int64_t idle = now_ms(r) - r->last_activity_ms;
    if (idle >= r->cfg.idle_ms) {
        end_relay(r, NET_RELAY_IDLE, &r->backend);
        return;
    }
    arm(r->timer, r->cfg.idle_ms - idle);
}

struct net_relay *net_relay_start(struct bufferevent *client, struct bufferevent *backend,
                                  const struct net_relay_config *cfg, net_relay_done_fn *done,
                                  void *arg)
{
    struct net_relay *r = xcalloc(1, sizeof(*r));
    r->client.bev = client;
    r->backend.bev = backend;
    r->cfg = *cfg;
    if (r->cfg.high_water == 0)
        r->cfg.high_water = 1;
    if (r->cfg.linger_ms <= 0)
        r->cfg.linger_ms = 1;
    r->done = done;
    r->arg = arg;
    struct event_base *base = bufferevent_get_base(client);
    r->timer = evtimer_new(base, timer_cb, r);
    r->finish = event_new(base, -1, 0, finish_cb, r);
    r->last_activity_ms = now_ms(r);
    size_t low = r->cfg.high_water / 2;
    bufferevent_setcb(client, client_read, client_write, client_event, r);
    bufferevent_setcb(backend, backend_read, backend_write, backend_event, r);
    bufferevent_setwatermark(client, EV_WRITE, low, 0);
    bufferevent_setwatermark(backend, EV_WRITE, low, 0);
    bufferevent_setwatermark(client, EV_READ, 0, 0);
    bufferevent_setwatermark(backend, EV_READ, 0, 0);
    bufferevent_enable(client, EV_READ | EV_WRITE);
    bufferevent_enable(backend, EV_READ | EV_WRITE);
    if (r->cfg.idle_ms > 0)
        arm(r->timer, r->cfg.idle_ms);
    relay_input(r, &r->client);
    relay_input(r, &r->backend);
    return r;
}

void net_relay_stop(struct net_relay *r, const char *farewell, size_t len)
{
    if (r == NULL || r->ending)
        return;
    if (farewell != NULL && len > 0 && r->client.bev != NULL)
        bufferevent_write(r->client.bev, farewell, len);
    end_relay(r, NET_RELAY_STOPPED, &r->backend);
}

size_t net_relay_buffered(const struct net_relay *r)
{
    size_t n = 0;
    const struct side *sides[] = {&r->client, &r->backend};
    for (size_t i = 0; i < 2; i++) {
        if (sides[i]->bev == NULL)
            continue;
        n += evbuffer_get_length(bufferevent_get_output(sides[i]->bev));
        n += evbuffer_get_length(bufferevent_get_input(sides[i]->bev));
    }
    return n;
}

const char *net_relay_end_name(enum net_relay_end end)
{
    switch (end) {
    case NET_RELAY_CLIENT_CLOSED:
        return "client_closed";
    case NET_RELAY_BACKEND_CLOSED:
        return "backend_closed";
    case NET_RELAY_CLIENT_ERROR:
        return "client_error";
    case NET_RELAY_BACKEND_ERROR:
        return "backend_error";
    case NET_RELAY_IDLE:
        return "idle";
    case NET_RELAY_STOPPED:
        return "stopped";
    }
    return "unknown";
}
