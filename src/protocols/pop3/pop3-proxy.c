/* POP3 in proxy mode (a login proxy's front, docs/login-proxy.md): the
 * same session code in the AUTHORIZATION state, with no storage; PASS and
 * AUTH check the password with the auth service (the SASL exchange runs
 * here, since the backend needs the password too), then protocols/common/
 * mail-proxy.h finds the user's backend and logs in there (XCLIENT with
 * the client's address first), and the client gets the backend's own +OK
 * before the bytes are relayed both ways. */
#include "protocols/pop3/pop3-private.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/tls-conn.h"
#include "protocols/common/mail-proxy-front-session.h"
#include "protocols/pop3/pop3-proxy-login.h"
#include "protocols/pop3/pop3-server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* As Dovecot 2.3's pop3-login: this many invalid commands close the
 * connection (CLIENT_MAX_BAD_COMMANDS). */
#define POP3_PROXY_MAX_BAD_COMMANDS 3

struct pop3_proxy_session {
    struct mail_proxy_front_session fs;
    int64_t started_us;
};

static void *dialogue_new(const struct mail_proxy_login_params *params)
{
    return pop3_proxy_login_new(params);
}

static void dialogue_line(void *d, const char *line, size_t len, struct buf *out,
                          struct mail_proxy_login_result *result)
{
    pop3_proxy_login_line(d, line, len, out, result);
}

static void dialogue_free(void *d)
{
    pop3_proxy_login_free(d);
}

const struct mail_proxy_protocol pop3_proxy_protocol = {
    .name = "pop3",
    .sid_prefix = 'p',
    .plain = RING_PROTO_POP3,
    .tls = RING_PROTO_POP3S,
    .dialogue_new = dialogue_new,
    .dialogue_line = dialogue_line,
    .dialogue_free = dialogue_free,
};

static const struct pop3_server_ctx *ctx_of(const struct pop3_session *s)
{
    return pop3_server_context(s->server);
}

static const struct login_metrics *lm(const struct pop3_session *s)
{
    return mail_proxy_front_metrics(ctx_of(s)->proxy);
}

static void count_login(struct pop3_session *s, const char *result)
{
    const char *values[] = {result};
    metric_add(metric_series_get(ctx_of(s)->m.logins, values), 1);
}

void pop3_proxy_session_start(struct pop3_session *s, bool tls)
{
    s->proxy = xcalloc(1, sizeof(*s->proxy));
    s->proxy->started_us = clock_mono_us();
    if (tls)
        s->proxy->fs.tls_started_us = s->proxy->started_us;
}

void pop3_proxy_starttls(struct pop3_session *s)
{
    if (s->proxy != NULL)
        s->proxy->fs.tls_started_us = clock_mono_us();
}

void pop3_proxy_tls_ready(struct pop3_session *s)
{
    /* Outside proxy mode there is neither a session nor metrics. */
    if (s->proxy != NULL)
        mail_proxy_front_session_tls_ready(&s->proxy->fs, lm(s));
}

void pop3_proxy_bad_command(struct pop3_session *s)
{
    struct pop3_proxy_session *ps = s->proxy;
    if (ps == NULL || s->state != POP3_STATE_AUTHORIZATION)
        return;
    if (mail_proxy_front_session_bad_command(&ps->fs, lm(s), POP3_COMPONENT, &s->io,
                                             POP3_PROXY_MAX_BAD_COMMANDS)) {
        pop3_send_raw(s, "-ERR Too many invalid commands.\r\n", 33);
        pop3_session_close_after_output(s);
    }
}

static void proxy_ended(void *arg, const struct net_relay_stats *stats)
{
    struct pop3_session *s = arg;
    metric_add(ctx_of(s)->m.bytes_in, (double)stats->to_backend);
    metric_add(ctx_of(s)->m.bytes_out, (double)stats->to_client);
    pop3_session_free(s);
}

static void proxy_done(void *arg, enum mail_proxy_outcome outcome, const char *text)
{
    struct pop3_session *s = arg;
    struct pop3_proxy_session *ps = s->proxy;
    const struct pop3_server_ctx *ctx = ctx_of(s);
    if (outcome == MAIL_PROXY_OK) {
        count_login(s, "ok");
        struct buf line = {0};
        buf_printf(&line, "+OK %s\r\n", text);
        pop3_send_raw(s, line.data, line.len);
        buf_free(&line);
        s->state = POP3_STATE_TRANSACTION;
        metric_gauge_add(ctx->m.sessions_authorization, -1);
        metric_gauge_add(ctx->m.sessions_transaction, 1);
        /* Nothing is parsed any more: the relay moves the bytes. */
        pop3_parser_free(s->parser);
        s->parser = NULL;
        mail_proxy_front_session_relay(&ps->fs, &s->io, POP3_COMPONENT);
        return;
    }
    /* `text` lives in the proxy: the reply goes first. */
    struct mail_proxy *done = ps->fs.proxy;
    ps->fs.proxy = NULL;
    switch (outcome) {
    case MAIL_PROXY_REJECTED:
        count_login(s, "failed");
        pop3_reply_err(s, "%s", text[0] != '\0' ? text : "[AUTH] Login refused.");
        break;
    case MAIL_PROXY_TOO_MANY:
        count_login(s, "refused");
        pop3_reply_err(s, "[IN-USE] Too many sessions for this account; try again later.");
        break;
    default:
        count_login(s, "unavailable");
        pop3_reply_err(s, "[SYS/TEMP] Temporary failure; try again later.");
        break;
    }
    mail_proxy_free(done);
}

