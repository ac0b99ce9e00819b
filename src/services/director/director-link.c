/* An outbound peer link (director-link.h):
 *
 *   WAIT_RETRY --timer--> CONNECTING --connected--> HANDSHAKE --DONE--> CONNECTED
 *        ^                     |                        |                  |
 *        +---------------------+---- error, EOF, timeout, bad line, -------+
 *                                    no PONG to a keep-alive PING
 *
 * One timer serves every state: the retry wait, the connect + handshake
 * deadline, and while connected the keep-alive (quiet interval, then the
 * PONG deadline). */
#include "services/director/director-link.h"

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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COMPONENT "director"

enum link_state { WAIT_RETRY, CONNECTING, HANDSHAKE, CONNECTED };

struct director_link {
    struct event_base *base;
    struct director_link_config cfg;
    struct director_link_callbacks cb;
    char addr[64];
    struct net_dialer *dialer; /* NULL: `addr` is no endpoint */
    char addr_error[128];
    char *self;
    char *secret;                           /* "" = this director does not authenticate */
    char nonce[RING_AUTH_HEX_LEN + 1];      /* ours, for this connection */
    char peer_nonce[RING_AUTH_HEX_LEN + 1]; /* the peer's, from its VERSION */
    bool awaiting_auth_ok;
    enum link_state state;
    struct bufferevent *bev;
    struct event *timer; /* retry wait, or the connect + handshake deadline */
    struct net_backoff backoff;
    int64_t since_ms;
    bool got_version;
    bool awaiting_pong; /* connected: a keep-alive PING is unanswered */
    struct buf line;
    struct buf out;
};

static void arm(struct director_link *link, int64_t ms)
{
    struct timeval tv = clock_ms_to_timeval(ms);
    evtimer_add(link->timer, &tv);
}

static void close_conn(struct director_link *link)
{
    if (link->bev != NULL) {
        net_dialer_cancel(link->dialer);
        bufferevent_free(link->bev);
        link->bev = NULL;
    }
}

/* Drops the connection and schedules the next dial. */
static void fail(struct director_link *link, const char *why)
{
    bool was_connected = link->state == CONNECTED;
    close_conn(link);
    link->state = WAIT_RETRY;
    link->since_ms = 0;
    if (was_connected)
        net_backoff_reset(&link->backoff); /* a lost link is redialled after min_ms */
    int64_t wait = net_backoff_failed(&link->backoff, clock_mono_ms());
    if (was_connected) {
        char why_q[200];
        log_warn(COMPONENT, "peer link lost", "peer=%s reason=%s", link->addr,
                 log_quote(why_q, sizeof(why_q), why));
    } else {
        char why_q[200];
        log_debug(COMPONENT, "peer dial failed", "peer=%s reason=%s retry_ms=%lld", link->addr,
                  log_quote(why_q, sizeof(why_q), why), (long long)wait);
    }
    arm(link, wait);
    if (link->cb.lost != NULL)
        link->cb.lost(link, why, link->cb.ctx);
}

static void send_hello(struct director_link *link)
{
    ring_write_hello(&link->out, RING_KIND_DIRECTOR, link->self);
    bufferevent_write(link->bev, link->out.data, link->out.len);
    buf_reset(&link->out);
}

/* The peer's VERSION arrived and this director has a secret: answer the
 * challenge (AUTH) and say HELLO; the peer's AUTH-OK must prove it knows
 * the secret too before its handshake lines count. A peer that offers no
 * challenge is refused: talking to it anonymously would let anyone who
 * can take its address feed this director a ring state. */
