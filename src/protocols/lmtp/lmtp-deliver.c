/* Per-recipient delivery into the mail storage (see lmtp-deliver.h). */
#include "protocols/lmtp/lmtp-deliver.h"

#include "core/buf.h"
#include "core/xalloc.h"
#include "storage/quota/quota-module.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double elapsed(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

void lmtp_deliver_compose(const struct lmtp_delivery *d, const struct lmtp_delivery_rcpt *r,
                          struct buf *out)
{
    buf_reset(out);
    buf_reserve(out, (d->fd >= 0 ? 0 : d->len) + 512);
    buf_printf(out, "Return-Path: <%s>\r\nDelivered-To: %s\r\n", d->return_path, r->address);
    if (d->received_head != NULL)
        buf_printf(out, "%s\r\n\tfor <%s>; %s\r\n", d->received_head, r->address, d->date);
    if (d->fd < 0)
        buf_append(out, d->data, d->len);
}

/* The detail folder when it exists in the personal namespace, else INBOX.
 * Without ACLs in the storage yet, an existing folder is one the user may
 * post to (docs/lmtp.md). */
static struct mailbox *open_target(struct lmtp_folder_cache *folders, struct mail_user *user,
                                   const char *detail, struct petrel_error *err)
{
    const struct namespace_config *ns = mail_user_namespace(user, "personal", err);
    if (ns == NULL)
        return NULL;
    if (detail != NULL && *detail != '\0' && strcmp(detail, "INBOX") != 0 &&
        mail_folder_exists(user, ns, detail)) {
        struct petrel_error ferr;
        struct mailbox *box = lmtp_folder_cache_get(folders, user, ns, detail, &ferr);
        if (box != NULL)
            return box;
        /* An ACL without the right to post: INBOX, as Dovecot's
         * lmtp_save_to_detail_mailbox falls back (a refusal for
         * the file system's reasons, sys_errno set, stays an error). */
        if (ferr.code != PETREL_ERR_NOT_FOUND && ferr.code != PETREL_ERR_INVALID &&
            !(ferr.code == PETREL_ERR_PERMISSION && ferr.sys_errno == 0)) {
            *err = ferr;
            return NULL;
        }
        /* gone meanwhile, a name the storage refuses, no right: INBOX */
    }
    return lmtp_folder_cache_get(folders, user, ns, "INBOX", err);
}

static void deliver_one(struct mail_storage *storage, struct lmtp_folder_cache *folders,
                        const struct lmtp_delivery *d, struct lmtp_delivery_rcpt *r,
                        struct buf *msg)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    petrel_error_clear(&r->err);
    /* Delivered as the recipient's own session: their ACLs apply. */
    struct mail_user *user = mail_user_get_session(storage, r->username, NULL, &r->err);
    if (user != NULL && d->quota_rules)
        quota_user_set(user, r->quota_rule); /* this delivery's userdb answer */
    struct mailbox *box = user != NULL ? open_target(folders, user, r->detail, &r->err) : NULL;
    if (box != NULL) {
        mailbox_set_delivery(box, true); /* a quota allows its grace */
        lmtp_deliver_compose(d, r, msg);
        /* A spooled message is copied from its file by the kernel, after
         * this recipient's trace headers. */
        r->ok = d->fd >= 0 ? mailbox_append_file(box, msg->data, msg->len, d->fd, 0, d->len, 0,
                                                 NULL, 0, &r->uid, &r->err)
                           : mailbox_append(box, msg->data, msg->len, 0, NULL, 0, &r->uid, &r->err);
        if (r->ok)
            r->folder = xstrdup(mailbox_name(box));
        lmtp_folder_cache_put(folders, box, r->ok);
    }
    r->seconds = elapsed(&t0);
}

bool lmtp_delivery_permanent(const struct petrel_error *err)
{
    return err->code == PETREL_ERR_LIMIT ||
           (err->code == PETREL_ERR_OVER_QUOTA && err->permanent) ||
           (err->code == PETREL_ERR_PERMISSION && err->sys_errno == 0);
}

void lmtp_deliver(struct mail_storage *storage, struct lmtp_folder_cache *folders,
                  struct lmtp_delivery *d)
{
    struct buf msg = {0};
    for (size_t i = 0; i < d->rcpt_count; i++)
        deliver_one(storage, folders, d, &d->rcpts[i], &msg);
    buf_free(&msg);
}

void lmtp_delivery_free(struct lmtp_delivery *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->rcpt_count; i++) {
        struct lmtp_delivery_rcpt *r = &d->rcpts[i];
        free(r->address);
        free(r->username);
        for (size_t k = 0; r->quota_rule != NULL && r->quota_rule[k] != NULL; k++)
            free(r->quota_rule[k]);
        free(r->quota_rule);
        free(r->detail);
        free(r->folder);
    }
    free(d->rcpts);
    free(d->data);
    if (d->fd >= 0)
        close(d->fd);
    free(d->return_path);
    free(d->received_head);
    free(d->date);
    free(d);
}
