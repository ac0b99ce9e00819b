/* Bytes both ways between two connections (see relay.h). */
#include "net/relay.h"

#include "core/xalloc.h"
#include "net/bev-write.h"
#include "net/linger.h"
#include "net/tls-conn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* The most one read moves. libevent's bufferevents read 4 KiB per call by
 * default, so a big FETCH cost a system call per 4 KiB on each side; the
 * back-pressure bound still holds to within one read. */
#define RELAY_IO_STEP (64 * 1024)

/* How often a closing side's queue is looked at while it lingers: a TLS
 * bufferevent's last bytes may sit in the socket bufferevent under it,
 * whose draining calls nothing of ours. */
#define RELAY_LINGER_POLL_MS 10

/* One connection of the relay. A socket, plain or TLS, is driven
 * directly: its descriptor (and SSL), a persistent read event and a write
 * event armed only while `queue` holds bytes the connection did not take.
 * That is one recv() and one send() per chunk (SSL_read/SSL_write on TLS)
 * and no event changes while the peer keeps up, where a socket bufferevent
 * asks the kernel for the readable size before each read (ioctl FIONREAD)
 * and adds and deletes its write event for every chunk; and an idle side
 * holds no buffer and no bufferevent (about 1.5 KiB less per TLS side).
 * A TLS filter over another bufferevent (a STARTTLS whose go-ahead could
 * not leave at once) stays behind its bufferevent. */
struct side {
    struct net_relay *r;
    struct bufferevent *bev; /* a bufferevent side; NULL for a socket side or once closed */
    evutil_socket_t fd;      /* a socket side; -1 for a bufferevent side or once closed */
    SSL *ssl;                /* a TLS socket side's connection; NULL when plain */
    struct event *readable;  /* socket side */
    struct event *writable;  /* socket side; made when first needed, pending while needed */
    struct evbuffer *queue;  /* socket side; made when first needed */
    bool paused;             /* not read: the other side's queue is full */
    /* TLS: SSL_read cannot go on until the socket takes what it must send
     * (a TLS 1.3 key update's answer), or SSL_write until it reads. */
    bool read_wants_write;
    bool write_wants_read;
    /* TLS: the least the next SSL_write must offer from the queue's front.
     * What the bufferevent had not sent at the takeover may include a
     * write OpenSSL left waiting for the socket, of any length up to all
     * of it and partly sent already: its retry must offer at least as
     * much (else SSL_R_BAD_LENGTH), so the first write offers all of it. */
    size_t retry_min;
};

struct net_relay {
    struct side client;
    struct side backend;
    struct net_relay_config cfg;
    struct event_base *base;
    net_relay_done_fn *done;
    void *arg;
    struct net_relay_stats stats;
    struct event *timer; /* idle, then linger */
    int64_t last_activity_ms;
    int64_t linger_until_ms; /* ending: the last moment to wait for the kept side */
    bool ending;
    bool finished;
    enum net_relay_end end;
};

