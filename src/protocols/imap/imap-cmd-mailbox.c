/* Authenticated-state commands on folders as a whole: NAMESPACE, LIST,
 * LSUB, CREATE, DELETE, RENAME, SUBSCRIBE, UNSUBSCRIBE, STATUS. Folder
 * names travel in modified UTF-7 (RFC 3501 5.1.3) and carry their
 * namespace's prefix; the storage sees UTF-8 names inside a namespace.
 * LIST speaks LIST-EXTENDED (RFC 5258), LIST-STATUS (RFC 5819) and
 * SPECIAL-USE (RFC 6154: attributes on every LIST line of the personal
 * namespace, from storage/special-use.h); CREATE takes (USE (...)). */
#include "protocols/imap/imap-private.h"

#include "core/log.h"
#include "core/utf8.h"
#include "core/xalloc.h"
#include "storage/acl/acl-list-index.h"
#include "storage/acl/acl-module.h"
#include "storage/acl/acl-registry.h"
#include "storage/acl/acl-rights.h"
#include "storage/mailbox-name.h"
#include "storage/shared-namespace.h"
#include "storage/special-use.h"
#include "storage/subscription-store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A wire name resolved to a namespace and the folder name inside it. */
struct imap_folder_ref {
    const struct namespace_config *ns;
    char *name; /* UTF-8, namespace separator; "INBOX" for the inbox */
};

/* How a storage failure is answered: an RFC 5530 response code and text
 * (NULL: the error's own message), with a warning logged when an operator
 * should see it. */
struct storage_answer {
    int keys[4];       /* petrel error codes or errno values, 0-terminated */
    const char *event; /* NULL: nothing logged */
    const char *code;
    const char *text;
};

/* By the error's code first. */
static const struct storage_answer by_code[] = {
    {{PETREL_ERR_NOT_FOUND}, NULL, "[NONEXISTENT]", "Mailbox does not exist."},
    {{PETREL_ERR_EXISTS}, NULL, "[ALREADYEXISTS]", "Mailbox already exists."},
    {{PETREL_ERR_INVALID, PETREL_ERR_UNSUPPORTED}, NULL, "[CANNOT]", NULL},
    /* The path stays in the log, not with the client. */
    {{PETREL_ERR_PERMISSION},
     "storage refused access",
     "[NOPERM]",
     "The mail store does not allow this."},
    {{PETREL_ERR_UNAVAILABLE}, NULL, "[UNAVAILABLE]", "Try again later."},
    /* RFC 5530: "such as the number of flags used in a mailbox". */
    {{PETREL_ERR_LIMIT}, NULL, "[LIMIT]", NULL},
    /* A storage module's refusal (quota), in the module's words: the text a
     * quota configures (quota_exceeded_message, docs/spec 3). */
    {{PETREL_ERR_OVER_QUOTA}, NULL, "[OVERQUOTA]", NULL},
};

/* Then system errors by their cause (as Dovecot maps them): a full disk or
 * quota is the user's OVERQUOTA, a passing shortage of descriptors or
 * memory UNAVAILABLE, a size the file system cannot hold LIMIT; anything
 * else is ours. */
static const struct storage_answer by_errno[] = {
    {{ENOSPC, EDQUOT}, "storage full", "[OVERQUOTA]", "Not enough disk space."},
    {{EMFILE, ENFILE, ENOMEM, EAGAIN},
     "storage short of resources",
     "[UNAVAILABLE]",
     "Temporarily out of resources; try again later."},
    {{EFBIG, EMLINK, ENAMETOOLONG}, "storage limit", "[LIMIT]", "A storage limit was reached."},
};

/* Answers with the row of `table` that holds `key`; false when none does. */
static bool answer_from(struct imap_session *s, const struct petrel_error *err,
                        const struct storage_answer *table, size_t rows, int key)
{
    for (size_t i = 0; i < rows; i++) {
        for (size_t k = 0; k < 4 && table[i].keys[k] != 0; k++) {
            if (table[i].keys[k] != key)
                continue;
            if (table[i].event != NULL)
                log_warn(IMAP_COMPONENT, table[i].event, "session=%s command=%s error=\"%s\"",
                         s->io.id, s->command, err->message);
            imap_reply_no(s, "%s %s", table[i].code,
                          table[i].text != NULL ? table[i].text : err->message);
            return true;
        }
    }
    return false;
}

void imap_reply_storage_error(struct imap_session *s, const struct petrel_error *err)
{
    if (answer_from(s, err, by_code, sizeof(by_code) / sizeof(by_code[0]), (int)err->code) ||
        answer_from(s, err, by_errno, sizeof(by_errno) / sizeof(by_errno[0]), err->sys_errno))
        return;
    log_error(IMAP_COMPONENT, "storage error", "session=%s command=%s error=\"%s\"", s->io.id,
              s->command, err->message);
    imap_reply_no(s, "[SERVERBUG] Internal error; it has been logged.");
}

static const struct mail_config *mail_cfg(const struct imap_session *s)
{
    return mail_storage_config(mail_user_storage(s->user));
}

/* Decodes a mailbox argument and finds its namespace (the longest matching
 * prefix; the empty prefix catches the rest). Replies itself and returns
 * false when the name is unusable. */
