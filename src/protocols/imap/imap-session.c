/* One IMAP client connection: greeting, reading and dispatching commands
 * one at a time, tagged replies, timeouts, STARTTLS, logout. */
#include "protocols/imap/imap-private.h"

#include "core/log.h"
#include "core/utf8.h"
#include "core/xalloc.h"
#include "net/sockaddr.h"
#include "protocols/common/mail-server-metrics.h"
#include "protocols/imap/imap-literal-spool.h"

#include <event2/buffer.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IMAP_PREAUTH_MAX_LITERAL 16384 /* LOGIN/AUTHENTICATE arguments */
#define IMAP_MAX_SINGLE_WRITE (256 * 1024)
/* Unsent output above which a session produces nothing more (no next
 * command, no next message of a FETCH) until it is back under the low mark:
 * a client that pipelines commands and does not read holds at most this
 * much (plus one FETCH step) instead of every answer. */
#define IMAP_OUTPUT_HIGH_WATER (256 * 1024)
#define IMAP_OUTPUT_LOW_WATER (64 * 1024)

static const struct imap_command_def *const command_tables[] = {
    imap_commands_any,     imap_commands_login,  imap_commands_mailbox, imap_commands_select,
    imap_commands_message, imap_commands_search, imap_commands_sort,    imap_commands_context,
    imap_commands_quota,
    imap_commands_acl,
    imap_commands_metadata,
};

/* ---------- output ---------- */

void imap_send_raw(struct imap_session *s, const void *data, size_t len)
{
    mail_session_io_write(&s->io, data, len);
}

void imap_send(struct imap_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mail_session_io_vwritef(&s->io, "", fmt, ap);
    va_end(ap);
}

/* login_timeout before login, idle_timeout after. */
static int64_t state_timeout_ms(const struct imap_session *s)
{
    const struct mail_login_config *cfg = &s->ctx->cfg->login;
    return s->state == IMAP_STATE_NOT_AUTHENTICATED
               ? mail_listeners_login_timeout(s->ctx->listeners, cfg->login_timeout_ms)
               : cfg->idle_timeout_ms;
}

static void set_timeout(struct imap_session *s)
{
    mail_session_io_set_timeout(&s->io, state_timeout_ms(s), false);
}

static void process_input(struct imap_session *s);

bool imap_session_output_full(struct imap_session *s)
{
    return mail_session_io_output_full(&s->io);
}

/* While the session waits on the client to read, the inactivity timeout
 * counts on the output: a client that never reads is closed after
 * idle_timeout (login_timeout before login) however much it had
 * pipelined. */
void imap_session_wait_output(struct imap_session *s)
{
    /* Set once per wait: input arriving meanwhile must not restart the
     * clock of a client that sends but never reads. */
    if (s->io.output_waiting)
        return;
    mail_session_io_wait_output(&s->io);
    mail_session_io_set_timeout(&s->io, state_timeout_ms(s), true);
}

static void command_done(struct imap_session *s, const char *result)
{
    mail_server_metrics_command_done(s->ctx->m.command_seconds, s->command, result,
                                     &s->command_started);
    s->tag[0] = '\0';
    s->command[0] = '\0';
    if (s->busy) {
        /* An asynchronous command finished: read what waited meanwhile. */
        s->busy = false;
        process_input(s);
    }
}

/* RFC 3501 7.4.1: no EXPUNGE while a FETCH, STORE or SEARCH (or their UID
 * forms) is completing, since the client may still be matching sequence
 * numbers; those commands leave every update for the next command. */
static bool updates_allowed(const struct imap_session *s)
{
    static const char *const quiet[] = {"FETCH",     "STORE",      "SEARCH", "UID FETCH",
                                        "UID STORE", "UID SEARCH", "SORT",   "UID SORT",
                                        "THREAD",    "UID THREAD"};
    /* Every tagged reply asks: most commands are none of these. */
    char c0 = s->command[0];
    if (c0 != 'F' && c0 != 'S' && c0 != 'U' && c0 != 'T')
        return true;
    for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) {
        if (strcmp(s->command, quiet[i]) == 0)
            return false;
    }
    return true;
}

static void reply_tagged(struct imap_session *s, const char *status, const char *result,
                         const char *fmt, va_list ap)
{
    if (s->view != NULL && s->tag[0] != '\0' && updates_allowed(s))
        imap_selected_sync(s);
    else if (s->view != NULL && s->tag[0] != '\0')
        imap_context_flush(s); /* own flag changes: no renumbering, allowed here */
    char prefix[96];
    snprintf(prefix, sizeof(prefix), "%s %s ", s->tag[0] != '\0' ? s->tag : "*", status);
    mail_session_io_vwritef(&s->io, prefix, fmt, ap);
    command_done(s, result);
}

