/* Asynchronous probes (monitor-probe.h): a bufferevent (plain or OpenSSL)
 * carrying a monitor_dialog, one deadline timer that also delivers
 * failures found while starting, so the callback never runs inside
 * monitor_probe_start(). */
#include "services/monitor/monitor-probe.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/xalloc.h"
#include "net/evbuffer-line.h"
#include "net/tls.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct monitor_probe {
    struct bufferevent *bev;
    struct event *timer; /* the deadline; also fires early failures */
    struct monitor_dialog dialog;
    char *user;
    char *password;
    size_t max_line;
    SSL_CTX *tls;       /* borrowed; NULL: plain */
    char *tls_host;     /* expected IP in the certificate (verifying contexts) */
    bool tcp_connected; /* the TCP connect completed */
    bool connected;     /* ... and the TLS handshake, when there is one */
    bool early;         /* a start-up failure waits in early_result */
    enum monitor_result early_result;
    struct timespec started;
    double decided_after; /* seconds to the verdict, < 0 until decided */
    struct buf line;
    struct buf out;
    monitor_probe_cb *cb;
    void *ctx;
};

static void wipe(char *s)
{
    if (s == NULL)
        return;
    volatile char *p = s;
    while (*p != '\0')
        *p++ = '\0';
}

static void probe_free(struct monitor_probe *p)
{
    if (p->bev != NULL)
        bufferevent_free(p->bev);
    if (p->timer != NULL)
        event_free(p->timer);
    free(p->user);
    free(p->tls_host);
    wipe(p->password);
    free(p->password);
    /* The output may hold the LOGIN or PASS line. */
    if (p->out.data != NULL)
        memset(p->out.data, 0, p->out.cap);
    buf_free(&p->out);
    buf_free(&p->line);
    free(p);
}

static void finish(struct monitor_probe *p, enum monitor_result result)
{
    if (p->bev != NULL) {
        bufferevent_free(p->bev);
        p->bev = NULL;
    }
    struct monitor_probe_outcome o = {
        .proto = p->dialog.proto,
        .result = result,
        .seconds = p->decided_after >= 0 ? p->decided_after : clock_seconds_since(&p->started),
        .detail = result == MONITOR_RESULT_OK ? "" : p->dialog.detail,
    };
    p->cb(&o, p->ctx);
    probe_free(p);
}

static void note_decision(struct monitor_probe *p)
{
    if (p->dialog.decided && p->decided_after < 0)
        p->decided_after = clock_seconds_since(&p->started);
}

/* Sets the verdict of a failure found outside the conversation. */
static enum monitor_result fail_with(struct monitor_probe *p, enum monitor_result r,
                                     const char *detail)
{
    if (!p->dialog.decided) {
        p->dialog.decided = true;
        p->dialog.verdict = r;
        snprintf(p->dialog.detail, sizeof(p->dialog.detail), "%s", detail);
    }
    return p->dialog.verdict;
}

/* Runs every complete line through the dialog. Returns true when the probe
 * was finished (and freed). */
static bool process_lines(struct monitor_probe *p)
{
    struct evbuffer *in = bufferevent_get_input(p->bev);
    for (;;) {
        enum evbuffer_line_result r =
            evbuffer_line_take(in, EVBUFFER_EOL_CRLF, p->max_line, &p->line);
        if (r == EVBUFFER_LINE_NONE)
            return false;
        if (r == EVBUFFER_LINE_TOO_LONG) {
            char msg[96];
            snprintf(msg, sizeof(msg), "reply line longer than %zu bytes", p->max_line);
            finish(p, fail_with(p, MONITOR_RESULT_PROTOCOL_ERROR, msg));
            return true;
        }
        size_t len = p->line.len;
        enum monitor_dialog_action a = monitor_dialog_line(&p->dialog, p->line.data, len, &p->out);
        note_decision(p);
        if (p->out.len > 0) {
            bufferevent_write(p->bev, p->out.data, p->out.len);
            memset(p->out.data, 0, p->out.len);
            buf_reset(&p->out);
        }
        if (a == MONITOR_DIALOG_FINISH) {
            finish(p, p->dialog.verdict);
            return true;
        }
    }
}

static void read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    process_lines(arg);
}

static void event_cb(struct bufferevent *bev, short what, void *arg);

/* TCP is up: for TLS, a filter bufferevent takes over the connection and
 * runs the handshake; its own CONNECTED event follows. False when the TLS
 * session cannot be set up (the probe is then finished). */