static int64_t now_ms(struct net_relay *r)
{
    struct timeval tv;
    event_base_gettimeofday_cached(r->base, &tv);
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

static bool side_open(const struct side *s)
{
    return s->bev != NULL || s->fd >= 0;
}

/* Bytes queued for `s` and not yet taken by its connection (a TLS
 * bufferevent's and the socket bufferevent's under it). */
static size_t side_queued(const struct side *s)
{
    if (s->bev != NULL)
        return net_output_pending(s->bev);
    return s->queue != NULL ? evbuffer_get_length(s->queue) : 0;
}

static void side_reading(struct side *s, bool on)
{
    if (s->bev != NULL) {
        if (on)
            bufferevent_enable(s->bev, EV_READ);
        else
            bufferevent_disable(s->bev, EV_READ);
    } else if (s->fd >= 0) {
        if (on) {
            event_add(s->readable, NULL);
            /* What OpenSSL holds already makes the socket no more readable. */
            if (s->ssl != NULL && SSL_has_pending(s->ssl))
                event_active(s->readable, EV_READ, 0);
        } else {
            event_del(s->readable);
        }
    }
}

/* The descriptor under `s` (under a filter, the socket bufferevent's). */
static evutil_socket_t side_fd(const struct side *s)
{
    if (s->bev == NULL)
        return s->fd;
    struct bufferevent *b = s->bev;
    while (bufferevent_get_underlying(b) != NULL)
        b = bufferevent_get_underlying(b);
    return bufferevent_getfd(b);
}

static void close_side(struct side *s)
{
    if (s->bev != NULL)
        bufferevent_free(s->bev);
    s->bev = NULL;
    if (s->fd >= 0) {
        event_free(s->readable);
        if (s->writable != NULL)
            event_free(s->writable);
        close(s->fd);
    }
    SSL_free(s->ssl); /* NULL is ignored */
    s->ssl = NULL;
    s->fd = -1;
    s->readable = s->writable = NULL;
    if (s->queue != NULL)
        evbuffer_free(s->queue);
    s->queue = NULL;
}

/* The lingering close of a descriptor whose last bytes have left and whose
 * FIN is sent: what the peer still sends is read and thrown away until its
 * EOF. Closing with unread input would make the kernel answer with a reset
 * instead, and a reset makes the peer's kernel drop what is still in
 * flight to it (the last answer, a kick's BYE, that a slow client has not
 * read yet); nginx's lingering close does the same.
 *
 * It runs after the relay is done (the owner's accounting, the director's
 * session count, do not wait for a client to close) and holds nothing but
 * the descriptor: each wait is a one-shot event of the loop, which frees it
 * with itself should the process stop first. The callback needs the loop
 * and a budget, and a one-shot event has one pointer for both: the loop's
 * address (malloc'd, so aligned to at least 8) carries the waits left in
 * its low three bits. A peer gets at most RELAY_DRAIN_WAITS wakeups (a
 * quiet one RELAY_DRAIN_WAIT_MS each) and RELAY_DRAIN_STEP bytes dropped
 * per wakeup, then is closed: a client cannot keep a descriptor after its
 * session ended by sending on. */
#define RELAY_DRAIN_WAITS 7 /* fits the three bits */
#define RELAY_DRAIN_WAIT_MS 300
#define RELAY_DRAIN_STEP (1024 * 1024)
#define RELAY_DRAIN_TAG ((uintptr_t)7)

static void drain_cb(evutil_socket_t fd, short what, void *arg);
static void finish(struct net_relay *r);

static void drain_wait(struct event_base *base, evutil_socket_t fd, uintptr_t waits)
{
    struct timeval tv = {0, RELAY_DRAIN_WAIT_MS * 1000};
    if (waits == 0 || ((uintptr_t)base & RELAY_DRAIN_TAG) != 0 ||
        event_base_once(base, fd, EV_READ, drain_cb, (void *)((uintptr_t)base | waits), &tv) < 0)
        close(fd);
}

static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
    struct event_base *base = (struct event_base *)((uintptr_t)arg & ~RELAY_DRAIN_TAG);
    uintptr_t waits = (uintptr_t)arg & RELAY_DRAIN_TAG;
    if (!(what & EV_READ)) {
        close(fd); /* quiet for a whole wait: nothing unread, a plain close */
        return;
    }
    char buf[16384];
    for (size_t dropped = 0; dropped < RELAY_DRAIN_STEP; dropped += sizeof(buf)) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            break;
        if (n <= 0) {
            close(fd); /* the peer's EOF (or its reset): the end */
            return;
        }
    }
    drain_wait(base, fd, waits - 1);
}

static void watch_writable(struct side *s);

/* TLS: close_notify, or false while the socket cannot take it yet (full
 * when the last bytes went in): it stays in OpenSSL, and a FIN now would
 * cut it (the peer would see a truncated record or no close_notify). */
