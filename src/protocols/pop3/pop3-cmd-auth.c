/* AUTHORIZATION state: STLS (RFC 2595), USER/PASS (RFC 1939), AUTH
 * (RFC 5034: PLAIN and LOGIN with initial responses). Passwords are
 * checked by the auth service, which also runs the SASL exchange (this file
 * relays it) and delays failed attempts per client IP. Response codes:
 * [AUTH] for refused credentials, [SYS/TEMP] when the auth service or the
 * storage cannot answer now (RFC 2449, RFC 3206). */
#include "protocols/pop3/pop3-private.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "clients/auth/auth-sasl.h"
#include "storage/quota/quota-module.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cmd_stls(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (cmd->arg_count != 0) {
        pop3_reply_err(s, "STLS takes no arguments.");
        return;
    }
    if (pop3_server_context(s->server)->tls == NULL) {
        pop3_reply_err(s, "TLS is not configured.");
        return;
    }
    if (s->io.tls) {
        pop3_reply_err(s, "TLS is already active.");
        return;
    }
    /* A USER given in clear text does not carry over. */
    free(s->user_arg);
    s->user_arg = NULL;
    pop3_reply_ok(s, "Begin TLS negotiation now.");
    if (!pop3_session_starttls(s)) {
        log_error(POP3_COMPONENT, "STLS failed", "session=%s", s->io.id);
        pop3_session_close_after_output(s);
    }
}

static bool plaintext_refused(struct pop3_session *s)
{
    if (s->secured)
        return false;
    pop3_reply_err(s, "[AUTH] Plaintext authentication disallowed on non-secure connections; "
                      "use STLS.");
    return true;
}

static void count_login(struct pop3_session *s, const char *result)
{
    const char *values[] = {result};
    metric_add(metric_series_get(pop3_server_context(s->server)->m.logins, values), 1);
}

/* The auth service's answer to PASS or AUTH. */
static void auth_done(const struct auth_client_reply *r, void *ctx)
{
    struct pop3_session *s = ctx;
    if (r->status == AUTH_CLIENT_CONTINUE) {
        pop3_session_sasl_challenge(s, r->challenge != NULL ? r->challenge : "");
        return;
    }
    s->auth_req = NULL;
    s->sasl_waiting_client = false;
    if (r->status == AUTH_CLIENT_OK && r->user != NULL) {
        if (!pop3_session_login(
                s, r->user, r->userdb != NULL ? (const char *const *)r->userdb->groups : NULL)) {
            count_login(s, "refused");
            return;
        }
        count_login(s, "ok");
        /* POP3 enforces nothing (it never saves), but its expunges mark the
         * quota mirror, which skips the folders these rules mark ignore. */
        quota_user_set(s->user, r->userdb != NULL ? r->userdb->quota_rule : NULL);
        char uq[300];
        log_info(POP3_COMPONENT, "logged in",
                 "session=%s user=%s peer=%s tls=%s messages=%zu octets=%llu", s->io.id,
                 log_quote(uq, sizeof(uq), r->user), s->io.peer, s->io.tls ? "yes" : "no",
                 s->drop.count, (unsigned long long)s->drop.total_size);
        pop3_reply_ok(s, "Logged in.");
        return;
    }
    if (r->status == AUTH_CLIENT_ERROR || r->temporary) {
        count_login(s, "unavailable");
        pop3_reply_err(s, "[SYS/TEMP] Temporary authentication failure; try again later.");
        return;
    }
    count_login(s, "failed");
    s->auth_failures++;
    pop3_reply_err(s, "[AUTH] Authentication failed.");
    int64_t max = pop3_server_context(s->server)->cfg->max_auth_failures;
    if (s->auth_failures >= (size_t)max && !s->io.closing) {
        log_info(POP3_COMPONENT, "closing", "session=%s peer=%s reason=\"too many failed logins\"",
                 s->io.id, s->io.peer);
        pop3_session_close_after_output(s);
    }
}

static void cmd_user(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (cmd->arg_count != 1) {
        pop3_reply_err(s, "USER needs a user name.");
        return;
    }
    if (plaintext_refused(s))
        return;
    free(s->user_arg);
    s->user_arg = xstrdup(cmd->args[0]);
    pop3_reply_ok(s, "Send the password with PASS.");
}