void imap_reply_ok(struct imap_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_tagged(s, "OK", "ok", fmt, ap);
    va_end(ap);
}

void imap_reply_no(struct imap_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_tagged(s, "NO", "no", fmt, ap);
    va_end(ap);
}

void imap_reply_bad(struct imap_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_tagged(s, "BAD", "bad", fmt, ap);
    va_end(ap);
}

static void append_quoted(struct buf *out, const char *text, size_t len)
{
    buf_append_char(out, '"');
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '"' || text[i] == '\\')
            buf_append_char(out, '\\');
        buf_append_char(out, text[i]);
    }
    buf_append_char(out, '"');
}

/* A quoted string holds at most 1023 bytes of `allowed` characters. */
static bool quotable(const char *text, size_t len, bool utf8)
{
    if (len >= 1024 || (utf8 && !utf8_valid(text, len)))
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == 0x7f || (!utf8 && c > 0x7f))
            return false;
    }
    return true;
}

void imap_append_utf8_string(struct buf *out, const char *text, size_t len)
{
    if (quotable(text, len, true))
        append_quoted(out, text, len);
    else
        imap_append_string(out, text, len);
}

void imap_append_string(struct buf *out, const char *text, size_t len)
{
    if (quotable(text, len, false)) {
        append_quoted(out, text, len);
        return;
    }
    buf_printf(out, "{%zu}\r\n", len);
    size_t at = out->len;
    buf_append(out, text, len);
    /* No NUL in a literal (RFC 3501): 0x80 stands in, as in BODY[]. */
    for (char *p = out->data + at; (p = memchr(p, '\0', out->len - (size_t)(p - out->data)));)
        *p++ = (char)0x80;
}

/* ---------- life cycle ---------- */

void imap_session_close_after_output(struct imap_session *s)
{
    mail_session_io_close_after_output(&s->io);
}

void imap_session_shutdown(struct imap_session *s, const char *reason)
{
    if (s->ctx->proxy != NULL && imap_proxy_shutdown(s, reason))
        return; /* relayed: the relay says goodbye */
    if (s->io.closing)
        return;
    /* Inside a literal a BYE line would read as message bytes, inside a
     * METADATA response as its entries: the answer is cut off by closing
     * instead. */
    bool cut = imap_fetch_abort(s);
    cut = imap_metadata_cut(s) || cut;
    if (!cut)
        imap_send(s, "* BYE %s", reason);
    s->state = IMAP_STATE_LOGOUT;
    imap_session_close_after_output(s);
}

void imap_session_free(struct imap_session *s)
{
    const struct imap_server_ctx *ctx = s->ctx;
    if (s->auth_req != NULL)
        auth_client_cancel(s->auth_req);
    imap_proxy_session_free(s);
    imap_metadata_abort(s);
    imap_list_abort(s);
    imap_fetch_abort(s); /* a disconnected client's FETCH stops here */
    imap_selected_close(s);
    free(s->recent);
    free(s->literal_refusal);
    mail_user_unref(s->user);
    if (s->io.username != NULL)
        metric_gauge_add(ctx->m.sessions_auth, -1);
    else
        metric_gauge_add(ctx->m.sessions_unauth, -1);
    log_debug(IMAP_COMPONENT, "disconnected", "session=%s peer=%s", s->io.id, s->io.peer);
    imap_parser_free(s->parser);
    mail_session_io_free(&s->io); /* also the warden registration and the user count */
    free(s);
}

static bool peer_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return sa->sa_family == AF_UNIX;
}

static void session_input(void *arg);
static void session_drained(void *arg);
static void session_goodbye(void *arg, const char *reason)
{
    imap_session_shutdown(arg, reason);
}
static void session_free(void *arg)
{
    imap_session_free(arg);
}
static void session_tls_ready(void *arg)
{
    imap_proxy_tls_ready(arg);
}

static const struct mail_session_io_ops session_ops = {
    .input = session_input,
    .drained = session_drained,
    .goodbye = session_goodbye,
    .free = session_free,
    .tls_ready = session_tls_ready,
};

