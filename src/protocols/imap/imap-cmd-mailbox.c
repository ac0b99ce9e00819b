/* Authenticated-state commands on folders as a whole: NAMESPACE, LIST,
 * LSUB, CREATE, DELETE, RENAME, SUBSCRIBE, UNSUBSCRIBE, STATUS. Folder
 * names travel in modified UTF-7 (RFC 3501 5.1.3) and carry their
 * namespace's prefix; the storage sees UTF-8 names inside a namespace. */
#include "protocols/imap/imap-private.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "storage/mailbox-name.h"
#include "storage/subscription-store.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A wire name resolved to a namespace and the folder name inside it. */
struct imap_folder_ref {
    const struct namespace_config *ns;
    char *name; /* UTF-8, namespace separator; "INBOX" for the inbox */
};

void imap_reply_storage_error(struct imap_session *s, const struct petrel_error *err)
{
    switch (err->code) {
    case PETREL_ERR_NOT_FOUND:
        imap_reply_no(s, "[NONEXISTENT] Mailbox does not exist.");
        return;
    case PETREL_ERR_EXISTS:
        imap_reply_no(s, "[ALREADYEXISTS] Mailbox already exists.");
        return;
    case PETREL_ERR_INVALID:
    case PETREL_ERR_UNSUPPORTED:
        imap_reply_no(s, "[CANNOT] %s", err->message);
        return;
    default:
        log_error(IMAP_COMPONENT, "storage error", "session=%s command=%s error=\"%s\"", s->id,
                  s->command, err->message);
        imap_reply_no(s, "[SERVERBUG] Internal error; it has been logged.");
        return;
    }
}

static const struct mail_config *mail_cfg(const struct imap_session *s)
{
    return mail_storage_config(mail_user_storage(s->user));
}

/* Decodes a mailbox argument and finds its namespace (the longest matching
 * prefix; the empty prefix catches the rest). Replies itself and returns
 * false when the name is unusable. */
static bool resolve_folder(struct imap_session *s, const struct imap_arg *arg,
                           struct imap_folder_ref *out)
{
    const char *wire = imap_arg_astring(arg);
    if (wire == NULL || strlen(wire) != arg->len) {
        imap_reply_bad(s, "Bad mailbox name.");
        return false;
    }
    struct buf utf8 = {0};
    if (!mailbox_name_from_mutf7(wire, &utf8)) {
        buf_free(&utf8);
        imap_reply_no(s, "[CANNOT] Mailbox name is not valid modified UTF-7.");
        return false;
    }
    buf_append_char(&utf8, '\0');
    const struct mail_config *cfg = mail_cfg(s);
    const struct namespace_config *best = NULL;
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        const struct namespace_config *ns = &cfg->namespaces[i];
        size_t plen = strlen(ns->prefix);
        if (strncmp(utf8.data, ns->prefix, plen) == 0 &&
            (best == NULL || plen > strlen(best->prefix)))
            best = ns;
    }
    if (best == NULL) {
        buf_free(&utf8);
        imap_reply_no(s, "[NONEXISTENT] No namespace holds this name.");
        return false;
    }
    const char *rest = utf8.data + strlen(best->prefix);
    out->ns = best;
    out->name = xstrdup(mailbox_name_is_inbox(rest) && best->type == NAMESPACE_PERSONAL ? "INBOX"
                                                                                        : rest);
    buf_free(&utf8);
    return true;
}

bool imap_resolve_folder(struct imap_session *s, const struct imap_arg *arg,
                         const struct namespace_config **ns, char **name)
{
    struct imap_folder_ref ref;
    if (!resolve_folder(s, arg, &ref))
        return false;
    *ns = ref.ns;
    *name = ref.name;
    return true;
}

/* The wire form of a namespace folder name. */
static void append_wire_name(struct buf *out, const struct namespace_config *ns, const char *name)
{
    struct buf full = {0};
    buf_append_str(&full, ns->prefix);
    buf_append_str(&full, name);
    buf_append_char(&full, '\0');
    struct buf mutf7 = {0};
    if (!mailbox_name_to_mutf7(full.data, &mutf7))
        buf_append(&mutf7, full.data, full.len - 1);
    imap_append_string(out, mutf7.data != NULL ? mutf7.data : "", mutf7.len);
    buf_free(&mutf7);
    buf_free(&full);
}