/* The wire name `wire` (NUL-terminated, `len` bytes) as namespace +
 * folder; NULL on success, else the reply that says why ("BAD ..." or
 * "NO ..."). */
static const char *folder_from_wire(const struct imap_session *s, const char *wire, size_t len,
                                    struct imap_folder_ref *out)
{
    if (strlen(wire) != len)
        return "BAD Bad mailbox name.";
    struct buf utf8 = {0};
    if (s->utf8_accept) {
        /* RFC 6855 3: names are UTF-8 now, with no modified UTF-7 decoding. */
        if (!utf8_valid(wire, len))
            return "BAD Mailbox name is not valid UTF-8.";
        buf_append(&utf8, wire, len);
    } else if (!mailbox_name_from_mutf7(wire, &utf8)) {
        buf_free(&utf8);
        return "NO [CANNOT] Mailbox name is not valid modified UTF-7.";
    }
    buf_append_char(&utf8, '\0');
    const char *rest = NULL;
    if (namespace_by_prefix(mail_cfg(s), utf8.data, NULL) == NULL) {
        buf_free(&utf8);
        return "NO [NONEXISTENT] No namespace holds this name.";
    }
    /* "shared/bob/Work": bob's instance of a per-owner shared namespace;
     * a name that stops at the owner level, or names no valid owner, is
     * answered as a missing folder. */
    struct petrel_error err;
    const struct namespace_config *best = mail_namespace_resolve(s->user, utf8.data, &rest, &err);
    if (best == NULL) {
        buf_free(&utf8);
        /* The replies imap_reply_storage_error() gives for these codes. */
        if (err.code == PETREL_ERR_NOT_FOUND)
            return "NO [NONEXISTENT] Mailbox does not exist.";
        if (err.code == PETREL_ERR_LIMIT)
            return "NO [LIMIT] Too many owners in shared namespaces.";
        log_error(IMAP_COMPONENT, "shared namespace failed", "session=%s error=\"%s\"", s->io.id,
                  err.message);
        return "NO [SERVERBUG] Internal error; it has been logged.";
    }
    out->ns = best;
    out->name = xstrdup(mailbox_name_is_inbox(rest) && namespace_has_inbox(best) ? "INBOX" : rest);
    buf_free(&utf8);
    return NULL;
}

static bool resolve_folder(struct imap_session *s, const struct imap_arg *arg,
                           struct imap_folder_ref *out)
{
    const char *wire = imap_arg_astring(arg);
    const char *why =
        wire != NULL ? folder_from_wire(s, wire, arg->len, out) : "BAD Bad mailbox name.";
    if (why == NULL)
        return true;
    if (why[0] == 'B')
        imap_reply_bad(s, "%s", why + 4);
    else
        imap_reply_no(s, "%s", why + 3);
    return false;
}

