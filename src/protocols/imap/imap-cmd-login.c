/* Not-authenticated state: STARTTLS, LOGIN, AUTHENTICATE (PLAIN, LOGIN,
 * SASL-IR). Passwords are checked by the auth service; the SASL exchange
 * itself runs there too, this file relays it. */
#include "protocols/imap/imap-private.h"

#include "core/base64.h"
#include "core/log.h"
#include "storage/quota/quota-module.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#define IMAP_MAX_AUTH_FAILURES 3

static void cmd_starttls(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    if (s->ctx->tls == NULL) {
        imap_reply_bad(s, "TLS is not configured.");
        return;
    }
    if (s->io.tls) {
        imap_reply_bad(s, "TLS is already active.");
        return;
    }
    imap_reply_ok(s, "Begin TLS negotiation now.");
    if (!imap_session_starttls(s)) {
        log_error(IMAP_COMPONENT, "STARTTLS failed", "session=%s", s->io.id);
        s->state = IMAP_STATE_LOGOUT;
        imap_session_close_after_output(s);
    }
}

static bool plaintext_refused(struct imap_session *s)
{
    if (s->secured)
        return false;
    imap_reply_no(s, "[PRIVACYREQUIRED] Plaintext authentication disallowed on non-secure "
                     "connections; use STARTTLS.");
    return true;
}

static void count_login(struct imap_session *s, const char *result)
{
    const char *values[] = {result};
    metric_add(metric_series_get(s->ctx->m.logins, values), 1);
}

/* The userdb's quota rules and over-flag reach the storage's quota. */
static void quota_login(struct imap_session *s, const struct userdb_entry *u)
{
    const char *over_flag = NULL;
    for (size_t i = 0; u != NULL && i < u->extra_count; i++) {
        if (strcmp(u->extra[i].key, "quota_over_flag") == 0)
            over_flag = u->extra[i].value;
    }
    quota_user_login(s->user, u != NULL ? u->quota_rule : NULL, over_flag);
}

/* The auth service's answer to LOGIN or AUTHENTICATE. */
static void auth_done(const struct auth_client_reply *r, void *ctx)
{
    struct imap_session *s = ctx;
    if (r->status == AUTH_CLIENT_CONTINUE) {
        /* SASL challenge: relay it and wait for the client's line. */
        imap_send(s, "+ %s", r->challenge != NULL ? r->challenge : "");
        s->sasl_waiting_client = true;
        s->busy = false;
        return;
    }
    s->auth_req = NULL;
    s->sasl_waiting_client = false;
    s->auth_sasl = false;
    if (r->status == AUTH_CLIENT_OK && r->user != NULL) {
        if (!imap_session_login(
                s, r->user, r->userdb != NULL ? (const char *const *)r->userdb->groups : NULL)) {
            count_login(s, "refused");
            imap_reply_no(s, "[UNAVAILABLE] Cannot serve this account now; try again later.");
            return;
        }
        count_login(s, "ok");
        quota_login(s, r->userdb);
        char uq[300];
        log_info(IMAP_COMPONENT, "logged in", "session=%s user=%s peer=%s tls=%s", s->io.id,
                 log_quote(uq, sizeof(uq), r->user), s->io.peer, s->io.tls ? "yes" : "no");
        struct buf caps = {0};
        imap_capabilities(s, &caps);
        imap_reply_ok(s, "[CAPABILITY %s] Logged in.", caps.data);
        buf_free(&caps);
        return;
    }
    if (r->status == AUTH_CLIENT_ERROR || r->temporary) {
        count_login(s, "unavailable");
        imap_reply_no(s, "[UNAVAILABLE] Temporary authentication failure.");
        return;
    }
    count_login(s, "failed");
    s->auth_failures++;
    imap_reply_no(s, "[AUTHENTICATIONFAILED] Authentication failed.");
    if (s->auth_failures >= IMAP_MAX_AUTH_FAILURES) {
        imap_send(s, "* BYE Too many failed logins.");
        s->state = IMAP_STATE_LOGOUT;
        imap_session_close_after_output(s);
    }
}

static void cmd_login(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count != 2 || cmd->args[0].type == IMAP_ARG_LIST ||
        cmd->args[1].type == IMAP_ARG_LIST) {
        imap_reply_bad(s, "LOGIN needs a user name and a password.");
        return;
    }
    if (plaintext_refused(s))
        return;
    const char *user = imap_arg_astring(&cmd->args[0]);
    const char *password = imap_arg_astring(&cmd->args[1]);
    if (strlen(user) != cmd->args[0].len || strlen(password) != cmd->args[1].len) {
        imap_reply_bad(s, "NUL bytes are not allowed in a user name or password.");
        return;
    }
    if (s->ctx->proxy != NULL) {
        imap_proxy_cmd_login(s, user, password);
        return;
    }
    s->busy = true;
    s->auth_req = auth_client_verify(s->ctx->auth, user, password, "imap",
                                     s->io.peer_ip, auth_done, s);
}

static void cmd_authenticate(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count < 1 || cmd->arg_count > 2 || cmd->args[0].type != IMAP_ARG_ATOM) {
        imap_reply_bad(s, "AUTHENTICATE needs a mechanism name.");
        return;
    }
    if (plaintext_refused(s))
        return;
    const char *mech = cmd->args[0].str;
    if (sasl_mech_parse(mech) == SASL_MECH_UNKNOWN) {
        imap_reply_no(s, "Unsupported authentication mechanism.");
        return;
    }
    const char *initial = NULL;
    if (cmd->arg_count == 2) {
        initial = imap_arg_astring(&cmd->args[1]);
        if (initial == NULL) {
            imap_reply_bad(s, "Bad initial response.");
            return;
        }
        if (strcmp(initial, "=") == 0) /* RFC 4959: an empty initial response */
            initial = "";
    }
    if (s->ctx->proxy != NULL) {
        imap_proxy_cmd_authenticate(s, mech, initial);
        return;
    }
    s->busy = true;
    s->auth_sasl = true;
    s->auth_req = auth_client_sasl_begin(s->ctx->auth, mech, "imap",
                                         s->io.peer_ip, initial, auth_done, s);
}

void imap_authenticate_continue(struct imap_session *s, const char *line, size_t len)
{
    if (s->ctx->proxy != NULL) {
        imap_proxy_cmd_authenticate_continue(s, line, len);
        return;
    }
    s->sasl_waiting_client = false;
    if (len == 1 && line[0] == '*') {
        /* RFC 3501: the client cancels the exchange. */
        auth_client_cancel(s->auth_req);
        s->auth_req = NULL;
        s->auth_sasl = false;
        imap_reply_bad(s, "Authentication aborted.");
        return;
    }
    s->busy = true;
    auth_client_sasl_continue(s->auth_req, line);
}

const struct imap_command_def imap_commands_login[] = {
    {"STARTTLS", IMAP_IN(IMAP_STATE_NOT_AUTHENTICATED), cmd_starttls},
    {"LOGIN", IMAP_IN(IMAP_STATE_NOT_AUTHENTICATED), cmd_login},
    {"AUTHENTICATE", IMAP_IN(IMAP_STATE_NOT_AUTHENTICATED), cmd_authenticate},
    {NULL, 0, NULL},
};
