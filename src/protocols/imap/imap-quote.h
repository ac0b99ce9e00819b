/* Writing IMAP response values: strings as atom, quoted string or literal
 * (whichever the bytes allow), NIL for absent values, mailbox names and
 * quoted date-times. Everything is appended to a caller's buffer. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_QUOTE_H
#define PETREL_PROTOCOLS_IMAP_IMAP_QUOTE_H

#include "core/buf.h"

#include <stddef.h>
#include <stdint.h>

/* UTF8=ACCEPT (RFC 6855) is enabled: 8-bit text may go in quoted strings. */
#define IMAP_QUOTE_UTF8 0x1u

/* Longest string written quoted; longer ones become literals. */
#define IMAP_QUOTE_MAX_QUOTED 1024

/* A quoted string when the bytes allow it (no CR, LF or NUL; 7-bit unless
 * IMAP_QUOTE_UTF8; not over IMAP_QUOTE_MAX_QUOTED), else a literal "{n}\r\n"
 * (a NUL byte in it goes out as 0x80: RFC 3501 allows none in a literal). */
void imap_quote_string(struct buf *out, const char *s, size_t len, unsigned flags);
/* NIL for a NULL `s`, else as imap_quote_string(). */
void imap_quote_nstring(struct buf *out, const char *s, size_t len, unsigned flags);
/* An atom when every byte is an ASTRING-CHAR (and it is not "NIL"), else as
 * imap_quote_string(). */
void imap_quote_astring(struct buf *out, const char *s, size_t len, unsigned flags);
/* A mailbox name (already in its wire form, e.g. modified UTF-7), always
 * quoted unless it needs a literal, as clients expect in LIST. */
void imap_quote_mailbox(struct buf *out, const char *name, unsigned flags);
/* A quoted date-time: "17-Jul-1996 02:44:25 -0700" (INTERNALDATE). */
void imap_quote_datetime(struct buf *out, int64_t t, int tz_minutes);

#endif