bool imap_folder_from_wire(const struct imap_session *s, const char *wire, size_t len,
                           const struct namespace_config **ns, char **name)
{
    struct imap_folder_ref ref;
    if (folder_from_wire(s, wire, len, &ref) != NULL)
        return false;
    *ns = ref.ns;
    *name = ref.name;
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

/* The wire form of a namespace folder name: modified UTF-7, or UTF-8 in a
 * quoted string once the client enabled UTF8=ACCEPT (RFC 6855 3). */
static void append_wire_name(struct buf *out, const struct imap_session *s,
                             const struct namespace_config *ns, const char *name)
{
    struct buf full = {0};
    buf_append_str(&full, ns->prefix);
    buf_append_str(&full, name);
    buf_append_char(&full, '\0');
    if (s->utf8_accept) {
        imap_append_utf8_string(out, full.data, full.len - 1);
        buf_free(&full);
        return;
    }
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
        imap_append_string(out, ns->prefix, namespace_prefix_head(ns));
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

/* ---------- STATUS (also LIST-STATUS) ---------- */

/* Checks a STATUS item list; *want_size when SIZE is asked. */
static bool status_items_check(const struct imap_arg *items, bool *want_size)
{
    static const char *const known[] = {"MESSAGES", "RECENT",        "UIDNEXT", "UIDVALIDITY",
                                        "UNSEEN",   "HIGHESTMODSEQ", "SIZE"};
    if (items->type != IMAP_ARG_LIST || items->count == 0)
        return false;
    *want_size = false;
    for (size_t i = 0; i < items->count; i++) {
        const struct imap_arg *it = &items->list[i];
        bool ok = false;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            ok = ok || imap_arg_atom_equals(it, known[k]);
        if (!ok)
            return false;
        *want_size = *want_size || imap_arg_atom_equals(it, "SIZE");
    }
    return true;
}

/* Sends "* STATUS" for one folder with the items of a checked list. */
static bool status_send(struct imap_session *s, const struct namespace_config *ns, const char *name,
                        const struct imap_arg *items, bool want_size, struct petrel_error *err)
{
    struct mailbox *box = mailbox_open(s->user, ns, name, err);
    struct mailbox_info info;
    if (box == NULL || !mailbox_get_info(box, want_size, &info, err)) {
        if (box != NULL)
            mailbox_close(box);
        return false;
    }
    mailbox_close(box);
    struct buf line = {0};
    buf_append_str(&line, "* STATUS ");
    append_wire_name(&line, s, ns, name);
    buf_append_str(&line, " (");
    for (size_t i = 0; i < items->count; i++) {
        const struct imap_arg *it = &items->list[i];
        if (i > 0)
            buf_append_char(&line, ' ');
        if (imap_arg_atom_equals(it, "MESSAGES"))
            buf_printf(&line, "MESSAGES %u", info.messages);
        else if (imap_arg_atom_equals(it, "RECENT"))
            buf_printf(&line, "RECENT %u", info.recent);
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
    return true;
}

static void cmd_status(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count != 2 || cmd->args[1].type != IMAP_ARG_LIST || cmd->args[1].count == 0) {
        imap_reply_bad(s, "STATUS needs a mailbox and a list of items.");
        return;
    }
    bool want_size = false;
    if (!status_items_check(&cmd->args[1], &want_size)) {
        imap_reply_bad(s, "Unknown STATUS item.");
        return;
    }
    struct imap_folder_ref ref;
    if (!resolve_folder(s, &cmd->args[0], &ref))
        return;
    struct petrel_error err;
    if (!status_send(s, ref.ns, ref.name, &cmd->args[1], want_size, &err))
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "STATUS completed.");
    free(ref.name);
}

/* ---------- LIST / LSUB ---------- */

/* RFC 3501 6.3.8: `*` matches anything, `%` anything but the separator. */
static bool pattern_match(const char *pat, const char *name, char sep)
{
    /* A state set over pattern positions, advanced one name byte at a time:
     * O(pattern x name), where naive backtracking over several wildcards is
     * exponential in what a client can send. */
    size_t plen = strlen(pat);
    bool *row = xcalloc(plen + 1, sizeof(bool));
    bool *next = xcalloc(plen + 1, sizeof(bool));
    row[0] = true;
    for (size_t pi = 0; pi < plen && row[pi] && (pat[pi] == '*' || pat[pi] == '%'); pi++)
        row[pi + 1] = true; /* wildcards match the empty string */
    for (const char *n = name; *n != '\0'; n++) {
        memset(next, 0, (plen + 1) * sizeof(bool));
        bool any = false;
        for (size_t pi = 0; pi < plen; pi++) {
            if (!row[pi])
                continue;
            if (pat[pi] == '*' || (pat[pi] == '%' && *n != sep))
                next[pi] = true;
            else if (pat[pi] == *n)
                next[pi + 1] = true;
        }
        for (size_t pi = 0; pi < plen; pi++) {
            if (next[pi] && (pat[pi] == '*' || pat[pi] == '%'))
                next[pi + 1] = true;
            any = any || next[pi];
        }
        bool *t = row;
        row = next;
        next = t;
        if (!any && !row[plen])
            break;
    }
    bool match = row[plen];
    free(row);
    free(next);
    return match;
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

/* What one LIST asks for: RFC 5258 selection and return options, RFC 5819
 * STATUS, RFC 6154 SPECIAL-USE. Basic LIST sets none of them; LSUB selects
 * the subscribed folders and keeps its RFC 3501 answers. */
struct list_query {
    bool lsub;
    bool root;     /* LIST "" "": the hierarchy delimiter only */
    bool extended; /* RFC 5258 syntax used: \NonExistent, children on request */
    bool sel_subscribed;
    bool sel_special_use;
    bool recursive_match;
    bool ret_subscribed;
    bool ret_children;
    bool ret_myrights; /* RFC 8440 LIST-MYRIGHTS (with ACLs only) */
    const struct imap_arg *status_items; /* RETURN (STATUS (...)), else NULL */
    bool status_want_size;
    char **patterns; /* full-name patterns (reference joined), UTF-8 */
    size_t pattern_count;
    bool utf8; /* UTF8=ACCEPT: patterns come in UTF-8, not modified UTF-7 */
};

/* One namespace's folders while a LIST runs. */
struct list_ns {
    const struct namespace_config *ns;
    char **names; /* existing folders */
    size_t count;
    char **subs; /* subscribed folders (when the query needs them) */
    size_t sub_count;
    bool special_use; /* the namespace special-use attributes belong to */
};

struct list_out {
    struct imap_session *s;
    const struct list_query *q;
    struct special_use_list overrides; /* the user's special-use overrides */
    struct buf seen;                   /* NUL-separated full names of parents sent */
};

/* The special-use attribute in force for an existing folder ("" for none),
 * with the overrides read once per command. */
static const char *list_special_use(const struct list_out *o, const struct list_ns *n,
                                    const char *name)
{
    return n->special_use ? special_use_in_force(o->s->user, &o->overrides, name, NULL) : "";
}

static bool list_exists(const struct list_ns *n, const char *name)
{
    return in_list(n->names, n->count, name);
}

static bool list_subscribed(const struct list_ns *n, const char *name)
{
    return in_list(n->subs, n->sub_count, name);
}

/* The selection criteria (RFC 5258 3.1): what the folder itself must be
 * to be listed in its own right. */
static bool list_selected(const struct list_out *o, const struct list_ns *n, const char *name)
{
    const struct list_query *q = o->q;
    bool exists = list_exists(n, name);
    if (q->sel_subscribed && !list_subscribed(n, name))
        return false;
    if (q->sel_special_use && (!exists || *list_special_use(o, n, name) == '\0'))
        return false;
    return q->sel_subscribed || exists;
}

static char *full_name(const struct namespace_config *ns, const char *name)
{
    struct buf full = {0};
    buf_append_str(&full, ns->prefix);
    buf_append_str(&full, name);
    buf_append_char(&full, '\0');
    return full.data;
}

static bool list_matches(const struct list_out *o, const struct namespace_config *ns,
                         const char *full)
{
    for (size_t i = 0; i < o->q->pattern_count; i++) {
        if (name_matches(o->q->patterns[i], full, ns->separator))
            return true;
    }
    return false;
}

/* RFC 5258 CHILDINFO: a descendant meets the selection criteria but is not
 * matched by the patterns (so the client would not learn of it).
 * RECURSIVEMATCH comes with SUBSCRIBED alone (list_parse()), so every
 * subscribed folder meets the criteria. */
static bool list_childinfo(const struct list_out *o, const struct list_ns *n, const char *name)
{
    if (!o->q->recursive_match)
        return false;
    size_t len = strlen(name);
    for (size_t i = 0; i < n->sub_count; i++) {
        const char *d = n->subs[i];
        if (strncmp(d, name, len) != 0 || d[len] != n->ns->separator)
            continue;
        char *full = full_name(n->ns, d);
        bool matched = list_matches(o, n->ns, full);
        free(full);
        if (!matched)
            return true;
    }
    return false;
}

static void append_attr(struct buf *attrs, const char *attr)
{
    if (attrs->len > 0)
        buf_append_char(attrs, ' ');
    buf_append_str(attrs, attr);
}

/* One LIST/LSUB line, then its STATUS when asked. `selected` tells whether
 * the folder meets the selection criteria or is only a level of the
 * hierarchy above one that does. */
static void list_send(struct list_out *o, const struct list_ns *n, const char *name, bool selected)
{
    const struct list_query *q = o->q;
    bool exists = list_exists(n, name);
    struct buf attrs = {0};
    if (q->lsub) {
        if (!selected)
            append_attr(&attrs, "\\Noselect");
        else if (!exists)
            append_attr(&attrs, "\\NonExistent");
    } else {
        if (!exists)
            append_attr(&attrs, q->extended ? "\\NonExistent" : "\\Noselect");
        if (q->ret_subscribed && list_subscribed(n, name))
            append_attr(&attrs, "\\Subscribed");
        bool children = has_children(n->names, n->count, name, n->ns->separator);
        /* RFC 5258: extended LIST gives child attributes only when asked
         * (RETURN (CHILDREN)), for \NonExistent levels too (as Dovecot). */
        if (!q->extended || q->ret_children)
            append_attr(&attrs, children ? "\\HasChildren" : "\\HasNoChildren");
        const char *use = exists ? list_special_use(o, n, name) : "";
        if (*use != '\0')
            append_attr(&attrs, use);
    }
    struct buf line = {0};
    buf_printf(&line, "* %s (", q->lsub ? "LSUB" : "LIST");
    buf_append(&line, attrs.data, attrs.len);
    buf_printf(&line, ") \"%s%c\" ",
               n->ns->separator == '"' || n->ns->separator == '\\' ? "\\" : "", n->ns->separator);
    append_wire_name(&line, o->s, n->ns, name);
    if (!q->lsub && list_childinfo(o, n, name))
        buf_append_str(&line, " (\"CHILDINFO\" (\"SUBSCRIBED\"))");
    buf_append_str(&line, "\r\n");
    imap_send_raw(o->s, line.data, line.len);
    buf_free(&line);
    buf_free(&attrs);
    struct petrel_error err;
    if (q->status_items != NULL && selected && exists &&
        !status_send(o->s, n->ns, name, q->status_items, q->status_want_size, &err) &&
        err.code != PETREL_ERR_NOT_FOUND)
        log_warn(IMAP_COMPONENT, "LIST-STATUS failed", "session=%s error=\"%s\"", o->s->io.id,
                 err.message);
    /* RFC 8440 2: after the folder's LIST (and STATUS), for a folder that
     * exists and is selected by the pattern. */
    if (q->ret_myrights && selected && exists) {
        char letters[14];
        struct buf mr = {0};
        buf_append_str(&mr, "* MYRIGHTS ");
        append_wire_name(&mr, o->s, n->ns, name);
        buf_printf(&mr, " %s\r\n",
                   acl_rights_str(mail_folder_my_rights(o->s->user, n->ns, name), true, letters));
        imap_send_raw(o->s, mr.data, mr.len);
        buf_free(&mr);
    }
}

/* Lists the folders of one namespace. The candidates are the existing
 * folders, or the subscribed ones for SUBSCRIBED/LSUB. A candidate that
 * does not match but has a level above it that does shows that level:
 * to "%" for plain LIST (RFC 3501: the hierarchy must be visible) and
 * LSUB, and for RECURSIVEMATCH (RFC 5258 3.1 with CHILDINFO). */
static bool list_namespace_names(struct list_out *o, const struct namespace_config *ns,
                                 bool special_use, char **names, size_t count,
                                 struct petrel_error *err);

static bool list_namespace(struct list_out *o, const struct namespace_config *ns, bool special_use,
                           struct petrel_error *err)
{
    char **names = NULL;
    size_t count = 0;
    if (!mail_folder_list(o->s->user, ns, &names, &count, err))
        return false;
    /* A folder the ACL does not let the user look up is left out here, so
     * every later step treats it as a folder that is not there. */
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        if ((mail_folder_my_rights(o->s->user, ns, names[i]) & ACL_LOOKUP) != 0)
            names[kept++] = names[i];
        else
            free(names[i]);
    }
    return list_namespace_names(o, ns, special_use, names, kept, err);
}

/* list_namespace() over folders already listed and filtered (`names`,
 * taken). */
static bool list_namespace_names(struct list_out *o, const struct namespace_config *ns,
                                 bool special_use, char **names, size_t count,
                                 struct petrel_error *err)
{
    const struct list_query *q = o->q;
    struct list_ns n = {.ns = ns, .special_use = special_use, .names = names, .count = count};
    bool need_subs = q->sel_subscribed || q->ret_subscribed;
    if (need_subs && !mail_subscriptions_list(o->s->user, ns, &n.subs, &n.sub_count, err)) {
        mail_folder_list_free(n.names, n.count);
        return false;
    }
    bool show_levels = q->lsub || q->recursive_match || (!q->sel_subscribed && !q->sel_special_use);
    char **candidates = q->sel_subscribed ? n.subs : n.names;
    size_t candidate_count = q->sel_subscribed ? n.sub_count : n.count;
    size_t plen = strlen(ns->prefix);
    for (size_t i = 0; i < candidate_count; i++) {
        const char *name = candidates[i];
        if (!list_selected(o, &n, name))
            continue;
        char *full = full_name(ns, name);
        bool matched = list_matches(o, ns, full);
        /* Levels of the hierarchy above a candidate that are not folders
         * themselves: shown to "%" when the candidate is not matched (RFC
         * 3501: the hierarchy must be visible), and for a plain listing
         * also when it is, as \Noselect (\NonExistent) parents the way
         * Dovecot lists "Dove" for "Dove/Made" to "*". Not for LSUB or
         * RECURSIVEMATCH, where a matched child speaks for itself. */
        bool plain_listing = !q->lsub && !q->sel_subscribed && !q->sel_special_use;
        if (show_levels && (!matched || plain_listing)) {
            /* Try each parent level: "a/b/c" shows "a" and "a/b". */
            for (char *sep = strchr(full + plen, ns->separator); sep != NULL;
                 sep = strchr(sep + 1, ns->separator)) {
                *sep = '\0';
                const char *parent = full + plen;
                bool sent = false;
                for (size_t k = 0; k < o->seen.len; k += strlen(o->seen.data + k) + 1)
                    sent = sent || strcmp(o->seen.data + k, full) == 0;
                if (!sent && list_matches(o, ns, full) && !list_selected(o, &n, parent)) {
                    buf_append(&o->seen, full, strlen(full) + 1);
                    list_send(o, &n, parent, false);
                }
                *sep = ns->separator;
            }
        }
        if (matched)
            list_send(o, &n, name, true);
        free(full);
    }
    mail_folder_list_free(n.subs, n.sub_count);
    mail_folder_list_free(n.names, n.count);
    return true;
}

/* RFC 5258 selection options: "(SUBSCRIBED REMOTE RECURSIVEMATCH
 * SPECIAL-USE)". REMOTE changes nothing: there are no remote folders. */
static bool list_select_options(const struct imap_arg *opts, struct list_query *q)
{
    for (size_t i = 0; i < opts->count; i++) {
        const struct imap_arg *o = &opts->list[i];
        if (imap_arg_atom_equals(o, "SUBSCRIBED"))
            q->sel_subscribed = true;
        else if (imap_arg_atom_equals(o, "SPECIAL-USE"))
            q->sel_special_use = true;
        else if (imap_arg_atom_equals(o, "RECURSIVEMATCH"))
            q->recursive_match = true;
        else if (!imap_arg_atom_equals(o, "REMOTE"))
            return false;
    }
    return true;
}

/* RFC 5258 return options: "RETURN (SUBSCRIBED CHILDREN SPECIAL-USE
 * STATUS (...))". Special-use attributes are always returned. */
static bool list_return_options(const struct imap_arg *opts, struct list_query *q)
{
    for (size_t i = 0; i < opts->count; i++) {
        const struct imap_arg *o = &opts->list[i];
        if (imap_arg_atom_equals(o, "SUBSCRIBED")) {
            q->ret_subscribed = true;
        } else if (imap_arg_atom_equals(o, "CHILDREN")) {
            q->ret_children = true;
        } else if (imap_arg_atom_equals(o, "MYRIGHTS")) {
            q->ret_myrights = true;
        } else if (imap_arg_atom_equals(o, "STATUS")) {
            if (i + 1 >= opts->count || q->status_items != NULL ||
                !status_items_check(&opts->list[i + 1], &q->status_want_size))
                return false;
            q->status_items = &opts->list[++i];
        } else if (!imap_arg_atom_equals(o, "SPECIAL-USE")) {
            return false;
        }
    }
    return true;
}

static void list_add_pattern(struct list_query *q, const char *ref, const char *pat)
{
    struct buf joined = {0};
    buf_append_str(&joined, ref);
    buf_append_str(&joined, pat);
    buf_append_char(&joined, '\0');
    struct buf pattern = {0};
    if (q->utf8 || !mailbox_name_from_mutf7(joined.data, &pattern)) {
        buf_reset(&pattern);
        buf_append(&pattern, joined.data, joined.len - 1);
    }
    buf_append_char(&pattern, '\0');
    buf_free(&joined);
    q->patterns[q->pattern_count++] = pattern.data;
}

/* LIST [(selection options)] reference (pattern | (pattern ...))
 * [RETURN (return options)], or LSUB reference pattern. Replies BAD itself
 * and returns false on a malformed command. */
static bool list_parse(struct imap_session *s, const struct imap_command *cmd, struct list_query *q)
{
    const struct imap_arg *args = cmd->args;
    size_t argc = cmd->arg_count, i = 0;
    if (!q->lsub && argc > 0 && args[0].type == IMAP_ARG_LIST) {
        q->extended = true;
        if (!list_select_options(&args[0], q)) {
            imap_reply_bad(s, "Unknown LIST selection option.");
            return false;
        }
        i = 1;
    }
    if (argc < i + 2 || args[i].type == IMAP_ARG_LIST ||
        (q->lsub && args[i + 1].type == IMAP_ARG_LIST) || (q->lsub && argc != 2)) {
        imap_reply_bad(s, "%s needs a reference and a mailbox pattern.", q->lsub ? "LSUB" : "LIST");
        return false;
    }
    const struct imap_arg *ref = &args[i], *pat = &args[i + 1];
    i += 2;
    if (i < argc) {
        q->extended = true;
        if (argc != i + 2 || !imap_arg_atom_equals(&args[i], "RETURN") ||
            args[i + 1].type != IMAP_ARG_LIST) {
            imap_reply_bad(s, "LIST takes RETURN (options) after the mailbox pattern.");
            return false;
        }
        if (!list_return_options(&args[i + 1], q) ||
            (q->ret_myrights && !mail_cfg(s)->acl.enabled)) {
            imap_reply_bad(s, "Unknown or malformed LIST return option.");
            return false;
        }
    }
    /* RFC 5258 3.1: RECURSIVEMATCH only refines another selection option;
     * with SPECIAL-USE it is not defined (RFC 6154 3). */
    if (q->recursive_match && (!q->sel_subscribed || q->sel_special_use)) {
        imap_reply_bad(s, "RECURSIVEMATCH needs the SUBSCRIBED selection option.");
        return false;
    }
    q->ret_subscribed = q->ret_subscribed || q->sel_subscribed;
    size_t count = pat->type == IMAP_ARG_LIST ? pat->count : 1;
    const struct imap_arg *pats = pat->type == IMAP_ARG_LIST ? pat->list : pat;
    if (pat->type == IMAP_ARG_LIST)
        q->extended = true;
    if (count == 0) {
        imap_reply_bad(s, "LIST needs at least one mailbox pattern.");
        return false;
    }
    for (size_t k = 0; k < count; k++) {
        if (pats[k].type == IMAP_ARG_LIST) {
            imap_reply_bad(s, "A mailbox pattern is a string.");
            return false;
        }
    }
    if (!q->lsub && pat->type != IMAP_ARG_LIST && imap_arg_astring(pat)[0] == '\0') {
        q->root = true;
        return true;
    }
    q->patterns = xcalloc(count, sizeof(*q->patterns));
    for (size_t k = 0; k < count; k++)
        list_add_pattern(q, imap_arg_astring(ref), imap_arg_astring(&pats[k]));
    return true;
}

static void list_query_free(struct list_query *q)
{
    for (size_t i = 0; i < q->pattern_count; i++)
        free(q->patterns[i]);
    free(q->patterns);
}

/* The hierarchy delimiter and root of the personal namespace. */
static void list_root(struct imap_session *s)
{
    const struct mail_config *cfg = mail_cfg(s);
    const struct namespace_config *ns = cfg->namespace_count > 0 ? &cfg->namespaces[0] : NULL;
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        if (cfg->namespaces[i].type == NAMESPACE_PERSONAL)
            ns = &cfg->namespaces[i];
    }
    if (ns != NULL)
        imap_send(s, "* LIST (\\Noselect) \"%s%c\" \"\"",
                  ns->separator == '"' || ns->separator == '\\' ? "\\" : "", ns->separator);
    imap_reply_ok(s, "LIST completed.");
}

