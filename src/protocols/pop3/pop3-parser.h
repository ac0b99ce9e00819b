/* Streaming POP3 command-line parser (RFC 1939, RFC 2449 section 3; no I/O).
 * The server feeds whatever bytes arrived and gets back one event at a time:
 * more bytes needed, a complete command (upper-cased keyword, arguments), a
 * raw line (the next line after pop3_parser_expect_line(): a SASL response)
 * or an error.
 *
 * Grammar, slightly more lenient than RFC 2449 the way deployed servers are:
 * a line ends in CRLF or a bare LF; the keyword is the text up to the first
 * space (1..POP3_MAX_KEYWORD bytes of printable ASCII); arguments are split
 * on runs of spaces. `rest` keeps everything after the keyword and its one
 * space byte for byte (PASS takes a password that may contain spaces). A
 * NUL, a control character other than TAB, or a CR that does not end the
 * line makes the line a syntax error. Octets >= 0x80 are allowed (UTF-8 user
 * names and passwords).
 *
 * Errors: an empty line, a syntax error or too many arguments are reported
 * after the whole line has been consumed, and the next line is parsed
 * normally. A line longer than max_line is fatal: the parser cannot find
 * where the next command starts without buffering without bound, so the
 * server answers -ERR and closes. After a fatal error every feed returns
 * ERROR and consumes nothing.
 *
 * The parser owns the current line and command; they stay valid until the
 * next feed after a COMMAND, LINE or ERROR result, or pop3_parser_reset(). */
#ifndef PETREL_PROTOCOLS_POP3_PARSER_H
#define PETREL_PROTOCOLS_POP3_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POP3_MAX_KEYWORD 15    /* longer keywords are not commands: a syntax error */
#define POP3_DEFAULT_LINE 8192 /* SASL responses (base64) need more than RFC 2449's 255 */
#define POP3_DEFAULT_ARGS 4    /* no POP3 command takes more than two */

struct pop3_parser_limits {
    size_t max_line; /* bytes of one line without its CRLF; at least 1 */
    size_t max_args; /* arguments after the keyword */
};

/* Fills in the defaults above. */
void pop3_parser_limits_default(struct pop3_parser_limits *limits);

struct pop3_command {
    const char *name;        /* upper-cased keyword, NUL-terminated */
    const char *const *args; /* arg_count NUL-terminated strings */
    size_t arg_count;
    const char *rest; /* text after "KEYWORD ", NUL-terminated ("" when none) */
    size_t rest_len;
};

enum pop3_parse_result {
    POP3_PARSE_NEED_MORE,
    POP3_PARSE_COMMAND,
    POP3_PARSE_LINE, /* after pop3_parser_expect_line(): see pop3_parser_line() */
    POP3_PARSE_ERROR,
};

enum pop3_parse_error_code {
    POP3_PARSE_ERR_EMPTY,         /* an empty (or all-space) line */
    POP3_PARSE_ERR_SYNTAX,        /* bad byte in the line, keyword not a keyword */
    POP3_PARSE_ERR_TOO_MANY_ARGS, /* more than max_args arguments */
    POP3_PARSE_ERR_LINE_TOO_LONG, /* fatal */
};

struct pop3_parse_error {
    enum pop3_parse_error_code code;
    const char *message; /* static text, no CR/LF */
    bool fatal;          /* close the connection after the -ERR */
};

struct pop3_parser;

/* A parser with `limits` (NULL: the defaults). Never NULL. */
struct pop3_parser *pop3_parser_new(const struct pop3_parser_limits *limits);
void pop3_parser_free(struct pop3_parser *p);

/* Consumes bytes from `data` until an event: *consumed (<= len) says how many
 * were used; the caller feeds the rest again after acting on the result.
 * NEED_MORE always consumes everything it was given. */
enum pop3_parse_result pop3_parser_feed(struct pop3_parser *p, const void *data, size_t len,
                                        size_t *consumed);

/* The command after a COMMAND result, else NULL. */
const struct pop3_command *pop3_parser_command(const struct pop3_parser *p);
/* The error after an ERROR result, else NULL. */
const struct pop3_parse_error *pop3_parser_error(const struct pop3_parser *p);
/* The next complete line (whatever it holds, even empty) is returned as
 * POP3_PARSE_LINE instead of being parsed as a command. */
void pop3_parser_expect_line(struct pop3_parser *p);
/* The line after a LINE result (NUL-terminated; may contain NUL bytes, *len
 * tells), else NULL. */
const char *pop3_parser_line(const struct pop3_parser *p, size_t *len);
/* True when part of a line has been received but not yet returned. */
bool pop3_parser_in_line(const struct pop3_parser *p);
/* Forgets the partial line, a pending expect_line and a fatal state. */
void pop3_parser_reset(struct pop3_parser *p);

/* A decimal number as POP3 arguments carry them: 1..20 digits, nothing
 * else (no sign, no spaces), at most `max`. */
bool pop3_parse_number(const char *text, uint64_t max, uint64_t *out);

#endif
