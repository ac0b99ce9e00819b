/* TRANSACTION state: STAT, LIST, UIDL, RETR, TOP, DELE, RSET, NOOP
 * (RFC 1939) over the session's maildrop. Sizes are octets as RETR sends
 * them (CRLF line ends, before byte-stuffing); message numbers are those of
 * the login snapshot. */
#include "protocols/pop3/pop3-private.h"

#include "core/log.h"
#include "protocols/pop3/pop3-uidl.h"

#include <stdio.h>
#include <string.h>

/* The message named by `arg`; replies -ERR itself when there is none. */
static struct pop3_message *message_arg(struct pop3_session *s, const char *arg, uint64_t *number)
{
    if (!pop3_parse_number(arg, UINT32_MAX, number)) {
        pop3_reply_err(s, "Invalid message number.");
        return NULL;
    }
    const char *why = NULL;
    struct pop3_message *msg = pop3_maildrop_get(&s->drop, *number, &why);
    if (msg == NULL)
        pop3_reply_err(s, "%s", why);
    return msg;
}

static void cmd_stat(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (cmd->arg_count != 0) {
        pop3_reply_err(s, "STAT takes no arguments.");
        return;
    }
    const struct pop3_maildrop *d = &s->drop;
    pop3_reply_ok(s, "%zu %llu", d->count - d->deleted_count,
                  (unsigned long long)(d->total_size - d->deleted_size));
}

static void append_uidl(struct pop3_session *s, struct buf *out, const struct pop3_message *msg)
{
    pop3_uidl_format(pop3_server_context(s->server)->cfg->uidl_format, msg->uid,
                     s->drop.uid_validity, out);
}

/* LIST and UIDL: one message, or every message not deleted. */
static void list_or_uidl(struct pop3_session *s, const struct pop3_command *cmd, bool uidl)
{
    if (cmd->arg_count > 1) {
        pop3_reply_err(s, "%s takes at most a message number.", uidl ? "UIDL" : "LIST");
        return;
    }
    struct buf out = {0};
    if (cmd->arg_count == 1) {
        uint64_t number = 0;
        struct pop3_message *msg = message_arg(s, cmd->args[0], &number);
        if (msg == NULL)
            return;
        buf_printf(&out, "%llu ", (unsigned long long)number);
        if (uidl)
            append_uidl(s, &out, msg);
        else
            buf_printf(&out, "%llu", (unsigned long long)msg->size);
        pop3_reply_ok(s, "%s", out.data);
        buf_free(&out);
        return;
    }
    const struct pop3_maildrop *d = &s->drop;
    for (size_t i = 0; i < d->count; i++) {
        const struct pop3_message *msg = &d->msgs[i];
        if (msg->deleted)
            continue;
        buf_printf(&out, "%zu ", i + 1);
        if (uidl)
            append_uidl(s, &out, msg);
        else
            buf_printf(&out, "%llu", (unsigned long long)msg->size);
        buf_append_str(&out, "\r\n");
    }
    char first[96];
    if (uidl)
        snprintf(first, sizeof(first), "Unique-id listing follows");
    else
        snprintf(first, sizeof(first), "%zu messages (%llu octets)", d->count - d->deleted_count,
                 (unsigned long long)(d->total_size - d->deleted_size));
    pop3_reply_multiline(s, first, &out);
    buf_free(&out);
}

static void cmd_list(struct pop3_session *s, const struct pop3_command *cmd)
{
    list_or_uidl(s, cmd, false);
}

static void cmd_uidl(struct pop3_session *s, const struct pop3_command *cmd)
{
    list_or_uidl(s, cmd, true);
}