void imap_session_start(const struct imap_server_ctx *ctx, struct bufferevent *bev, bool tls,
                        const struct sockaddr *peer)
{
    struct imap_session *s = xcalloc(1, sizeof(*s));
    s->ctx = ctx;
    mail_session_io_init(&s->io, ctx->sessions, bev, tls, peer, &session_ops, s);
    s->secured =
        tls || peer_is_loopback(peer) || s->io.trusted || !ctx->cfg->login.disable_plaintext_auth;
    /* Before login nothing needs a big literal, and the parser allocates a
     * literal when it is announced: keep strangers to small ones. */
    struct imap_parser_limits preauth = ctx->limits;
    if (preauth.max_literal > IMAP_PREAUTH_MAX_LITERAL)
        preauth.max_literal = IMAP_PREAUTH_MAX_LITERAL;
    if (preauth.non_sync_max > IMAP_PREAUTH_MAX_LITERAL)
        preauth.non_sync_max = IMAP_PREAUTH_MAX_LITERAL;
    preauth.long_line_fatal = true;
    s->parser = imap_parser_new(&preauth);
    s->state = IMAP_STATE_NOT_AUTHENTICATED;
    clock_gettime(CLOCK_MONOTONIC, &s->started);
    metric_gauge_add(ctx->m.sessions_unauth, 1);
    if (ctx->proxy != NULL)
        imap_proxy_session_start(s, tls);
    set_timeout(s);
    mail_session_io_set_deadline(&s->io, state_timeout_ms(s));
    /* libevent's 16 KiB per pass would take ~50 loop passes for one 800 KB
     * BODY[]; larger steps keep big fetches from stalling other sessions.
     * The input bound has room for a whole line, which IDLE and
     * AUTHENTICATE read as one piece. */
    mail_session_io_enable(&s->io, IMAP_MAX_SINGLE_WRITE,
                           mail_session_io_input_bound((size_t)ctx->cfg->max_line_length));
    mail_session_io_set_output_limits(&s->io, IMAP_OUTPUT_HIGH_WATER, IMAP_OUTPUT_LOW_WATER);
    struct buf caps = {0};
    imap_capabilities(s, &caps);
    imap_send(s, "* OK [CAPABILITY %s] Petrel ready.", caps.data);
    buf_free(&caps);
}

/* ---------- STARTTLS ---------- */

/* Whatever the client pipelined after STARTTLS is thrown away (by
 * mail_session_io_starttls()), and the parser forgets any partial command. */
bool imap_session_starttls(struct imap_session *s)
{
    imap_parser_reset(s->parser);
    if (!mail_session_io_starttls(&s->io))
        return false;
    if (s->proxy != NULL)
        imap_proxy_starttls(s);
    s->secured = true;
    return true;
}

/* ---------- input ---------- */

static const struct imap_command_def *find_command(const char *name)
{
    for (size_t t = 0; t < sizeof(command_tables) / sizeof(command_tables[0]); t++) {
        for (const struct imap_command_def *d = command_tables[t]; d->name != NULL; d++) {
            if (strcmp(d->name, name) == 0)
                return d;
        }
    }
    return NULL;
}

static void run_command(struct imap_session *s, const struct imap_command *cmd)
{
    snprintf(s->tag, sizeof(s->tag), "%s", cmd->tag);
    clock_gettime(CLOCK_MONOTONIC, &s->command_started);
    const struct imap_command_def *def = find_command(cmd->name);
    if (def == NULL) {
        snprintf(s->command, sizeof(s->command), "unknown");
        imap_reply_bad(s, "Unknown command.");
        imap_proxy_bad_command(s);
        return;
    }
    snprintf(s->command, sizeof(s->command), "%s", def->name);
    if ((def->states & IMAP_IN(s->state)) == 0) {
        if (s->state == IMAP_STATE_NOT_AUTHENTICATED) {
            imap_reply_bad(s, "Log in first.");
            imap_proxy_bad_command(s);
        } else if (s->state == IMAP_STATE_AUTHENTICATED)
            imap_reply_bad(s, "No mailbox selected.");
        else
            imap_reply_bad(s, "Not allowed now.");
        return;
    }
    def->run(s, cmd);
}

static void parse_error(struct imap_session *s, const struct imap_parse_error *e)
{
    const char *code = e->code == IMAP_PARSE_ERR_TOO_BIG ? "[TOOBIG] " : "";
    snprintf(s->tag, sizeof(s->tag), "%s", e->tag != NULL ? e->tag : "*");
    snprintf(s->command, sizeof(s->command), "invalid");
    clock_gettime(CLOCK_MONOTONIC, &s->command_started);
    if (e->code == IMAP_PARSE_ERR_REFUSED) {
        imap_reply_no(s, "%s", e->message);
        imap_proxy_bad_command(s);
        return;
    }
    if (e->fatal) {
        imap_proxy_bad_command(s);
        imap_send(s, "* BYE %s%s", code, e->message);
        s->state = IMAP_STATE_LOGOUT;
        imap_session_close_after_output(s);
        return;
    }
    imap_reply_bad(s, "%s%s", code, e->message);
    imap_proxy_bad_command(s);
}

