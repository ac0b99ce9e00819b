/* POP3 in proxy mode (a login proxy's front, docs/login-proxy.md): the
 * same session code in the AUTHORIZATION state, with no storage; PASS and
 * AUTH check the password with the auth service (the SASL exchange runs
 * here, since the backend needs the password too), then protocols/common/
 * mail-proxy.h finds the user's backend and logs in there (XCLIENT with
 * the client's address first), and the client gets the backend's own +OK
 * before the bytes are relayed both ways. */
#include "protocols/pop3/pop3-private.h"

#include "clients/auth/auth-sasl.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/tls-conn.h"
#include "protocols/pop3/pop3-proxy-login.h"
#include "protocols/pop3/pop3-server.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* As Dovecot's pop3-login: this many invalid commands close the connection. */
#define POP3_PROXY_MAX_BAD_COMMANDS 10

struct pop3_proxy_session {
    struct mail_proxy_auth *auth;
    struct mail_proxy *proxy;
    struct sasl_exchange sasl;
    bool sasl_running;
    char *login_name;
    char *password;
    int64_t started_us;
    int64_t tls_started_us;
    bool tls_done;
    bool preamble_counted;
    bool result_counted;
    unsigned bad_commands;
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

static void wipe(char **secret)
{
    if (*secret == NULL)
        return;
    OPENSSL_cleanse(*secret, strlen(*secret));
    free(*secret);
    *secret = NULL;
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
        s->proxy->tls_started_us = s->proxy->started_us;
}

void pop3_proxy_starttls(struct pop3_session *s)
{
    if (s->proxy != NULL)
        s->proxy->tls_started_us = clock_mono_us();
}

void pop3_proxy_tls_ready(struct pop3_session *s)
{
    struct pop3_proxy_session *ps = s->proxy;
    if (ps == NULL || ps->tls_done || ps->tls_started_us == 0)
        return;
    ps->tls_done = true;
    login_metrics_phase(lm(s), LOGIN_PHASE_TLS_HANDSHAKE, ps->tls_started_us);
}

void pop3_proxy_bad_command(struct pop3_session *s)
{
    struct pop3_proxy_session *ps = s->proxy;
    if (ps == NULL || s->state != POP3_STATE_AUTHORIZATION)
        return;
    if (!ps->preamble_counted) {
        ps->preamble_counted = true;
        login_metrics_result(lm(s), LOGIN_RESULT_PREAMBLE_ERROR);
        log_info(POP3_COMPONENT, "invalid command before login", "session=%s peer=%s", s->io.id,
                 s->io.peer);
    }
    if (++ps->bad_commands >= POP3_PROXY_MAX_BAD_COMMANDS && !s->io.closing) {
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
        char uq[300];
        log_info(POP3_COMPONENT, "proxied", "session=%s user=%s peer=%s tls=%s", s->io.id,
                 log_quote(uq, sizeof(uq), s->io.username != NULL ? s->io.username : ""),
                 s->io.peer, s->io.tls ? "yes" : "no");
        struct buf line = {0};
        buf_printf(&line, "+OK %s\r\n", text);
        pop3_send_raw(s, line.data, line.len);
        buf_free(&line);
        s->state = POP3_STATE_TRANSACTION;
        mail_session_io_clear_deadline(&s->io);
        metric_gauge_add(ctx->m.sessions_authorization, -1);
        metric_gauge_add(ctx->m.sessions_transaction, 1);
        ps->result_counted = true;
        /* Nothing is parsed any more: the relay moves the bytes. */
        pop3_parser_free(s->parser);
        s->parser = NULL;
        mail_proxy_relay(ps->proxy);
        return;
    }
    /* `text` lives in the proxy: the reply goes first. */
    struct mail_proxy *done = ps->proxy;
    ps->proxy = NULL;
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

static void auth_done(void *arg, const struct auth_client_reply *r)
{
    struct pop3_session *s = arg;
    struct pop3_proxy_session *ps = s->proxy;
    const struct pop3_server_ctx *ctx = ctx_of(s);
    ps->auth = NULL;
    if (s->io.closing) {
        wipe(&ps->password);
        return;
    }
    if (r->status == AUTH_CLIENT_OK && r->user != NULL) {
        const struct mail_proxy_request req = {
            .io = &s->io,
            .warden = ctx->warden,
            .login_name = ps->login_name,
            .user = r->user,
            .password = ps->password,
            .tag = mail_proxy_director_tag(r->userdb),
        };
        static const struct mail_proxy_callbacks cb = {.done = proxy_done, .ended = proxy_ended};
        ps->proxy = mail_proxy_start(ctx->proxy, &req, &cb, s);
        wipe(&ps->password);
        return;
    }
    wipe(&ps->password);
    if (r->status == AUTH_CLIENT_ERROR || r->temporary) {
        count_login(s, "unavailable");
        pop3_reply_err(s, "[SYS/TEMP] Temporary authentication failure; try again later.");
        return;
    }
    count_login(s, "failed");
    s->auth_failures++;
    pop3_reply_err(s, "[AUTH] Authentication failed.");
    if (s->auth_failures >= (size_t)ctx->cfg->max_auth_failures && !s->io.closing)
        pop3_session_close_after_output(s);
}

void pop3_proxy_cmd_pass(struct pop3_session *s, const char *user, const char *password)
{
    struct pop3_proxy_session *ps = s->proxy;
    login_metrics_phase(lm(s), LOGIN_PHASE_PREAMBLE, ps->started_us);
    free(ps->login_name);
    ps->login_name = xstrdup(user);
    wipe(&ps->password);
    ps->password = xstrdup(password);
    s->busy = true;
    ps->auth = mail_proxy_auth_start(ctx_of(s)->proxy, ctx_of(s)->auth, user, password,
                                     s->io.peer_ip, auth_done, s);
}

static void sasl_step(struct pop3_session *s, const char *response)
{
    struct pop3_proxy_session *ps = s->proxy;
    struct buf challenge = {0};
    enum sasl_step_result r = sasl_exchange_step(&ps->sasl, response, &challenge);
    switch (r) {
    case SASL_STEP_CHALLENGE: {
        struct buf line = {0};
        buf_printf(&line, "+ %s\r\n", challenge.data != NULL ? challenge.data : "");
        pop3_send_raw(s, line.data, line.len);
        buf_free(&line);
        s->sasl_waiting_client = true;
        pop3_parser_expect_line(s->parser);
        break;
    }
    case SASL_STEP_DONE: {
        char *user = xstrdup(ps->sasl.username);
        char *password = xstrdup(ps->sasl.password);
        sasl_exchange_free(&ps->sasl);
        ps->sasl_running = false;
        pop3_proxy_cmd_pass(s, user, password);
        wipe(&password);
        free(user);
        break;
    }
    case SASL_STEP_FAILED:
        sasl_exchange_free(&ps->sasl);
        ps->sasl_running = false;
        pop3_reply_err(s, "Invalid SASL response.");
        break;
    }
    buf_free(&challenge);
}

void pop3_proxy_cmd_auth(struct pop3_session *s, const char *mech, const char *initial)
{
    struct pop3_proxy_session *ps = s->proxy;
    sasl_exchange_init(&ps->sasl, sasl_mech_parse(mech));
    ps->sasl_running = true;
    sasl_step(s, initial);
}

void pop3_proxy_auth_continue(struct pop3_session *s, const char *line, size_t len)
{
    struct pop3_proxy_session *ps = s->proxy;
    s->sasl_waiting_client = false;
    if ((len == 1 && line[0] == '*') || strlen(line) != len || !ps->sasl_running) {
        if (ps->sasl_running)
            sasl_exchange_free(&ps->sasl);
        ps->sasl_running = false;
        pop3_reply_err(s, len == 1 ? "Authentication aborted." : "Invalid SASL response.");
        return;
    }
    sasl_step(s, line);
}

bool pop3_proxy_shutdown(struct pop3_session *s, const char *reason)
{
    struct pop3_proxy_session *ps = s->proxy;
    if (ps == NULL || !mail_proxy_relaying(ps->proxy))
        return false;
    char line[160];
    snprintf(line, sizeof(line), "-ERR [SYS/TEMP] %s\r\n", reason);
    mail_proxy_stop(ps->proxy, line);
    return true;
}

void pop3_proxy_session_free(struct pop3_session *s)
{
    struct pop3_proxy_session *ps = s->proxy;
    if (ps == NULL)
        return;
    if (ps->tls_started_us != 0 && !ps->tls_done && !ps->result_counted && !s->io.relayed &&
        s->io.bev != NULL && !tls_conn_established(s->io.bev))
        login_metrics_result(lm(s), LOGIN_RESULT_TLS_ERROR);
    mail_proxy_auth_cancel(ps->auth);
    mail_proxy_free(ps->proxy);
    if (ps->sasl_running)
        sasl_exchange_free(&ps->sasl);
    wipe(&ps->password);
    free(ps->login_name);
    free(ps);
    s->proxy = NULL;
}
