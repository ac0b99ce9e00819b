/* One LMTP client connection: greeting, command lines and the DATA stream
 * read off the socket, replies, timeouts, STARTTLS, shutdown and the
 * deferred free. What each command does is in lmtp-commands.c. */
#include "protocols/lmtp/lmtp-private.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/linger.h"
#include "net/sockaddr.h"
#include "net/tls-conn.h"

#include <event2/buffer.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LMTP_DATA_CHUNK 65536      /* DATA bytes decoded per step */
/* Replies waiting for a client that does not read: past this, commands are
 * not read either (a pipelining client that never reads cannot make the
 * server queue replies without bound); reading resumes once it is drained
 * to half. */
#define LMTP_OUTPUT_MAX (64 * 1024)

#include <netinet/in.h>

static void session_read_cb(struct bufferevent *bev, void *arg);
static void session_write_cb(struct bufferevent *bev, void *arg);
static void session_event_cb(struct bufferevent *bev, short what, void *arg);

/* ---------- output ---------- */

static void send_raw(struct lmtp_session *s, const void *data, size_t len)
{
    bufferevent_write(s->bev, data, len);
    metric_add(lmtp_server_context(s->server)->m.bytes_out, (double)len);
}

static void reply_v(struct lmtp_session *s, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void reply_v(struct lmtp_session *s, const char *fmt, va_list ap)
{
    struct buf line = {0};
    buf_vprintf(&line, fmt, ap);
    buf_append_str(&line, "\r\n");
    send_raw(s, line.data, line.len);
    buf_free(&line);
}

void lmtp_reply(struct lmtp_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_v(s, fmt, ap);
    va_end(ap);
}

static void count_error(struct lmtp_session *s);

void lmtp_reply_client_error(struct lmtp_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_v(s, fmt, ap);
    va_end(ap);
    count_error(s);
}

void lmtp_reply_lines(struct lmtp_session *s, int code, const char *const *lines, size_t n)
{
    struct buf out = {0};
    for (size_t i = 0; i < n; i++)
        buf_printf(&out, "%d%c%s\r\n", code, i + 1 < n ? '-' : ' ', lines[i]);
    send_raw(s, out.data, out.len);
    buf_free(&out);
}

/* ---------- life cycle ---------- */

static void set_timeout(struct lmtp_session *s)
{
    int64_t ms = lmtp_server_context(s->server)->cfg->command_timeout_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    bufferevent_set_timeouts(s->bev, &tv, NULL);
}

static void linger_done(void *arg)
{
    lmtp_session_free(arg);
}

void lmtp_session_close_after_output(struct lmtp_session *s)
{
    if (s->closing)
        return;
    s->closing = true;
    bufferevent_disable(s->bev, EV_READ);
    s->linger = net_linger_start(s->bev, NULL, linger_done, s);
}

void lmtp_session_shutdown(struct lmtp_session *s)
{
    if (s->closing)
        return;
    s->stopping = true;
    if (s->busy || s->in_data)
        return; /* after the transaction (lmtp_session_resume) */
    lmtp_reply(s, "421 4.3.2 %s Service shutting down", lmtp_server_context(s->server)->hostname);
    lmtp_session_close_after_output(s);
}

void lmtp_session_reset_transaction(struct lmtp_session *s)
{
    const struct lmtp_server_ctx *ctx = lmtp_server_context(s->server);
    if (ctx->front != NULL)
        ctx->front->reset(ctx->front_arg, s);
    s->body_8bit = false;
    s->has_mail = false;
    free(s->sender);
    s->sender = NULL;
    s->smtputf8 = false;
    for (size_t i = 0; i < s->rcpt_count; i++) {
        lmtp_recipient_name_free(&s->rcpts[i].name);
        free(s->rcpts[i].username);
        for (size_t k = 0; s->rcpts[i].quota_rule != NULL && s->rcpts[i].quota_rule[k] != NULL; k++)
            free(s->rcpts[i].quota_rule[k]);
        free(s->rcpts[i].quota_rule);
    }
    s->rcpt_count = 0;
    s->in_data = false;
    lmtp_spool_free(&s->message);
}

void lmtp_session_free(struct lmtp_session *s)
{
    if (s->auth_req != NULL)
        auth_client_cancel(s->auth_req);
    lmtp_recipient_name_free(&s->pending);
    /* A delivery still running finishes without us (and is not answered). */
    lmtp_server_detach_job(s->job);
    lmtp_session_reset_transaction(s);
    free(s->rcpts);
    free(s->helo);
    log_debug(LMTP_COMPONENT, "disconnected", "session=%s peer=%s", s->id, s->peer);
    lmtp_server_session_gone(s->server, s);
    net_linger_free(s->linger);
    tls_handshake_deadline_free(s->handshake);
    bufferevent_free(s->bev);
    free(s);
}

static void count_error(struct lmtp_session *s)
{
    const struct lmtp_server_ctx *ctx = lmtp_server_context(s->server);
    if (++s->errors < (size_t)ctx->cfg->max_errors)
        return;
    log_info(LMTP_COMPONENT, "too many errors, disconnecting", "session=%s peer=%s errors=%zu",
             s->id, s->peer, s->errors);
    lmtp_reply(s, "421 4.7.0 %s Too many errors, closing connection", ctx->hostname);
    lmtp_session_close_after_output(s);
}

void lmtp_session_start(struct lmtp_server *srv, struct bufferevent *bev,
                        const struct sockaddr *peer)
{
    const struct lmtp_server_ctx *ctx = lmtp_server_context(srv);
    struct lmtp_session *s = xcalloc(1, sizeof(*s));
    s->server = srv;
    s->bev = bev;
    lmtp_spool_init(&s->message);
    net_addr_format_ip(peer, s->peer_ip, sizeof(s->peer_ip));
    net_addr_format(peer, s->peer, sizeof(s->peer));
    if (peer->sa_family == AF_INET || peer->sa_family == AF_INET6)
        memcpy(&s->peer_addr, peer,
               peer->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                          : sizeof(struct sockaddr_in6));
    else
        s->peer_addr.ss_family = peer->sa_family;
    if (peer->sa_family == AF_INET)
        s->peer_port = ntohs(((const struct sockaddr_in *)peer)->sin_port);
    else if (peer->sa_family == AF_INET6)
        s->peer_port = ntohs(((const struct sockaddr_in6 *)peer)->sin6_port);
    snprintf(s->id, sizeof(s->id), "%llx", lmtp_server_next_session_id(srv));
    s->trusted = lmtp_server_peer_trusted(srv, peer);
    s->forwarded_ttl = -1;
    lmtp_server_session_added(srv, s);
    bufferevent_setcb(bev, session_read_cb, session_write_cb, session_event_cb, s);
    set_timeout(s);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    log_debug(LMTP_COMPONENT, "connected", "session=%s peer=%s", s->id, s->peer);
    lmtp_reply(s, "220 %s Petrel LMTP ready", ctx->hostname);
}

/* ---------- STARTTLS ---------- */

/* Whatever the client pipelined after STARTTLS is thrown away: it arrived
 * in clear text (RFC 3207 5, CVE-2011-0411). */
static void handshake_expired(void *arg)
{
    struct lmtp_session *s = arg;
    if (s->closing)
        return; /* the close timer frees it */
    /* Nothing can be said: the client is in the middle of a handshake. */
    log_info(LMTP_COMPONENT, "TLS handshake timeout", "session=%s peer=%s", s->id, s->peer);
    lmtp_session_free(s);
}

bool lmtp_session_starttls(struct lmtp_session *s)
{
    const struct lmtp_server_ctx *ctx = lmtp_server_context(s->server);
    struct bufferevent *tls_bev = tls_conn_starttls(s->bev, ctx->tls);
    if (tls_bev == NULL)
        return false;
    s->bev = tls_bev;
    s->tls = true;
    bufferevent_setcb(tls_bev, session_read_cb, session_write_cb, session_event_cb, s);
    set_timeout(s);
    bufferevent_enable(tls_bev, EV_READ | EV_WRITE);
    /* The command timeout is an idle timeout, restarted by every byte: a
     * client trickling its handshake would hold the session for ever. */
    int64_t ms = ctx->cfg->command_timeout_ms;
    s->handshake = tls_handshake_deadline_new(
        tls_bev, ms < TLS_CONN_HANDSHAKE_MS ? ms : TLS_CONN_HANDSHAKE_MS, handshake_expired, s);
    return true;
}

/* ---------- input ---------- */

void lmtp_session_park(struct lmtp_session *s)
{
    s->busy = true;
    /* Nothing is read meanwhile, so no timeout runs and nothing piles up. */
    bufferevent_disable(s->bev, EV_READ);
}

static void process_input(struct lmtp_session *s);

/* Un-parks without reading: true when the session goes on. */
static bool unpark(struct lmtp_session *s)
{
    s->busy = false;
    if (s->closing)
        return false;
    if (s->stopping && !s->in_data) {
        lmtp_session_shutdown(s);
        return false;
    }
    if (s->output_full)
        return true; /* session_write_cb reads on */
    set_timeout(s);
    bufferevent_enable(s->bev, EV_READ);
    return true;
}

void lmtp_session_resume(struct lmtp_session *s)
{
    if (unpark(s))
        process_input(s);
}

void lmtp_session_unpark(struct lmtp_session *s)
{
    unpark(s);
}

/* The DATA stream: decodes what is buffered, and hands the message over
 * once its end marker came. */
static void read_data(struct lmtp_session *s, struct evbuffer *in)
{
    const struct lmtp_server_ctx *ctx = lmtp_server_context(s->server);
    while (evbuffer_get_length(in) > 0) {
        size_t avail = evbuffer_get_length(in);
        size_t chunk = avail < LMTP_DATA_CHUNK ? avail : LMTP_DATA_CHUNK;
        const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)chunk);
        size_t used = 0;
        bool done = lmtp_data_feed(&s->data, data, chunk, &used);
        evbuffer_drain(in, used);
        /* Large messages go to a file as they come, not into memory. */
        lmtp_spool_settle(&s->message, ctx->cfg->temp_dir, done);
        metric_add(ctx->m.bytes_in, (double)used);
        if (done) {
            s->in_data = false;
            lmtp_command_data_done(s);
            return;
        }
    }
}

