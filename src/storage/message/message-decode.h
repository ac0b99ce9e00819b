/* Undoing MIME encodings for whoever needs the text a message means rather
 * than the bytes it holds (IMAP BINARY, SEARCH): Content-Transfer-Encoding
 * of a part's body (RFC 2045) and encoded words in header values
 * (RFC 2047). Lenient like the parser: junk is skipped or kept, never an
 * error. */
#ifndef PETREL_STORAGE_MESSAGE_DECODE_H
#define PETREL_STORAGE_MESSAGE_DECODE_H

#include "core/buf.h"
#include "storage/message/message-parser.h"

#include <stddef.h>

enum message_cte {
    MESSAGE_CTE_IDENTITY, /* 7bit, 8bit, binary, none, or a container */
    MESSAGE_CTE_BASE64,
    MESSAGE_CTE_QP,
    MESSAGE_CTE_UNKNOWN,
};

enum message_cte message_part_cte(const struct message_part *part);
/* Base64 (characters outside the alphabet ignored, '=' ends the data). */
void message_decode_base64(struct buf *out, const char *s, size_t len);
/* Quoted-printable: soft breaks joined, hard breaks become CRLF, a broken
 * escape kept as it stands. */
void message_decode_qp(struct buf *out, const char *s, size_t len);
/* The body of part `part` with its transfer encoding undone (identity
 * parts are copied as stored). False for an unknown encoding. */
bool message_part_decode(const struct message *msg, size_t part, struct buf *out);
/* A header value with RFC 2047 encoded words decoded into UTF-8 (UTF-8 and
 * US-ASCII words as they are, ISO-8859-1/-15 and Windows-1252 converted,
 * other charsets' bytes kept); whitespace between adjacent encoded words
 * dropped; everything else copied. */
void message_header_decode(const char *value, size_t len, struct buf *out);

#endif
