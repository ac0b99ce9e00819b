/* One backend transaction of the LMTP front: the connection (plain or
 * TLS), its set-up with retries, the lines fed to the dialogue
 * (lmtp-proxy-client.h) and the message streamed from the spool with
 * back-pressure: at most LMTP_PROXY_OUT_HIGH bytes wait for a slow backend,
 * read from the spool file only as the backend takes them. */
#include "protocols/lmtp/lmtp-proxy-private.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/dial.h"
#include "net/endpoint.h"
#include "net/evbuffer-line.h"
#include "net/tls-conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LMTP_PROXY_OUT_HIGH (256 * 1024) /* message bytes queued for a backend at most */
#define LMTP_PROXY_CHUNK (64 * 1024)     /* spool bytes read per step */

static void read_cb(struct bufferevent *bev, void *arg);
static void write_cb(struct bufferevent *bev, void *arg);
static void event_cb(struct bufferevent *bev, short what, void *arg);
static void attempt(struct lmtp_proxy_backend *b);
static void send_out(struct lmtp_proxy_backend *b, struct buf *out);

static const struct login_metrics *metrics(const struct lmtp_proxy_backend *b)
{
    return &b->t->p->m;
}

static void arm(struct lmtp_proxy_backend *b, int64_t ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    evtimer_add(b->timer, &tv);
}

static void drop_connection(struct lmtp_proxy_backend *b)
{
    if (b->dialer != NULL)
        net_dialer_cancel(b->dialer);
    tls_handshake_deadline_free(b->handshake);
    b->handshake = NULL;
    if (b->bev != NULL)
        bufferevent_free(b->bev);
    b->bev = NULL;
    lmtp_proxy_client_free(b->dlg);
    b->dlg = NULL;
    b->connected = false;
    b->sending = false;
}

static void log_fail(const struct lmtp_proxy_backend *b, const char *what, const char *why)
{
    char q[400];
    log_quote(q, sizeof(q), why);
    log_warn(LMTP_PROXY_COMPONENT, what, "session=%s backend=%s:%u attempt=%d error=%s",
             b->t->s->id, b->ip, b->port, b->attempts, q);
}

/* The connection broke after the set-up: what is outstanding fails. */
static void lost(struct lmtp_proxy_backend *b, const char *why)
{
    log_fail(b, "backend connection lost", why);
    drop_connection(b);
    evtimer_del(b->timer);
    snprintf(b->fail, sizeof(b->fail), "451 4.4.2 Backend connection lost, try again later");
    b->fail_has_code = true;
    bool in_data = b->state == LMTP_PROXY_B_DATA;
    b->state = LMTP_PROXY_B_FAILED;
    if (in_data)
        lmtp_proxy_txn_backend_done(b->t, b);
    else
        lmtp_proxy_txn_backend_failed(b->t, b);
}

/* A set-up attempt failed: another after LMTP_PROXY_RETRY_MS, or the
 * recipients get 451 once login.transient_retries are used up. */
static void setup_failed(struct lmtp_proxy_backend *b, const char *why)
{
    log_fail(b, "backend set-up failed", why);
    drop_connection(b);
    evtimer_del(b->timer);
    int retries = b->t->p->deps.transient_retries;
    if (retries >= 0 && b->attempts <= retries) {
        login_metrics_retry(metrics(b), LOGIN_STAGE_BACKEND_SESSION);
        b->state = LMTP_PROXY_B_RETRY;
        arm(b, LMTP_PROXY_RETRY_MS);
        return;
    }
    if (retries >= 0)
        login_metrics_exhausted(metrics(b), LOGIN_STAGE_BACKEND_SESSION);
    snprintf(b->fail, sizeof(b->fail), "451 4.4.1 Backend unavailable, try again later");
    b->fail_has_code = true;
    b->state = LMTP_PROXY_B_FAILED;
    lmtp_proxy_txn_backend_failed(b->t, b);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct lmtp_proxy_backend *b = arg;
    switch (b->state) {
    case LMTP_PROXY_B_RETRY:
        attempt(b);
        break;
    case LMTP_PROXY_B_SETUP:
        setup_failed(b, b->bev == NULL ? "dial failed"
                        : b->connected ? "no answer in backend_timeout"
                                       : "connect timed out");
        break;
    case LMTP_PROXY_B_RCPT:
    case LMTP_PROXY_B_DATA:
        lost(b, "no answer in backend_timeout");
        break;
    default:
        break;
    }
}

/* TLS to the backend did not finish its handshake in time. */
static void handshake_expired(void *arg)
{
    struct lmtp_proxy_backend *b = arg;
    tls_handshake_deadline_free(b->handshake);
    b->handshake = NULL;
    setup_failed(b, "TLS handshake timed out");
}