/* ---------- NAMESPACE ---------- */

static void append_namespaces(struct buf *out, const struct mail_config *cfg,
                              enum namespace_type type)
{
    bool any = false;
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        const struct namespace_config *ns = &cfg->namespaces[i];
        if (ns->type != type)
            continue;
        buf_append_str(out, any ? "(" : " ((");
        any = true;
        imap_append_string(out, ns->prefix, strlen(ns->prefix));
        buf_printf(out, " \"%s%c\")", ns->separator == '"' || ns->separator == '\\' ? "\\" : "",
                   ns->separator);
    }
    buf_append_str(out, any ? ")" : " NIL");
}

static void cmd_namespace(struct imap_session *s, const struct imap_command *cmd)
{
    (void)cmd;
    struct buf line = {0};
    buf_append_str(&line, "* NAMESPACE");
    append_namespaces(&line, mail_cfg(s), NAMESPACE_PERSONAL);
    append_namespaces(&line, mail_cfg(s), NAMESPACE_SHARED);
    append_namespaces(&line, mail_cfg(s), NAMESPACE_PUBLIC);
    buf_append_str(&line, "\r\n");
    imap_send_raw(s, line.data, line.len);
    buf_free(&line);
    imap_reply_ok(s, "NAMESPACE completed.");
}

/* ---------- LIST / LSUB ---------- */

/* RFC 3501 6.3.8: `*` matches anything, `%` anything but the separator. */
static bool pattern_match(const char *pat, const char *name, char sep)
{
    while (*pat != '\0') {
        if (*pat == '*' || *pat == '%') {
            bool any = *pat == '*';
            pat++;
            for (const char *n = name;; n++) {
                if (pattern_match(pat, n, sep))
                    return true;
                if (*n == '\0' || (!any && *n == sep))
                    return false;
            }
        }
        if (*name == '\0' || *pat != *name)
            return false;
        pat++;
        name++;
    }
    return *name == '\0';
}

/* INBOX matches case-insensitively: compare with the canonical spelling. */
static bool name_matches(const char *pattern, const char *full, char sep)
{
    if (strncasecmp(pattern, "INBOX", 5) == 0 && strcmp(full, "INBOX") == 0)
        return pattern_match(pattern + 5, "", sep) || pattern_match(pattern, full, sep);
    if (strncasecmp(full, "INBOX", 5) == 0 && strncasecmp(pattern, "INBOX", 5) == 0) {
        struct buf p = {0};
        buf_append_str(&p, "INBOX");
        buf_append_str(&p, pattern + 5);
        bool m = pattern_match(p.data, full, sep);
        buf_free(&p);
        return m;
    }
    return pattern_match(pattern, full, sep);
}

static bool has_children(char **names, size_t count, const char *name, char sep)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < count; i++) {
        if (strncmp(names[i], name, len) == 0 && names[i][len] == sep)
            return true;
    }
    return false;
}

static bool in_list(char **names, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++) {
        if (strcmp(names[i], name) == 0)
            return true;
    }
    return false;
}

struct list_out {
    struct imap_session *s;
    const char *verb; /* "LIST" or "LSUB" */
    struct buf seen;  /* NUL-separated names already sent (parents) */
};

static void send_list_line(struct list_out *o, const struct namespace_config *ns,
                           const char *name, const char *attrs)
{
    struct buf line = {0};
    buf_printf(&line, "* %s (%s) \"%s%c\" ", o->verb, attrs,
               ns->separator == '"' || ns->separator == '\\' ? "\\" : "", ns->separator);
    append_wire_name(&line, ns, name);
    buf_append_str(&line, "\r\n");
    imap_send_raw(o->s, line.data, line.len);
    buf_free(&line);
}

/* Lists the folders of one namespace matching `pattern` (a full name
 * pattern, prefix included). A folder that does not match but whose parent
 * level does is shown through that parent as \Noselect when the parent does
 * not exist itself (RFC 3501: "%" must show the hierarchy). */
