/* IMAP QUOTA (RFC 9208) when imap.imap_quota is on: GETQUOTAROOT,
 * GETQUOTA, SETQUOTA (refused). One quota root per user, named
 * quota.quota_name, holding the personal namespace (as Dovecot's quota
 * plugin with one root). A resource without a limit is left out of the
 * QUOTA response, and STORAGE counts KiB rounded up, as Dovecot 2.3 does.
 * The root name is always a quoted string, as RFC 9208's examples write it. */
#include "protocols/imap/imap-private.h"

#include "core/buf.h"
#include "protocols/imap/imap-quote.h"
#include "storage/namespace.h"
#include "storage/quota/quota-module.h"

#include <stdlib.h>
#include <string.h>

static bool quota_on(struct imap_session *s)
{
    if (s->ctx->cfg->imap_quota)
        return true;
    imap_reply_bad(s, "Unknown command.");
    return false;
}

static unsigned quote_flags(const struct imap_session *s)
{
    return s->utf8_accept ? IMAP_QUOTE_UTF8 : 0;
}

static uint64_t kib(uint64_t bytes)
{
    return bytes / 1024 + (bytes % 1024 != 0);
}

/* "* QUOTA <root> (STORAGE u l MESSAGE u l)" with the limited resources. */
static void send_quota(struct imap_session *s, const struct quota_report *r)
{
    struct buf line = {0};
    buf_append_str(&line, "* QUOTA ");
    imap_quote_string(&line, r->name, strlen(r->name), quote_flags(s));
    buf_append_str(&line, " (");
    bool first = true;
    if (r->limits.storage != 0) {
        buf_printf(&line, "STORAGE %llu %llu", (unsigned long long)kib(r->usage.storage),
                   (unsigned long long)kib(r->limits.storage));
        first = false;
    }
    if (r->limits.messages != 0)
        buf_printf(&line, "%sMESSAGE %llu %llu", first ? "" : " ",
                   (unsigned long long)r->usage.messages, (unsigned long long)r->limits.messages);
    buf_append_str(&line, ")");
    imap_send(s, "%s", line.data);
    buf_free(&line);
}

/* The user's report; replies NO itself and returns false on failure. */
static bool report(struct imap_session *s, struct quota_report *r)
{
    struct petrel_error err;
    if (quota_user_report(s->user, r, &err))
        return true;
    if (err.code == PETREL_ERR_NOT_FOUND) {
        imap_reply_no(s, "Quota root doesn't exist.");
        return false;
    }
    imap_reply_no(s, "[SERVERBUG] Internal quota calculation error.");
    return false;
}

static void cmd_getquotaroot(struct imap_session *s, const struct imap_command *cmd)
{
    if (!quota_on(s))
        return;
    if (cmd->arg_count != 1 || cmd->args[0].type == IMAP_ARG_LIST) {
        imap_reply_bad(s, "GETQUOTAROOT needs a mailbox name.");
        return;
    }
    const struct namespace_config *ns;
    char *name;
    if (!imap_resolve_folder(s, &cmd->args[0], &ns, &name))
        return;
    /* Dovecot 2.3 answers for a folder that does not exist (yet) too: its
     * root is known from the name alone. */
    bool personal = ns->type == NAMESPACE_PERSONAL;
    free(name);
    struct quota_report r;
    if (personal && !report(s, &r))
        return;
    struct buf line = {0};
    buf_append_str(&line, "* QUOTAROOT ");
    /* the mailbox as the client wrote it */
    imap_quote_astring(&line, imap_arg_astring(&cmd->args[0]), cmd->args[0].len, quote_flags(s));
    bool shown = personal && !r.hidden;
    if (shown) {
        buf_append_char(&line, ' ');
        imap_quote_string(&line, r.name, strlen(r.name), quote_flags(s));
    }
    imap_send(s, "%s", line.data);
    buf_free(&line);
    if (shown)
        send_quota(s, &r);
    imap_reply_ok(s, "Getquotaroot completed.");
}

static void cmd_getquota(struct imap_session *s, const struct imap_command *cmd)
{
    if (!quota_on(s))
        return;
    const char *root = cmd->arg_count == 1 ? imap_arg_astring(&cmd->args[0]) : NULL;
    if (root == NULL) {
        imap_reply_bad(s, "GETQUOTA needs a quota root.");
        return;
    }
    struct quota_report r;
    if (!report(s, &r))
        return;
    if (r.hidden || strcmp(root, r.name) != 0) {
        imap_reply_no(s, "Quota root doesn't exist.");
        return;
    }
    send_quota(s, &r);
    imap_reply_ok(s, "Getquota completed.");
}

static void cmd_setquota(struct imap_session *s, const struct imap_command *cmd)
{
    if (!quota_on(s))
        return;
    if (cmd->arg_count != 2 || cmd->args[1].type != IMAP_ARG_LIST) {
        imap_reply_bad(s, "SETQUOTA needs a quota root and a list of limits.");
        return;
    }
    /* Limits come from the userdb only (document 3: no set operation). */
    imap_reply_no(s, "[NOPERM] Permission denied");
}

const struct imap_command_def imap_commands_quota[] = {
    {"GETQUOTAROOT", IMAP_AUTHED, cmd_getquotaroot},
    {"GETQUOTA", IMAP_AUTHED, cmd_getquota},
    {"SETQUOTA", IMAP_AUTHED, cmd_setquota},
    {NULL, 0, NULL},
};