static void attempt(struct lmtp_proxy_backend *b)
{
    struct lmtp_proxy *p = b->t->p;
    b->attempts++;
    b->state = LMTP_PROXY_B_SETUP;
    b->t0_us = clock_mono_us();
    struct lmtp_session *s = b->t->s;
    struct lmtp_proxy_client_params params = {
        .helo = lmtp_server_context(p->srv)->hostname,
        .sender = s->sender != NULL ? s->sender : "",
        .body_8bit = s->body_8bit,
        .smtputf8 = s->smtputf8,
        /* LMTP has no implicit-TLS port: TLS to a backend is STARTTLS
         * (Petrel's and Dovecot's LMTP offer it), required once set. */
        .starttls = p->deps.backend_tls != NULL,
    };
    mail_forward_init(&params.client);
    unsigned char bin[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, s->peer_ip, bin) == 1 || inet_pton(AF_INET6, s->peer_ip, bin) == 1) {
        /* A client on the Unix socket has no address to pass on. */
        snprintf(params.client.ip, sizeof(params.client.ip), "%s", s->peer_ip);
        params.client.port = s->peer_port;
    }
    snprintf(params.client.session, sizeof(params.client.session), "%s", s->id);
    params.client.ttl = 5; /* Dovecot's proxy_ttl: a loop of proxies ends */
    b->dlg = lmtp_proxy_client_new(&params);
    b->bev = bufferevent_socket_new(p->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (b->bev == NULL) {
        setup_failed(b, "cannot make a connection");
        return;
    }
    bufferevent_setcb(b->bev, read_cb, write_cb, event_cb, b);
    arm(b, p->deps.backend_timeout_ms);
    if (!net_dialer_connect(b->dialer, b->bev)) {
        const char *why = net_dialer_error(b->dialer);
        /* From the loop: the caller may be in the middle of its own step. */
        b->state = LMTP_PROXY_B_SETUP;
        drop_connection(b);
        log_fail(b, "backend dial failed", why != NULL ? why : strerror(errno));
        arm(b, 0);
        return;
    }
}

/* The backend said 220 to STARTTLS: TLS over the connection, checked
 * against login.backend_tls_ca_file for the backend's address. */
static void start_tls(struct lmtp_proxy_backend *b)
{
    struct lmtp_proxy *p = b->t->p;
    struct bufferevent *tls = tls_conn_starttls_client(b->bev, p->deps.backend_tls, b->ip);
    if (tls == NULL) {
        setup_failed(b, "cannot start TLS");
        return;
    }
    b->bev = tls;
    bufferevent_setcb(tls, read_cb, write_cb, event_cb, b);
    bufferevent_setwatermark(tls, EV_WRITE, LMTP_PROXY_OUT_HIGH / 4, 0);
    bufferevent_enable(tls, EV_READ | EV_WRITE);
    b->handshake =
        tls_handshake_deadline_new(tls, p->deps.backend_timeout_ms, handshake_expired, b);
    struct buf out = {0};
    lmtp_proxy_client_tls_started(b->dlg, &out);
    send_out(b, &out);
    buf_free(&out);
}

struct lmtp_proxy_backend *lmtp_proxy_backend_new(struct lmtp_proxy_txn *t, const char *ip,
                                                  unsigned port)
{
    struct lmtp_proxy_backend *b = xcalloc(1, sizeof(*b));
    b->t = t;
    snprintf(b->ip, sizeof(b->ip), "%s", ip);
    b->port = port;
    struct net_endpoint ep;
    struct petrel_error err;
    char addr[96];
    snprintf(addr, sizeof(addr), strchr(ip, ':') != NULL ? "[%s]:%u" : "%s:%u", ip, port);
    b->timer = evtimer_new(t->p->base, timer_cb, b);
    if (!net_endpoint_parse(addr, NET_ENDPOINT_NAME_REJECT | NET_ENDPOINT_PORT_NONZERO, 0, &ep,
                            &err)) {
        /* The director answered something that is no address: not worth
         * retrying. */
        log_fail(b, "bad backend address", err.message);
        snprintf(b->fail, sizeof(b->fail), "451 4.4.0 Bad backend address, try again later");
        b->fail_has_code = true;
        b->state = LMTP_PROXY_B_FAILED;
        return b;
    }
    b->dialer = net_dialer_new(t->p->base, &ep);
    attempt(b);
    return b;
}

void lmtp_proxy_backend_free(struct lmtp_proxy_backend *b)
{
    if (b == NULL)
        return;
    drop_connection(b);
    net_dialer_free(b->dialer);
    event_free(b->timer);
    for (size_t i = 0; i < b->result_count; i++)
        free(b->results[i]);
    free(b->results);
    free(b);
}

