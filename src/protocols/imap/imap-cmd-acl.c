/* RFC 4314 ACL commands: SETACL, DELETEACL, GETACL, LISTRIGHTS, MYRIGHTS
 * (capabilities ACL and RIGHTS=texk, when mail.acl.enabled). They read
 * and change the folders' dovecot-acl files (storage/acl/acl-store.h);
 * the rights checks of every other command are the ACL storage module's.
 *
 * As Dovecot's imap_acl plugin answers: identifiers "anyone",
 * "authenticated", "owner", "$group", "-" for negative rights, anything
 * else a user name; the owner's entry is shown under the owner's name, and
 * when the file gives the owner no positive entry their implicit rights
 * are shown last; "anyone" and "authenticated" may be granted only with
 * mail.acl.allow_anyone; a change to an entry that matches the user
 * themselves keeps their "a" (nobody locks themselves out). Rights are
 * shown in RFC 4314's canonical order (Dovecot keeps the order it read),
 * with the virtual c and d. */
#include "protocols/imap/imap-private.h"

#include "storage/acl/acl-module.h"
#include "storage/acl/acl-rights.h"
#include "storage/acl/acl-store.h"
#include "storage/shared-namespace.h"

#include <stdlib.h>
#include <string.h>

#define NOT_ADMIN "[NOPERM] You lack administrator privileges on this mailbox."

static const struct mail_acl_config *acl_cfg(const struct imap_session *s)
{
    return &mail_storage_config(mail_user_storage(s->user))->acl;
}

/* An astring as Dovecot writes one: an atom when every byte may be in
 * one, else a quoted string (or a literal). */
static void append_astring(struct buf *out, const char *text)
{
    bool atom = text[0] != '\0' && strcasecmp(text, "NIL") != 0;
    for (const char *p = text; atom && *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        atom = c > 0x20 && c < 0x7f && strchr("(){%*\"\\]", c) == NULL;
    }
    if (atom)
        buf_append_str(out, text);
    else
        imap_append_string(out, text, strlen(text));
}

/* The folder of a command's first argument, which must exist and which
 * the user must see; `need` (0: none) the rights asked of them. Replies
 * itself and returns false otherwise. */
struct acl_ref {
    const struct namespace_config *ns;
    char *name;      /* the caller frees it */
    uint32_t rights; /* the user's own on the folder */
};

static bool acl_folder(struct imap_session *s, const struct imap_arg *arg, uint32_t need,
                       struct acl_ref *f)
{
    if (!imap_resolve_folder(s, arg, &f->ns, &f->name))
        return false;
    f->rights = mail_folder_my_rights(s->user, f->ns, f->name);
    /* The admin right alone is enough to manage the ACL (Dovecot's
     * imap_acl_mailbox_open); a folder without it and without l is
     * answered as a missing one. */
    if (!mail_folder_exists(s->user, f->ns, f->name) ||
        ((f->rights & need) != need && (f->rights & ACL_LOOKUP) == 0))
        imap_reply_no(s, "[NONEXISTENT] Mailbox does not exist.");
    else if ((f->rights & need) != need)
        imap_reply_no(s, NOT_ADMIN);
    else
        return true;
    free(f->name);
    f->name = NULL;
    return false;
}

/* The IMAP identifier ("-$staff") as an entry identifier. */
static bool parse_identifier(struct imap_session *s, const char *text, struct acl_id *id)
{
    struct buf model = {0};
    const char *p = text;
    if (*p == '-') {
        buf_append_char(&model, '-');
        p++;
    }
    if (strcmp(p, "anyone") == 0 || strcmp(p, "authenticated") == 0 || strcmp(p, "owner") == 0)
        buf_append_str(&model, p);
    else if (p[0] == '$')
        buf_printf(&model, "group=%s", p + 1);
    else
        buf_printf(&model, "user=%s", p);
    const char *why = NULL;
    bool ok = acl_id_parse(model.data, model.len, id, &why);
    buf_free(&model);
    if (!ok) {
        imap_reply_bad(s, "Invalid identifier: %s", why != NULL ? why : "not valid");
        return false;
    }
    if ((id->kind == ACL_ID_ANYONE || id->kind == ACL_ID_AUTHENTICATED) &&
        !acl_cfg(s)->allow_anyone) {
        imap_reply_bad(s, "'%s' identifier is disallowed.", p);
        return false;
    }
    return true;
}

