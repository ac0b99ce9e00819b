/* The parser buffers one "segment" of command text at a time: the bytes up
 * to the next LF. A segment is tokenised only once complete, so feeding byte
 * by byte and feeding everything at once run exactly the same code. A segment
 * that ends in a literal announcement is followed by the literal's bytes and
 * then by the next segment of the same command. Tokens of the whole command
 * are kept flat (parentheses as OPEN/CLOSE tokens) and turned into the
 * argument tree when the command's last line arrives. */
#include "protocols/imap/imap-parser.h"

#include "core/buf.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum token_type { TOK_NIL, TOK_ATOM, TOK_QUOTED, TOK_LITERAL, TOK_OPEN, TOK_CLOSE };

struct token {
    enum token_type type;
    bool literal8;
    size_t off; /* into the text buffer (atoms, quoted strings) */
    size_t len;
    char *literal;   /* literal bytes, owned */
    void *spool;     /* or the sink's spool that took them, owned */
    size_t children; /* OPEN: direct children */
};

enum parser_state {
    ST_LINE,         /* collecting command text up to LF */
    ST_LITERAL,      /* receiving announced literal bytes */
    ST_SKIP_LINE,    /* discarding the rest of a failed command's line */
    ST_SKIP_LITERAL, /* discarding a failed command's non-synchronizing literal */
    ST_DONE,         /* a COMMAND or ERROR was returned */
    ST_FATAL,
};

/* Long enough for "~{18446744073709551615+}" with its CR. */
#define TAIL_SIZE 32

struct imap_parser {
    struct imap_parser_limits limits;
    enum parser_state state;
    enum imap_parse_result done_result;

    struct buf segment;
    size_t line_used; /* command text in earlier segments */
    struct buf text;  /* tag, name, atoms and quoted strings, each NUL-terminated */
    struct token *tokens;
    size_t token_count;
    size_t token_cap;
    size_t arg_nodes;
    size_t *open_stack; /* token index of each open '(' */
    size_t depth;
    size_t top_count;
    bool have_tag;
    bool have_name;
    bool after_literal;
    size_t tag_off;
    size_t name_off;

    struct token *literal_token; /* being received */
    uint64_t literal_got;
    uint64_t skip_remaining;
    char tail[TAIL_SIZE];
    size_t tail_len;

    struct imap_arg *args;
    size_t args_cap;
    struct imap_command command;
    struct imap_parse_error error;
    struct imap_literal_sink sink;
    bool have_sink;
    bool holds_literals;           /* some token owns a literal buffer or spool */
    uint64_t memory_literal_bytes; /* this command's literals in memory */
    uint64_t later_literal_bytes;  /* this command's literals after its first argument */
};

struct literal_announcement {
    bool present;
    bool non_sync;
    uint64_t size;
};

void imap_parser_limits_default(struct imap_parser_limits *limits)
{
    limits->max_line = 64 * 1024;
    limits->max_literal = 64ull * 1024 * 1024;
    limits->non_sync_max = limits->max_literal;
    limits->max_args = 4096;
    limits->max_depth = 32;
    limits->max_memory_literals = 8ull * 1024 * 1024;
    limits->long_line_fatal = false;
}

struct imap_parser *imap_parser_new(const struct imap_parser_limits *limits)
{
    struct imap_parser *p = xcalloc(1, sizeof(*p));
    if (limits != NULL)
        p->limits = *limits;
    else
        imap_parser_limits_default(&p->limits);
    if (p->limits.max_depth == 0)
        p->limits.max_depth = 1;
    p->open_stack = xcalloc(p->limits.max_depth, sizeof(*p->open_stack));
    p->state = ST_LINE;
    return p;
}

static void free_literals(struct imap_parser *p)
{
    /* Twice per command (answered, then reset); most commands have none. */
    if (!p->holds_literals)
        return;
    p->holds_literals = false;
    p->memory_literal_bytes = 0;
    for (size_t i = 0; i < p->token_count; i++) {
        free(p->tokens[i].literal);
        p->tokens[i].literal = NULL;
        if (p->tokens[i].spool != NULL)
            p->sink.close(p->sink.ctx, p->tokens[i].spool);
        p->tokens[i].spool = NULL;
    }
}

void imap_parser_set_sink(struct imap_parser *p, const struct imap_literal_sink *sink)
{
    p->have_sink = sink != NULL;
    if (sink != NULL)
        p->sink = *sink;
}

