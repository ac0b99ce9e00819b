/* One POP3 client connection: greeting, reading and dispatching commands
 * one at a time, replies, streamed RETR/TOP responses, timeouts, STLS,
 * login into the TRANSACTION state, and the end of the session. */
#include "protocols/pop3/pop3-private.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"
#include "protocols/common/mail-server-metrics.h"
#include "clients/warden/warden-client.h"

#include <event2/buffer.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POP3_MAX_SINGLE_WRITE (256 * 1024)
#define POP3_STREAM_STEP (256 * 1024) /* bytes of a message produced per output drain */
/* Replies queued for a client before its further pipelined commands wait
 * for them to drain: a client that sends commands and reads nothing holds
 * this much output, and its unread commands stay in the kernel (the input
 * bound stops reading once they wait). */
#define POP3_OUTPUT_HIGH (256 * 1024)

static void process_input(struct pop3_session *s);

static const struct pop3_command_def *const command_tables[] = {
    pop3_commands_any,
    pop3_commands_auth,
    pop3_commands_mail,
};

/* ---------- output ---------- */

void pop3_send_raw(struct pop3_session *s, const void *data, size_t len)
{
    mail_session_io_write(&s->io, data, len);
}

/* While a response streams, the client sends nothing and may read slowly:
 * the inactivity limit then applies to the output making no progress. */
static void set_timeout(struct pop3_session *s)
{
    const struct pop3_server_ctx *ctx = pop3_server_context(s->server);
    const struct mail_login_config *cfg = &ctx->cfg->login;
    int64_t ms = s->state == POP3_STATE_AUTHORIZATION
                     ? mail_listeners_login_timeout(ctx->listeners, cfg->login_timeout_ms)
                     : cfg->idle_timeout_ms;
    mail_session_io_set_timeout(&s->io, ms, s->stream != NULL);
}

static void command_done(struct pop3_session *s, const char *result)
{
    mail_server_metrics_command_done(pop3_server_context(s->server)->m.command_seconds,
                                     s->command[0] != '\0' ? s->command : "invalid", result,
                                     &s->command_started);
    s->command[0] = '\0';
    if (s->busy) {
        /* An asynchronous command finished: read what waited meanwhile. */
        s->busy = false;
        process_input(s);
    }
}

/* The one-line reply that ends the current command: `status` ("+OK",
 * "-ERR"), the text, and the command's metric under `result`. */
static void reply_line(struct pop3_session *s, const char *status, const char *result,
                       const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));

static void reply_line(struct pop3_session *s, const char *status, const char *result,
                       const char *fmt, va_list ap)
{
    mail_session_io_vwritef(&s->io, status, fmt, ap);
    command_done(s, result);
}

void pop3_reply_ok(struct pop3_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_line(s, "+OK ", "ok", fmt, ap);
    va_end(ap);
}

void pop3_reply_err(struct pop3_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_line(s, "-ERR ", "err", fmt, ap);
    va_end(ap);
}

void pop3_reply_multiline(struct pop3_session *s, const char *first, const struct buf *body)
{
    struct buf out = {0};
    buf_printf(&out, "+OK %s\r\n", first);
    if (body != NULL && body->len > 0)
        buf_append(&out, body->data, body->len);
    buf_append_str(&out, ".\r\n");
    pop3_send_raw(s, out.data, out.len);
    buf_free(&out);
    command_done(s, "ok");
}

/* ---------- streamed RETR / TOP ---------- */

static void stream_end(struct pop3_session *s)
{
    mailbox_message_release(s->stream->msg);
    free(s->stream);
    s->stream = NULL;
    set_timeout(s);
}

/* Produces the next piece; true (and the stream gone) once the terminator
 * is out. */
static bool stream_step(struct pop3_session *s)
{
    struct buf piece = {0};
    bool done = pop3_body_write(&s->stream->writer, &piece, POP3_STREAM_STEP);
    pop3_send_raw(s, piece.data, piece.len);
    buf_free(&piece);
    if (done)
        stream_end(s);
    return done;
}