static bool start_tls(struct monitor_probe *p)
{
    SSL *ssl = SSL_new(p->tls);
    if (ssl == NULL) {
        ERR_clear_error();
        finish(p, fail_with(p, MONITOR_RESULT_TLS_ERROR, "cannot create a TLS session"));
        return false;
    }
    if ((SSL_CTX_get_verify_mode(p->tls) & SSL_VERIFY_PEER) && p->tls_host != NULL)
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), p->tls_host);
    struct bufferevent *filter = bufferevent_openssl_filter_new(
        bufferevent_get_base(p->bev), p->bev, ssl, BUFFEREVENT_SSL_CONNECTING,
        BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (filter == NULL) { /* libevent freed the SSL (BEV_OPT_CLOSE_ON_FREE) */
        finish(p, fail_with(p, MONITOR_RESULT_TLS_ERROR, "cannot start TLS"));
        return false;
    }
    bufferevent_openssl_set_allow_dirty_shutdown(filter, 1);
    p->bev = filter; /* owns the socket bufferevent now */
    bufferevent_setcb(filter, read_cb, NULL, event_cb, p);
    bufferevent_enable(filter, EV_READ | EV_WRITE);
    return true;
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct monitor_probe *p = arg;
    if (what & BEV_EVENT_CONNECTED) {
        if (!p->tcp_connected) {
            p->tcp_connected = true;
            if (p->tls != NULL) {
                start_tls(p);
                return;
            }
        }
        p->connected = true;
        return;
    }
    char msg[200];
    if (!p->tcp_connected) {
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(msg, sizeof(msg), "connect failed: %s",
                 e != 0 ? evutil_socket_error_to_string(e) : "connection closed");
        finish(p, fail_with(p, MONITOR_RESULT_CONNECT_ERROR, msg));
        return;
    }
    unsigned long ssl_err = p->tls != NULL ? bufferevent_get_openssl_error(bev) : 0;
    if (!p->connected) { /* during the TLS handshake */
        if (ssl_err != 0) {
            char reason[160];
            ERR_error_string_n(ssl_err, reason, sizeof(reason));
            snprintf(msg, sizeof(msg), "TLS handshake: %s", reason);
        } else {
            snprintf(msg, sizeof(msg), "connection closed during the TLS handshake");
        }
        ERR_clear_error();
        finish(p, fail_with(p, MONITOR_RESULT_TLS_ERROR, msg));
        return;
    }
    if (what & BEV_EVENT_EOF) {
        if (process_lines(p))
            return;
        finish(p, monitor_dialog_closed(&p->dialog));
        return;
    }
    /* BEV_EVENT_ERROR on an established connection */
    int e = EVUTIL_SOCKET_ERROR();
    if (ssl_err != 0) {
        char reason[160];
        ERR_error_string_n(ssl_err, reason, sizeof(reason));
        snprintf(msg, sizeof(msg), "TLS: %s", reason);
        ERR_clear_error();
    } else {
        snprintf(msg, sizeof(msg), "connection failed: %s",
                 e != 0 ? evutil_socket_error_to_string(e) : "error");
    }
    finish(p, fail_with(p, MONITOR_RESULT_CLOSED, msg));
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct monitor_probe *p = arg;
    if (p->early) {
        finish(p, p->early_result);
        return;
    }
    if (!p->connected && !p->dialog.decided)
        fail_with(p, MONITOR_RESULT_TIMEOUT,
                  p->tcp_connected ? "no TLS handshake in time" : "no connection in time");
    finish(p, monitor_dialog_timed_out(&p->dialog));
}

static void fail_early(struct monitor_probe *p, enum monitor_result r, const char *detail)
{
    fail_with(p, r, detail);
    p->early = true;
    p->early_result = r;
    if (p->bev != NULL) {
        bufferevent_free(p->bev);
        p->bev = NULL;
    }
    event_del(p->timer);
    event_active(p->timer, EV_TIMEOUT, 1);
}

struct monitor_probe *monitor_probe_start(struct event_base *base,
                                          const struct monitor_probe_params *params,
                                          monitor_probe_cb *cb, void *ctx)
{
    struct monitor_probe *p = xcalloc(1, sizeof(*p));
    p->cb = cb;
    p->ctx = ctx;
    p->max_line = params->max_line;
    p->decided_after = -1;
    if (params->user != NULL) {
        p->user = xstrdup(params->user);
        p->password = xstrdup(params->password != NULL ? params->password : "");
    }
    monitor_dialog_init(&p->dialog, params->proto, p->user, p->password);
    p->started = clock_mono_now();
    p->timer = evtimer_new(base, timer_cb, p);
    if (p->timer == NULL)
        petrel_fatal("out of memory creating a probe timer");
    struct timeval tv = clock_ms_to_timeval(params->timeout_ms);
    evtimer_add(p->timer, &tv);

    p->tls = params->tls;
    if (params->tls_host != NULL)
        p->tls_host = xstrdup(params->tls_host);
    /* TCP first; TLS starts on top of it once connected (start_tls), so a
     * refused connect and a failed handshake are told apart. */
    p->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (p->bev == NULL) {
        fail_early(p, MONITOR_RESULT_CONNECT_ERROR, "cannot create a socket");
        return p;
    }
    bufferevent_setcb(p->bev, read_cb, NULL, event_cb, p);
    bufferevent_enable(p->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(p->bev, (struct sockaddr *)params->addr, (int)params->addr_len) <
        0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "connect failed: %s", strerror(errno));
        fail_early(p, MONITOR_RESULT_CONNECT_ERROR, msg);
    }
    return p;
}

void monitor_probe_cancel(struct monitor_probe *probe)
{
    if (probe != NULL)
        probe_free(probe);
}

SSL_CTX *monitor_probe_tls_ctx(const char *ca_file, struct petrel_error *err)
{
    if (ca_file != NULL && *ca_file != '\0')
        return tls_client_ctx_new(ca_file, NULL, NULL, err);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        ERR_clear_error();
        petrel_error_set(err, PETREL_ERR_IO, "cannot create a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    return ctx;
}