static bool notify_sent(struct side *s)
{
    if (s->ssl == NULL || s->fd < 0)
        return true;
    ERR_clear_error();
    int rc = SSL_shutdown(s->ssl); /* a retry sends what is left of it */
    bool later = rc < 0 && SSL_get_error(s->ssl, rc) == SSL_ERROR_WANT_WRITE;
    ERR_clear_error();
    return !later;
}

/* Ending, all of `s`'s queue has left: close_notify (TLS) and a FIN go
 * after it (the peer reads everything, then EOF), and a copy of the
 * descriptor lingers on without the relay, which is then done. A
 * close_notify the socket does not take at once waits for its write event
 * (or the linger timer) within the linger. A bufferevent side's descriptor
 * is the socket under its filters; freeing the bufferevent closes only its
 * own copy. */
static void shut_side(struct net_relay *r, struct side *s)
{
    if (!notify_sent(s) && now_ms(r) < r->linger_until_ms) {
        watch_writable(s);
        evtimer_del(r->timer);
        arm(r->timer, RELAY_LINGER_POLL_MS);
        return;
    }
    evutil_socket_t fd = side_fd(s);
    if (fd >= 0) {
        evutil_socket_t copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (copy >= 0) {
            shutdown(copy, SHUT_WR);
            drain_wait(r->base, copy, RELAY_DRAIN_WAITS);
        }
    }
    finish(r);
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
    free(r);
    if (done != NULL) /* NULL: aborted after it finished */
        done(done_arg, end, &stats);
}

/* Both sides are done: `done` runs from the loop, never inside a call of
 * ours. */
static void finish(struct net_relay *r)
{
    if (r->finished)
        return;
    r->finished = true;
    close_side(&r->client);
    close_side(&r->backend);
    evtimer_del(r->timer);
    /* An event made only now: an idle relay does not hold one. */
    if (event_base_once(r->base, -1, EV_TIMEOUT, finish_cb, r, NULL) != 0)
        petrel_fatal("out of memory ending a relay");
}

/* The relay ends: `gone` (may be NULL) is closed now, the other side gets
 * what is queued for it, for at most linger_ms, then its lingering close. */
static void end_relay(struct net_relay *r, enum net_relay_end why, struct side *gone)
{
    if (r->ending)
        return;
    r->ending = true;
    r->end = why;
    struct side *keep = gone != NULL ? other(r, gone) : &r->client;
    close_side(other(r, keep));
    r->linger_until_ms = now_ms(r) + r->cfg.linger_ms;
    if (!side_open(keep)) {
        finish(r);
        return;
    }
    if (side_queued(keep) == 0) {
        shut_side(r, keep);
        return;
    }
    /* While its queue leaves, the kept side is read on and what it sends
     * thrown away (the readers drop input while ending), for the reason
     * the lingering close does: a peer that writes before it reads must
     * not stall, and unread input must not turn our close into a reset. A
     * bufferevent's write callback now runs once its output is empty; a
     * socket side's write event is pending while its queue is not; the
     * timer looks at the whole chain until the linger runs out. */
    keep->paused = false;
    side_reading(keep, true);
    if (keep->bev != NULL)
        bufferevent_setwatermark(keep->bev, EV_WRITE, 0, 0);
    evtimer_del(r->timer);
    arm(r->timer, RELAY_LINGER_POLL_MS);
}

/* `s` reached EOF (`eof`) or failed. */
static void side_gone(struct net_relay *r, struct side *s, bool eof)
{
    if (r->ending) {
        /* The side being flushed half-closed (it may still read its last
         * bytes) or failed (nothing more to wait for). */
        if (eof)
            side_reading(s, false);
        else
            finish(r);
        return;
    }
    bool client = s == &r->client;
    enum net_relay_end why;
    if (!eof)
        why = client ? NET_RELAY_CLIENT_ERROR : NET_RELAY_BACKEND_ERROR;
    else
        why = client ? NET_RELAY_CLIENT_CLOSED : NET_RELAY_BACKEND_CLOSED;
    end_relay(r, why, s);
}

