/* The monitor's ring-protocol client (monitor-director-link.h).
 *
 * States: IDLE (waiting out the backoff) -> CONNECTING (VERSION and HELLO
 * already queued on the socket) -> HANDSHAKE (connected; the director's
 * VERSION, then HOST lines up to DONE) -> READY. One timer, `watch`, bounds
 * silence: in CONNECTING/HANDSHAKE it is the handshake deadline; in READY it
 * sends a PING after `ping_interval` without a line and declares the
 * director gone after another `ping_interval` without one. Every failure
 * goes through link_fail(), which closes, reports `lost` when the link was
 * ready, and arms the reconnect timer. */
#include "services/monitor/monitor-director-link.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/backoff.h"
#include "net/evbuffer-line.h"
#include "net/dial.h"
#include "clients/ring/ring-auth.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define COMPONENT "monitor"
#define REASON_MAX 200

enum link_state { LINK_IDLE, LINK_CONNECTING, LINK_HANDSHAKE, LINK_READY };

struct monitor_link {
    struct event_base *base;
    char *address;
    struct net_dialer *dialer;
    char *name;
    char *secret;                               /* "" = anonymous */
    char nonce[RING_AUTH_HEX_LEN + 1];          /* ours, per connection */
    char director_nonce[RING_AUTH_HEX_LEN + 1]; /* from the director's VERSION */
    bool awaiting_auth_ok;
    size_t max_line;
    int64_t ping_ms;
    struct monitor_link_events ev;
    void *ctx;

    enum link_state state;
    struct bufferevent *bev;
    bool got_version;
    bool hosts_begun;
    size_t host_count;
    bool ping_out;
    uint64_t ping_seq;
    struct event *retry;
    struct event *watch;
    struct net_backoff backoff;
    bool failing; /* a failure was logged at warn; quiet until the next success */
    struct buf line;
    struct buf out;
};

static void arm_watch(struct monitor_link *l)
{
    struct timeval tv;
    tv = clock_ms_to_timeval(l->ping_ms);
    evtimer_add(l->watch, &tv);
}

static void send_msg(struct monitor_link *l, const struct ring_msg *m)
{
    buf_reset(&l->out);
    ring_msg_write(&l->out, m);
    bufferevent_write(l->bev, l->out.data, l->out.len);
}

/* A last message before closing: written straight to the socket if it
 * takes it now (the bufferevent would only send it after the close). */