static bool list_namespace(struct list_out *o, const struct namespace_config *ns,
                           const char *pattern, bool subscribed_only, struct petrel_error *err)
{
    char **names = NULL;
    size_t count = 0;
    if (!mail_folder_list(o->s->user, ns, &names, &count, err))
        return false;
    char **subs = NULL;
    size_t sub_count = 0;
    if (subscribed_only && !mail_subscriptions_list(o->s->user, ns, &subs, &sub_count, err)) {
        mail_folder_list_free(names, count);
        return false;
    }
    char **candidates = subscribed_only ? subs : names;
    size_t candidate_count = subscribed_only ? sub_count : count;
    size_t plen = strlen(ns->prefix);
    for (size_t i = 0; i < candidate_count; i++) {
        const char *name = candidates[i];
        struct buf full = {0};
        buf_append_str(&full, ns->prefix);
        buf_append_str(&full, name);
        buf_append_char(&full, '\0');
        if (name_matches(pattern, full.data, ns->separator)) {
            bool exists = !subscribed_only || in_list(names, count, name);
            const char *attrs = !exists ? "\\NonExistent"
                                : has_children(names, count, name, ns->separator)
                                    ? "\\HasChildren"
                                    : "\\HasNoChildren";
            send_list_line(o, ns, name, subscribed_only && exists ? "" : attrs);
        } else {
            /* Try each parent level: "a/b/c" shows "a" and "a/b" to "%". */
            for (char *sep = strchr(full.data + plen, ns->separator); sep != NULL;
                 sep = strchr(sep + 1, ns->separator)) {
                *sep = '\0';
                const char *parent = full.data + plen;
                bool sent = false;
                for (size_t k = 0; k < o->seen.len; k += strlen(o->seen.data + k) + 1)
                    sent = sent || strcmp(o->seen.data + k, full.data) == 0;
                if (!sent && name_matches(pattern, full.data, ns->separator) &&
                    !in_list(candidates, candidate_count, parent)) {
                    buf_append(&o->seen, full.data, strlen(full.data) + 1);
                    send_list_line(o, ns, parent,
                                   subscribed_only ? "\\Noselect"
                                   : in_list(names, count, parent)
                                       ? "\\HasChildren"
                                       : "\\NonExistent \\HasChildren");
                }
                *sep = ns->separator;
            }
        }
        buf_free(&full);
    }
    mail_folder_list_free(subs, sub_count);
    mail_folder_list_free(names, count);
    return true;
}

static void list_common(struct imap_session *s, const struct imap_command *cmd, bool lsub)
{
    if (cmd->arg_count != 2 || cmd->args[0].type == IMAP_ARG_LIST ||
        cmd->args[1].type == IMAP_ARG_LIST) {
        imap_reply_bad(s, "%s needs a reference and a mailbox pattern.", lsub ? "LSUB" : "LIST");
        return;
    }
    const char *ref = imap_arg_astring(&cmd->args[0]);
    const char *pat = imap_arg_astring(&cmd->args[1]);
    const struct mail_config *cfg = mail_cfg(s);
    if (!lsub && *pat == '\0') {
        /* The hierarchy delimiter and root of the reference's namespace. */
        const struct namespace_config *ns = cfg->namespace_count > 0 ? &cfg->namespaces[0] : NULL;
        for (size_t i = 0; i < cfg->namespace_count; i++) {
            if (cfg->namespaces[i].type == NAMESPACE_PERSONAL)
                ns = &cfg->namespaces[i];
        }
        if (ns != NULL)
            imap_send(s, "* LIST (\\Noselect) \"%s%c\" \"\"",
                      ns->separator == '"' || ns->separator == '\\' ? "\\" : "", ns->separator);
        imap_reply_ok(s, "LIST completed.");
        return;
    }
    struct buf joined = {0};
    buf_append_str(&joined, ref);
    buf_append_str(&joined, pat);
    buf_append_char(&joined, '\0');
    struct buf pattern = {0};
    if (!mailbox_name_from_mutf7(joined.data, &pattern)) {
        buf_reset(&pattern);
        buf_append(&pattern, joined.data, joined.len - 1);
    }
    buf_append_char(&pattern, '\0');
    buf_free(&joined);
    struct list_out o = {s, lsub ? "LSUB" : "LIST", {0}};
    struct petrel_error err;
    bool ok = true;
    for (size_t i = 0; ok && i < cfg->namespace_count; i++)
        ok = list_namespace(&o, &cfg->namespaces[i], pattern.data, lsub, &err);
    buf_free(&pattern);
    buf_free(&o.seen);
    if (!ok)
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "%s completed.", lsub ? "LSUB" : "LIST");
}

