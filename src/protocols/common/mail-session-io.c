/* The connection under a mail protocol session: bufferevent callbacks,
 * timeouts, STARTTLS, writes, the deferred close and the shared login
 * steps. */
#include "protocols/common/mail-session-io.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/bev-write.h"
#include "net/deadline.h"
#include "net/linger.h"
#include "net/sockaddr.h"
#include "net/tls-conn.h"

#include <errno.h>
#include <event2/buffer.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Writes at least this long go to the bufferevent at once (after what is
 * held back): copying a big FETCH into the hold buffer buys nothing. */
#define MAIL_CORK_MAX_WRITE (16u * 1024)
/* A hold buffer grown past this is freed after use, not kept per session. */
#define MAIL_CORK_KEEP (4u * 1024)

/* Bytes still queued anywhere below the session: a TLS filter hands its
 * output to the socket bufferevent underneath, which must drain too. */
static size_t output_pending(const struct mail_session_io *io)
{
    return io->cork.len + net_output_pending(io->bev);
}

/* Empties the hold buffer once its bytes are handed on; a big one is freed
 * rather than kept per session. */
static void cork_release(struct mail_session_io *io)
{
    if (io->cork.cap > MAIL_CORK_KEEP)
        buf_free(&io->cork);
    else
        buf_reset(&io->cork);
}

/* Hands what was held back to the bufferevent (`direct`: first try the
 * socket itself, when the connection is plain and nothing is queued). */
static void uncork(struct mail_session_io *io, bool direct)
{
    if (io->cork.len == 0)
        return;
    if (direct)
        net_bev_write(io->bev, io->cork.data, io->cork.len);
    else
        bufferevent_write(io->bev, io->cork.data, io->cork.len);
    cork_release(io);
}

/* Runs `fn` (ops->input or ops->drained) with what it writes held back and
 * sent in one go at its end. False when the session freed itself. */
static bool run_corked(struct mail_session_io *io, void (*fn)(void *owner))
{
    bool alive = true;
    io->alive = &alive;
    io->corked = true;
    fn(io->owner);
    if (!alive)
        return false; /* the session freed itself */
    io->alive = NULL;
    io->corked = false;
    uncork(io, true);
    return true;
}

/* An owner waiting for the output to drain, and nothing left queued: the
 * hold buffer went straight to the socket, so no write callback will come
 * to wake it. */
static bool wake_now(const struct mail_session_io *io)
{
    return io->output_waiting && !io->closing &&
           evbuffer_get_length(bufferevent_get_output(io->bev)) <= io->output_low_water;
}

/* The input bound (input_high_water) as libevent's read watermark, but
 * only while input waits unparsed after the owner's input callback: the
 * watermark callback runs on every read and every drain and re-arms the
 * read event each time (two event_adds and a timer move per command), and
 * most sessions parse everything they read at once. With nothing left over
 * a read adds at most libevent's single-read step (16 KiB, below any bound
 * used here), so the bound holds as before: once bytes wait, the watermark
 * is in place before the next read. */
static void update_input_watermark(struct mail_session_io *io)
{
    if (io->input_high_water == 0 || io->closing)
        return;
    bool waiting = evbuffer_get_length(bufferevent_get_input(io->bev)) > 0;
    if (waiting == io->input_wm_on)
        return;
    bufferevent_setwatermark(io->bev, EV_READ, 0, waiting ? io->input_high_water : 0);
    io->input_wm_on = waiting;
}

static void read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct mail_session_io *io = arg;
    if (io->ops->drained != NULL && io->output_high_water == 0) {
        bool alive = true;
        io->alive = &alive;
        io->ops->input(io->owner);
        if (!alive)
            return;
        io->alive = NULL;
        update_input_watermark(io);
        return;
    }
    if (!run_corked(io, io->ops->input))
        return;
    while (wake_now(io)) {
        io->output_waiting = false;
        if (!run_corked(io, io->ops->drained))
            return;
    }
    update_input_watermark(io);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct mail_session_io *io = arg;
    if (!io->closing) {
        if (io->ops->drained == NULL)
            return;
        if (io->output_high_water == 0) {
            io->ops->drained(io->owner);
            return;
        }
        /* The callback runs at the low-water mark after every write: the
         * owner hears of it once per wait. */
        while (wake_now(io)) {
            io->output_waiting = false;
            if (!run_corked(io, io->ops->drained))
                return;
        }
        return;
    }
    if (output_pending(io) == 0)
        io->ops->free(io->owner);
}