static void send_farewell(struct monitor_link *l, const struct ring_msg *m)
{
    evutil_socket_t fd = bufferevent_getfd(l->bev);
    if (fd < 0 || l->state < LINK_HANDSHAKE)
        return;
    buf_reset(&l->out);
    ring_msg_write(&l->out, m);
    (void)send(fd, l->out.data, l->out.len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void link_close(struct monitor_link *l)
{
    if (l->bev != NULL) {
        net_dialer_cancel(l->dialer);
        bufferevent_free(l->bev);
        l->bev = NULL;
    }
    evtimer_del(l->watch);
    l->got_version = false;
    l->awaiting_auth_ok = false;
    l->hosts_begun = false;
    l->host_count = 0;
    l->ping_out = false;
}

static void link_fail(struct monitor_link *l, const char *reason)
{
    bool was_ready = l->state == LINK_READY;
    link_close(l);
    l->state = LINK_IDLE;
    int64_t wait = net_backoff_failed(&l->backoff, clock_mono_ms());
    char q_addr[256], q_reason[REASON_MAX + 16];
    log_quote(q_addr, sizeof(q_addr), l->address);
    log_quote(q_reason, sizeof(q_reason), reason);
    if (!l->failing || was_ready) {
        log_warn(COMPONENT, "director link down", "director=%s reason=%s retry_ms=%" PRId64, q_addr,
                 q_reason, wait);
        l->failing = true;
    } else {
        log_debug(COMPONENT, "director link still down", "director=%s reason=%s retry_ms=%" PRId64,
                  q_addr, q_reason, wait);
    }
    struct timeval tv;
    tv = clock_ms_to_timeval(wait);
    evtimer_add(l->retry, &tv);
    if (was_ready && l->ev.lost != NULL)
        l->ev.lost(l->ctx);
}

static void begin_hosts(struct monitor_link *l)
{
    if (l->hosts_begun)
        return;
    l->hosts_begun = true;
    l->host_count = 0;
    if (l->ev.hosts_begin != NULL)
        l->ev.hosts_begin(l->ctx);
}

static void send_hello(struct monitor_link *l)
{
    buf_reset(&l->out);
    ring_write_hello(&l->out, RING_KIND_MONITOR, l->name);
    bufferevent_write(l->bev, l->out.data, l->out.len);
}

/* The director's VERSION with a secret configured: AUTH and HELLO. False
 * when the link failed (a director that offers no challenge is refused, so
 * a stranger on its address cannot feed this monitor a backend list). */
static bool authenticate(struct monitor_link *l, const struct ring_msg *version)
{
    if (version->version.auth == NULL || strcmp(version->version.auth, RING_AUTH_MECH) != 0 ||
        version->version.nonce == NULL) {
        link_fail(l, "the director does not authenticate (no auth=" RING_AUTH_MECH
                     " in its VERSION) but this monitor has a ring secret");
        return false;
    }
    snprintf(l->director_nonce, sizeof(l->director_nonce), "%s", version->version.nonce);
    buf_reset(&l->out);
    if (!ring_auth_write_answer(&l->out, l->secret, l->director_nonce, l->nonce)) {
        link_fail(l, "no random bytes for the authentication nonce");
        return false;
    }
    bufferevent_write(l->bev, l->out.data, l->out.len);
    send_hello(l);
    l->awaiting_auth_ok = true;
    return true;
}

/* Handles one decoded message. False when the link failed (closed). */
static bool handle(struct monitor_link *l, const struct ring_msg *m)
{
    if (!l->got_version) {
        if (m->type != RING_MSG_VERSION) {
            link_fail(l, "the director did not start with VERSION");
            return false;
        }
        if (m->version.major != RING_VERSION_MAJOR) {
            char reason[96];
            snprintf(reason, sizeof(reason), "director speaks ring protocol %u.%u, not %d.x",
                     m->version.major, m->version.minor, RING_VERSION_MAJOR);
            struct ring_msg e = {.type = RING_MSG_ERROR};
            e.error.text = "unsupported protocol version";
            send_farewell(l, &e);
            link_fail(l, reason);
            return false;
        }
        l->got_version = true;
        return l->secret[0] == '\0' || authenticate(l, m);
    }
    if (l->awaiting_auth_ok) {
        if (m->type == RING_MSG_ERROR) {
            char reason[REASON_MAX];
            snprintf(reason, sizeof(reason), "the director refused: %.150s", m->error.text);
            link_fail(l, reason);
            return false;
        }
        if (m->type != RING_MSG_AUTH_OK) {
            link_fail(l, "AUTH-OK expected from the director");
            return false;
        }
        if (!ring_auth_check(l->secret, strlen(l->secret), RING_AUTH_SERVER, l->director_nonce,
                             l->nonce, m->auth_ok.proof)) {
            link_fail(l, "the director's proof does not match the ring secret");
            return false;
        }
        l->awaiting_auth_ok = false;
        return true;
    }
    switch (m->type) {
    case RING_MSG_HOST:
        if (l->state == LINK_READY)
            return true; /* HOST belongs to the handshake only */
        begin_hosts(l);
        l->host_count++;
        if (l->ev.host != NULL)
            l->ev.host(&m->host, l->ctx);
        return true;
    case RING_MSG_DONE:
        if (l->state == LINK_READY)
            return true;
        begin_hosts(l);
        l->state = LINK_READY;
        net_backoff_reset(&l->backoff);
        l->failing = false;
        char q_addr[256];
        log_info(COMPONENT, "director link ready", "director=%s backends=%zu",
                 log_quote(q_addr, sizeof(q_addr), l->address), l->host_count);
        if (l->ev.hosts_done != NULL)
            l->ev.hosts_done(l->ctx);
        return true;
    case RING_MSG_RING_CHANGE:
        if (l->ev.change != NULL && l->hosts_begun)
            l->ev.change(m->ring_change.change, &m->ring_change.host, l->ctx);
        return true;
    case RING_MSG_PING: {
        struct ring_msg pong = ring_msg_pong(m);
        send_msg(l, &pong);
        return true;
    }
    case RING_MSG_PONG:
        l->ping_out = false;
        return true;
    case RING_MSG_ERROR: {
        char q_text[320];
        log_warn(COMPONENT, "director reported an error", "error=%s",
                 log_quote(q_text, sizeof(q_text), m->error.text));
        return true;
    }
    default:
        return true; /* VERSION again, USER-*: not for a monitor */
    }
}

static void handle_line(struct monitor_link *l, char *line, size_t len, bool *alive)
{
    struct ring_line fields;
    struct ring_msg msg;
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!ring_msg_parse(line, len, l->max_line, &fields, &msg, &err)) {
        if (err.code == PETREL_ERR_UNSUPPORTED && l->got_version) {
            char q_err[160];
            log_debug(COMPONENT, "ignoring an unknown ring message", "error=%s",
                      log_quote(q_err, sizeof(q_err), err.message));
            return; /* a newer minor version: ignore what we do not know */
        }
        struct ring_msg e = {.type = RING_MSG_ERROR};
        e.error.text = err.message;
        send_farewell(l, &e);
        char reason[REASON_MAX];
        snprintf(reason, sizeof(reason), "malformed line from the director: %.150s", err.message);
        link_fail(l, reason);
        *alive = false;
        return;
    }
    *alive = handle(l, &msg);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
    struct monitor_link *l = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    bool heard = false;
    for (;;) {
        enum evbuffer_line_result r =
            evbuffer_line_take(in, EVBUFFER_EOL_LF, l->max_line, &l->line);
        if (r == EVBUFFER_LINE_NONE)
            break;
        if (r == EVBUFFER_LINE_TOO_LONG) {
            char reason[96];
            snprintf(reason, sizeof(reason), "director line longer than %zu bytes", l->max_line);
            link_fail(l, reason);
            return;
        }
        heard = true;
        bool alive = true;
        handle_line(l, l->line.data, l->line.len, &alive);
        if (!alive)
            return;
    }
    if (heard && l->state == LINK_READY) {
        l->ping_out = false; /* any line proves the director alive */
        arm_watch(l);
    }
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct monitor_link *l = arg;
    if (what & BEV_EVENT_CONNECTED) {
        l->state = LINK_HANDSHAKE;
        return;
    }
    if (what & BEV_EVENT_EOF) {
        link_fail(l, "the director closed the connection");
        return;
    }
    char reason[REASON_MAX];
    int e = EVUTIL_SOCKET_ERROR();
    const char *dns = l->state == LINK_CONNECTING ? net_dialer_error(l->dialer) : NULL;
    snprintf(reason, sizeof(reason), "%s: %s",
             l->state == LINK_CONNECTING ? "connect failed" : "connection failed",
             dns != NULL ? dns
             : e != 0    ? evutil_socket_error_to_string(e)
                         : "error");
    link_fail(l, reason);
}

static void watch_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct monitor_link *l = arg;
    if (l->state != LINK_READY) {
        link_fail(l, "no complete handshake from the director in time");
        return;
    }
    if (l->ping_out) {
        link_fail(l, "the director did not answer PING");
        return;
    }
    char token[32];
    snprintf(token, sizeof(token), "m%" PRIu64, ++l->ping_seq);
    struct ring_msg ping = {.type = RING_MSG_PING};
    ping.ping.token = token;
    send_msg(l, &ping);
    l->ping_out = true;
    arm_watch(l);
}

