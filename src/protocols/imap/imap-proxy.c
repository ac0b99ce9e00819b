/* IMAP in proxy mode (a login proxy's front, docs/login-proxy.md): the
 * same session code before login, with no storage; LOGIN and AUTHENTICATE
 * check the password with the auth service (the SASL exchange runs here,
 * since the backend needs the password too), then protocols/common/
 * mail-proxy.h finds the user's backend, logs in there with the client's
 * address in ID, and the client gets the backend's own tagged OK (with its
 * CAPABILITY) before the bytes are relayed both ways. */
#include "protocols/imap/imap-private.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "net/tls-conn.h"
#include "protocols/common/mail-proxy-front-session.h"
#include "protocols/imap/imap-proxy-login.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAP_PROXY_MAX_AUTH_FAILURES 3
/* Dovecot 2.3's imap-login closes after this many invalid commands
 * (CLIENT_MAX_BAD_COMMANDS). */
#define IMAP_PROXY_MAX_BAD_COMMANDS 3

struct imap_proxy_session {
    struct mail_proxy_front_session fs;
};

/* ---------- the backend dialogue, for mail-proxy ---------- */

static void *dialogue_new(const struct mail_proxy_login_params *params)
{
    return imap_proxy_login_new(params);
}

static void dialogue_line(void *d, const char *line, size_t len, struct buf *out,
                          struct mail_proxy_login_result *result)
{
    imap_proxy_login_line(d, line, len, out, result);
}

static void dialogue_free(void *d)
{
    imap_proxy_login_free(d);
}

const struct mail_proxy_protocol imap_proxy_protocol = {
    .name = "imap",
    .sid_prefix = 'i',
    .plain = RING_PROTO_IMAP,
    .tls = RING_PROTO_IMAPS,
    .dialogue_new = dialogue_new,
    .dialogue_line = dialogue_line,
    .dialogue_free = dialogue_free,
};

/* ---------- helpers ---------- */

static const struct login_metrics *lm(const struct imap_session *s)
{
    return mail_proxy_front_metrics(s->ctx->proxy);
}

static int64_t timespec_us(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000 + t->tv_nsec / 1000;
}

static void count_login(struct imap_session *s, const char *result)
{
    const char *values[] = {result};
    metric_add(metric_series_get(s->ctx->m.logins, values), 1);
}

void imap_proxy_session_start(struct imap_session *s, bool tls)
{
    s->proxy = xcalloc(1, sizeof(*s->proxy));
    if (tls)
        s->proxy->fs.tls_started_us = timespec_us(&s->started);
}

void imap_proxy_starttls(struct imap_session *s)
{
    s->proxy->fs.tls_started_us = clock_mono_us();
}

void imap_proxy_tls_ready(struct imap_session *s)
{
    /* Outside proxy mode there is neither a session nor metrics. */
    if (s->proxy != NULL)
        mail_proxy_front_session_tls_ready(&s->proxy->fs, lm(s));
}

void imap_proxy_capabilities(const struct imap_session *s, struct buf *out)
{
    /* Before login only what the proxy itself does; the backend's own
     * list comes with its OK to the login. */
    buf_append_str(out, "IMAP4rev1 SASL-IR LITERAL+ ID");
    if (!s->io.tls && s->ctx->tls != NULL)
        buf_append_str(out, " STARTTLS");
    if (s->secured)
        buf_append_str(out, " AUTH=PLAIN AUTH=LOGIN");
    else
        buf_append_str(out, " LOGINDISABLED");
}

void imap_proxy_bad_command(struct imap_session *s)
{
    struct imap_proxy_session *ps = s->proxy;
    if (ps == NULL || s->state != IMAP_STATE_NOT_AUTHENTICATED)
        return;
    if (mail_proxy_front_session_bad_command(&ps->fs, lm(s), IMAP_COMPONENT, &s->io,
                                             IMAP_PROXY_MAX_BAD_COMMANDS)) {
        imap_send(s, "* BYE Too many invalid IMAP commands.");
        s->state = IMAP_STATE_LOGOUT;
        imap_session_close_after_output(s);
    }
}

/* ---------- after the backend ---------- */

static void proxy_ended(void *arg, const struct net_relay_stats *stats)
{
    struct imap_session *s = arg;
    metric_add(s->ctx->m.bytes_in, (double)stats->to_backend);
    metric_add(s->ctx->m.bytes_out, (double)stats->to_client);
    imap_session_free(s);
}