static void authenticate(struct director_link *link, const struct ring_msg *version)
{
    if (version->version.auth == NULL || strcmp(version->version.auth, RING_AUTH_MECH) != 0 ||
        version->version.nonce == NULL) {
        /* at warn, like a wrong AUTH-OK: a failed dial alone is only logged at debug */
        log_warn(COMPONENT, "peer failed authentication",
                 "peer=%s reason=\"it offers no challenge (no auth=" RING_AUTH_MECH
                 " in its VERSION)\"",
                 link->addr);
        fail(link, "the peer does not authenticate (no auth=" RING_AUTH_MECH
                   " in its VERSION): give it the same director.ring.secret_file");
        return;
    }
    if (!ring_auth_nonce(link->nonce)) {
        fail(link, "no random bytes for the authentication nonce");
        return;
    }
    snprintf(link->peer_nonce, sizeof(link->peer_nonce), "%s", version->version.nonce);
    char proof[RING_AUTH_HEX_LEN + 1];
    ring_auth_proof(link->secret, strlen(link->secret), RING_AUTH_CLIENT, link->peer_nonce,
                    link->nonce, proof);
    struct ring_msg m = {.type = RING_MSG_AUTH};
    m.auth.mech = RING_AUTH_MECH;
    m.auth.nonce = link->nonce;
    m.auth.proof = proof;
    ring_msg_write(&link->out, &m);
    link->awaiting_auth_ok = true;
    send_hello(link);
}

static void handle_line(struct director_link *link, char *text, size_t len)
{
    struct ring_line fields;
    struct ring_msg m;
    struct petrel_error err;
    if (!ring_msg_parse(text, len, link->cfg.max_line, &fields, &m, &err)) {
        char why[600];
        snprintf(why, sizeof(why), "bad line from the peer: %s", err.message);
        fail(link, why);
        return;
    }
    if (m.type == RING_MSG_ERROR) {
        char text_q[300];
        log_warn(COMPONENT, "peer reports an error", "peer=%s error=%s", link->addr,
                 log_quote(text_q, sizeof(text_q), m.error.text));
        if (link->state == HANDSHAKE) {
            char why[400];
            snprintf(why, sizeof(why), "the peer refused the handshake: %.300s", m.error.text);
            fail(link, why);
        }
        return;
    }
    if (link->state == CONNECTED) {
        /* PONG (or anything newer than this version): the peer is alive */
        link->awaiting_pong = false;
        arm(link, link->cfg.ping_interval_ms);
        return;
    }
    if (!link->got_version) {
        if (m.type != RING_MSG_VERSION || m.version.major != RING_VERSION_MAJOR) {
            fail(link, "the peer does not speak petrel-ring 1");
            return;
        }
        link->got_version = true;
        if (link->secret[0] != '\0')
            authenticate(link, &m);
        return;
    }
    if (link->awaiting_auth_ok) {
        if (m.type != RING_MSG_AUTH_OK) {
            log_warn(COMPONENT, "peer failed authentication",
                     "peer=%s reason=\"it sent %s instead of AUTH-OK\"", link->addr,
                     ring_msg_verb(m.type));
            fail(link, "AUTH-OK expected from the peer");
            return;
        }
        if (!ring_auth_check(link->secret, strlen(link->secret), RING_AUTH_SERVER, link->peer_nonce,
                             link->nonce, m.auth_ok.proof)) {
            log_warn(COMPONENT, "peer failed authentication",
                     "peer=%s reason=\"its AUTH-OK proof does not match our ring secret\"",
                     link->addr);
            fail(link, "the peer's proof does not match the ring secret");
            return;
        }
        link->awaiting_auth_ok = false;
        return;
    }
    if (m.type == RING_MSG_HOST || m.type == RING_MSG_USER) {
        if (link->cb.handshake_line != NULL)
            link->cb.handshake_line(link, &m, link->cb.ctx);
        return;
    }
    if (m.type != RING_MSG_DONE) {
        fail(link, "unexpected line in the peer's handshake");
        return;
    }
    link->state = CONNECTED;
    link->awaiting_pong = false;
    arm(link, link->cfg.ping_interval_ms);
    link->since_ms = clock_real_ms();
    net_backoff_reset(&link->backoff);
    log_info(COMPONENT, "peer link connected", "peer=%s", link->addr);
    if (link->cb.connected != NULL)
        link->cb.connected(link, link->cb.ctx);
}

static void read_cb(struct bufferevent *bev, void *ctx)
{
    struct director_link *link = ctx;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (link->bev == bev) {
        enum evbuffer_line_result r =
            evbuffer_line_take(in, EVBUFFER_EOL_LF, link->cfg.max_line, &link->line);
        if (r != EVBUFFER_LINE_OK) {
            if (r == EVBUFFER_LINE_TOO_LONG)
                fail(link, "line too long");
            return;
        }
        handle_line(link, link->line.data, link->line.len); /* may fail(): bev gone */
    }
}

