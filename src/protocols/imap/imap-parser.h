/* Streaming IMAP command parser (RFC 3501 / RFC 9051 grammar, no I/O).
 * The server feeds whatever bytes arrived and gets back one event at a time:
 * more bytes needed, a synchronizing literal to acknowledge with "+ OK", a
 * complete command (tag, upper-cased name, argument tree) or an error.
 * Literals: {n} synchronizing, {n+} non-synchronizing (RFC 7888 LITERAL+, or
 * LITERAL- when `non_sync_max` is 4096), ~{n} literal8 (RFC 3516 BINARY).
 * An erroneous command is consumed up to the end of its line (and through any
 * non-synchronizing literal it announced) before the error is reported, so
 * the client's following bytes are never taken for a command; errors the
 * parser cannot resynchronise from (a non-synchronizing literal over the
 * limit) are fatal: the server must close the connection.
 * The parser owns the current command's storage (strings, literals, the
 * argument tree); it stays valid until the next feed after a COMMAND/ERROR
 * result, or imap_parser_reset(). */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_PARSER_H
#define PETREL_PROTOCOLS_IMAP_IMAP_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct imap_parser_limits {
    size_t max_line;       /* bytes of command text, literals excluded (64 KiB) */
    uint64_t max_literal;  /* bytes of one literal (64 MiB) */
    uint64_t non_sync_max; /* largest {n+}; 4096 for LITERAL-, 0 refuses them */
    size_t max_args;       /* argument nodes in one command (4096) */
    size_t max_depth;      /* parenthesis nesting (32) */
    /* Bytes of one command's literals held in memory, all of them together
     * (8 MiB): past it a literal goes to the sink's spool if it takes it,
     * else the command is refused [TOOBIG]. Without it 4,096 literals of
     * up to a MiB each could make one command hold gigabytes. */
    uint64_t max_memory_literals;
    /* A line over max_line ends the connection at once (fatal error)
     * instead of BAD after the rest of the line is read and dropped: set
     * before login, where nobody has a reason to send one and the rest
     * could stream in until the login timeout (Dovecot disconnects too). */
    bool long_line_fatal;
};

/* RFC 7888: a LITERAL- server accepts non-synchronizing literals up to this. */
#define IMAP_LITERAL_MINUS_MAX 4096

/* Fills in the defaults above (non_sync_max = max_literal: LITERAL+). */
void imap_parser_limits_default(struct imap_parser_limits *limits);

enum imap_arg_type {
    IMAP_ARG_NIL,     /* the atom NIL (str holds its spelling) */
    IMAP_ARG_ATOM,    /* also flags (\Seen), sequence sets and BODY[...]<..> */
    IMAP_ARG_QUOTED,  /* escapes removed */
    IMAP_ARG_LITERAL, /* binary-safe: may contain NUL bytes */
    IMAP_ARG_LIST,
};

struct imap_arg {
    enum imap_arg_type type;
    bool literal8;   /* announced as ~{n} */
    const char *str; /* NUL-terminated after `len` bytes; NULL for a list or a spooled literal */
    size_t len;
    void *spool; /* a literal whose `len` bytes went to the sink's spool (str NULL) */
    const struct imap_arg *list; /* children of a list */
    size_t count;
};

struct imap_command {
    const char *tag;
    const char *name; /* upper-cased: "FETCH", "UID" (then args[0] is "FETCH") */
    const struct imap_arg *args;
    size_t arg_count;
};

enum imap_parse_result {
    IMAP_PARSE_NEED_MORE,
    IMAP_PARSE_LITERAL_CONTINUATION, /* send "+ OK", then keep feeding */
    IMAP_PARSE_COMMAND,
    IMAP_PARSE_ERROR,
};

enum imap_parse_error_code {
    IMAP_PARSE_ERR_SYNTAX,
    IMAP_PARSE_ERR_LINE_TOO_LONG,
    IMAP_PARSE_ERR_TOO_BIG, /* a literal over the limits: [TOOBIG] */
    IMAP_PARSE_ERR_LIMIT,   /* too many arguments or too deep nesting */
    IMAP_PARSE_ERR_REFUSED, /* the sink's refuse(): the message is the NO's text */
};

struct imap_parse_error {
    enum imap_parse_error_code code;
    const char *message;
    const char *tag; /* the failed command's tag, NULL when unknown ("* BAD") */
    bool fatal;      /* close the connection after the BAD */
};

struct imap_parser;

