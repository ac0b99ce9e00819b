/* POP3 unique-ids (UIDL, RFC 1939 section 7) from a message's IMAP UID and
 * its folder's UIDVALIDITY. Both survive sessions, index rebuilds and a
 * migration from or to Dovecot (dovecot-uidlist keeps them), so the id of a
 * message never changes while it exists, and a folder recreated with a new
 * UIDVALIDITY gives every message a new id (clients then download again
 * rather than skip mail).
 *
 * The format is a subset of Dovecot's pop3_uidl_format, expanded as
 * Dovecot 2.3's var_expand does: literal characters and the variables %u
 * (UID) and %v (UIDVALIDITY), each optionally with a zero-padded width and
 * the modifiers X (hexadecimal, lower case), U (upper case) and L (lower
 * case) applied in the order written, e.g. the default "%08Xu%08Xv"
 * (Dovecot's default: "0000002a5f3b1c00"); "%%" is a percent sign. */
#ifndef PETREL_PROTOCOLS_POP3_UIDL_H
#define PETREL_PROTOCOLS_POP3_UIDL_H

#include "core/buf.h"
#include "core/error.h"

#include <stdbool.h>
#include <stdint.h>

#define POP3_UIDL_DEFAULT_FORMAT "%08Xu%08Xv"
#define POP3_UIDL_MAX 70 /* RFC 1939: 1 to 70 characters in 0x21..0x7E */

/* Checks a format: known variables only, at least one %u, printable
 * characters without spaces, every expansion at most POP3_UIDL_MAX long. */
bool pop3_uidl_format_check(const char *format, struct petrel_error *err);
/* Appends the unique-id of one message; `format` passed the check. */
void pop3_uidl_format(const char *format, uint32_t uid, uint32_t uid_validity, struct buf *out);

#endif