static void send_out(struct lmtp_proxy_backend *b, struct buf *out)
{
    if (out->len > 0)
        bufferevent_write(b->bev, out->data, out->len);
    buf_reset(out);
}

void lmtp_proxy_backend_rcpt(struct lmtp_proxy_backend *b, const char *address)
{
    struct buf out = {0};
    if (b->state != LMTP_PROXY_B_READY || !lmtp_proxy_client_rcpt(b->dlg, address, &out)) {
        buf_free(&out);
        lost(b, "RCPT out of order");
        return;
    }
    b->state = LMTP_PROXY_B_RCPT;
    send_out(b, &out);
    buf_free(&out);
    arm(b, b->t->p->deps.backend_timeout_ms);
}

void lmtp_proxy_backend_data(struct lmtp_proxy_backend *b)
{
    struct buf out = {0};
    b->accepted = lmtp_proxy_client_accepted(b->dlg);
    b->results = xcalloc(b->accepted > 0 ? b->accepted : 1, sizeof(char *));
    /* From here on every end of this backend counts the transaction down. */
    b->state = LMTP_PROXY_B_DATA;
    if (!lmtp_proxy_client_data(b->dlg, &out)) {
        buf_free(&out);
        lost(b, "DATA out of order");
        return;
    }
    send_out(b, &out);
    buf_free(&out);
    arm(b, b->t->p->deps.backend_timeout_ms);
}

/* Puts more of the message into the backend's output, up to the high mark;
 * the write callback calls again as it drains. */
static void pump(struct lmtp_proxy_backend *b)
{
    const struct lmtp_spool *sp = &b->t->s->message;
    struct evbuffer *output = bufferevent_get_output(b->bev);
    struct buf chunk = {0};
    struct buf enc = {0};
    uint64_t total = sp->fd >= 0 ? sp->filed : sp->mem.len;
    while (b->sending && evbuffer_get_length(output) < LMTP_PROXY_OUT_HIGH) {
        if (b->offset >= total) {
            lmtp_data_encode_end(&b->enc, &enc);
            bufferevent_write(b->bev, enc.data, enc.len);
            b->sending = false;
            lmtp_proxy_client_data_sent(b->dlg);
            break;
        }
        size_t want =
            total - b->offset < LMTP_PROXY_CHUNK ? (size_t)(total - b->offset) : LMTP_PROXY_CHUNK;
        const char *data;
        if (sp->fd >= 0) {
            buf_reserve(&chunk, want);
            ssize_t n = pread(sp->fd, chunk.data, want, (off_t)b->offset);
            if (n <= 0) {
                buf_free(&chunk);
                buf_free(&enc);
                lost(b, n < 0 ? strerror(errno) : "spool file shorter than the message");
                return;
            }
            want = (size_t)n;
            data = chunk.data;
        } else {
            data = sp->mem.data + b->offset;
        }
        buf_reset(&enc);
        lmtp_data_encode(&b->enc, data, want, &enc);
        bufferevent_write(b->bev, enc.data, enc.len);
        b->offset += want;
    }
    buf_free(&chunk);
    buf_free(&enc);
    /* While the message goes out the deadline is for the backend taking
     * bytes; after it, for its answers. */
    arm(b, b->t->p->deps.backend_timeout_ms);
}

