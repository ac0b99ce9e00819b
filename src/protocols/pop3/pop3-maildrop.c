/* The maildrop of a POP3 session: the personal INBOX as it was at login
 * (RFC 1939 numbers messages once per session; mail delivered later shows
 * up in the next session), deletion marks, and the UPDATE state that
 * expunges exactly the marked messages at QUIT. */
#include "protocols/pop3/pop3-private.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

static const struct namespace_config *personal_namespace(struct mail_user *user,
                                                         struct petrel_error *err)
{
    const struct mail_config *cfg = mail_storage_config(mail_user_storage(user));
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        if (cfg->namespaces[i].type == NAMESPACE_PERSONAL)
            return &cfg->namespaces[i];
    }
    petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no personal namespace is configured");
    return NULL;
}

bool pop3_maildrop_open(struct pop3_maildrop *drop, struct mail_user *user,
                        struct petrel_error *err)
{
    memset(drop, 0, sizeof(*drop));
    const struct namespace_config *ns = personal_namespace(user, err);
    if (ns == NULL)
        return false;
    struct mailbox *box = mailbox_open(user, ns, "INBOX", err);
    if (box == NULL)
        return false;
    struct mailbox_view *view = mailbox_view_new(box, err);
    if (view == NULL) {
        mailbox_close(box);
        return false;
    }
    struct mailbox_view_status st;
    mailbox_view_get_status(view, &st);
    size_t count = mailbox_view_count(view);
    drop->msgs = count > 0 ? xcalloc(count, sizeof(*drop->msgs)) : NULL;
    for (size_t i = 0; i < count; i++) {
        const struct mailbox_view_entry *e = mailbox_view_at(view, (uint32_t)(i + 1));
        drop->msgs[i].uid = e->uid;
        drop->msgs[i].seen = (e->flags & MAIL_FLAG_SEEN) != 0;
        drop->msgs[i].size = e->vsize;
        drop->total_size += e->vsize;
    }
    mailbox_view_free(view);
    drop->box = box;
    drop->count = count;
    drop->uid_validity = st.uid_validity;
    return true;
}

void pop3_maildrop_close(struct pop3_maildrop *drop)
{
    if (drop->box != NULL)
        mailbox_close(drop->box);
    free(drop->msgs);
    memset(drop, 0, sizeof(*drop));
}

struct pop3_message *pop3_maildrop_get(struct pop3_maildrop *drop, uint64_t number,
                                       const char **why)
{
    if (number == 0 || number > drop->count) {
        *why = "No such message.";
        return NULL;
    }
    struct pop3_message *msg = &drop->msgs[number - 1];
    if (msg->deleted) {
        *why = "Message is deleted.";
        return NULL;
    }
    return msg;
}

void pop3_maildrop_delete(struct pop3_maildrop *drop, struct pop3_message *msg)
{
    if (msg->deleted)
        return;
    msg->deleted = true;
    drop->deleted_count++;
    drop->deleted_size += msg->size;
}

void pop3_maildrop_undelete_all(struct pop3_maildrop *drop)
{
    for (size_t i = 0; i < drop->count; i++)
        drop->msgs[i].deleted = false;
    drop->deleted_count = 0;
    drop->deleted_size = 0;
}

bool pop3_maildrop_commit(struct pop3_maildrop *drop, size_t *expunged, struct petrel_error *err)
{
    *expunged = 0;
    if (drop->deleted_count == 0)
        return true;
    uint32_t *uids = xcalloc(drop->deleted_count, sizeof(*uids));
    size_t n = 0;
    for (size_t i = 0; i < drop->count && n < drop->deleted_count; i++) {
        if (drop->msgs[i].deleted)
            uids[n++] = drop->msgs[i].uid;
    }
    /* \Deleted first: mailbox_expunge() removes only flagged messages, and
     * only those listed, so \Deleted set by an IMAP client elsewhere stays
     * that client's business. */
    struct mailbox_flags_update upd = {MAILBOX_FLAGS_ADD, MAIL_FLAG_DELETED, NULL, 0};
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    bool ok = mailbox_update_flags(drop->box, uids, n, &upd, NULL, NULL, NULL, NULL, err) &&
              mailbox_expunge(drop->box, uids, n, &gone, &gone_count, err);
    if (ok) {
        /* mailbox_expunge() logs and skips a message it cannot remove: what
         * is still in the index was not deleted. Messages expunged by
         * someone else meanwhile are gone as asked. */
        size_t left = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t size = 0, vsize = 0;
            struct petrel_error e;
            if (mailbox_message_sizes(drop->box, uids[i], &size, &vsize, &e))
                left++;
        }
        if (left > 0)
            ok =
                petrel_error_set(err, PETREL_ERR_IO, "%zu of %zu deleted messages remain", left, n);
        *expunged = gone_count;
    }
    free(gone);
    free(uids);
    return ok;
}

bool pop3_maildrop_set_seen(struct pop3_maildrop *drop, struct pop3_message *msg,
                            struct petrel_error *err)
{
    if (msg->seen)
        return true;
    struct mailbox_flags_update upd = {MAILBOX_FLAGS_ADD, MAIL_FLAG_SEEN, NULL, 0};
    if (!mailbox_update_flags(drop->box, &msg->uid, 1, &upd, NULL, NULL, NULL, NULL, err))
        return false;
    msg->seen = true;
    return true;
}