/* The entry identifier as IMAP shows it to `s` on a folder of `ns`. */
static void append_identifier(struct buf *out, const struct imap_session *s,
                              const struct namespace_config *ns, const struct acl_id *id)
{
    struct buf text = {0};
    if (id->negative)
        buf_append_char(&text, '-');
    switch (id->kind) {
    case ACL_ID_ANYONE:
        buf_append_str(&text, "anyone");
        break;
    case ACL_ID_AUTHENTICATED:
        buf_append_str(&text, "authenticated");
        break;
    case ACL_ID_OWNER:
        /* in a shared namespace's instance, the owner whose folder it is */
        buf_append_str(&text, ns->type == NAMESPACE_PERSONAL ? mail_user_name(s->user)
                              : ns->owner != NULL            ? ns->owner
                                                             : "owner");
        break;
    case ACL_ID_USER:
        buf_append_str(&text, id->name);
        break;
    case ACL_ID_GROUP:
        buf_printf(&text, "$%s", id->name);
        break;
    case ACL_ID_GROUP_OVERRIDE:
        buf_printf(&text, "!$%s", id->name);
        break;
    }
    buf_append_char(&text, '\0');
    append_astring(out, text.data);
    buf_free(&text);
}

static void append_rights(struct buf *out, uint32_t rights)
{
    char letters[14];
    append_astring(out, acl_rights_str(rights, true, letters));
}

static bool folder_dir(struct imap_session *s, const struct namespace_config *ns, const char *name,
                       struct buf *dir)
{
    struct petrel_error err;
    if (!acl_store_dir(s->user, ns, name, dir, &err)) {
        imap_reply_storage_error(s, &err);
        return false;
    }
    buf_append_char(dir, '\0');
    return true;
}

/* ---------- GETACL ---------- */

static void cmd_getacl(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count != 1) {
        imap_reply_bad(s, "GETACL needs a mailbox name.");
        return;
    }
    struct acl_ref f;
    if (!acl_folder(s, &cmd->args[0], ACL_ADMIN, &f))
        return;
    struct buf dir = {0};
    struct acl_list list = {0};
    struct petrel_error err;
    if (!folder_dir(s, f.ns, f.name, &dir))
        goto out;
    if (acl_store_read(dir.data, &list, NULL, &err) < 0) {
        imap_reply_storage_error(s, &err);
        goto out;
    }
    struct buf line = {0};
    buf_append_str(&line, "* ACL ");
    append_astring(&line, imap_arg_astring(&cmd->args[0]));
    bool owner_shown = false;
    for (size_t i = 0; i < list.count; i++) {
        const struct acl_entry *e = &list.entries[i];
        if (!e->id.negative &&
            (e->id.kind == ACL_ID_OWNER ||
             (e->id.kind == ACL_ID_USER && strcmp(e->id.name, mail_user_name(s->user)) == 0)))
            owner_shown = true;
        buf_append_char(&line, ' ');
        append_identifier(&line, s, f.ns, &e->id);
        buf_append_char(&line, ' ');
        append_rights(&line, e->rights);
    }
    if (!owner_shown && f.ns->type == NAMESPACE_PERSONAL) {
        /* The owner's implicit rights, as Dovecot shows them. */
        buf_append_char(&line, ' ');
        append_astring(&line, mail_user_name(s->user));
        buf_append_char(&line, ' ');
        append_rights(&line, ACL_ALL_RIGHTS);
    }
    imap_send(s, "%s", line.data);
    buf_free(&line);
    imap_reply_ok(s, "Getacl completed.");
out:
    acl_list_free(&list);
    buf_free(&dir);
    free(f.name);
}

/* ---------- MYRIGHTS ---------- */

static void cmd_myrights(struct imap_session *s, const struct imap_command *cmd)
{
    if (cmd->arg_count != 1) {
        imap_reply_bad(s, "MYRIGHTS needs a mailbox name.");
        return;
    }
    struct acl_ref f;
    if (!acl_folder(s, &cmd->args[0], 0, &f))
        return;
    free(f.name);
    /* RFC 4314 4: any of l r i k x a lets one ask; p alone is for
     * deliveries and tells nothing. */
    if ((f.rights & (ACL_LOOKUP | ACL_READ | ACL_INSERT | ACL_CREATE | ACL_DELETE | ACL_ADMIN)) ==
        0) {
        imap_reply_no(s, "[NONEXISTENT] Mailbox does not exist.");
        return;
    }
    struct buf line = {0};
    buf_append_str(&line, "* MYRIGHTS ");
    append_astring(&line, imap_arg_astring(&cmd->args[0]));
    buf_append_char(&line, ' ');
    append_rights(&line, f.rights);
    imap_send(s, "%s", line.data);
    buf_free(&line);
    imap_reply_ok(s, "Myrights completed.");
}

/* ---------- LISTRIGHTS ---------- */

static void cmd_listrights(struct imap_session *s, const struct imap_command *cmd)
{
    const char *who = cmd->arg_count == 2 ? imap_arg_astring(&cmd->args[1]) : NULL;
    if (who == NULL) {
        imap_reply_bad(s, "LISTRIGHTS needs a mailbox name and an identifier.");
        return;
    }
    struct acl_ref f;
    if (!acl_folder(s, &cmd->args[0], ACL_ADMIN, &f))
        return;
    free(f.name);
    /* Nothing is always granted, and each right can be given alone (as
     * Dovecot answers, the owner included). */
    struct buf line = {0};
    buf_append_str(&line, "* LISTRIGHTS ");
    append_astring(&line, imap_arg_astring(&cmd->args[0]));
    buf_append_char(&line, ' ');
    append_astring(&line, who);
    buf_append_str(&line, " \"\" l r w s t p i e k x a c d");
    imap_send(s, "%s", line.data);
    buf_free(&line);
    imap_reply_ok(s, "Listrights completed.");
}