static void connect_now(struct monitor_link *l)
{
    l->bev = bufferevent_socket_new(l->base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (l->bev == NULL)
        petrel_fatal("out of memory creating the director connection");
    bufferevent_setcb(l->bev, read_cb, NULL, event_cb, l);
    bufferevent_enable(l->bev, EV_READ | EV_WRITE);
    l->state = LINK_CONNECTING;
    /* Anonymous: both lines go at once, the director does not make us wait
     * for its VERSION. With a secret, AUTH and HELLO follow its challenge. */
    buf_reset(&l->out);
    ring_write_version(&l->out);
    if (l->secret[0] == '\0')
        ring_write_hello(&l->out, RING_KIND_MONITOR, l->name);
    bufferevent_write(l->bev, l->out.data, l->out.len);
    arm_watch(l);
    if (!net_dialer_connect(l->dialer, l->bev))
        link_fail(l, net_dialer_error(l->dialer) != NULL ? net_dialer_error(l->dialer)
                                                         : "connect failed");
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connect_now(arg);
}

struct monitor_link *monitor_link_new(struct event_base *base,
                                      const struct monitor_link_options *opts,
                                      const struct monitor_link_events *events, void *ctx,
                                      struct petrel_error *err)
{
    struct net_endpoint ep;
    if (!net_endpoint_parse(opts->addr, NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_PORT_NONZERO, 0, &ep,
                            err))
        return NULL;
    struct monitor_link *l = xcalloc(1, sizeof(*l));
    l->base = base;
    l->address = xstrdup(opts->addr);
    l->dialer = net_dialer_new(base, &ep);
    l->name = xstrndup(opts->name != NULL && *opts->name != '\0' ? opts->name : "petrel-monitor",
                       RING_NAME_MAX);
    l->secret = xstrdup(opts->secret != NULL ? opts->secret : "");
    l->max_line = opts->max_line;
    net_backoff_init(&l->backoff, opts->reconnect_min_ms, opts->reconnect_max_ms);
    l->ping_ms = opts->ping_interval_ms;
    l->ev = *events;
    l->ctx = ctx;
    l->retry = evtimer_new(base, retry_cb, l);
    l->watch = evtimer_new(base, watch_cb, l);
    if (l->retry == NULL || l->watch == NULL)
        petrel_fatal("out of memory creating director link timers");
    /* The first attempt from the loop, so start-up finishes first. */
    struct timeval now = {0, 0};
    evtimer_add(l->retry, &now);
    return l;
}

void monitor_link_free(struct monitor_link *l)
{
    if (l == NULL)
        return;
    link_close(l);
    event_free(l->retry);
    event_free(l->watch);
    buf_free(&l->line);
    buf_free(&l->out);
    free(l->address);
    net_dialer_free(l->dialer);
    free(l->name);
    ring_secret_free(l->secret);
    free(l);
}

bool monitor_link_ready(const struct monitor_link *l)
{
    return l->state == LINK_READY;
}

bool monitor_link_report(struct monitor_link *l, bool flush, const char *ip, const char *reason)
{
    if (l->state != LINK_READY)
        return false;
    struct ring_msg m;
    memset(&m, 0, sizeof(m));
    if (flush) {
        char text[REASON_MAX];
        m.type = RING_MSG_BACKEND_FLUSH;
        m.backend_flush.ip = ip;
        if (reason != NULL) {
            snprintf(text, sizeof(text), "%s", reason);
            m.backend_flush.reason = text;
        }
        send_msg(l, &m);
    } else {
        m.type = RING_MSG_BACKEND_UP;
        m.backend_up.ip = ip;
        send_msg(l, &m);
    }
    return true;
}

const char *monitor_link_address(const struct monitor_link *l)
{
    return l->address;
}
