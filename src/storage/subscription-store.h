/* Where a user's subscriptions live and how a namespace's folder names map
 * onto rows of the Dovecot subscriptions file (storage/subscriptions.h):
 * a namespace with `subscriptions: true` keeps its own file at
 * "<namespace root>/subscriptions"; the others keep their rows, prefixed
 * with the namespace prefix, in the personal namespace's file. Shared by
 * the backend-plane API and IMAP so both read and write the same rows. */
#ifndef PETREL_STORAGE_SUBSCRIPTION_STORE_H
#define PETREL_STORAGE_SUBSCRIPTION_STORE_H

#include "core/buf.h"
#include "core/error.h"
#include "storage/mail-storage.h"

#include <stdbool.h>
#include <stddef.h>

/* The file holding `ns`'s rows (appended to `path`) and the prefix (in the
 * namespace's separator) its rows carry there (borrowed from the config). */
bool mail_subscriptions_file(struct mail_user *user, const struct namespace_config *ns,
                             struct buf *path, const char **prefix, struct petrel_error *err);
/* `prefix` + `name` as a file row: the namespace separator becomes '/'. Allocated. */
char *mail_subscriptions_row(const char *prefix, const char *name, char separator);
/* The folders of `ns` that are subscribed, in the namespace's own form
 * (separator, no prefix), sorted. Free with mail_folder_list_free(). */
bool mail_subscriptions_list(struct mail_user *user, const struct namespace_config *ns,
                             char ***names, size_t *count, struct petrel_error *err);
/* Subscribes or unsubscribes folder `name` of `ns` (validated here; INBOX
 * in any case is INBOX). *changed tells whether the file changed. */
bool mail_subscriptions_set(struct mail_user *user, const struct namespace_config *ns,
                            const char *name, bool subscribed, bool *changed,
                            struct petrel_error *err);

#endif