/* RETR and TOP: the message's bytes, streamed. */
static void send_message(struct pop3_session *s, const struct pop3_command *cmd, bool top)
{
    if (cmd->arg_count != (top ? 2u : 1u)) {
        pop3_reply_err(s, top ? "TOP needs a message number and a line count."
                              : "RETR needs a message number.");
        return;
    }
    uint64_t lines = 0;
    if (top && !pop3_parse_number(cmd->args[1], UINT64_MAX, &lines)) {
        pop3_reply_err(s, "Invalid line count.");
        return;
    }
    uint64_t number = 0;
    struct pop3_message *msg = message_arg(s, cmd->args[0], &number);
    if (msg == NULL)
        return;
    struct petrel_error err;
    struct mailbox_message_data *data = mailbox_message_open(s->drop.box, msg->uid, &err);
    if (data == NULL) {
        if (err.code == PETREL_ERR_NOT_FOUND) {
            pop3_reply_err(s, "Message %llu no longer exists (expunged by another session).",
                           (unsigned long long)number);
            return;
        }
        log_warn(POP3_COMPONENT, "cannot read a message", "session=%s uid=%u error=\"%s\"",
                 s->io.id, msg->uid, err.message);
        pop3_reply_err(s, "[SYS/TEMP] Cannot read the message now.");
        return;
    }
    if (!top) {
        s->retrieved++;
        s->retrieved_bytes += msg->size;
        if (pop3_server_context(s->server)->cfg->retr_sets_seen &&
            !pop3_maildrop_set_seen(&s->drop, msg, &err) && err.code != PETREL_ERR_NOT_FOUND)
            log_warn(POP3_COMPONENT, "cannot set \\Seen", "session=%s uid=%u error=\"%s\"",
                     s->io.id, msg->uid, err.message);
    }
    char first[64];
    if (top)
        snprintf(first, sizeof(first), "Top of message follows");
    else
        snprintf(first, sizeof(first), "%llu octets", (unsigned long long)msg->size);
    pop3_session_stream(s, first, data, top, lines);
}

static void cmd_retr(struct pop3_session *s, const struct pop3_command *cmd)
{
    send_message(s, cmd, false);
}

static void cmd_top(struct pop3_session *s, const struct pop3_command *cmd)
{
    send_message(s, cmd, true);
}

static void cmd_dele(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (cmd->arg_count != 1) {
        pop3_reply_err(s, "DELE needs a message number.");
        return;
    }
    uint64_t number = 0;
    struct pop3_message *msg = message_arg(s, cmd->args[0], &number);
    if (msg == NULL)
        return;
    pop3_maildrop_delete(&s->drop, msg);
    pop3_reply_ok(s, "Message %llu marked for deletion.", (unsigned long long)number);
}

static void cmd_rset(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (cmd->arg_count != 0) {
        pop3_reply_err(s, "RSET takes no arguments.");
        return;
    }
    pop3_maildrop_undelete_all(&s->drop);
    pop3_reply_ok(s, "Maildrop has %zu messages (%llu octets).", s->drop.count,
                  (unsigned long long)s->drop.total_size);
}

static void cmd_noop(struct pop3_session *s, const struct pop3_command *cmd)
{
    if (cmd->arg_count != 0) {
        pop3_reply_err(s, "NOOP takes no arguments.");
        return;
    }
    pop3_reply_ok(s, "Nothing done.");
}

const struct pop3_command_def pop3_commands_mail[] = {
    {"STAT", POP3_IN(POP3_STATE_TRANSACTION), cmd_stat},
    {"LIST", POP3_IN(POP3_STATE_TRANSACTION), cmd_list},
    {"UIDL", POP3_IN(POP3_STATE_TRANSACTION), cmd_uidl},
    {"RETR", POP3_IN(POP3_STATE_TRANSACTION), cmd_retr},
    {"TOP", POP3_IN(POP3_STATE_TRANSACTION), cmd_top},
    {"DELE", POP3_IN(POP3_STATE_TRANSACTION), cmd_dele},
    {"RSET", POP3_IN(POP3_STATE_TRANSACTION), cmd_rset},
    {"NOOP", POP3_IN(POP3_STATE_TRANSACTION), cmd_noop},
    {NULL, 0, NULL},
};
