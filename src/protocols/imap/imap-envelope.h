/* The IMAP ENVELOPE of a message (RFC 3501 7.4.2, RFC 9051 7.5.2), rendered
 * from its header block in the stored bytes. Values stay as sent (encoded
 * words included), unfolded; address lists are parsed per RFC 5322 with the
 * usual tolerance: groups become (NIL NIL "name" NIL) ... (NIL NIL NIL NIL),
 * a missing local part or domain becomes MISSING_MAILBOX / MISSING_DOMAIN
 * (a NIL there would read as a group marker), and a comment names an
 * address that has no display name. */
#ifndef PETREL_PROTOCOLS_IMAP_ENVELOPE_H
#define PETREL_PROTOCOLS_IMAP_ENVELOPE_H

#include "core/buf.h"
#include "storage/message/message-parser.h"

#include <stddef.h>

/* Appends "(date subject from sender reply-to to cc bcc in-reply-to
 * message-id)" for the message whose header block is `header` in `data`.
 * Sender and Reply-To default to From when absent or empty. */
void imap_envelope_append(struct buf *out, const char *data, const struct message_range *header);

/* Appends one address list as "((name adl mailbox host)...)" or NIL when
 * it holds no address: `value` is an unfolded header value. */
void imap_envelope_append_addresses(struct buf *out, const char *value, size_t len);

/* Appends the addresses of an unfolded header value as text, the form a
 * SEARCH FROM/TO/CC/BCC compares (as Dovecot does): "name <mailbox@host>"
 * (the name quoted unless it is one atom; a comment stands in for a
 * missing name) or "<mailbox@host>", separated by ", ", groups as
 * "name: ...;"; comments inside an address, quoting and white space around
 * its parts are gone. */
void imap_envelope_address_text(struct buf *out, const char *value, size_t len);

/* Appends `s` as an IMAP nstring: NIL for NULL, a quoted string when it can
 * be one, otherwise a literal (8-bit, CR, LF or NUL bytes). */
void imap_envelope_append_nstring(struct buf *out, const char *s, size_t len);

#endif