void imap_parser_release_literals(struct imap_parser *p)
{
    if (p->state == ST_DONE || p->state == ST_FATAL)
        free_literals(p);
}

void imap_parser_reset(struct imap_parser *p)
{
    free_literals(p);
    p->token_count = 0;
    p->arg_nodes = 0;
    p->depth = 0;
    p->top_count = 0;
    buf_reset(&p->segment);
    buf_reset(&p->text);
    p->line_used = 0;
    p->have_tag = false;
    p->have_name = false;
    p->after_literal = false;
    p->literal_token = NULL;
    p->literal_got = 0;
    p->skip_remaining = 0;
    p->later_literal_bytes = 0;
    p->tail_len = 0;
    memset(&p->command, 0, sizeof(p->command));
    memset(&p->error, 0, sizeof(p->error));
    p->state = ST_LINE;
}

void imap_parser_free(struct imap_parser *p)
{
    if (p == NULL)
        return;
    free_literals(p);
    free(p->tokens);
    free(p->open_stack);
    free(p->args);
    buf_free(&p->segment);
    buf_free(&p->text);
    free(p);
}

static bool set_error(struct imap_parser *p, enum imap_parse_error_code code, const char *message)
{
    p->error.code = code;
    p->error.message = message;
    p->error.fatal = false;
    return false;
}

/* ATOM-CHAR plus what IMAP puts in atom-like arguments anyway: list
 * wildcards, '\' of flags, ']' (ASTRING-CHAR) and '*' of sequence sets.
 * '[' is one too, but parse_atom() first tries it as a section opener. */
static bool is_atom_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '(' && c != ')' && c != '{' && c != '"' && c != '[';
}

static bool is_tag_char(unsigned char c)
{
    return (is_atom_char(c) || c == '[') && c != '+' && c != '%' && c != '*' && c != '\\' &&
           c != ']';
}

static size_t text_add(struct imap_parser *p, const char *s, size_t len)
{
    size_t off = p->text.len;
    buf_append(&p->text, s, len);
    buf_append_char(&p->text, '\0');
    return off;
}