/* Sends one level of a per-owner shared namespace that is no folder
 * ("shared", "shared/bob") when a pattern matches it: a plain listing
 * shows the hierarchy above what it lists, as Dovecot does. */
static void list_level(struct list_out *o, const struct namespace_config *ns, const char *level)
{
    const struct list_query *q = o->q;
    if (q->lsub || q->sel_subscribed || q->sel_special_use || !list_matches(o, ns, level))
        return;
    for (size_t k = 0; k < o->seen.len; k += strlen(o->seen.data + k) + 1) {
        if (strcmp(o->seen.data + k, level) == 0)
            return;
    }
    buf_append(&o->seen, level, strlen(level) + 1);
    struct buf line = {0};
    buf_printf(&line, "* LIST (%s%s) \"%s%c\" ", q->extended ? "\\NonExistent" : "\\Noselect",
               !q->extended || q->ret_children ? " \\HasChildren" : "",
               ns->separator == '"' || ns->separator == '\\' ? "\\" : "", ns->separator);
    const struct namespace_config none = {.prefix = (char *)""};
    append_wire_name(&line, o->s, &none, level);
    buf_append_str(&line, "\r\n");
    imap_send_raw(o->s, line.data, line.len);
    buf_free(&line);
}

struct list_visible {
    char **names;
    size_t count;
    size_t cap;
};