static void handle(struct lmtp_proxy_backend *b, const struct lmtp_proxy_client_result *r)
{
    struct lmtp_proxy_txn *t = b->t;
    const struct login_metrics *m = metrics(b);
    char line[LMTP_PROXY_CLIENT_LINE_MAX + 8];
    switch (r->event) {
    case LMTP_PROXY_CLIENT_CONTINUE:
        return;
    case LMTP_PROXY_CLIENT_READY:
        evtimer_del(b->timer);
        login_metrics_phase(m, LOGIN_PHASE_BACKEND_PREAMBLE, b->t0_us);
        b->state = LMTP_PROXY_B_READY;
        lmtp_proxy_txn_backend_ready(t, b);
        return;
    case LMTP_PROXY_CLIENT_SETUP_FAILED:
        if (r->mail_stage && r->code / 100 == 5) {
            /* The backend refuses the sender for good: its answer is the
             * answer for every recipient it would have had. */
            evtimer_del(b->timer);
            snprintf(b->fail, sizeof(b->fail), "%d %s", r->code, r->text);
            b->fail_has_code = true;
            drop_connection(b);
            b->state = LMTP_PROXY_B_FAILED;
            lmtp_proxy_txn_backend_failed(t, b);
            return;
        }
        snprintf(line, sizeof(line), "%d %s", r->code, r->text);
        setup_failed(b, line);
        return;
    case LMTP_PROXY_CLIENT_STARTTLS:
        start_tls(b);
        return;
    case LMTP_PROXY_CLIENT_RCPT:
        evtimer_del(b->timer);
        b->state = LMTP_PROXY_B_READY;
        snprintf(line, sizeof(line), "%d %s", r->code, r->text);
        lmtp_proxy_txn_backend_rcpt(t, b, r->code, line);
        return;
    case LMTP_PROXY_CLIENT_DATA_GO:
        lmtp_data_encoder_init(&b->enc);
        b->offset = 0;
        b->sending = true;
        pump(b);
        return;
    case LMTP_PROXY_CLIENT_DATA_REFUSED:
        evtimer_del(b->timer);
        snprintf(b->fail, sizeof(b->fail), "%d %s", r->code, r->text);
        b->fail_has_code = true;
        b->state = LMTP_PROXY_B_FAILED;
        drop_connection(b);
        lmtp_proxy_txn_backend_done(t, b);
        return;
    case LMTP_PROXY_CLIENT_RESULT:
        snprintf(line, sizeof(line), "%d %s", r->code, r->text);
        if (b->result_count < b->accepted)
            b->results[b->result_count++] = xstrdup(line);
        if (r->done) {
            evtimer_del(b->timer);
            b->state = LMTP_PROXY_B_DONE;
            lmtp_proxy_txn_backend_done(t, b);
        } else {
            arm(b, b->t->p->deps.backend_timeout_ms);
        }
        return;
    case LMTP_PROXY_CLIENT_PROTOCOL:
        if (b->state == LMTP_PROXY_B_SETUP)
            setup_failed(b, r->text);
        else
            lost(b, r->text);
        return;
    }
}

static void read_cb(struct bufferevent *bev, void *arg)
{
    struct lmtp_proxy_backend *b = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct buf line = {0};
    struct buf out = {0};
    /* Each step may end the connection (or hand the transaction back,
     * which frees nothing here: the session's answers go from the loop). */
    while (b->bev == bev) {
        enum evbuffer_line_result lr =
            evbuffer_line_take(in, EVBUFFER_EOL_LF, LMTP_PROXY_CLIENT_LINE_MAX + 1, &line);
        if (lr == EVBUFFER_LINE_NONE)
            break;
        struct lmtp_proxy_client_result r;
        if (lr == EVBUFFER_LINE_TOO_LONG) {
            r.event = LMTP_PROXY_CLIENT_PROTOCOL;
            r.text = "reply line too long";
            r.code = 0;
        } else {
            lmtp_proxy_client_line(b->dlg, line.data, line.len, &out, &r);
            send_out(b, &out);
        }
        /* The transaction answers its client from the loop only
         * (lmtp-proxy.c), so `b` outlives this step. */
        enum lmtp_proxy_backend_state was = b->state;
        handle(b, &r);
        if (b->state != was && (b->state == LMTP_PROXY_B_DONE || b->state == LMTP_PROXY_B_FAILED))
            break;
    }
    buf_free(&line);
    buf_free(&out);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct lmtp_proxy_backend *b = arg;
    if (b->sending)
        pump(b);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct lmtp_proxy_backend *b = arg;
    if (what & BEV_EVENT_CONNECTED) {
        if (b->connected) { /* the TLS handshake after STARTTLS */
            tls_handshake_deadline_free(b->handshake);
            b->handshake = NULL;
            return;
        }
        b->connected = true;
        login_metrics_phase(metrics(b), LOGIN_PHASE_BACKEND_DIAL, b->t0_us);
        b->t0_us = clock_mono_us();
        tls_handshake_deadline_free(b->handshake);
        b->handshake = NULL;
        bufferevent_setwatermark(b->bev, EV_WRITE, LMTP_PROXY_OUT_HIGH / 4, 0);
        bufferevent_enable(b->bev, EV_READ | EV_WRITE);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        char why[256] = "connection closed";
        if (what & BEV_EVENT_ERROR) {
            char tls[200] = "";
            if (b->handshake != NULL || tls_conn_established(b->bev))
                tls_conn_error(b->bev, tls, sizeof(tls));
            const char *dial = net_dialer_error(b->dialer);
            snprintf(why, sizeof(why), "%s",
                     tls[0] != '\0' ? tls
                     : dial != NULL ? dial
                                    : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        }
        if (b->state == LMTP_PROXY_B_SETUP)
            setup_failed(b, why);
        else if (b->state != LMTP_PROXY_B_DONE && b->state != LMTP_PROXY_B_FAILED)
            lost(b, why);
    }
}