static void event_cb(struct bufferevent *bev, short what, void *ctx)
{
    (void)bev;
    struct director_link *link = ctx;
    if (what & BEV_EVENT_CONNECTED) {
        link->state = HANDSHAKE;
        ring_write_version(&link->out);
        if (link->secret[0] == '\0') {
            send_hello(link); /* anonymous: the peer must allow it */
        } else {
            /* AUTH and HELLO follow the peer's VERSION (its challenge) */
            bufferevent_write(link->bev, link->out.data, link->out.len);
            buf_reset(&link->out);
        }
        return;
    }
    if (what & BEV_EVENT_EOF)
        fail(link, "connection closed by the peer");
    else if (what & BEV_EVENT_ERROR)
        fail(link, link->state != CONNECTING                ? "connection error"
                   : net_dialer_error(link->dialer) != NULL ? net_dialer_error(link->dialer)
                                                            : "cannot connect");
}

static void dial(struct director_link *link)
{
    if (link->dialer == NULL) {
        fail(link, link->addr_error);
        return;
    }
    link->bev = bufferevent_socket_new(link->base, -1, BEV_OPT_CLOSE_ON_FREE);
    link->got_version = false;
    link->awaiting_auth_ok = false;
    link->state = CONNECTING;
    bufferevent_setcb(link->bev, read_cb, NULL, event_cb, link);
    bufferevent_enable(link->bev, EV_READ | EV_WRITE);
    arm(link, link->cfg.handshake_timeout_ms);
    if (!net_dialer_connect(link->dialer, link->bev))
        fail(link, net_dialer_error(link->dialer) != NULL ? net_dialer_error(link->dialer)
                                                          : "cannot connect");
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct director_link *link = arg;
    if (link->state == WAIT_RETRY) {
        dial(link);
    } else if (link->state != CONNECTED) {
        fail(link, "connect or handshake timed out");
    } else if (link->awaiting_pong) {
        fail(link, "no answer to PING");
    } else {
        static const char ping[] = "PING\tkeepalive\n";
        link->awaiting_pong = true;
        bufferevent_write(link->bev, ping, sizeof(ping) - 1);
        arm(link, link->cfg.handshake_timeout_ms);
    }
}

struct director_link *director_link_new(struct event_base *base, const char *addr,
                                        const struct director_link_config *cfg,
                                        const struct director_link_callbacks *cb)
{
    struct director_link *link = xcalloc(1, sizeof(*link));
    link->base = base;
    link->cfg = *cfg;
    link->self = xstrdup(cfg->self);
    link->cfg.self = link->self;
    link->secret = xstrdup(cfg->secret != NULL ? cfg->secret : "");
    link->cfg.secret = link->secret;
    link->cb = *cb;
    snprintf(link->addr, sizeof(link->addr), "%s", addr);
    struct net_endpoint ep;
    struct petrel_error err;
    if (net_endpoint_parse(link->addr, NET_ENDPOINT_PORT_NONZERO, 0, &ep, &err))
        link->dialer = net_dialer_new(base, &ep);
    else
        snprintf(link->addr_error, sizeof(link->addr_error), "%.120s", err.message);
    link->timer = evtimer_new(base, timer_cb, link);
    net_backoff_init(&link->backoff, cfg->reconnect_min_ms, cfg->reconnect_max_ms);
    link->state = WAIT_RETRY;
    arm(link, 0);
    return link;
}

void director_link_free(struct director_link *link)
{
    if (link == NULL)
        return;
    close_conn(link);
    net_dialer_free(link->dialer);
    event_free(link->timer);
    buf_free(&link->line);
    buf_free(&link->out);
    free(link->self);
    ring_secret_free(link->secret);
    free(link);
}

const char *director_link_addr(const struct director_link *link)
{
    return link->addr;
}

bool director_link_connected(const struct director_link *link)
{
    return link->state == CONNECTED;
}

int64_t director_link_since_ms(const struct director_link *link)
{
    return link->since_ms;
}

void director_link_send(struct director_link *link, const char *data, size_t len)
{
    if (link->state != CONNECTED)
        return;
    bufferevent_write(link->bev, data, len);
    if (evbuffer_get_length(bufferevent_get_output(link->bev)) > link->cfg.max_output)
        fail(link, "the peer does not read what this director forwards");
}