/* The output has drained: the next piece, or the end of the command. */
static void stream_pump(struct pop3_session *s)
{
    if (stream_step(s))
        command_done(s, "ok");
}

void pop3_session_stream(struct pop3_session *s, const char *first,
                         struct mailbox_message_data *msg, bool top, uint64_t lines)
{
    struct buf line = {0};
    buf_printf(&line, "+OK %s\r\n", first);
    pop3_send_raw(s, line.data, line.len);
    buf_free(&line);
    s->stream = xcalloc(1, sizeof(*s->stream));
    s->stream->msg = msg;
    pop3_body_init(&s->stream->writer, msg->data, msg->size, top, lines);
    /* A small message goes out at once and the command ends here; a larger
     * one parks the session until the write callback has sent the rest. */
    if (stream_step(s)) {
        command_done(s, "ok");
        return;
    }
    s->busy = true;
    set_timeout(s);
}

/* ---------- life cycle ---------- */

void pop3_session_close_after_output(struct pop3_session *s)
{
    s->state = POP3_STATE_LOGOUT;
    mail_session_io_close_after_output(&s->io);
    /* An answer from the auth service would find nobody to log in. */
    if (s->auth_req != NULL) {
        auth_client_cancel(s->auth_req);
        s->auth_req = NULL;
    }
}

void pop3_session_shutdown(struct pop3_session *s, const char *reason)
{
    if (pop3_proxy_shutdown(s, reason))
        return; /* relayed: the relay says goodbye */
    if (s->io.closing)
        return;
    if (s->stream != NULL) {
        /* Inside a multi-line response an -ERR line would read as message
         * text: the response is cut off by closing instead. */
        stream_end(s);
    } else {
        struct buf line = {0};
        buf_printf(&line, "-ERR %s\r\n", reason);
        pop3_send_raw(s, line.data, line.len);
        buf_free(&line);
    }
    pop3_session_close_after_output(s);
}

void pop3_session_free(struct pop3_session *s)
{
    const struct pop3_server_ctx *ctx = pop3_server_context(s->server);
    if (s->auth_req != NULL)
        auth_client_cancel(s->auth_req);
    pop3_proxy_session_free(s);
    if (s->stream != NULL) {
        mailbox_message_release(s->stream->msg);
        free(s->stream);
    }
    pop3_maildrop_close(&s->drop);
    mail_user_unref(s->user);
    if (s->io.username != NULL)
        metric_gauge_add(ctx->m.sessions_transaction, -1);
    else
        metric_gauge_add(ctx->m.sessions_authorization, -1);
    free(s->user_arg);
    log_debug(POP3_COMPONENT, "disconnected", "session=%s peer=%s", s->io.id, s->io.peer);
    pop3_parser_free(s->parser);
    mail_session_io_free(&s->io); /* also the warden registration and the user count */
    free(s);
}

/* Plaintext passwords are fine over TLS, from the networks the operator
 * calls secure (loopback by default) and over a Unix socket. */
static bool peer_is_secure(const struct pop3_server_ctx *ctx, const struct sockaddr *sa)
{
    return sa->sa_family == AF_UNIX || cidr_list_match(&ctx->secure_nets, sa);
}

static void session_input(void *arg);
static void session_drained(void *arg);
static void session_goodbye(void *arg, const char *reason)
{
    pop3_session_shutdown(arg, reason);
}
static void session_free(void *arg)
{
    pop3_session_free(arg);
}
static void session_tls_ready(void *arg)
{
    pop3_proxy_tls_ready(arg);
}

static const struct mail_session_io_ops session_ops = {
    .input = session_input,
    .drained = session_drained,
    .goodbye = session_goodbye,
    .free = session_free,
    .tls_ready = session_tls_ready,
};

