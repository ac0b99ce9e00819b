/* Commands valid in both states: CAPA (RFC 2449) and QUIT (which in the
 * TRANSACTION state enters UPDATE: the marked messages are expunged). */
#include "protocols/pop3/pop3-private.h"

#include "core/log.h"

#include <stdio.h>

void pop3_capabilities(const struct pop3_session *s, struct buf *out)
{
    const struct pop3_server_ctx *ctx = pop3_server_context(s->server);
    /* Only what is implemented: clients take every word literally. */
    buf_append_str(out, "TOP\r\nUIDL\r\nRESP-CODES\r\nPIPELINING\r\nAUTH-RESP-CODE\r\n");
    if (s->state == POP3_STATE_AUTHORIZATION) {
        if (s->secured)
            buf_append_str(out, "USER\r\nSASL PLAIN LOGIN\r\n");
        if (!s->io.tls && ctx->tls != NULL)
            buf_append_str(out, "STLS\r\n");
        if (s->io.trusted)
            buf_append_str(out, "XCLIENT\r\n");
    }
    buf_append_str(out, "IMPLEMENTATION Petrel\r\n");
}

static void cmd_capa(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (cmd->arg_count != 0) {
        pop3_reply_err(s, "CAPA takes no arguments.");
        return;
    }
    struct buf caps = {0};
    pop3_capabilities(s, &caps);
    pop3_reply_multiline(s, "Capability list follows", &caps);
    buf_free(&caps);
}

static void cmd_quit(struct pop3_session *s, const struct pop3_command *cmd)
{
    (void)cmd;
    if (s->state != POP3_STATE_TRANSACTION) {
        pop3_reply_ok(s, "Logging out.");
        pop3_session_close_after_output(s);
        return;
    }
    size_t expunged = 0;
    struct petrel_error err;
    bool ok = pop3_maildrop_commit(&s->drop, &expunged, &err);
    char uq[300];
    log_info(POP3_COMPONENT, "logged out",
             "session=%s user=%s retrieved=%zu retrieved_bytes=%llu deleted=%zu expunged=%zu "
             "result=%s",
             s->io.id, log_quote(uq, sizeof(uq), s->io.username), s->retrieved,
             (unsigned long long)s->retrieved_bytes, s->drop.deleted_count, expunged,
             ok ? "ok" : "failed");
    mail_session_io_logout(&s->io);
    if (ok) {
        pop3_reply_ok(s, "Logging out, %zu messages deleted.", s->drop.deleted_count);
    } else {
        log_warn(POP3_COMPONENT, "deleting messages failed", "session=%s error=\"%s\"", s->io.id,
                 err.message);
        pop3_reply_err(s, "[SYS/TEMP] Some deleted messages could not be removed.");
    }
    pop3_session_close_after_output(s);
}

const struct pop3_command_def pop3_commands_any[] = {
    {"CAPA", POP3_ANY_STATE, cmd_capa},
    {"QUIT", POP3_ANY_STATE, cmd_quit},
    {NULL, 0, NULL},
};