static void login_failed(struct pop3_session *s)
{
    count_login(s, "failed");
    s->auth_failures++;
    pop3_reply_err(s, "[AUTH] Authentication failed.");
    if (s->auth_failures >= (size_t)ctx_of(s)->cfg->max_auth_failures && !s->io.closing)
        pop3_session_close_after_output(s);
}

static void auth_done(void *arg, const struct auth_client_reply *r)
{
    struct pop3_session *s = arg;
    const struct pop3_server_ctx *ctx = ctx_of(s);
    static const struct mail_proxy_callbacks cb = {.done = proxy_done, .ended = proxy_ended};
    switch (mail_proxy_front_session_auth_done(&s->proxy->fs, r, ctx->proxy, &s->io, ctx->warden,
                                               &cb, s)) {
    case MAIL_PROXY_FRONT_AUTH_CLOSING:
    case MAIL_PROXY_FRONT_AUTH_STARTED:
        break;
    case MAIL_PROXY_FRONT_AUTH_TEMPFAIL:
        count_login(s, "unavailable");
        pop3_reply_err(s, "[SYS/TEMP] Temporary authentication failure; try again later.");
        break;
    case MAIL_PROXY_FRONT_AUTH_FAILED:
        login_failed(s);
        break;
    }
}

void pop3_proxy_cmd_pass(struct pop3_session *s, const char *user, const char *password)
{
    login_metrics_phase(lm(s), LOGIN_PHASE_PREAMBLE, s->proxy->started_us);
    s->busy = true;
    mail_proxy_front_session_login(&s->proxy->fs, ctx_of(s)->proxy, ctx_of(s)->auth, user, password,
                                   s->io.peer_ip, auth_done, s);
}

static void sasl_step(struct pop3_session *s, const char *response)
{
    struct buf challenge = {0};
    char *user = NULL, *password = NULL;
    switch (
        mail_proxy_front_session_sasl_step(&s->proxy->fs, response, &challenge, &user, &password)) {
    case MAIL_PROXY_FRONT_SASL_CHALLENGE: {
        struct buf line = {0};
        buf_printf(&line, "+ %s\r\n", challenge.data != NULL ? challenge.data : "");
        pop3_send_raw(s, line.data, line.len);
        buf_free(&line);
        s->sasl_waiting_client = true;
        pop3_parser_expect_line(s->parser);
        break;
    }
    case MAIL_PROXY_FRONT_SASL_DONE:
        pop3_proxy_cmd_pass(s, user, password);
        mail_proxy_front_session_wipe(&password);
        free(user);
        break;
    case MAIL_PROXY_FRONT_SASL_SYNTAX:
        pop3_reply_err(s, "Invalid SASL response.");
        break;
    case MAIL_PROXY_FRONT_SASL_FAILED:
        /* With the [AUTH] code CAPA's AUTH-RESP-CODE promises, as a backend. */
        login_failed(s);
        break;
    }
    buf_free(&challenge);
}

void pop3_proxy_cmd_auth(struct pop3_session *s, const char *mech, const char *initial)
{
    mail_proxy_front_session_sasl_begin(&s->proxy->fs, mech);
    sasl_step(s, initial);
}

void pop3_proxy_auth_continue(struct pop3_session *s, const char *line, size_t len)
{
    s->sasl_waiting_client = false;
    if (!mail_proxy_front_session_sasl_continue(&s->proxy->fs, line, len)) {
        pop3_reply_err(s, len == 1 ? "Authentication aborted." : "Invalid SASL response.");
        return;
    }
    sasl_step(s, line);
}

bool pop3_proxy_shutdown(struct pop3_session *s, const char *reason)
{
    char line[160];
    snprintf(line, sizeof(line), "-ERR [SYS/TEMP] %s\r\n", reason);
    return mail_proxy_front_session_shutdown(s->proxy != NULL ? &s->proxy->fs : NULL, line);
}

void pop3_proxy_session_free(struct pop3_session *s)
{
    struct pop3_proxy_session *ps = s->proxy;
    if (ps == NULL)
        return;
    mail_proxy_front_session_release(&ps->fs, &s->io, lm(s));
    free(ps);
    s->proxy = NULL;
}