static void proxy_done(void *arg, enum mail_proxy_outcome outcome, const char *text)
{
    struct imap_session *s = arg;
    struct imap_proxy_session *ps = s->proxy;
    if (outcome == MAIL_PROXY_OK) {
        count_login(s, "ok");
        /* The backend's own answer (its CAPABILITY), under the client's
         * tag; the session reads no further command: the relay takes
         * whatever the client pipelined. */
        imap_send(s, "%s OK %s", s->tag, text);
        s->state = IMAP_STATE_AUTHENTICATED;
        metric_gauge_add(s->ctx->m.sessions_unauth, -1);
        metric_gauge_add(s->ctx->m.sessions_auth, 1);
        /* Nothing is parsed any more: the relay moves the bytes. */
        imap_parser_free(s->parser);
        s->parser = NULL;
        mail_proxy_front_session_relay(&ps->fs, &s->io, IMAP_COMPONENT);
        return;
    }
    /* `text` lives in the proxy: the reply goes first. */
    struct mail_proxy *done = ps->fs.proxy;
    ps->fs.proxy = NULL;
    switch (outcome) {
    case MAIL_PROXY_REJECTED:
        count_login(s, "failed");
        imap_reply_no(s, "%s", text[0] != '\0' ? text : "[AUTHENTICATIONFAILED] Login refused.");
        break;
    case MAIL_PROXY_TOO_MANY:
        count_login(s, "refused");
        imap_reply_no(s, "[UNAVAILABLE] Too many sessions for this account.");
        break;
    default:
        count_login(s, "unavailable");
        imap_reply_no(s, "[UNAVAILABLE] Temporary failure, try again later.");
        break;
    }
    mail_proxy_free(done);
}

static void login_failed(struct imap_session *s)
{
    count_login(s, "failed");
    s->auth_failures++;
    imap_reply_no(s, "[AUTHENTICATIONFAILED] Authentication failed.");
    if (s->auth_failures >= IMAP_PROXY_MAX_AUTH_FAILURES) {
        imap_send(s, "* BYE Too many failed logins.");
        s->state = IMAP_STATE_LOGOUT;
        imap_session_close_after_output(s);
    }
}

static void auth_done(void *arg, const struct auth_client_reply *r)
{
    struct imap_session *s = arg;
    static const struct mail_proxy_callbacks cb = {.done = proxy_done, .ended = proxy_ended};
    switch (mail_proxy_front_session_auth_done(&s->proxy->fs, r, s->ctx->proxy, &s->io,
                                               s->ctx->warden, &cb, s)) {
    case MAIL_PROXY_FRONT_AUTH_CLOSING:
    case MAIL_PROXY_FRONT_AUTH_STARTED:
        break;
    case MAIL_PROXY_FRONT_AUTH_TEMPFAIL:
        count_login(s, "unavailable");
        imap_reply_no(s, "[UNAVAILABLE] Temporary authentication failure.");
        break;
    case MAIL_PROXY_FRONT_AUTH_FAILED:
        login_failed(s);
        break;
    }
}

void imap_proxy_cmd_login(struct imap_session *s, const char *user, const char *password)
{
    login_metrics_phase(lm(s), LOGIN_PHASE_PREAMBLE, timespec_us(&s->started));
    s->busy = true;
    mail_proxy_front_session_login(&s->proxy->fs, s->ctx->proxy, s->ctx->auth, user, password,
                                   s->io.peer_ip, auth_done, s);
}

/* One step of the local SASL exchange: a challenge for the client, or
 * the name and password to check. */
static void sasl_step(struct imap_session *s, const char *response)
{
    struct buf challenge = {0};
    char *user = NULL, *password = NULL;
    switch (
        mail_proxy_front_session_sasl_step(&s->proxy->fs, response, &challenge, &user, &password)) {
    case MAIL_PROXY_FRONT_SASL_CHALLENGE:
        imap_send(s, "+ %s", challenge.data != NULL ? challenge.data : "");
        s->sasl_waiting_client = true; /* the next line is the client's answer */
        break;
    case MAIL_PROXY_FRONT_SASL_DONE:
        s->auth_sasl = false;
        imap_proxy_cmd_login(s, user, password);
        mail_proxy_front_session_wipe(&password);
        free(user);
        break;
    case MAIL_PROXY_FRONT_SASL_SYNTAX:
        /* BAD, as Dovecot's imap-login answers. */
        s->auth_sasl = false;
        imap_reply_bad(s, "Invalid SASL response.");
        break;
    case MAIL_PROXY_FRONT_SASL_FAILED:
        s->auth_sasl = false;
        login_failed(s);
        break;
    }
    buf_free(&challenge);
}

void imap_proxy_cmd_authenticate(struct imap_session *s, const char *mech, const char *initial)
{
    mail_proxy_front_session_sasl_begin(&s->proxy->fs, mech);
    s->auth_sasl = true;
    sasl_step(s, initial);
}

void imap_proxy_cmd_authenticate_continue(struct imap_session *s, const char *line, size_t len)
{
    s->sasl_waiting_client = false;
    if (!mail_proxy_front_session_sasl_continue(&s->proxy->fs, line, len)) {
        s->auth_sasl = false;
        imap_reply_bad(s, len == 1 ? "Authentication aborted." : "Invalid SASL response.");
        return;
    }
    sasl_step(s, line);
}

bool imap_proxy_shutdown(struct imap_session *s, const char *reason)
{
    char line[160];
    snprintf(line, sizeof(line), "* BYE %s\r\n", reason);
    return mail_proxy_front_session_shutdown(s->proxy != NULL ? &s->proxy->fs : NULL, line);
}

void imap_proxy_session_free(struct imap_session *s)
{
    struct imap_proxy_session *ps = s->proxy;
    if (ps == NULL)
        return;
    mail_proxy_front_session_release(&ps->fs, &s->io, lm(s));
    free(ps);
    s->proxy = NULL;
}
