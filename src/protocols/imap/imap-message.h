/* A message of the selected folder read on demand by FETCH and SEARCH:
 * its stored bytes when an item needs them, its MIME parse when an item
 * needs that, each at most once, and once it cannot be read, never tried
 * again until it is released. */
#ifndef PETREL_PROTOCOLS_IMAP_MESSAGE_H
#define PETREL_PROTOCOLS_IMAP_MESSAGE_H

#include "core/error.h"
#include "storage/mail-storage.h"
#include "storage/message/message-parser.h"

#include <stdbool.h>
#include <stdint.h>

struct imap_message {
    struct mailbox_message_data *data; /* NULL until opened */
    struct message parsed;             /* with have_parsed */
    bool have_parsed;
    bool gone; /* cannot be read (expunged by someone else since our last sync) */
};

/* The stored bytes of message `uid` of `box` in m->data (opened once).
 * False when the message cannot be read; a failure other than NOT_FOUND
 * is logged as a warning under session `log_id` (NULL: not logged). */
bool imap_message_open(struct imap_message *m, struct mailbox *box, uint32_t uid,
                       const char *log_id);
/* imap_message_open(), then the MIME parse in m->parsed (done once). */
bool imap_message_parse(struct imap_message *m, struct mailbox *box, uint32_t uid,
                        const char *log_id);
/* Marks the message unreadable after `err`, logged as imap_message_open()
 * does (for a caller that read it another way). */
void imap_message_gone(struct imap_message *m, uint32_t uid, const char *log_id,
                       const struct petrel_error *err);
/* Gives back what was read; `m` is empty again, ready for another message. */
void imap_message_release(struct imap_message *m);

#endif