static void list_visit(void *arg, const char *folder, uint32_t rights)
{
    (void)rights; /* only folders with l are visited */
    struct list_visible *v = arg;
    v->names = xgrow(v->names, &v->cap, v->count + 1, sizeof(*v->names));
    v->names[v->count++] = xstrdup(folder);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A per-owner shared namespace: for each owner the registry names, the
 * folders that owner's ACL list index lets the user look up, read from
 * the index alone (no folder of the owner is opened for it, and none of
 * another owner is looked at); an indexed folder gone since is left out
 * (one stat each). */
static void list_shared(struct list_out *o, const struct namespace_config *tmpl,
                        const char *const *owners, size_t owner_count)
{
    struct imap_session *s = o->s;
    struct acl_identity who;
    acl_user_identity(s->user, tmpl, &who);
    for (size_t i = 0; i < owner_count; i++) {
        struct petrel_error err;
        const struct namespace_config *ns = mail_shared_namespace(s->user, tmpl, owners[i], &err);
        if (ns == NULL)
            continue; /* oneself, or a name that is no user's */
        struct list_visible v = {0};
        if (acl_list_index_visible(s->user, ns, &who, list_visit, &v, &err) < 0) {
            log_warn(IMAP_COMPONENT, "ACL list index unreadable: owner left out of LIST",
                     "session=%s owner=%s error=\"%s\"", s->io.id, owners[i], err.message);
            mail_folder_list_free(v.names, v.count);
            continue;
        }
        size_t kept = 0;
        for (size_t k = 0; k < v.count; k++) {
            /* The index only narrows the search: the folder's own file
             * decides (it may have changed without the index: Dovecot,
             * an editor, an index write that failed), as Dovecot checks
             * each name its acl list gives. */
            if (mail_folder_exists(s->user, ns, v.names[k]) &&
                (mail_folder_my_rights(s->user, ns, v.names[k]) & ACL_LOOKUP) != 0)
                v.names[kept++] = v.names[k];
            else
                free(v.names[k]);
        }
        if (kept == 0) {
            free(v.names);
            continue;
        }
        qsort(v.names, kept, sizeof(*v.names), cmp_str);
        size_t head = namespace_prefix_head(tmpl);
        char *level = xstrndup(ns->prefix, head - 1); /* "shared" */
        list_level(o, ns, level);
        free(level);
        level = xstrndup(ns->prefix, strlen(ns->prefix) - 1); /* "shared/bob" */
        list_level(o, ns, level);
        free(level);
        if (!list_namespace_names(o, ns, false, v.names, kept, &err))
            log_warn(IMAP_COMPONENT, "LIST of a shared folder failed",
                     "session=%s owner=%s error=\"%s\"", s->io.id, owners[i], err.message);
    }
}

/* A LIST waiting for the sharing registry's owners (an asynchronous dict). */
struct imap_list_wait {
    struct imap_session *s; /* NULL once the session is gone */
    struct list_query q;
};

static void list_run(struct imap_session *s, struct list_query *q, const char *const *owners,
                     size_t owner_count)
{
    bool lsub = q->lsub;
    struct list_out o = {.s = s, .q = q};
    struct petrel_error err;
    const struct namespace_config *personal = mail_user_namespace(s->user, "personal", &err);
    if (!lsub && personal != NULL && !special_use_read(s->user, &o.overrides, &err)) {
        /* Unreadable overrides: list without attributes rather than not at all. */
        log_warn(IMAP_COMPONENT, "special-use overrides unreadable", "session=%s error=\"%s\"",
                 s->io.id, err.message);
        personal = NULL;
    }
    const struct mail_config *cfg = mail_cfg(s);
    bool ok = true;
    for (size_t i = 0; ok && i < cfg->namespace_count; i++) {
        const struct namespace_config *ns = &cfg->namespaces[i];
        if (ns->per_owner)
            list_shared(&o, ns, owners, owner_count);
        else
            ok = list_namespace(&o, ns, !lsub && ns == personal, &err);
    }
    special_use_list_free(&o.overrides);
    buf_free(&o.seen);
    list_query_free(q);
    if (!ok)
        imap_reply_storage_error(s, &err);
    else
        imap_reply_ok(s, "%s completed.", lsub ? "LSUB" : "LIST");
}

static void list_owners_done(bool ok, const char *error, const char *const *owners, size_t count,
                             void *ctx)
{
    struct imap_list_wait *w = ctx;
    struct imap_session *s = w->s;
    if (s == NULL) {
        list_query_free(&w->q);
        free(w);
        return;
    }
    s->list_wait = NULL;
    if (!ok)
        log_warn(IMAP_COMPONENT, "sharing registry unavailable: shared folders not listed",
                 "session=%s error=\"%s\"", s->io.id, error != NULL ? error : "");
    struct list_query q = w->q;
    free(w);
    /* Replies, which (after an asynchronous wait) reads the next command. */
    list_run(s, &q, ok ? owners : NULL, ok ? count : 0);
}

void imap_list_abort(struct imap_session *s)
{
    if (s->list_wait != NULL) {
        s->list_wait->s = NULL;
        s->list_wait = NULL;
    }
}

static void list_common(struct imap_session *s, const struct imap_command *cmd, bool lsub)
{
    struct list_query q = {.lsub = lsub, .sel_subscribed = lsub, .utf8 = s->utf8_accept};
    if (!list_parse(s, cmd, &q))
        return;
    if (q.root) {
        list_root(s);
        return;
    }
    const struct mail_config *cfg = mail_cfg(s);
    const struct namespace_config *shared = NULL;
    for (size_t i = 0; i < cfg->namespace_count && shared == NULL; i++)
        shared = cfg->namespaces[i].per_owner ? &cfg->namespaces[i] : NULL;
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict *dict = shared != NULL ? acl_registry_dict(s->ctx->storage, &err) : NULL;
    if (dict == NULL) {
        if (shared != NULL && err.code != PETREL_ERR_UNSUPPORTED)
            log_warn(IMAP_COMPONENT, "sharing registry unavailable: shared folders not listed",
                     "session=%s error=\"%s\"", s->io.id, err.message);
        list_run(s, &q, NULL, 0);
        return;
    }
    /* The owners who shared something with this user (the registry, a
     * dict: answered at once by the file and SQLite drivers, later by
     * Redis and PostgreSQL, the session waiting meanwhile). */
    struct imap_list_wait *w = xcalloc(1, sizeof(*w));
    w->s = s;
    w->q = q;
    s->list_wait = w;
    struct acl_identity who;
    acl_user_identity(s->user, shared, &who); /* a reader: never the owner */
    acl_registry_owners(dict, &who, list_owners_done, w);
    if (s->list_wait == w)
        s->busy = true;
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

/* RFC 6154 3 (CREATE-SPECIAL-USE): "(USE (\Sent))". *attr is the canonical
 * spelling of the one attribute asked for, NULL for none (the storage keeps
 * one per folder). Replies itself: BAD for an unknown parameter, NO
 * [USEATTR] for an attribute that cannot be set. */
static bool create_params(struct imap_session *s, const struct imap_arg *params, const char **attr)
{
    *attr = NULL;
    for (size_t i = 0; i < params->count; i++) {
        if (!imap_arg_atom_equals(&params->list[i], "USE") || i + 1 >= params->count ||
            params->list[i + 1].type != IMAP_ARG_LIST) {
            imap_reply_bad(s, "Unknown CREATE parameter.");
            return false;
        }
        const struct imap_arg *use = &params->list[++i];
        for (size_t k = 0; k < use->count; k++) {
            const char *canonical = use->list[k].type == IMAP_ARG_ATOM
                                        ? special_use_attr_canonical(use->list[k].str)
                                        : NULL;
            if (canonical == NULL) {
                imap_reply_no(s, "[USEATTR] Not a supported special-use attribute.");
                return false;
            }
            if (*attr != NULL && strcmp(*attr, canonical) != 0) {
                imap_reply_no(s, "[USEATTR] A mailbox can have one special use only.");
                return false;
            }
            *attr = canonical;
        }
    }
    return true;
}

static void cmd_create(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count < 1 || cmd->arg_count > 2 || cmd->args[0].type == IMAP_ARG_LIST ||
        (cmd->arg_count == 2 && cmd->args[1].type != IMAP_ARG_LIST)) {
        imap_reply_bad(s, "CREATE needs one mailbox name and optionally (parameters).");
        return;
    }
    const char *use = NULL;
    if (cmd->arg_count == 2 && !create_params(s, &cmd->args[1], &use))
        return;
    struct imap_folder_ref ref;
    if (!resolve_folder(s, &cmd->args[0], &ref))
        return;
    /* A trailing separator only announces children (RFC 3501 6.3.3). */
    size_t len = strlen(ref.name);
    if (len > 0 && ref.name[len - 1] == ref.ns->separator)
        ref.name[len - 1] = '\0';
    struct petrel_error err;
    struct mail_folder_create_params params = {.special_use = use};
    if (strcmp(ref.name, "INBOX") == 0 && ref.ns->type == NAMESPACE_PERSONAL) {
        imap_reply_no(s, "[ALREADYEXISTS] INBOX always exists.");
    } else if (!mail_folder_create_with(s->user, ref.ns, ref.name, &params, &err)) {
        if (params.special_use_failed)
            imap_reply_no(s, "[USEATTR] The special use could not be given: %s.",
                          params.special_use_error);
        else
            imap_reply_storage_error(s, &err);
    } else {
        imap_reply_ok(s, "CREATE completed.");
    }
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

const struct imap_command_def imap_commands_mailbox[] = {
    {"NAMESPACE", IMAP_AUTHED, cmd_namespace}, {"LIST", IMAP_AUTHED, cmd_list},
    {"LSUB", IMAP_AUTHED, cmd_lsub},           {"CREATE", IMAP_AUTHED, cmd_create},
    {"DELETE", IMAP_AUTHED, cmd_delete},       {"RENAME", IMAP_AUTHED, cmd_rename},
    {"SUBSCRIBE", IMAP_AUTHED, cmd_subscribe}, {"UNSUBSCRIBE", IMAP_AUTHED, cmd_unsubscribe},
    {"STATUS", IMAP_AUTHED, cmd_status},       {NULL, 0, NULL},
};