/* The inactivity timeout or the login deadline passed. */
static void inactive(struct mail_session_io *io)
{
    log_debug(mail_listeners_params(io->listeners)->component, "inactivity timeout",
              "session=%s peer=%s", io->id, io->peer);
    io->ops->goodbye(io->owner, "Disconnected for inactivity.");
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct mail_session_io *io = arg;
    if (what & BEV_EVENT_CONNECTED) {
        if (io->ops->tls_ready != NULL)
            io->ops->tls_ready(io->owner);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        if (what & BEV_EVENT_WRITING) {
            /* The output made no progress for the whole timeout (libevent
             * has stopped writing): a goodbye would not leave either, and
             * a close after the output would wait for ever. */
            log_info(mail_listeners_params(io->listeners)->component,
                     "closing: the client reads nothing", "session=%s peer=%s", io->id, io->peer);
            io->ops->free(io->owner);
            return;
        }
        if (!io->closing)
            inactive(io);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        io->ops->free(io->owner);
}

static void deadline_cb(void *arg)
{
    struct mail_session_io *io = arg;
    if (!io->closing)
        inactive(io);
}

void mail_session_io_set_deadline(struct mail_session_io *io, int64_t ms)
{
    if (io->deadline == NULL)
        io->deadline = net_deadline_new(bufferevent_get_base(io->bev), deadline_cb, io);
    net_deadline_arm(io->deadline, ms);
}

void mail_session_io_clear_deadline(struct mail_session_io *io)
{
    /* Freed, not just disarmed: a logged-in or relayed session holds many
     * thousands of times over, and never needs it again. */
    net_deadline_free(io->deadline);
    io->deadline = NULL;
}

static void apply_timeout(struct mail_session_io *io)
{
    int64_t ms = io->timeout_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    if (io->timeout_on_output)
        bufferevent_set_timeouts(io->bev, NULL, &tv);
    else
        bufferevent_set_timeouts(io->bev, &tv, NULL);
}

/* The output bound on the current bufferevents: the write callback (and
 * with it ops->drained) runs once the output is down to the low-water mark;
 * under a STARTTLS filter the socket bufferevent below takes at most
 * MAIL_TLS_UNDER_HIGH bytes, so what the session queued stays in the top
 * buffer, where mail_session_io_output_full() sees it, rather than moving
 * below as ciphertext at once. */
#define MAIL_TLS_UNDER_HIGH (64u * 1024)
static void apply_output_limits(struct mail_session_io *io)
{
    if (io->output_high_water == 0)
        return;
    bufferevent_setwatermark(io->bev, EV_WRITE, io->output_low_water, 0);
    struct bufferevent *under = bufferevent_get_underlying(io->bev);
    if (under != NULL)
        bufferevent_setwatermark(under, EV_WRITE, 0, MAIL_TLS_UNDER_HIGH);
}

/* Callbacks, write step and watermark on the current top bufferevent. */
static void setup_bev(struct mail_session_io *io)
{
    bufferevent_setcb(io->bev, read_cb, write_cb, event_cb, io);
    bufferevent_set_max_single_write(io->bev, io->max_single_write);
    io->input_wm_on = false; /* installed once input waits (read_cb) */
    update_input_watermark(io);
    apply_output_limits(io);
    apply_timeout(io);
    bufferevent_enable(io->bev, EV_READ | EV_WRITE);
}

void mail_session_io_init(struct mail_session_io *io, struct mail_session_set *set,
                          struct bufferevent *bev, bool tls, const struct sockaddr *peer,
                          const struct mail_session_io_ops *ops, void *owner)
{
    io->bev = bev;
    io->tls = tls;
    io->listeners = mail_session_set_listeners(set);
    io->set = set;
    io->ops = ops;
    io->owner = owner;
    io->connected_at = (int64_t)time(NULL);
    net_addr_format_ip(peer, io->peer_ip, sizeof(io->peer_ip));
    net_addr_format(peer, io->peer, sizeof(io->peer));
    memcpy(io->conn_ip, io->peer_ip, sizeof(io->conn_ip));
    io->trusted = mail_listeners_peer_trusted(io->listeners, peer);
    io->forwarded_ttl = -1;
    mail_listeners_attach(set, io);
}

void mail_session_io_forward(struct mail_session_io *io, const struct mail_forward *f)
{
    if (!io->trusted || io->username != NULL)
        return;
    if (f->ip[0] != '\0') {
        snprintf(io->peer_ip, sizeof(io->peer_ip), "%s", f->ip);
        mail_forward_format_peer(f, io->peer, sizeof(io->peer));
        io->forwarded = true;
    }
    if (f->session[0] != '\0')
        snprintf(io->id, sizeof(io->id), "%s", f->session);
    if (f->ttl >= 0)
        io->forwarded_ttl = f->ttl;
}

void mail_session_io_ack_now(struct mail_session_io *io)
{
#ifdef TCP_QUICKACK
    if (strcmp(io->conn_ip, "unix") == 0) /* no ACKs to hurry */
        return;
    int one = 1;
    setsockopt(bufferevent_getfd(io->bev), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
#else
    (void)io; /* Linux only; elsewhere the kernel's own ACK timing */
#endif
}

void mail_session_io_enable(struct mail_session_io *io, size_t max_single_write,
                            size_t input_high_water)
{
    io->max_single_write = max_single_write;
    io->input_high_water = input_high_water;
    setup_bev(io);
}

size_t mail_session_io_input_bound(size_t max_line)
{
    size_t n = max_line * 2 + 2;
    return n < 65536 ? 65536 : n;
}

void mail_session_io_set_timeout(struct mail_session_io *io, int64_t ms, bool on_output)
{
    io->timeout_ms = ms;
    io->timeout_on_output = on_output;
    apply_timeout(io);
}

void mail_session_io_set_output_limits(struct mail_session_io *io, size_t high, size_t low)
{
    io->output_high_water = high;
    io->output_low_water = low < high ? low : high / 2;
    apply_output_limits(io);
}

void mail_session_io_wait_output(struct mail_session_io *io)
{
    io->output_waiting = true;
}

bool mail_session_io_output_full(const struct mail_session_io *io)
{
    if (io->output_high_water == 0)
        return false;
    /* The top buffer and the hold buffer: what lies below a STARTTLS
     * filter is capped by MAIL_TLS_UNDER_HIGH and drains on its own. */
    return io->cork.len + evbuffer_get_length(bufferevent_get_output(io->bev)) >=
           io->output_high_water;
}

/* A big write while input is handled on a plain connection with nothing
 * queued: what is held back and `data` leave in one sendmsg, straight to
 * the socket; whatever it does not take goes to the bufferevent, in order.
 * Saves copying a big FETCH into the bufferevent and the write event's
 * round through the loop. */
static void write_direct(struct mail_session_io *io, const char *data, size_t len)
{
    struct iovec iov[2] = {{io->cork.data, io->cork.len}, {(void *)data, len}};
    struct msghdr msg = {.msg_iov = io->cork.len > 0 ? iov : iov + 1,
                         .msg_iovlen = io->cork.len > 0 ? 2 : 1};
    ssize_t n;
    do
        n = sendmsg(bufferevent_getfd(io->bev), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    size_t sent = n > 0 ? (size_t)n : 0; /* an error is the bufferevent's to report */
    if (sent < io->cork.len) {
        bufferevent_write(io->bev, io->cork.data + sent, io->cork.len - sent);
        sent = 0;
    } else {
        sent -= io->cork.len;
    }
    if (sent < len)
        bufferevent_write(io->bev, data + sent, len - sent);
    cork_release(io);
}

void mail_session_io_write(struct mail_session_io *io, const void *data, size_t len)
{
    if (len == 0)
        return;
    if (io->corked && len < MAIL_CORK_MAX_WRITE) {
        buf_append(&io->cork, data, len);
    } else if (io->corked && !io->tls &&
               evbuffer_get_length(bufferevent_get_output(io->bev)) == 0) {
        write_direct(io, data, len);
    } else {
        uncork(io, false); /* keeps the order */
        /* A write outside ops->input (a greeting, an answer that waited
         * for the auth service or a backend) leaves at once when nothing
         * is queued on a plain connection; but not for an owner that
         * produces the next part of its output from each write callback
         * (ops->drained without output limits: POP3's RETR), which a write
         * that queued nothing would never get. */
        if (io->ops->drained != NULL && io->output_high_water == 0)
            bufferevent_write(io->bev, data, len);
        else
            net_bev_write(io->bev, data, len);
    }
    metric_add(mail_listeners_params(io->listeners)->bytes_out, (double)len);
}

bool mail_session_io_file_ready(const struct mail_session_io *io)
{
    return !io->tls && !io->closing && evbuffer_get_length(bufferevent_get_output(io->bev)) == 0;
}

void mail_session_io_write_file(struct mail_session_io *io, int fd, off_t offset, size_t len)
{
    metric_add(mail_listeners_params(io->listeners)->bytes_out, (double)len);
    uncork(io, true); /* keeps the order */
    struct evbuffer *output = bufferevent_get_output(io->bev);
    if (len > 0 && evbuffer_get_length(output) == 0) {
        ssize_t n;
        do
            n = sendfile(bufferevent_getfd(io->bev), fd, &offset, len);
        while (n < 0 && errno == EINTR);
        /* An error on the socket is the bufferevent's to find and report;
         * a file shorter than promised leaves a remainder sendfile will
         * never finish, which ends the connection in the write callback. */
        if (n > 0)
            len -= (size_t)n;
    }
    if (len == 0) {
        close(fd);
        return;
    }
    /* libevent owns `fd` from here (closes it with the segment); on a
     * failure, which only allocation can cause, it is left alone rather
     * than risk a second close. */
    if (evbuffer_add_file(output, fd, offset, (ev_off_t)len) != 0) {
        log_warn(mail_listeners_params(io->listeners)->component,
                 "cannot queue a message file for the client", "session=%s", io->id);
        mail_session_io_close_after_output(io);
    }
}

void mail_session_io_vwritef(struct mail_session_io *io, const char *prefix, const char *fmt,
                             va_list ap)
{
    struct buf line = {0};
    buf_append_str(&line, prefix);
    buf_vprintf(&line, fmt, ap);
    buf_append_str(&line, "\r\n");
    mail_session_io_write(io, line.data, line.len);
    buf_free(&line);
}

bool mail_session_io_starttls(struct mail_session_io *io)
{
    uncork(io, false); /* the go-ahead leaves in clear text */
    /* Drops what was pipelined in clear text; the handshake is bounded by
     * the login deadline, which input does not push back. */
    struct bufferevent *tls_bev = tls_conn_starttls(io->bev, mail_listeners_tls(io->listeners));
    if (tls_bev == NULL)
        return false;
    io->bev = tls_bev;
    io->tls = true;
    setup_bev(io);
    return true;
}

static size_t linger_pending(void *arg)
{
    struct mail_session_io *io = arg;
    /* A TLS handshake that has not finished delivers nothing queued (the
     * greeting, a BYE): waiting the linger out would only hold the slot
     * 5 s past the login deadline that cut the handshake. */
    if (io->tls && !tls_conn_established(io->bev))
        return 0;
    return output_pending(io);
}

static void linger_done(void *arg)
{
    struct mail_session_io *io = arg;
    io->ops->free(io->owner);
}

void mail_session_io_close_after_output(struct mail_session_io *io)
{
    io->closing = true;
    bufferevent_disable(io->bev, EV_READ);
    /* A client that reads nothing more must not keep a closing session for
     * ever: the timeout now counts on the output (see event_cb). */
    if (io->timeout_ms > 0) {
        io->timeout_on_output = true;
        apply_timeout(io);
    }
    /* The write callback frees the session once the output has left; with
     * nothing queued (or under TLS, where the socket below drains later, or
     * with replies held back, which may leave without the bufferevent) a
     * timer does it, so callers up the stack never touch a freed session. */
    if (io->linger == NULL && (io->tls || io->corked || output_pending(io) == 0))
        io->linger = net_linger_start(io->bev, linger_pending, linger_done, io);
}

/* ---------- login ---------- */

enum mail_session_login mail_session_io_login(struct mail_session_io *io,
                                              struct mail_storage *storage, const char *username,
                                              const char *const *groups, struct mail_user **user)
{
    const char *component = mail_listeners_params(io->listeners)->component;
    struct petrel_error err;
    *user = mail_user_get_session(storage, username, groups, &err);
    if (*user == NULL) {
        log_warn(component, "login refused by storage", "session=%s error=\"%s\"", io->id,
                 err.message);
        return MAIL_SESSION_LOGIN_REFUSED;
    }
    if (!mail_listeners_user_add(io->listeners, username)) {
        log_info(component, "login refused: too many sessions for the user", "session=%s", io->id);
        *user = NULL;
        return MAIL_SESSION_LOGIN_TOO_MANY;
    }
    io->username = xstrdup(username);
    return MAIL_SESSION_LOGIN_OK;
}

enum mail_session_login mail_session_io_admit(struct mail_session_io *io, const char *username)
{
    if (!mail_listeners_user_add(io->listeners, username)) {
        log_info(mail_listeners_params(io->listeners)->component,
                 "login refused: too many sessions for the user", "session=%s", io->id);
        return MAIL_SESSION_LOGIN_TOO_MANY;
    }
    io->username = xstrdup(username);
    return MAIL_SESSION_LOGIN_OK;
}

struct net_relay *mail_session_io_relay(struct mail_session_io *io, struct bufferevent *backend,
                                        const struct net_relay_config *cfg, net_relay_done_fn *done,
                                        void *arg)
{
    uncork(io, false);
    buf_free(&io->cork); /* the relay writes on its own from now on */
    mail_session_io_clear_deadline(io);
    bufferevent_set_timeouts(io->bev, NULL, NULL);
    bufferevent_setwatermark(io->bev, EV_READ | EV_WRITE, 0, 0);
    struct bufferevent *under = bufferevent_get_underlying(io->bev);
    if (under != NULL)
        bufferevent_setwatermark(under, EV_WRITE, 0, 0);
    io->input_wm_on = false;
    io->output_waiting = false;
    struct bufferevent *client = io->bev;
    io->bev = NULL;
    io->relayed = true;
    return net_relay_start(client, backend, cfg, done, arg);
}

void mail_session_io_logout(struct mail_session_io *io)
{
    warden_client_session_disconnect(io->warden);
    io->warden = NULL;
    if (io->username == NULL || io->user_released)
        return;
    mail_listeners_user_remove(io->listeners, io->username);
    io->user_released = true;
}

void mail_session_io_login_cancel(struct mail_session_io *io)
{
    if (io->username == NULL)
        return;
    if (!io->user_released)
        mail_listeners_user_remove(io->listeners, io->username);
    io->user_released = false;
    free(io->username);
    io->username = NULL;
}

void mail_session_io_register(struct mail_session_io *io, struct warden_client *warden,
                              const char *service)
{
    if (warden != NULL && io->username != NULL && io->warden == NULL)
        io->warden = warden_client_session_connect(warden, io->username, io->peer_ip, service,
                                                   io->connected_at);
}

void mail_session_io_free(struct mail_session_io *io)
{
    if (io->alive != NULL)
        *io->alive = false;
    io->alive = NULL;
    buf_free(&io->cork);
    warden_client_session_disconnect(io->warden);
    io->warden = NULL;
    mail_session_io_login_cancel(io);
    mail_listeners_detach(io->set, io);
    net_linger_free(io->linger);
    io->linger = NULL;
    net_deadline_free(io->deadline);
    io->deadline = NULL;
    if (io->bev != NULL) /* NULL once a relay took it */
        bufferevent_free(io->bev);
    io->bev = NULL;
}