/* Feeds buffered input to the parser and runs complete commands until the
 * buffer is empty or a command waits. The session may be freed inside. */
static void process_input(struct imap_session *s)
{
    while (!s->busy && !s->io.closing) {
        if (imap_session_output_full(s)) {
            /* The client is not reading: no next command until it does. */
            imap_session_wait_output(s);
            return;
        }
        /* Looked up each round: STARTTLS replaces the bufferevent. */
        struct evbuffer *in = bufferevent_get_input(s->io.bev);
        if (s->idling) {
            size_t n = 0;
            char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);
            if (line == NULL)
                return;
            metric_add(s->ctx->m.bytes_in, (double)n + 2);
            imap_idle_line(s, line, n);
            free(line);
            continue;
        }
        if (s->sasl_waiting_client) {
            size_t n = 0;
            char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);
            if (line == NULL) {
                if (evbuffer_get_length(in) > (size_t)s->ctx->cfg->max_line_length) {
                    imap_session_shutdown(s, "Line too long.");
                }
                return;
            }
            metric_add(s->ctx->m.bytes_in, (double)n + 2);
            imap_authenticate_continue(s, line, n);
            free(line);
            continue;
        }
        size_t avail = evbuffer_get_length(in);
        if (avail == 0)
            return;
        /* Contiguous view of what is buffered; the parser copies what it keeps. */
        size_t chunk = avail < 65536 ? avail : 65536;
        const unsigned char *data = evbuffer_pullup(in, (ev_ssize_t)chunk);
        size_t consumed = 0;
        enum imap_parse_result r = imap_parser_feed(s->parser, data, chunk, &consumed);
        evbuffer_drain(in, consumed);
        metric_add(s->ctx->m.bytes_in, (double)consumed);
        switch (r) {
        case IMAP_PARSE_NEED_MORE:
            if (consumed == 0)
                return;
            /* Bytes of a command taken with nothing to answer: a literal's
             * end waits for its CRLF, which the client may hold under Nagle
             * until our ACK comes, 40 ms later without this. */
            if (consumed == avail && imap_parser_in_command(s->parser) &&
                imap_parser_literal_remaining(s->parser) == 0)
                mail_session_io_ack_now(&s->io);
            break;
        case IMAP_PARSE_LITERAL_CONTINUATION:
            imap_send(s, "+ OK");
            break;
        case IMAP_PARSE_COMMAND:
            run_command(s, imap_parser_command(s->parser));
            /* Answered (unless it went on asynchronously): its spools go
             * now, not when the client's next command arrives. */
            if (!s->busy)
                imap_parser_release_literals(s->parser);
            break;
        case IMAP_PARSE_ERROR:
            parse_error(s, imap_parser_error(s->parser));
            imap_parser_release_literals(s->parser);
            break;
        }
    }
}

static void session_input(void *arg)
{
    process_input(arg);
}

/* The output is down to the low-water mark after a wait. */
static void session_drained(void *arg)
{
    struct imap_session *s = arg;
    set_timeout(s);
    if (s->fetch != NULL)
        imap_fetch_continue(s); /* ends with the tagged reply, then reads on */
    else if (!imap_metadata_continue(s))
        process_input(s);
}

bool imap_session_login(struct imap_session *s, const char *username, const char *const *groups)
{
    const struct imap_server_ctx *ctx = s->ctx;
    struct mail_user *user;
    if (mail_session_io_login(&s->io, ctx->storage, username, groups, &user) !=
        MAIL_SESSION_LOGIN_OK)
        return false;
    s->user = user;
    mail_user_ref(user);
    s->state = IMAP_STATE_AUTHENTICATED;
    mail_session_io_clear_deadline(&s->io);
    mail_session_io_register(&s->io, ctx->warden, "imap");
    /* Between commands the parser holds nothing: switch to the full limits. */
    imap_parser_free(s->parser);
    s->parser = imap_parser_new(&ctx->limits);
    imap_literal_spool_attach(s); /* big APPEND literals go to a file */
    metric_gauge_add(ctx->m.sessions_unauth, -1);
    metric_gauge_add(ctx->m.sessions_auth, 1);
    set_timeout(s);
    return true;
}