/* ---------- SETACL and DELETEACL ---------- */

static void change_acl(struct imap_session *s, const struct imap_arg *mbox, struct acl_change *c,
                       const char *done)
{
    struct acl_ref f;
    if (!acl_folder(s, mbox, ACL_ADMIN, &f))
        return;
    /* Whoever changes an entry that is theirs keeps "a" (Dovecot's
     * imap_acl_update_ensure_keep_admins). */
    if (acl_id_matches_user(&c->id, s->user, f.ns)) {
        if (c->id.negative || c->mode == ACL_MODIFY_REMOVE)
            c->rights &= ~(uint32_t)ACL_ADMIN;
        else
            c->rights |= ACL_ADMIN;
        if (c->remove && !c->id.negative) {
            c->remove = false;
            c->mode = ACL_MODIFY_REPLACE;
            c->rights = ACL_ADMIN;
        }
    }
    struct buf dir = {0};
    struct petrel_error err;
    if (folder_dir(s, f.ns, f.name, &dir)) {
        /* shared/bob/X: bob's index and registry rows (shared-namespace.h) */
        struct mail_user *holder;
        const struct namespace_config *holder_ns;
        mail_namespace_acl_holder(s->user, f.ns, &holder, &holder_ns);
        if (acl_store_change_folder(holder, holder_ns, f.name, c, &err)) {
            /* This user's own next command sees the change at once. */
            mail_user_rights_changed(s->user);
            imap_reply_ok(s, "%s", done);
        } else
            imap_reply_storage_error(s, &err);
    }
    buf_free(&dir);
    free(f.name);
}

static void cmd_setacl(struct imap_session *s, const struct imap_command *cmd)
{
    const char *who = cmd->arg_count == 3 ? imap_arg_astring(&cmd->args[1]) : NULL;
    const char *text = cmd->arg_count == 3 ? imap_arg_astring(&cmd->args[2]) : NULL;
    if (who == NULL || text == NULL) {
        imap_reply_bad(s, "SETACL needs a mailbox name, an identifier and rights.");
        return;
    }
    struct acl_change c = {.mode = ACL_MODIFY_REPLACE};
    if (text[0] == '+' || text[0] == '-') {
        c.mode = text[0] == '+' ? ACL_MODIFY_ADD : ACL_MODIFY_REMOVE;
        text++;
    }
    char bad = 0;
    if (!acl_rights_parse(text, strlen(text), &c.rights, &bad)) {
        imap_reply_bad(s, "Invalid ACL right: %c", bad);
        return;
    }
    if (!parse_identifier(s, who, &c.id))
        return;
    change_acl(s, &cmd->args[0], &c, "Setacl complete.");
}

static void cmd_deleteacl(struct imap_session *s, const struct imap_command *cmd)
{
    const char *who = cmd->arg_count == 2 ? imap_arg_astring(&cmd->args[1]) : NULL;
    if (who == NULL) {
        imap_reply_bad(s, "DELETEACL needs a mailbox name and an identifier.");
        return;
    }
    struct acl_change c = {.remove = true};
    if (!parse_identifier(s, who, &c.id))
        return;
    change_acl(s, &cmd->args[0], &c, "Deleteacl complete.");
}

/* Without mail.acl.enabled the commands do not exist (no capability). */
static void run_if_enabled(struct imap_session *s, const struct imap_command *cmd,
                           imap_command_fn *fn)
{
    if (!acl_cfg(s)->enabled) {
        imap_reply_bad(s, "Unknown command.");
        return;
    }
    fn(s, cmd);
}

#define ACL_COMMAND(fn)                                                                            \
    static void fn##_checked(struct imap_session *s, const struct imap_command *cmd)               \
    {                                                                                              \
        run_if_enabled(s, cmd, fn);                                                                \
    }
ACL_COMMAND(cmd_setacl)
ACL_COMMAND(cmd_deleteacl)
ACL_COMMAND(cmd_getacl)
ACL_COMMAND(cmd_listrights)
ACL_COMMAND(cmd_myrights)

const struct imap_command_def imap_commands_acl[] = {
    {"SETACL", IMAP_AUTHED, cmd_setacl_checked},
    {"DELETEACL", IMAP_AUTHED, cmd_deleteacl_checked},
    {"GETACL", IMAP_AUTHED, cmd_getacl_checked},
    {"LISTRIGHTS", IMAP_AUTHED, cmd_listrights_checked},
    {"MYRIGHTS", IMAP_AUTHED, cmd_myrights_checked},
    {NULL, 0, NULL},
};