static bool retry_later(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

static void socket_writable(evutil_socket_t fd, short what, void *arg);

/* `s`'s write event is pending from now on. */
static void watch_writable(struct side *s)
{
    if (s->writable == NULL)
        s->writable = event_new(s->r->base, s->fd, EV_WRITE | EV_PERSIST, socket_writable, s);
    event_add(s->writable, NULL);
}

static struct evbuffer *queue_of(struct side *to)
{
    if (to->queue == NULL)
        to->queue = evbuffer_new();
    if (evbuffer_get_length(to->queue) == 0)
        watch_writable(to);
    return to->queue;
}

/* Offers `n` (> 0) bytes to a socket side's connection: how many it took
 * (0: none for now), or -1 on an error. A TLS write the socket did not
 * take must be offered again with at least the same bytes (OpenSSL's rule
 * for a retried SSL_write): its caller queues what was not taken and
 * writes from the queue's front. */
static ssize_t conn_write(struct side *s, const void *data, size_t n)
{
    if (s->ssl == NULL) {
        ssize_t w = send(s->fd, data, n, MSG_NOSIGNAL);
        return w < 0 && retry_later(errno) ? 0 : w;
    }
    size_t w = 0;
    ERR_clear_error();
    if (SSL_write_ex(s->ssl, data, n, &w) == 1)
        return (ssize_t)w;
    switch (SSL_get_error(s->ssl, 0)) {
    case SSL_ERROR_WANT_WRITE:
        return 0;
    case SSL_ERROR_WANT_READ:
        s->write_wants_read = true; /* the read event writes again */
        return 0;
    default:
        ERR_clear_error();
        return -1;
    }
}

/* Writes what `buf` holds to a socket side, front first, as far as the
 * connection takes it now. False on an error. */
static bool conn_write_buffer(struct side *s, struct evbuffer *buf)
{
    if (s->ssl == NULL)
        return evbuffer_write(buf, s->fd) >= 0 || retry_later(errno);
    size_t len;
    while ((len = evbuffer_get_length(buf)) > 0 && !s->write_wants_read) {
        size_t step = len < RELAY_IO_STEP ? len : RELAY_IO_STEP;
        if (step < s->retry_min)
            step = s->retry_min < len ? s->retry_min : len;
        ssize_t w = conn_write(s, evbuffer_pullup(buf, (ssize_t)step), step);
        if (w < 0)
            return false;
        if (w == 0)
            break;
        s->retry_min = 0; /* a write done: OpenSSL holds none waiting */
        evbuffer_drain(buf, (size_t)w);
    }
    return true;
}

/* Hands `n` bytes to `to`: straight to a socket with nothing queued, what
 * it does not take (and anything for a bufferevent) queued. */
static void send_bytes(struct net_relay *r, struct side *to, const char *data, size_t n)
{
    if (to->bev != NULL) {
        bufferevent_write(to->bev, data, n);
        return;
    }
    size_t sent = 0;
    if (side_queued(to) == 0) {
        ssize_t w = conn_write(to, data, n);
        if (w < 0) {
            side_gone(r, to, false);
            return;
        }
        sent = (size_t)w;
    }
    if (sent < n)
        evbuffer_add(queue_of(to), data + sent, n - sent);
}

/* The same for the whole of `buf` (a bufferevent side's input), moved
 * chain by chain without a copy where it must wait. */
static void send_buffer(struct net_relay *r, struct side *to, struct evbuffer *buf)
{
    if (to->bev != NULL) {
        evbuffer_add_buffer(bufferevent_get_output(to->bev), buf);
        return;
    }
    if (side_queued(to) == 0 && !conn_write_buffer(to, buf)) {
        evbuffer_drain(buf, evbuffer_get_length(buf));
        side_gone(r, to, false);
        return;
    }
    if (evbuffer_get_length(buf) > 0)
        evbuffer_add_buffer(queue_of(to), buf);
}

/* `n` bytes from `from` were handed to the other side: count them, and
 * stop reading `from` while the other side's queue is at its bound. */
static void relayed(struct net_relay *r, struct side *from, size_t n)
{
    if (from == &r->client)
        r->stats.to_backend += n;
    else
        r->stats.to_client += n;
    r->last_activity_ms = now_ms(r);
    struct side *to = other(r, from);
    if (!r->ending && !from->paused && side_queued(to) >= r->cfg.high_water) {
        side_reading(from, false);
        from->paused = true;
    }
}

/* `to`'s queue went down to half the bound: read its sender again, or
 * (ending) the last bytes have left. */
static void drained(struct net_relay *r, struct side *to)
{
    if (r->ending) {
        if (side_queued(to) == 0)
            shut_side(r, to);
        return;
    }
    struct side *from = other(r, to);
    if (from->paused && side_open(from)) {
        from->paused = false;
        side_reading(from, true);
    }
}

enum conn_read { READ_AGAIN, READ_EOF, READ_ERROR };

/* Reads what a socket side's connection has now into `buf`: *got bytes,
 * then why it stopped. A TLS side reads record after record until `buf`
 * is full or the socket has no more. */
static enum conn_read conn_read(struct side *s, char *buf, size_t size, size_t *got)
{
    *got = 0;
    if (s->ssl == NULL) {
        ssize_t n = recv(s->fd, buf, size, 0);
        if (n > 0)
            *got = (size_t)n;
        if (n < 0 && retry_later(errno))
            return READ_AGAIN;
        return n > 0 ? READ_AGAIN : n == 0 ? READ_EOF : READ_ERROR;
    }
    while (*got < size) {
        size_t n = 0;
        ERR_clear_error();
        if (SSL_read_ex(s->ssl, buf + *got, size - *got, &n) == 1) {
            *got += n;
            continue;
        }
        switch (SSL_get_error(s->ssl, 0)) {
        case SSL_ERROR_WANT_READ:
            return READ_AGAIN;
        case SSL_ERROR_WANT_WRITE:
            s->read_wants_write = true; /* the write event reads again */
            watch_writable(s);
            return READ_AGAIN;
        case SSL_ERROR_ZERO_RETURN:
            return READ_EOF; /* close_notify, or an EOF without it */
        default:
            ERR_clear_error();
            return READ_ERROR;
        }
    }
    return READ_AGAIN;
}

static void socket_readable(evutil_socket_t fd, short what, void *arg);

/* Bytes the side has taken, now that its write event came. */
static void flush_queue(struct net_relay *r, struct side *to)
{
    if (to->queue != NULL && !conn_write_buffer(to, to->queue)) {
        side_gone(r, to, false);
        return;
    }
    size_t left = to->queue != NULL ? evbuffer_get_length(to->queue) : 0;
    if (left == 0 && !to->read_wants_write) {
        /* An idle side holds no queue and no write event (a peer that
         * keeps up never makes them). */
        if (to->queue != NULL)
            evbuffer_free(to->queue);
        event_free(to->writable);
        to->queue = NULL;
        to->writable = NULL;
    } else if (to->write_wants_read && !to->read_wants_write) {
        event_del(to->writable);
    } else {
        /* Bytes left for the socket: its write event goes on, or comes
         * back when this flush ran from the read event after a write that
         * wanted a read (a renegotiation's answer) and now wants the
         * socket again: else nothing would ever write them. */
        watch_writable(to);
    }
    if (left <= r->cfg.high_water / 2)
        drained(r, to);
}

static void socket_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct side *from = arg;
    struct net_relay *r = from->r;
    if (from->write_wants_read) {
        from->write_wants_read = false;
        flush_queue(r, from);
        if (!side_open(from) || from->fd < 0)
            return;
    }
    char buf[RELAY_IO_STEP];
    size_t n;
    enum conn_read how = conn_read(from, buf, sizeof(buf), &n);
    struct side *to = other(r, from);
    if (n > 0 && !r->ending && side_open(to)) {
        send_bytes(r, to, buf, n);
        relayed(r, from, n);
    }
    if (how != READ_AGAIN) {
        if (from->fd >= 0)
            side_gone(r, from, how == READ_EOF);
        return;
    }
    /* A full buffer may leave decrypted bytes in OpenSSL, which no socket
     * event announces. */
    if (n == sizeof(buf) && from->ssl != NULL && !from->paused && SSL_has_pending(from->ssl))
        event_active(from->readable, EV_READ, 0);
}