static void cmd_pass(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (s->user_arg == NULL) {
        pop3_reply_err(s, "Send USER first.");
        return;
    }
    if (plaintext_refused(s))
        return;
    /* The whole rest of the line: a password may contain spaces. */
    char *password = xstrndup(cmd->rest, cmd->rest_len);
    char *user = s->user_arg;
    s->user_arg = NULL;
    if (pop3_server_context(s->server)->proxy != NULL) {
        pop3_proxy_cmd_pass(s, user, password);
        OPENSSL_cleanse(password, cmd->rest_len);
        free(password);
        free(user);
        return;
    }
    s->busy = true;
    s->auth_req = auth_client_verify(pop3_server_context(s->server)->auth, user, password, "pop3",
                                     s->io.peer_ip, auth_done, s);
    OPENSSL_cleanse(password, cmd->rest_len);
    free(password);
    free(user);
}

static void cmd_auth(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (cmd->arg_count == 0) {
        /* Not in RFC 5034, but what clients from before it send to learn the
         * mechanisms (and what other servers answer). */
        struct buf list = {0};
        if (s->secured)
            buf_append_str(&list, "PLAIN\r\nLOGIN\r\n");
        pop3_reply_multiline(s, "Mechanisms follow", &list);
        buf_free(&list);
        return;
    }
    if (cmd->arg_count > 2) {
        pop3_reply_err(s, "AUTH takes a mechanism and an optional initial response.");
        return;
    }
    if (plaintext_refused(s))
        return;
    const char *mech = cmd->args[0];
    if (sasl_mech_parse(mech) == SASL_MECH_UNKNOWN) {
        pop3_reply_err(s, "Unsupported authentication mechanism.");
        return;
    }
    const char *initial = NULL;
    if (cmd->arg_count == 2)
        initial = strcmp(cmd->args[1], "=") == 0 ? "" : cmd->args[1]; /* RFC 5034 4: "=" is empty */
    free(s->user_arg);
    s->user_arg = NULL;
    if (pop3_server_context(s->server)->proxy != NULL) {
        pop3_proxy_cmd_auth(s, mech, initial);
        return;
    }
    s->busy = true;
    s->auth_req = auth_client_sasl_begin(pop3_server_context(s->server)->auth, mech, "pop3",
                                         s->io.peer_ip, initial, auth_done, s);
}

void pop3_auth_continue(struct pop3_session *s, const char *line, size_t len)
{
    if (pop3_server_context(s->server)->proxy != NULL) {
        pop3_proxy_auth_continue(s, line, len);
        return;
    }
    s->sasl_waiting_client = false;
    if (s->auth_req == NULL) {
        /* Cannot happen: a line is expected only while an exchange runs. */
        pop3_reply_err(s, "No authentication in progress.");
        return;
    }
    if ((len == 1 && line[0] == '*') || strlen(line) != len) {
        /* RFC 5034 4: the client cancels the exchange. */
        auth_client_cancel(s->auth_req);
        s->auth_req = NULL;
        pop3_reply_err(s, len == 1 ? "Authentication aborted." : "Invalid SASL response.");
        return;
    }
    s->busy = true;
    auth_client_sasl_continue(s->auth_req, line);
}

/* Dovecot's XCLIENT for POP3 (ADDR, PORT, SESSION, TTL): a login proxy in
 * login_trusted_networks passes on the client's real address before it
 * logs in on the client's behalf. Anyone else is refused: believed, it
 * would let a client choose the address its penalties and logs go to. */
static void cmd_xclient(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (!s->io.trusted) {
        pop3_reply_err(s, "XCLIENT is allowed only from login_trusted_networks.");
        return;
    }
    if (s->user_arg != NULL || s->auth_req != NULL) {
        pop3_reply_err(s, "XCLIENT must come before USER or AUTH.");
        return;
    }
    struct mail_forward f;
    mail_forward_init(&f);
    const char *why = NULL;
    if (!mail_forward_xclient(&f, MAIL_FORWARD_RAW, cmd->rest, cmd->rest_len, &why)) {
        pop3_reply_err(s, "Invalid XCLIENT: %s.", why);
        return;
    }
    char was[80];
    snprintf(was, sizeof(was), "%s", s->io.peer);
    mail_session_io_forward(&s->io, &f);
    log_debug(POP3_COMPONENT, "client forwarded", "session=%s proxy=%s peer=%s", s->io.id, was,
              s->io.peer);
    pop3_reply_ok(s, "Updated.");
}

const struct pop3_command_def pop3_commands_auth[] = {
    {"XCLIENT", POP3_IN(POP3_STATE_AUTHORIZATION), cmd_xclient},
    {"STLS", POP3_IN(POP3_STATE_AUTHORIZATION), cmd_stls},
    {"USER", POP3_IN(POP3_STATE_AUTHORIZATION), cmd_user},
    {"PASS", POP3_IN(POP3_STATE_AUTHORIZATION), cmd_pass},
    {"AUTH", POP3_IN(POP3_STATE_AUTHORIZATION), cmd_auth},
    {NULL, 0, NULL},
};
