/* IMAP BODY and BODYSTRUCTURE (RFC 3501 7.4.2, RFC 9051 7.5.2) rendered
 * from a parsed message. Sizes are in CRLF form, text and message/rfc822
 * parts carry their line counts, message/rfc822 (and message/global) parts
 * carry the ENVELOPE and structure of the encapsulated message. Defaults
 * follow Dovecot: a text part without a charset gets ("charset"
 * "us-ascii"), a missing encoding is "7bit", and a multipart that could not
 * be split (no boundary, no part found) shows one empty text/plain part. */
#ifndef PETREL_PROTOCOLS_IMAP_BODYSTRUCTURE_H
#define PETREL_PROTOCOLS_IMAP_BODYSTRUCTURE_H

#include "core/buf.h"
#include "storage/message/message-parser.h"

#include <stdbool.h>
#include <stddef.h>

/* Appends the structure of part `part` (0: the whole message): BODYSTRUCTURE
 * when `extended` (with the extension data: MD5, disposition, language and
 * location; parameters, disposition, language and location for multiparts),
 * BODY otherwise. */
void imap_bodystructure_append(struct buf *out, const struct message *msg, size_t part,
                               bool extended);

#endif