/* Where large literals go instead of memory: a literal over `threshold`
 * bytes is offered to open() when announced (after the size checks); a
 * spool it returns receives the literal's bytes through write() as they
 * are fed, and the argument carries it (imap_arg.spool, str NULL). NULL
 * keeps the literal in memory, and a literal over `max_memory` kept in
 * memory is refused instead ([TOOBIG], the command's bytes consumed).
 * write() cannot fail the parse: a spool that could not take the bytes
 * remembers it and the command answers. The parser owns the spools: each
 * goes to close() when its command's storage is freed (the next feed
 * after COMMAND or ERROR, imap_parser_reset(), imap_parser_free()). */
struct imap_literal_sink {
    uint64_t threshold;
    uint64_t max_memory;
    /* `command` upper-cased ("APPEND"), `arg_index` the literal's place
     * among the command's top-level arguments (0: the first after the
     * name; inside a list, the list's place). */
    void *(*open)(void *ctx, const char *command, size_t arg_index, uint64_t size, bool literal8);
    void (*write)(void *ctx, void *spool, const void *data, size_t len);
    void (*close)(void *ctx, void *spool);
    /* Optional: asked when a literal is announced, before it is accepted
     * (for a synchronizing one, before the continuation). A non-NULL text
     * refuses the command with a tagged NO of that text (valid until the
     * next refuse): a synchronizing literal is then never sent by the
     * client; a non-synchronizing one (`non_sync`) is on its way, so its
     * bytes and the rest of the command are read and dropped first. */
    const char *(*refuse)(void *ctx, const char *command, size_t arg_index, uint64_t size,
                          bool non_sync);
    void *ctx;
};

/* Sets (or with NULL removes) the sink for literals announced from now on;
 * `sink` is copied. */
void imap_parser_set_sink(struct imap_parser *p, const struct imap_literal_sink *sink);

/* A parser with `limits` (NULL: the defaults). Never NULL. */
struct imap_parser *imap_parser_new(const struct imap_parser_limits *limits);
void imap_parser_free(struct imap_parser *p);

/* Consumes bytes from `data` until an event: *consumed (<= len) says how many
 * were used; the caller feeds the rest again after acting on the result.
 * After COMMAND or a non-fatal ERROR the next feed starts a new command (and
 * frees the previous one). After a fatal ERROR every feed returns ERROR and
 * consumes nothing. */
enum imap_parse_result imap_parser_feed(struct imap_parser *p, const void *data, size_t len,
                                        size_t *consumed);

/* The command after a COMMAND result, else NULL. */
const struct imap_command *imap_parser_command(const struct imap_parser *p);
/* The error after an ERROR result, else NULL. */
const struct imap_parse_error *imap_parser_error(const struct imap_parser *p);
/* For the sink's refuse(): the command's first argument as it came
 * (an atom, a quoted string's content, or a complete literal; not
 * decoded), false when it is none of these; and the bytes of the
 * command's literals after the first argument accepted so far (the
 * earlier messages of a MULTIAPPEND). */
bool imap_parser_first_arg(const struct imap_parser *p, const char **str, size_t *len);
uint64_t imap_parser_later_literal_bytes(const struct imap_parser *p);
/* Bytes of the literal being received that are still to come (0 outside
 * literals); for progress reporting and timeouts. */
uint64_t imap_parser_literal_remaining(const struct imap_parser *p);
/* True when part of a command has been received but not yet returned. */
bool imap_parser_in_command(const struct imap_parser *p);
/* Forgets the current command (and a fatal state) and frees its storage. */
void imap_parser_reset(struct imap_parser *p);
/* Once a COMMAND or ERROR result has been answered: frees its literals and
 * closes its spools now rather than at the next feed, so a client that
 * sends nothing more does not keep an unnamed spool file (and its disk
 * blocks) open after a BAD or NO. The command's arguments that were
 * literals are invalid afterwards. No effect while a command is parsed. */
void imap_parser_release_literals(struct imap_parser *p);

/* Non-streaming: parses one command from a complete buffer, acknowledging
 * synchronizing literals internally. Returns COMMAND, ERROR or NEED_MORE
 * (the buffer ends inside the command); *consumed as for feed. */
enum imap_parse_result imap_parser_parse_all(struct imap_parser *p, const void *data, size_t len,
                                             size_t *consumed);

/* Argument helpers. True when `arg` is an atom (or NIL) spelled `name`,
 * case-insensitively. */
bool imap_arg_atom_equals(const struct imap_arg *arg, const char *name);
/* The text of an atom, NIL (as the atom "NIL"), quoted string or literal;
 * NULL for a list. */
const char *imap_arg_astring(const struct imap_arg *arg);
/* As imap_arg_astring() but NULL for NIL (nstring). */
const char *imap_arg_nstring(const struct imap_arg *arg);

#endif
