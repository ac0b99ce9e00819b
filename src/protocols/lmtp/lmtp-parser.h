/* LMTP command lines (RFC 2033 over the RFC 5321 grammar), no I/O: the
 * verb, MAIL FROM / RCPT TO paths with their ESMTP parameters, and the
 * canonical text form of an address.
 *
 * The parser works in place on one command line (without its CRLF) that
 * the caller owns and may modify: every result is a slice of that line; a
 * quoted local part is unquoted where it stands (the decoded text is never
 * longer than the quoted one). Nothing is allocated, so a command lives
 * exactly as long as its line.
 *
 * Grammar accepted (RFC 5321 4.1.2, RFC 6531 for UTF-8):
 *   Path      = "<" [ A-d-l ":" ] Mailbox ">"     source route parsed and dropped
 *   Mailbox   = Local-part [ "@" ( Domain / address-literal ) ]
 *               (the domain is optional in RCPT TO only, as LMTP clients
 *               address local users; "<>" is allowed in MAIL FROM only)
 *   Local-part = Dot-string / Quoted-string
 * Leniencies real clients need: verbs in any case, optional spaces after
 * "FROM:" / "TO:", several spaces between parameters. Bytes >= 0x80 are
 * allowed in atoms, quoted strings and domains when they form valid UTF-8
 * (the caller decides whether SMTPUTF8 allows them: path.utf8 says so).
 * Limits: local part LMTP_MAX_LOCAL_PART, domain LMTP_MAX_DOMAIN, at most
 * LMTP_MAX_PARAMS parameters, each keyword LMTP_MAX_PARAM_KEYWORD; the whole
 * line is bounded by the server's max_line_length before it gets here. */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_PARSER_H
#define PETREL_PROTOCOLS_LMTP_LMTP_PARSER_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LMTP_MAX_LOCAL_PART 256   /* RFC 5321 says 64; real systems send more */
#define LMTP_MAX_DOMAIN 255       /* RFC 5321 4.5.3.1.2 */
#define LMTP_MAX_PARAMS 16        /* ESMTP parameters after a path */
#define LMTP_MAX_PARAM_KEYWORD 32 /* "SMTPUTF8", "BODY", ... */

enum lmtp_verb {
    LMTP_VERB_UNKNOWN,
    LMTP_VERB_LHLO,
    LMTP_VERB_HELO, /* refused: LMTP needs LHLO (RFC 2033 4.1) */
    LMTP_VERB_EHLO, /* refused likewise */
    LMTP_VERB_MAIL,
    LMTP_VERB_RCPT,
    LMTP_VERB_DATA,
    LMTP_VERB_BDAT, /* CHUNKING is not offered */
    LMTP_VERB_RSET,
    LMTP_VERB_NOOP,
    LMTP_VERB_QUIT,
    LMTP_VERB_VRFY,
    LMTP_VERB_EXPN,
    LMTP_VERB_HELP,
    LMTP_VERB_STARTTLS,
    LMTP_VERB_XCLIENT, /* Postfix's XCLIENT, from login_trusted_networks only */
};

/* A view into the parsed line. */
struct lmtp_slice {
    const char *ptr;
    size_t len;
};

struct lmtp_path {
    bool null;                /* "<>" */
    struct lmtp_slice local;  /* decoded (unquoted) local part */
    struct lmtp_slice domain; /* "" when absent; "[1.2.3.4]" for a literal */
    bool quoted;              /* the local part was a quoted string */
    bool utf8;                /* non-ASCII bytes in the local part or domain */
};

struct lmtp_param {
    struct lmtp_slice keyword; /* as sent; compare case-insensitively */
    struct lmtp_slice value;   /* empty when has_value is false */
    bool has_value;
};

struct lmtp_command {
    enum lmtp_verb verb;
    struct lmtp_slice verb_text; /* the verb as sent (for logs of unknown commands) */
    struct lmtp_slice arg;       /* everything after the verb and its space(s) */
    struct lmtp_path path;       /* MAIL / RCPT */
    struct lmtp_param params[LMTP_MAX_PARAMS];
    size_t param_count;
};

/* What went wrong, as the reply the server sends: an SMTP code, an
 * enhanced status code (RFC 3463) and a short text without CR/LF. */
struct lmtp_reply_error {
    int code;             /* 500, 501, 555 ... */
    const char *enhanced; /* "5.5.2" ... (static) */
    const char *text;     /* static */
};

/* Parses `line` (len bytes, no CRLF; may contain anything, NUL included).
 * The line is modified in place (quoted local parts). False with `err` set
 * for an unknown verb (500 5.5.2), a missing or malformed argument (501),
 * a path too long (501 5.1.3) or too many parameters (555 5.5.4). For MAIL
 * and RCPT the path and parameters are filled in; other verbs only get
 * `arg`. */
bool lmtp_parse_command(char *line, size_t len, struct lmtp_command *cmd,
                        struct lmtp_reply_error *err);

enum lmtp_body_type { LMTP_BODY_7BIT, LMTP_BODY_8BITMIME };

struct lmtp_mail_params {
    bool has_size;
    uint64_t size;            /* SIZE=n (RFC 1870) */
    enum lmtp_body_type body; /* BODY=7BIT|8BITMIME (RFC 6152) */
    bool smtputf8;            /* SMTPUTF8 (RFC 6531) */
};

/* The parameters of a parsed MAIL command. Unknown keywords (and BODY
 * values other than 7BIT/8BITMIME) answer 555 5.5.4; a malformed SIZE or a
 * repeated keyword 501 5.5.4. */
bool lmtp_mail_params_parse(const struct lmtp_command *cmd, struct lmtp_mail_params *out,
                            struct lmtp_reply_error *err);

/* Appends the address of `path` in its canonical text form, without angle
 * brackets: local@domain, the local part quoted (with \" and \\) when it is
 * not a dot-string; "" for the null path. Parsing "<" + result + ">" gives
 * the same local part and domain back. */
void lmtp_path_format(const struct lmtp_path *path, struct buf *out);

/* True when `s` (len bytes) may be written as a dot-string (atoms joined by
 * single dots; UTF-8 allowed) and so needs no quoting. */
bool lmtp_is_dot_string(const char *s, size_t len);

#endif