/* Adds an argument token (not CLOSE) under the innermost open list. */
static struct token *add_token(struct imap_parser *p, enum token_type type)
{
    if (type != TOK_CLOSE) {
        if (p->arg_nodes >= p->limits.max_args) {
            set_error(p, IMAP_PARSE_ERR_LIMIT, "Too many arguments");
            return NULL;
        }
        p->arg_nodes++;
        if (p->depth > 0)
            p->tokens[p->open_stack[p->depth - 1]].children++;
        else
            p->top_count++;
    }
    p->tokens = xgrow(p->tokens, &p->token_cap, p->token_count + 1, sizeof(*p->tokens));
    struct token *t = &p->tokens[p->token_count++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    return t;
}

/* Parses "{n}", "{n+}" or "~{n}" at line[*i]; it must end the line. Sizes
 * beyond 64 bits saturate (they are over any limit anyway). */
static bool parse_announcement(struct imap_parser *p, const char *line, size_t m, size_t *i,
                               struct literal_announcement *ann, bool *literal8)
{
    size_t k = *i;
    *literal8 = line[k] == '~';
    if (*literal8)
        k++;
    k++; /* '{' */
    size_t digits = 0;
    uint64_t v = 0;
    while (k < m && line[k] >= '0' && line[k] <= '9') {
        unsigned d = (unsigned)(line[k] - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
        digits++;
        k++;
    }
    if (digits == 0)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Invalid literal size");
    ann->non_sync = false;
    if (k < m && line[k] == '+') {
        ann->non_sync = true;
        k++;
    }
    if (k >= m || line[k] != '}')
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Invalid literal announcement");
    k++;
    if (k != m)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Literal announcement must end the line");
    ann->present = true;
    ann->size = v;
    *i = k;
    return true;
}

/* The tag and the command name at the start of the first segment. */
static bool parse_tag_and_name(struct imap_parser *p, const char *line, size_t m, size_t *i)
{
    size_t k = 0;
    while (k < m && is_tag_char((unsigned char)line[k]))
        k++;
    if (k == 0)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Missing or invalid tag");
    if (k < m && line[k] != ' ')
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Invalid character in tag");
    p->tag_off = text_add(p, line, k);
    p->have_tag = true;
    if (k == m)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Missing command name");
    k++;
    size_t start = k;
    while (k < m && is_atom_char((unsigned char)line[k]))
        k++;
    if (k == start)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Missing command name");
    if (k < m && line[k] == '\r')
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "CR without LF in command line");
    if (k < m && line[k] != ' ')
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Invalid character in command name");
    p->name_off = text_add(p, line + start, k - start);
    for (size_t j = 0; j < k - start; j++) {
        char *c = &p->text.data[p->name_off + j];
        if (*c >= 'a' && *c <= 'z')
            *c = (char)(*c - 'a' + 'A');
    }
    p->have_name = true;
    *i = k;
    return true;
}

static bool parse_quoted(struct imap_parser *p, const char *line, size_t m, size_t *i)
{
    size_t k = *i + 1;
    size_t off = p->text.len;
    while (k < m && line[k] != '"') {
        if (line[k] == '\\') {
            if (k + 1 >= m)
                break;
            if (line[k + 1] != '"' && line[k + 1] != '\\')
                return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Invalid escape in quoted string");
            k++;
        }
        buf_append_char(&p->text, line[k]);
        k++;
    }
    if (k >= m)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Unterminated quoted string");
    size_t len = p->text.len - off;
    buf_append_char(&p->text, '\0');
    struct token *t = add_token(p, TOK_QUOTED);
    if (t == NULL)
        return false;
    t->off = off;
    t->len = len;
    *i = k + 1;
    return true;
}

/* The bracketed part of BODY[...] / BINARY[...]: anything printable up to the
 * matching ']', including spaces, balanced parentheses and quoted strings.
 * False when no such section follows: then '[' is an ordinary ATOM-CHAR
 * (RFC 3501), as in the password "pa[ss". */
static bool skip_section(const struct imap_parser *p, const char *line, size_t m, size_t *i)
{
    size_t k = *i + 1;
    size_t parens = 0;
    while (k < m) {
        unsigned char c = (unsigned char)line[k];
        if (c == ']' && parens == 0) {
            *i = k + 1;
            return true;
        }
        if (c == '(') {
            if (++parens > p->limits.max_depth)
                return false;
        } else if (c == ')') {
            if (parens == 0)
                return false;
            parens--;
        } else if (c == '"') {
            k++;
            while (k < m && line[k] != '"')
                k += line[k] == '\\' ? 2 : 1;
            if (k >= m)
                return false;
        } else if (c == '[' || c == '{' || c < 0x20 || c >= 0x7f) {
            return false;
        }
        k++;
    }
    return false;
}

static bool parse_atom(struct imap_parser *p, const char *line, size_t m, size_t *i)
{
    size_t start = *i;
    size_t k = start;
    while (k < m) {
        if (line[k] == '[' && skip_section(p, line, m, &k))
            continue;
        if (line[k] != '[' && !is_atom_char((unsigned char)line[k]))
            break;
        k++;
    }
    if (k == start)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Invalid character in arguments");
    bool nil = k - start == 3 && strncasecmp(line + start, "NIL", 3) == 0;
    struct token *t = add_token(p, nil ? TOK_NIL : TOK_ATOM);
    if (t == NULL)
        return false;
    t->len = k - start;
    t->off = text_add(p, line + start, t->len);
    *i = k;
    return true;
}

/* Tokenises one complete segment (its LF included). `ann` tells whether it
 * ends in a literal announcement; the literal's token is then the last one. */
static bool parse_segment(struct imap_parser *p, const char *seg, size_t n,
                          struct literal_announcement *ann)
{
    size_t m = n - 1; /* without LF */
    if (m > 0 && seg[m - 1] == '\r')
        m--;
    size_t i = 0;
    /* A token just ended: what follows must be SP, ')' or the line end. */
    bool token_ended = p->after_literal;
    p->after_literal = false;
    if (!p->have_tag) {
        if (!parse_tag_and_name(p, seg, m, &i))
            return false;
        token_ended = true;
    }
    if (memchr(seg, '\r', m) != NULL)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "CR without LF in command line");
    if (memchr(seg, '\0', m) != NULL)
        return set_error(p, IMAP_PARSE_ERR_SYNTAX, "NUL byte in command line");
    while (i < m) {
        char c = seg[i];
        if (c == ' ') {
            token_ended = false;
            i++;
            continue;
        }
        if (c == ')') {
            if (p->depth == 0)
                return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Unexpected ')'");
            add_token(p, TOK_CLOSE);
            p->depth--;
            token_ended = true;
            i++;
            continue;
        }
        if (token_ended)
            return set_error(p, IMAP_PARSE_ERR_SYNTAX, "Missing space between arguments");
        if (c == '(') {
            if (p->depth >= p->limits.max_depth)
                return set_error(p, IMAP_PARSE_ERR_LIMIT, "Lists nested too deeply");
            if (add_token(p, TOK_OPEN) == NULL)
                return false;
            p->open_stack[p->depth++] = p->token_count - 1;
            i++;
            continue;
        }
        if (c == '"') {
            if (!parse_quoted(p, seg, m, &i))
                return false;
        } else if (c == '{' || (c == '~' && i + 1 < m && seg[i + 1] == '{')) {
            bool literal8 = false;
            if (!parse_announcement(p, seg, m, &i, ann, &literal8))
                return false;
            struct token *t = add_token(p, TOK_LITERAL);
            if (t == NULL)
                return false;
            t->literal8 = literal8;
            return true;
        } else if (!parse_atom(p, seg, m, &i)) {
            return false;
        }
        token_ended = true;
    }
    return true;
}