static void cmd_list(struct imap_session *s, const struct imap_command *cmd)
{
    list_common(s, cmd, false);
}

static void cmd_lsub(struct imap_session *s, const struct imap_command *cmd)
{
    list_common(s, cmd, true);
}

/* ---------- CREATE / DELETE / RENAME ---------- */

static bool one_folder_arg(struct imap_session *s, const struct imap_command *cmd,
                           struct imap_folder_ref *ref)
{
    if (cmd->arg_count != 1 || cmd->args[0].type == IMAP_ARG_LIST) {
        imap_reply_bad(s, "%s needs one mailbox name.", s->command);
        return false;
    }
    return resolve_folder(s, &cmd->args[0], ref);
}

static void cmd_create(struct imap_session *s, const struct imap_command *cmd)
{
    struct imap_folder_ref ref;
    if (!one_folder_arg(s, cmd, &ref))
        return;
    /* A trailing separator only announces children (RFC 3501 6.3.3). */
    size_t len = strlen(ref.name);
    if (len > 0 && ref.name[len - 1] == ref.ns->separator)
        ref.name[len - 1] = '\0';
    struct petrel_error err;
    if (strcmp(ref.name, "INBOX") == 0 && ref.ns->type == NAMESPACE_PERSONAL)
        imap_reply_no(s, "[ALREADYEXISTS] INBOX always exists.");
    else if (!mail_folder_create(s->user, ref.ns, ref.name, &err))
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "CREATE completed.");
    free(ref.name);
}

static void cmd_delete(struct imap_session *s, const struct imap_command *cmd)
{
    struct imap_folder_ref ref;
    if (!one_folder_arg(s, cmd, &ref))
        return;
    struct petrel_error err;
    if (strcmp(ref.name, "INBOX") == 0 && ref.ns->type == NAMESPACE_PERSONAL)
        imap_reply_no(s, "[CANNOT] INBOX cannot be deleted.");
    else if (!mail_folder_delete(s->user, ref.ns, ref.name, &err))
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "DELETE completed.");
    free(ref.name);
}

static void cmd_rename(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count != 2 || cmd->args[0].type == IMAP_ARG_LIST ||
        cmd->args[1].type == IMAP_ARG_LIST) {
        imap_reply_bad(s, "RENAME needs two mailbox names.");
        return;
    }
    struct imap_folder_ref from, to;
    if (!resolve_folder(s, &cmd->args[0], &from))
        return;
    if (!resolve_folder(s, &cmd->args[1], &to)) {
        free(from.name);
        return;
    }
    struct petrel_error err;
    if (from.ns != to.ns)
        imap_reply_no(s, "[CANNOT] Cannot move a mailbox between namespaces.");
    else if (strcmp(from.name, "INBOX") == 0 && from.ns->type == NAMESPACE_PERSONAL)
        imap_reply_no(s, "[CANNOT] Renaming INBOX is not supported.");
    else if (!mail_folder_rename(s->user, from.ns, from.name, to.name, &err))
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "RENAME completed.");
    free(from.name);
    free(to.name);
}

/* ---------- SUBSCRIBE / UNSUBSCRIBE ---------- */

static void subscribe_common(struct imap_session *s, const struct imap_command *cmd, bool on)
{
    struct imap_folder_ref ref;
    if (!one_folder_arg(s, cmd, &ref))
        return;
    struct petrel_error err;
    bool changed = false;
    if (!mail_subscriptions_set(s->user, ref.ns, ref.name, on, &changed, &err))
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "%s completed.", on ? "SUBSCRIBE" : "UNSUBSCRIBE");
    free(ref.name);
}

