/* THREAD algorithms of RFC 5256 section 3 as pure functions over an array
 * of message facts: ORDEREDSUBJECT (3.1) and REFERENCES (3.2, with the
 * Message-ID table, dummy messages, pruning, grouping by base subject and
 * sorting siblings by sent date). The output is the text after
 * "* THREAD" (RFC 5256 4: thread-list*), e.g. "(2)(3 6 (4 23)(44 7 96))".
 * Traversals are iterative, so a deep reply chain cannot exhaust the
 * stack. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_THREAD_H
#define PETREL_PROTOCOLS_IMAP_IMAP_THREAD_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One message, given in sequence order (the array index is the final
 * tie-breaker). Header values are unfolded and may be NULL when absent. */
struct imap_thread_msg {
    uint32_t number;         /* what is printed: sequence number or UID */
    int64_t date;            /* sent date in UTC (INTERNALDATE when unusable) */
    const char *subject;     /* decoded Subject (not yet the base subject) */
    const char *message_id;  /* Message-ID value */
    const char *references;  /* References value */
    const char *in_reply_to; /* In-Reply-To value */
};

/* RFC 5256 3.1. */
void imap_thread_orderedsubject(const struct imap_thread_msg *msgs, size_t count, struct buf *out);
/* RFC 5256 3.2. */
void imap_thread_references(const struct imap_thread_msg *msgs, size_t count, struct buf *out);

/* The next msg-id "<left@right>" of a header value from *pos (comments and
 * white space skipped, as RFC 5322 allows around and Dovecot inside);
 * false at the end. `id` receives "left@right" without the brackets. */
bool imap_thread_next_msgid(const char *value, size_t len, size_t *pos, struct buf *id);

#endif