/* Finds a literal announcement at the end of `s` (no LF; a CR is dropped). */
static bool trailing_announcement(const char *s, size_t n, struct literal_announcement *ann)
{
    if (n > 0 && s[n - 1] == '\r')
        n--;
    if (n < 3 || s[n - 1] != '}')
        return false;
    size_t k = n - 1;
    ann->non_sync = s[k - 1] == '+';
    if (ann->non_sync)
        k--;
    size_t end = k;
    while (k > 0 && s[k - 1] >= '0' && s[k - 1] <= '9')
        k--;
    if (k == end || k == 0 || s[k - 1] != '{')
        return false;
    uint64_t v = 0;
    for (size_t j = k; j < end; j++) {
        unsigned d = (unsigned)(s[j] - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
    }
    ann->present = true;
    ann->size = v;
    return true;
}

static void tail_push(struct imap_parser *p, const char *s, size_t n)
{
    if (n >= TAIL_SIZE) {
        memcpy(p->tail, s + n - TAIL_SIZE, TAIL_SIZE);
        p->tail_len = TAIL_SIZE;
        return;
    }
    if (p->tail_len + n > TAIL_SIZE) {
        size_t drop = p->tail_len + n - TAIL_SIZE;
        memmove(p->tail, p->tail + drop, p->tail_len - drop);
        p->tail_len -= drop;
    }
    memcpy(p->tail + p->tail_len, s, n);
    p->tail_len += n;
}

static bool non_sync_allowed(const struct imap_parser *p, uint64_t size)
{
    return size <= p->limits.non_sync_max && size <= p->limits.max_literal;
}

static enum imap_parse_result report_error(struct imap_parser *p, bool fatal)
{
    p->error.fatal = fatal;
    p->error.tag = p->have_tag ? p->text.data + p->tag_off : NULL;
    p->state = fatal ? ST_FATAL : ST_DONE;
    p->done_result = IMAP_PARSE_ERROR;
    return IMAP_PARSE_ERROR;
}

/* A failed command's line ended (its text without LF in `s`). A
 * non-synchronizing literal at its end is still coming and must be skipped;
 * the error is reported once the command's bytes are all consumed. */
static enum imap_parse_result failed_line_end(struct imap_parser *p, const char *s, size_t n)
{
    struct literal_announcement ann = {0};
    if (!trailing_announcement(s, n, &ann) || !ann.non_sync)
        return report_error(p, false);
    if (!non_sync_allowed(p, ann.size))
        return report_error(p, true);
    p->skip_remaining = ann.size;
    p->state = ST_SKIP_LITERAL;
    return IMAP_PARSE_NEED_MORE;
}

static void layout(struct imap_parser *p, size_t *ti, struct imap_arg *dest, size_t count,
                   size_t *next_free)
{
    for (size_t k = 0; k < count; k++) {
        const struct token *t = &p->tokens[(*ti)++];
        struct imap_arg *a = &dest[k];
        memset(a, 0, sizeof(*a));
        switch (t->type) {
        case TOK_NIL:
        case TOK_ATOM:
        case TOK_QUOTED:
            a->type = t->type == TOK_NIL    ? IMAP_ARG_NIL
                      : t->type == TOK_ATOM ? IMAP_ARG_ATOM
                                            : IMAP_ARG_QUOTED;
            a->str = p->text.data + t->off;
            a->len = t->len;
            break;
        case TOK_LITERAL:
            a->type = IMAP_ARG_LITERAL;
            a->literal8 = t->literal8;
            a->str = t->literal;
            a->len = t->len;
            a->spool = t->spool;
            break;
        case TOK_OPEN: {
            a->type = IMAP_ARG_LIST;
            a->count = t->children;
            struct imap_arg *children = t->children > 0 ? p->args + *next_free : NULL;
            a->list = children;
            *next_free += t->children;
            layout(p, ti, children, t->children, next_free);
            (*ti)++; /* its CLOSE */
            break;
        }
        case TOK_CLOSE:
            PETREL_ASSERT(false);
        }
    }
}

static enum imap_parse_result complete_command(struct imap_parser *p)
{
    if (p->depth != 0) {
        set_error(p, IMAP_PARSE_ERR_SYNTAX, "Missing ')'");
        return report_error(p, false);
    }
    p->args = xgrow(p->args, &p->args_cap, p->arg_nodes + 1, sizeof(*p->args));
    size_t ti = 0;
    size_t next_free = p->top_count;
    layout(p, &ti, p->args, p->top_count, &next_free);
    PETREL_ASSERT(ti == p->token_count && next_free == p->arg_nodes);
    p->command.tag = p->text.data + p->tag_off;
    p->command.name = p->text.data + p->name_off;
    p->command.args = p->top_count > 0 ? p->args : NULL;
    p->command.arg_count = p->top_count;
    p->state = ST_DONE;
    p->done_result = IMAP_PARSE_COMMAND;
    return IMAP_PARSE_COMMAND;
}

/* The segment buffer holds a complete line (LF included). */
static enum imap_parse_result finish_segment(struct imap_parser *p)
{
    const char *seg = p->segment.data;
    size_t n = p->segment.len;
    p->line_used += n;
    if (!p->have_tag && (n == 1 || (n == 2 && seg[0] == '\r'))) {
        /* An empty line between commands: nothing to answer. */
        buf_reset(&p->segment);
        p->line_used = 0;
        return IMAP_PARSE_NEED_MORE;
    }
    struct literal_announcement ann = {0};
    if (!parse_segment(p, seg, n, &ann)) {
        enum imap_parse_result r = failed_line_end(p, seg, n - 1);
        buf_reset(&p->segment);
        return r;
    }
    buf_reset(&p->segment);
    if (!ann.present)
        return complete_command(p);

    struct token *t = &p->tokens[p->token_count - 1];
    if (ann.non_sync && !non_sync_allowed(p, ann.size)) {
        set_error(p, IMAP_PARSE_ERR_TOO_BIG, "Non-synchronizing literal too large");
        return report_error(p, true);
    }
    /* Before the literal limit: a message the storage refuses (over
     * quota_mail_size or the quota) gets the storage's reply whatever its
     * size, as document 3's Errors table says and as Dovecot answers (it
     * has no literal limit of its own for APPEND). */
    if (p->have_sink && p->sink.refuse != NULL) {
        const char *why = p->sink.refuse(p->sink.ctx, p->text.data + p->name_off, p->top_count - 1,
                                         ann.size, ann.non_sync);
        if (why != NULL) {
            set_error(p, IMAP_PARSE_ERR_REFUSED, why);
            if (!ann.non_sync)
                return report_error(p, false); /* before the continuation */
            /* Its bytes are on the way: read and dropped, then the NO. */
            p->skip_remaining = ann.size;
            p->state = ST_SKIP_LITERAL;
            p->tail_len = 0;
            return IMAP_PARSE_NEED_MORE;
        }
    }
    if (ann.size > p->limits.max_literal) {
        /* The client waits for a continuation that will not come. */
        set_error(p, IMAP_PARSE_ERR_TOO_BIG, "Literal too large");
        return report_error(p, false);
    }
    if (p->top_count > 1)
        p->later_literal_bytes += ann.size;
    t->len = (size_t)ann.size;
    /* memory_literal_bytes never passes the budget, so this cannot wrap. */
    bool over_budget = ann.size > p->limits.max_memory_literals - p->memory_literal_bytes;
    bool too_big = over_budget;
    if (p->have_sink && (ann.size > p->sink.threshold || over_budget)) {
        size_t index = p->top_count - 1; /* a list counts from its "(" */
        t->spool =
            p->sink.open(p->sink.ctx, p->text.data + p->name_off, index, ann.size, t->literal8);
        too_big = t->spool == NULL && (ann.size > p->sink.max_memory || over_budget);
    }
    if (too_big) {
        set_error(p, IMAP_PARSE_ERR_TOO_BIG, "Literal too large");
        if (!ann.non_sync)
            return report_error(p, false);
        /* Its bytes are on the way: skipped, then the rest of the line. */
        p->skip_remaining = ann.size;
        p->state = ST_SKIP_LITERAL;
        p->tail_len = 0;
        return IMAP_PARSE_NEED_MORE;
    }
    /* Else one allocation of the announced size (plus the terminator). */
    if (t->spool == NULL) {
        t->literal = xmalloc(t->len + 1);
        t->literal[t->len] = '\0';
        p->memory_literal_bytes += ann.size;
    }
    p->holds_literals = true;
    p->literal_token = t;
    p->literal_got = 0;
    p->state = ST_LITERAL;
    if (ann.size == 0) {
        p->state = ST_LINE;
        p->after_literal = true;
    }
    return ann.non_sync ? IMAP_PARSE_NEED_MORE : IMAP_PARSE_LITERAL_CONTINUATION;
}

static enum imap_parse_result feed_line(struct imap_parser *p, const char *d, size_t len,
                                        size_t *pos)
{
    const char *nl = memchr(d + *pos, '\n', len - *pos);
    size_t n = nl != NULL ? (size_t)(nl - (d + *pos)) + 1 : len - *pos;
    if (p->line_used + p->segment.len + n > p->limits.max_line) {
        set_error(p, IMAP_PARSE_ERR_LINE_TOO_LONG, "Command line too long");
        if (p->limits.long_line_fatal) {
            *pos = len; /* nothing more of this connection is read */
            return report_error(p, true);
        }
        /* Take exactly what fits, however the bytes were split into feeds,
         * so the tag (for the BAD) is found or not found the same way. */
        size_t room = p->limits.max_line - p->line_used - p->segment.len;
        buf_append(&p->segment, d + *pos, room);
        *pos += room;
        if (!p->have_tag && p->segment.len > 0) {
            size_t k = 0;
            while (k < p->segment.len && is_tag_char((unsigned char)p->segment.data[k]))
                k++;
            if (k > 0 && k < p->segment.len && p->segment.data[k] == ' ') {
                p->tag_off = text_add(p, p->segment.data, k);
                p->have_tag = true;
            }
        }
        p->tail_len = 0;
        tail_push(p, p->segment.data, p->segment.len);
        buf_reset(&p->segment);
        p->state = ST_SKIP_LINE;
        return IMAP_PARSE_NEED_MORE;
    }
    buf_append(&p->segment, d + *pos, n);
    *pos += n;
    if (nl == NULL)
        return IMAP_PARSE_NEED_MORE;
    return finish_segment(p);
}

static void feed_literal(struct imap_parser *p, const char *d, size_t len, size_t *pos)
{
    struct token *t = p->literal_token;
    uint64_t want = (uint64_t)t->len - p->literal_got;
    size_t n = len - *pos < want ? len - *pos : (size_t)want;
    if (t->spool != NULL)
        p->sink.write(p->sink.ctx, t->spool, d + *pos, n);
    else
        memcpy(t->literal + p->literal_got, d + *pos, n);
    p->literal_got += n;
    *pos += n;
    if (p->literal_got == t->len) {
        p->literal_token = NULL;
        p->state = ST_LINE;
        p->after_literal = true;
    }
}

static enum imap_parse_result feed_skip_line(struct imap_parser *p, const char *d, size_t len,
                                             size_t *pos)
{
    const char *nl = memchr(d + *pos, '\n', len - *pos);
    size_t n = nl != NULL ? (size_t)(nl - (d + *pos)) : len - *pos;
    tail_push(p, d + *pos, n);
    *pos += n;
    if (nl == NULL)
        return IMAP_PARSE_NEED_MORE;
    (*pos)++;
    enum imap_parse_result r = failed_line_end(p, p->tail, p->tail_len);
    p->tail_len = 0;
    return r;
}

enum imap_parse_result imap_parser_feed(struct imap_parser *p, const void *data, size_t len,
                                        size_t *consumed)
{
    const char *d = data;
    size_t pos = 0;
    *consumed = 0;
    if (p->state == ST_FATAL)
        return IMAP_PARSE_ERROR;
    if (p->state == ST_DONE)
        imap_parser_reset(p);
    enum imap_parse_result r = IMAP_PARSE_NEED_MORE;
    while (pos < len && r == IMAP_PARSE_NEED_MORE) {
        switch (p->state) {
        case ST_LINE:
            r = feed_line(p, d, len, &pos);
            break;
        case ST_LITERAL:
            feed_literal(p, d, len, &pos);
            break;
        case ST_SKIP_LITERAL: {
            size_t n = len - pos < p->skip_remaining ? len - pos : (size_t)p->skip_remaining;
            p->skip_remaining -= n;
            pos += n;
            if (p->skip_remaining == 0)
                p->state = ST_SKIP_LINE;
            break;
        }
        case ST_SKIP_LINE:
            r = feed_skip_line(p, d, len, &pos);
            break;
        case ST_DONE:
        case ST_FATAL:
            PETREL_ASSERT(false);
        }
    }
    *consumed = pos;
    return r;
}

enum imap_parse_result imap_parser_parse_all(struct imap_parser *p, const void *data, size_t len,
                                             size_t *consumed)
{
    const char *d = data;
    size_t total = 0;
    for (;;) {
        size_t used = 0;
        enum imap_parse_result r = imap_parser_feed(p, d + total, len - total, &used);
        total += used;
        if (r != IMAP_PARSE_LITERAL_CONTINUATION) {
            *consumed = total;
            return r;
        }
    }
}

const struct imap_command *imap_parser_command(const struct imap_parser *p)
{
    return p->state == ST_DONE && p->done_result == IMAP_PARSE_COMMAND ? &p->command : NULL;
}

const struct imap_parse_error *imap_parser_error(const struct imap_parser *p)
{
    if (p->state == ST_FATAL || (p->state == ST_DONE && p->done_result == IMAP_PARSE_ERROR))
        return &p->error;
    return NULL;
}

bool imap_parser_first_arg(const struct imap_parser *p, const char **str, size_t *len)
{
    if (p->token_count == 0)
        return false;
    const struct token *t = &p->tokens[0];
    switch (t->type) {
    case TOK_ATOM:
    case TOK_QUOTED:
        *str = p->text.data + t->off;
        *len = t->len;
        return true;
    case TOK_LITERAL:
        if (t->literal == NULL || (p->state == ST_LITERAL && p->literal_token == t))
            return false;
        *str = t->literal;
        *len = t->len;
        return true;
    default:
        return false;
    }
}

uint64_t imap_parser_later_literal_bytes(const struct imap_parser *p)
{
    return p->later_literal_bytes;
}

uint64_t imap_parser_literal_remaining(const struct imap_parser *p)
{
    if (p->state == ST_LITERAL)
        return (uint64_t)p->literal_token->len - p->literal_got;
    if (p->state == ST_SKIP_LITERAL)
        return p->skip_remaining;
    return 0;
}

bool imap_parser_in_command(const struct imap_parser *p)
{
    switch (p->state) {
    case ST_LINE:
        return p->segment.len > 0 || p->have_tag;
    case ST_LITERAL:
    case ST_SKIP_LINE:
    case ST_SKIP_LITERAL:
        return true;
    case ST_DONE:
    case ST_FATAL:
        break;
    }
    return false;
}

bool imap_arg_atom_equals(const struct imap_arg *arg, const char *name)
{
    return (arg->type == IMAP_ARG_ATOM || arg->type == IMAP_ARG_NIL) && arg->len == strlen(name) &&
           strncasecmp(arg->str, name, arg->len) == 0;
}

const char *imap_arg_astring(const struct imap_arg *arg)
{
    return arg->type == IMAP_ARG_LIST ? NULL : arg->str;
}

const char *imap_arg_nstring(const struct imap_arg *arg)
{
    return arg->type == IMAP_ARG_NIL ? NULL : imap_arg_astring(arg);
}