static void cmd_subscribe(struct imap_session *s, const struct imap_command *cmd)
{
    subscribe_common(s, cmd, true);
}

static void cmd_unsubscribe(struct imap_session *s, const struct imap_command *cmd)
{
    subscribe_common(s, cmd, false);
}

/* ---------- STATUS ---------- */

static void cmd_status(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count != 2 || cmd->args[1].type != IMAP_ARG_LIST ||
        cmd->args[1].count == 0) {
        imap_reply_bad(s, "STATUS needs a mailbox and a list of items.");
        return;
    }
    const struct imap_arg *items = &cmd->args[1];
    bool want_size = false;
    for (size_t i = 0; i < items->count; i++) {
        const struct imap_arg *it = &items->list[i];
        static const char *const known[] = {"MESSAGES", "RECENT",        "UIDNEXT", "UIDVALIDITY",
                                            "UNSEEN",   "HIGHESTMODSEQ", "SIZE",    "DELETED"};
        bool ok = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            ok = ok || imap_arg_atom_equals(it, known[k]);
        if (!ok || imap_arg_atom_equals(it, "DELETED")) {
            imap_reply_bad(s, "Unknown STATUS item.");
            return;
        }
        want_size = want_size || imap_arg_atom_equals(it, "SIZE");
    }
    struct imap_folder_ref ref;
    if (!resolve_folder(s, &cmd->args[0], &ref))
        return;
    struct petrel_error err;
    struct mailbox *box = mailbox_open(s->user, ref.ns, ref.name, &err);
    struct mailbox_info info;
    if (box == NULL || !mailbox_get_info(box, want_size, &info, &err)) {
        if (box != NULL)
            mailbox_close(box);
        imap_reply_storage_error(s, &err);
        free(ref.name);
        return;
    }
    mailbox_close(box);
    struct buf line = {0};
    buf_append_str(&line, "* STATUS ");
    append_wire_name(&line, ref.ns, ref.name);
    buf_append_str(&line, " (");
    for (size_t i = 0; i < items->count; i++) {
        const struct imap_arg *it = &items->list[i];
        if (i > 0)
            buf_append_char(&line, ' ');
        if (imap_arg_atom_equals(it, "MESSAGES"))
            buf_printf(&line, "MESSAGES %u", info.messages);
        else if (imap_arg_atom_equals(it, "RECENT"))
            buf_append_str(&line, "RECENT 0");
        else if (imap_arg_atom_equals(it, "UIDNEXT"))
            buf_printf(&line, "UIDNEXT %u", info.next_uid);
        else if (imap_arg_atom_equals(it, "UIDVALIDITY"))
            buf_printf(&line, "UIDVALIDITY %u", info.uid_validity);
        else if (imap_arg_atom_equals(it, "UNSEEN"))
            buf_printf(&line, "UNSEEN %u", info.unseen);
        else if (imap_arg_atom_equals(it, "HIGHESTMODSEQ"))
            buf_printf(&line, "HIGHESTMODSEQ %llu", (unsigned long long)info.highest_modseq);
        else if (imap_arg_atom_equals(it, "SIZE"))
            buf_printf(&line, "SIZE %llu", (unsigned long long)info.size_bytes);
    }
    buf_append_str(&line, ")\r\n");
    imap_send_raw(s, line.data, line.len);
    buf_free(&line);
    free(ref.name);
    imap_reply_ok(s, "STATUS completed.");
}

const struct imap_command_def imap_commands_mailbox[] = {
    {"NAMESPACE", IMAP_AUTHED, cmd_namespace},
    {"LIST", IMAP_AUTHED, cmd_list},
    {"LSUB", IMAP_AUTHED, cmd_lsub},
    {"CREATE", IMAP_AUTHED, cmd_create},
    {"DELETE", IMAP_AUTHED, cmd_delete},
    {"RENAME", IMAP_AUTHED, cmd_rename},
    {"SUBSCRIBE", IMAP_AUTHED, cmd_subscribe},
    {"UNSUBSCRIBE", IMAP_AUTHED, cmd_unsubscribe},
    {"STATUS", IMAP_AUTHED, cmd_status},
    {NULL, 0, NULL},
};