static void socket_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct side *to = arg;
    struct net_relay *r = to->r;
    if (to->read_wants_write) {
        to->read_wants_write = false;
        if (to->paused || r->ending)
            ; /* read again when it is read again */
        else
            event_active(to->readable, EV_READ, 0);
    }
    flush_queue(r, to);
}

static void bev_input(struct net_relay *r, struct side *from)
{
    struct side *to = other(r, from);
    struct evbuffer *in = bufferevent_get_input(from->bev);
    size_t n = evbuffer_get_length(in);
    if (n == 0)
        return;
    if (r->ending || !side_open(to)) {
        evbuffer_drain(in, n);
        return;
    }
    send_buffer(r, to, in);
    relayed(r, from, n);
}

static struct side *side_of(struct net_relay *r, struct bufferevent *bev)
{
    return bev == r->client.bev ? &r->client : &r->backend;
}

static void bev_read(struct bufferevent *bev, void *arg)
{
    struct net_relay *r = arg;
    bev_input(r, side_of(r, bev));
}

static void bev_write(struct bufferevent *bev, void *arg)
{
    struct net_relay *r = arg;
    drained(r, side_of(r, bev));
}

static void bev_event(struct bufferevent *bev, short what, void *arg)
{
    struct net_relay *r = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    struct side *s = side_of(r, bev);
    if (!r->ending)
        bev_input(r, s); /* what arrived with the EOF still goes across */
    side_gone(r, s, !(what & BEV_EVENT_ERROR));
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct net_relay *r = arg;
    if (r->ending) {
        struct side *keep = side_open(&r->client) ? &r->client : &r->backend;
        int64_t left = r->linger_until_ms - now_ms(r);
        if (side_queued(keep) == 0)
            shut_side(r, keep);
        else if (left <= 0)
            finish(r); /* it did not read its last bytes: dropped */
        else
            arm(r->timer, left < RELAY_LINGER_POLL_MS ? left : RELAY_LINGER_POLL_MS);
        return;
    }
    int64_t idle = now_ms(r) - r->last_activity_ms;
    if (idle >= r->cfg.idle_ms) {
        end_relay(r, NET_RELAY_IDLE, &r->backend);
        return;
    }
    arm(r->timer, r->cfg.idle_ms - idle);
}