void pop3_session_start(struct pop3_server *srv, struct bufferevent *bev, bool tls,
                        const struct sockaddr *peer)
{
    const struct pop3_server_ctx *ctx = pop3_server_context(srv);
    struct pop3_session *s = xcalloc(1, sizeof(*s));
    s->server = srv;
    mail_session_io_init(&s->io, mail_listeners_main_set(ctx->listeners), bev, tls, peer,
                         &session_ops, s);
    s->secured = tls || peer_is_secure(ctx, peer) || s->io.trusted ||
                 !ctx->cfg->login.disable_plaintext_auth;
    s->parser = pop3_parser_new(&ctx->limits);
    s->state = POP3_STATE_AUTHORIZATION;
    metric_gauge_add(ctx->m.sessions_authorization, 1);
    if (ctx->proxy != NULL)
        pop3_proxy_session_start(s, tls);
    set_timeout(s);
    mail_session_io_set_deadline(
        &s->io, mail_listeners_login_timeout(ctx->listeners, ctx->cfg->login.login_timeout_ms));
    /* A client pipelining behind a long RETR waits in TCP. */
    mail_session_io_enable(&s->io, POP3_MAX_SINGLE_WRITE,
                           mail_session_io_input_bound(ctx->limits.max_line));
    /* A login proxy learns from "[XCLIENT]" that it may forward the
     * client's address (Dovecot's pop3-login announces it the same way, and
     * its proxy sends XCLIENT only after seeing it). */
    static const char greeting[] = "+OK Petrel POP3 ready.\r\n";
    static const char trusted_greeting[] = "+OK [XCLIENT] Petrel POP3 ready.\r\n";
    if (s->io.trusted)
        pop3_send_raw(s, trusted_greeting, sizeof(trusted_greeting) - 1);
    else
        pop3_send_raw(s, greeting, sizeof(greeting) - 1);
}

/* ---------- STLS ---------- */

/* Whatever the client pipelined after STLS is thrown away (by
 * mail_session_io_starttls()), and the parser forgets any partial line. */
bool pop3_session_starttls(struct pop3_session *s)
{
    pop3_parser_reset(s->parser);
    if (!mail_session_io_starttls(&s->io))
        return false;
    pop3_proxy_starttls(s);
    s->secured = true;
    return true;
}

/* ---------- input ---------- */

static const struct pop3_command_def *find_command(const char *name)
{
    for (size_t t = 0; t < sizeof(command_tables) / sizeof(command_tables[0]); t++) {
        for (const struct pop3_command_def *d = command_tables[t]; d->name != NULL; d++) {
            if (strcmp(d->name, name) == 0)
                return d;
        }
    }
    return NULL;
}

static void run_command(struct pop3_session *s, const struct pop3_command *cmd)
{
    clock_gettime(CLOCK_MONOTONIC, &s->command_started);
    const struct pop3_command_def *def = find_command(cmd->name);
    if (def == NULL) {
        snprintf(s->command, sizeof(s->command), "unknown");
        pop3_reply_err(s, "Unknown command.");
        pop3_proxy_bad_command(s);
        return;
    }
    snprintf(s->command, sizeof(s->command), "%s", def->name);
    if ((def->states & POP3_IN(s->state)) == 0) {
        if (s->state == POP3_STATE_AUTHORIZATION) {
            pop3_reply_err(s, "Log in first.");
            pop3_proxy_bad_command(s);
        } else
            pop3_reply_err(s, "Already logged in.");
        return;
    }
    def->run(s, cmd);
}

static void parse_error(struct pop3_session *s, const struct pop3_parse_error *e)
{
    snprintf(s->command, sizeof(s->command), "invalid");
    clock_gettime(CLOCK_MONOTONIC, &s->command_started);
    pop3_reply_err(s, "%s", e->message);
    pop3_proxy_bad_command(s);
    if (e->fatal && !s->io.closing) {
        log_info(POP3_COMPONENT, "closing", "session=%s peer=%s reason=\"%s\"", s->io.id,
                 s->io.peer, e->message);
        pop3_session_close_after_output(s);
    }
}