/* Reads command lines (and DATA) until the buffer is empty or the session
 * waits. The session is never freed in here (closing goes through a timer). */
static void process_input(struct lmtp_session *s)
{
    const struct lmtp_server_ctx *ctx = lmtp_server_context(s->server);
    size_t max = (size_t)ctx->cfg->max_line_length;
    while (!s->busy && !s->closing && !s->output_full) {
        if (!s->in_data && evbuffer_get_length(bufferevent_get_output(s->bev)) > LMTP_OUTPUT_MAX) {
            /* The client does not read its replies: neither do we read its
             * commands (session_write_cb reads on). */
            s->output_full = true;
            bufferevent_disable(s->bev, EV_READ);
            bufferevent_setwatermark(s->bev, EV_WRITE, LMTP_OUTPUT_MAX / 2, 0);
            /* ... for command_timeout at most without any progress. */
            int64_t ms = ctx->cfg->command_timeout_ms;
            struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
            bufferevent_set_timeouts(s->bev, NULL, &tv);
            return;
        }
        /* Looked up each round: STARTTLS replaces the bufferevent. */
        struct evbuffer *in = bufferevent_get_input(s->bev);
        if (s->in_data) {
            read_data(s, in);
            if (s->in_data)
                return; /* everything buffered was message data */
            continue;
        }
        struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, NULL, EVBUFFER_EOL_LF);
        if (eol.pos < 0) {
            size_t avail = evbuffer_get_length(in);
            if (avail > max) {
                /* No line end within the limit: drop what came, and the
                 * rest of the line when it arrives. */
                evbuffer_drain(in, avail);
                metric_add(ctx->m.bytes_in, (double)avail);
                if (!s->skip_line) {
                    s->skip_line = true;
                    lmtp_reply_client_error(s, "500 5.5.2 Line too long");
                }
            }
            return;
        }
        size_t total = (size_t)eol.pos + 1;
        metric_add(ctx->m.bytes_in, (double)total);
        if (s->skip_line || total - 1 > max) {
            evbuffer_drain(in, total);
            if (!s->skip_line) {
                lmtp_reply_client_error(s, "500 5.5.2 Line too long");
            }
            s->skip_line = false;
            continue;
        }
        char *line = xmalloc(total);
        evbuffer_remove(in, line, total);
        size_t len = total - 1;
        if (len > 0 && line[len - 1] == '\r')
            len--;
        line[len] = '\0';
        lmtp_command_run(s, line, len);
        free(line);
    }
}

static void session_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    process_input(arg);
}

static void session_write_cb(struct bufferevent *bev, void *arg)
{
    struct lmtp_session *s = arg;
    if (!s->output_full || s->closing)
        return;
    s->output_full = false;
    bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
    bufferevent_set_timeouts(bev, NULL, NULL);
    if (!s->busy) {
        set_timeout(s);
        bufferevent_enable(bev, EV_READ);
        process_input(s);
    }
}

static void session_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct lmtp_session *s = arg;
    if (what & BEV_EVENT_TIMEOUT) {
        if (!s->closing) {
            log_info(LMTP_COMPONENT, "timeout", "session=%s peer=%s in_data=%d", s->id, s->peer,
                     (int)s->in_data);
            lmtp_reply(s, "421 4.4.2 %s Timeout, closing connection",
                       lmtp_server_context(s->server)->hostname);
            lmtp_session_close_after_output(s);
        }
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (s->in_data)
            log_info(LMTP_COMPONENT, "connection lost during DATA", "session=%s peer=%s", s->id,
                     s->peer);
        if (s->closing)
            return; /* the close timer frees it */
        lmtp_session_free(s);
    }
}