/* Takes `bev` as side `s`. A plain socket's descriptor is kept and its
 * bufferevent freed (what it had read goes to `pending`, what it had not
 * sent to the side's queue), and so are a TLS socket's descriptor and SSL;
 * anything else keeps its bufferevent, with larger read and write steps. */
static void side_take(struct net_relay *r, struct side *s, struct bufferevent *bev,
                      struct evbuffer *pending)
{
    s->r = r;
    s->fd = -1;
    struct evbuffer *unsent = evbuffer_new();
    s->ssl = tls_conn_detach(bev, &s->fd, pending, unsent);
    if (s->ssl != NULL) {
        s->readable = event_new(r->base, s->fd, EV_READ | EV_PERSIST, socket_readable, s);
        s->retry_min = evbuffer_get_length(unsent);
        if (s->retry_min > 0)
            evbuffer_add_buffer(queue_of(s), unsent);
        evbuffer_free(unsent);
        side_reading(s, true);
        return;
    }
    evbuffer_free(unsent);
    if (net_bev_plain_socket(bev)) {
        s->fd = bufferevent_getfd(bev);
        bufferevent_disable(bev, EV_READ | EV_WRITE);
        bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
        /* Detaches the descriptor (the free no longer closes it) and lets
         * the buffers be emptied from outside. */
        bufferevent_setfd(bev, -1);
        evbuffer_add_buffer(pending, bufferevent_get_input(bev));
        s->readable = event_new(r->base, s->fd, EV_READ | EV_PERSIST, socket_readable, s);
        struct evbuffer *out = bufferevent_get_output(bev);
        if (evbuffer_get_length(out) > 0)
            evbuffer_add_buffer(queue_of(s), out);
        bufferevent_free(bev);
        event_add(s->readable, NULL);
        return;
    }
    s->bev = bev;
    bufferevent_setcb(bev, bev_read, bev_write, bev_event, r);
    bufferevent_setwatermark(bev, EV_WRITE, r->cfg.high_water / 2, 0);
    bufferevent_setwatermark(bev, EV_READ, 0, 0);
    for (struct bufferevent *b = bev; b != NULL; b = bufferevent_get_underlying(b)) {
        bufferevent_set_max_single_read(b, RELAY_IO_STEP);
        bufferevent_set_max_single_write(b, RELAY_IO_STEP);
        /* A filter (TLS) moves what it is given to the bufferevent under
         * it as long as that one's output is under its high mark: without
         * one, everything would pile up there, out of the bound's sight. */
        if (b != bev)
            bufferevent_setwatermark(b, EV_WRITE, 0, r->cfg.high_water / 2 + 1);
    }
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* Bytes a side had read before the relay took it go across first. */
static void send_pending(struct net_relay *r, struct side *from, struct evbuffer *pending)
{
    size_t n = evbuffer_get_length(pending);
    if (n > 0 && !r->ending) {
        send_buffer(r, other(r, from), pending);
        relayed(r, from, n);
    }
    evbuffer_free(pending);
}

struct net_relay *net_relay_start(struct bufferevent *client, struct bufferevent *backend,
                                  const struct net_relay_config *cfg, net_relay_done_fn *done,
                                  void *arg)
{
    struct net_relay *r = xcalloc(1, sizeof(*r));
    r->cfg = *cfg;
    if (r->cfg.high_water == 0)
        r->cfg.high_water = 1;
    if (r->cfg.linger_ms <= 0)
        r->cfg.linger_ms = 1;
    r->done = done;
    r->arg = arg;
    r->base = bufferevent_get_base(client);
    r->timer = evtimer_new(r->base, timer_cb, r);
    r->last_activity_ms = now_ms(r);
    struct evbuffer *from_client = evbuffer_new();
    struct evbuffer *from_backend = evbuffer_new();
    side_take(r, &r->client, client, from_client);
    side_take(r, &r->backend, backend, from_backend);
    if (r->cfg.idle_ms > 0)
        arm(r->timer, r->cfg.idle_ms);
    send_pending(r, &r->client, from_client);
    send_pending(r, &r->backend, from_backend);
    if (r->client.bev != NULL)
        bev_input(r, &r->client);
    if (r->backend.bev != NULL)
        bev_input(r, &r->backend);
    return r;
}

void net_relay_abort(struct net_relay *r)
{
    if (r == NULL)
        return;
    if (r->finished) { /* finish_cb, queued with r, frees it */
        r->done = NULL;
        return;
    }
    close_side(&r->client);
    close_side(&r->backend);
    event_free(r->timer);
    free(r);
}

void net_relay_stop(struct net_relay *r, const char *farewell, size_t len)
{
    if (r == NULL || r->ending)
        return;
    if (farewell != NULL && len > 0 && side_open(&r->client))
        send_bytes(r, &r->client, farewell, len);
    end_relay(r, NET_RELAY_STOPPED, &r->backend);
}

size_t net_relay_buffered(const struct net_relay *r)
{
    size_t n = side_queued(&r->client) + side_queued(&r->backend);
    if (r->client.bev != NULL)
        n += evbuffer_get_length(bufferevent_get_input(r->client.bev));
    if (r->backend.bev != NULL)
        n += evbuffer_get_length(bufferevent_get_input(r->backend.bev));
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