/* Feeds buffered input to the parser and runs complete commands until the
 * buffer is empty or a command waits. The session may be freed inside only
 * through the deferred close, never directly. */
static void process_input(struct pop3_session *s)
{
    const struct pop3_server_ctx *ctx = pop3_server_context(s->server);
    while (!s->busy && !s->io.closing) {
        /* Looked up each round: STLS replaces the bufferevent. */
        struct evbuffer *in = bufferevent_get_input(s->io.bev);
        size_t avail = evbuffer_get_length(in);
        if (avail == 0)
            return;
        if (evbuffer_get_length(bufferevent_get_output(s->io.bev)) >= POP3_OUTPUT_HIGH) {
            s->output_wait = true; /* session_drained() goes on */
            return;
        }
        size_t chunk = avail < 65536 ? avail : 65536;
        const unsigned char *data = evbuffer_pullup(in, (ev_ssize_t)chunk);
        size_t consumed = 0;
        enum pop3_parse_result r = pop3_parser_feed(s->parser, data, chunk, &consumed);
        evbuffer_drain(in, consumed);
        metric_add(ctx->m.bytes_in, (double)consumed);
        switch (r) {
        case POP3_PARSE_NEED_MORE:
            break;
        case POP3_PARSE_COMMAND:
            run_command(s, pop3_parser_command(s->parser));
            break;
        case POP3_PARSE_LINE: {
            size_t len = 0;
            const char *line = pop3_parser_line(s->parser, &len);
            pop3_auth_continue(s, line, len);
            break;
        }
        case POP3_PARSE_ERROR:
            parse_error(s, pop3_parser_error(s->parser));
            break;
        }
    }
}

static void session_input(void *arg)
{
    process_input(arg);
}

/* The output drained: the next piece of a streamed response, or the
 * pipelined commands that waited for it. */
static void session_drained(void *arg)
{
    struct pop3_session *s = arg;
    if (s->stream != NULL) {
        stream_pump(s);
    } else if (s->output_wait) {
        s->output_wait = false;
        process_input(s);
    }
}

void pop3_session_sasl_challenge(struct pop3_session *s, const char *challenge)
{
    struct buf line = {0};
    buf_printf(&line, "+ %s\r\n", challenge);
    pop3_send_raw(s, line.data, line.len);
    buf_free(&line);
    s->sasl_waiting_client = true;
    pop3_parser_expect_line(s->parser);
    s->busy = false;
    process_input(s);
}

/* ---------- login ---------- */

bool pop3_session_login(struct pop3_session *s, const char *username, const char *const *groups)
{
    const struct pop3_server_ctx *ctx = pop3_server_context(s->server);
    struct mail_user *user;
    switch (mail_session_io_login(&s->io, ctx->storage, username, groups, &user)) {
    case MAIL_SESSION_LOGIN_OK:
        break;
    case MAIL_SESSION_LOGIN_REFUSED:
        pop3_reply_err(s, "[SYS/PERM] Cannot serve this account.");
        return false;
    case MAIL_SESSION_LOGIN_TOO_MANY:
        pop3_reply_err(s, "[IN-USE] Too many sessions for this account; try again later.");
        return false;
    }
    mail_user_ref(user);
    struct petrel_error err;
    if (!pop3_maildrop_open(&s->drop, user, &err)) {
        log_warn(POP3_COMPONENT, "cannot open the maildrop", "session=%s error=\"%s\"", s->io.id,
                 err.message);
        mail_user_unref(user);
        mail_session_io_login_cancel(&s->io);
        pop3_reply_err(s, "[SYS/TEMP] Cannot open the mailbox now; try again later.");
        return false;
    }
    s->user = user;
    s->state = POP3_STATE_TRANSACTION;
    mail_session_io_clear_deadline(&s->io);
    metric_gauge_add(ctx->m.sessions_authorization, -1);
    metric_gauge_add(ctx->m.sessions_transaction, 1);
    mail_session_io_register(&s->io, ctx->warden, "pop3");
    set_timeout(s);
    return true;
}
