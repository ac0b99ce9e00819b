/* Mailbox (folder) names: validation and the two encodings they travel in.
 * The API speaks UTF-8 names with the namespace's hierarchy separator; IMAP
 * and the disk use modified UTF-7 (RFC 3501 5.1.3). Valid names: non-empty,
 * valid UTF-8, no control characters, no leading or trailing separator, no
 * empty, "." or ".." level, no '/' or '\' inside a level when the separator
 * is something else, no '.' inside a level (Maildir++ uses it on disk), at
 * most 16 levels and 1024 bytes. */
#ifndef PETREL_STORAGE_MAILBOX_NAME_H
#define PETREL_STORAGE_MAILBOX_NAME_H

#include "core/buf.h"
#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>

#define MAILBOX_NAME_MAX 1024
#define MAILBOX_NAME_MAX_LEVELS 16

/* Checks a UTF-8 name using `separator` between levels. */
bool mailbox_name_validate(const char *name, char separator, struct petrel_error *err);
/* UTF-8 -> modified UTF-7 (appended). False on invalid UTF-8. */
bool mailbox_name_to_mutf7(const char *utf8, struct buf *out);
/* Modified UTF-7 -> UTF-8 (appended). False on malformed input (bad
 * base64, non-canonical or unterminated shifts, invalid UTF-16). */
bool mailbox_name_from_mutf7(const char *mutf7, struct buf *out);
/* True for "INBOX" in any case (RFC 3501: INBOX is case-insensitive). */
bool mailbox_name_is_inbox(const char *name);

#endif
