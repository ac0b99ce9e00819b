/* Delivering one received message into its recipients' mailboxes.
 *
 * Runs on a delivery thread (lmtp-server.c) with a mail storage that only
 * that thread uses: the storage is not thread-safe, and two threads
 * appending to one folder exclude each other through the folder lock
 * (flock), exactly as two processes do. Nothing here touches the event loop
 * or the metrics registry; results go back in the job.
 *
 * Per recipient: the user from the storage, the folder named by the
 * address detail when it exists in the personal namespace (else INBOX),
 * and one mailbox_append (mailbox_append_file from a spooled message) of
 *     Return-Path: <sender>
 *     Delivered-To: <recipient address>
 *     Received: ... for <recipient address>; <date>     (when configured)
 * followed by the message bytes as received. mailbox_append makes the file
 * durable (mail.fsync) before it returns and leaves no partial file on
 * failure, so a recipient reported ok is stored and one reported failed has
 * nothing in its mailbox. */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_DELIVER_H
#define PETREL_PROTOCOLS_LMTP_LMTP_DELIVER_H

#include "core/error.h"
#include "protocols/lmtp/lmtp-folder-cache.h"
#include "storage/mail-storage.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lmtp_delivery_rcpt {
    /* in */
    char *address;  /* canonical recipient address (Delivered-To) */
    char *username; /* the storage user (canonical userdb name) */
    char *detail;   /* folder wanted by the address detail, or NULL */
    char **quota_rule; /* the userdb's quota rules (NULL-terminated, owned), or NULL */
    /* out */
    bool ok;
    uint32_t uid;
    char *folder; /* where it went (allocated), NULL on failure */
    struct petrel_error err;
    double seconds; /* time spent on this recipient */
};

struct lmtp_delivery {
    char *data; /* the message as received (owned), or NULL with `fd` */
    size_t len;
    int fd;              /* -1, or the spool file holding the `len` bytes (owned; lmtp-spool.h) */
    char *return_path;   /* the sender as written into Return-Path, without brackets */
    char *received_head; /* "Received: from ... with LMTP id ..." (no CRLF), or NULL */
    char *date;          /* RFC 5322 date for the Received header */
    struct lmtp_delivery_rcpt *rcpts;
    size_t rcpt_count;
    bool quota_rules; /* the recipients' quota_rule are set (the storage enforces a quota) */
};

/* Delivers to every recipient, filling in their results, through the
 * folders this thread keeps open (`folders`, on `storage`). */
/* Whether a recipient's storage error is a permanent refusal (5xx: a
 * module's LIMIT, or its PERMISSION rather than a file system's); anything
 * else is answered and counted as a temporary failure. */
bool lmtp_delivery_permanent(const struct petrel_error *err);
void lmtp_deliver(struct mail_storage *storage, struct lmtp_folder_cache *folders,
                  struct lmtp_delivery *d);

/* The bytes stored for recipient `r`: trace headers, then the message
 * (the headers alone when the message is in `fd`). */
void lmtp_deliver_compose(const struct lmtp_delivery *d, const struct lmtp_delivery_rcpt *r,
                          struct buf *out);

void lmtp_delivery_free(struct lmtp_delivery *d);

#endif
