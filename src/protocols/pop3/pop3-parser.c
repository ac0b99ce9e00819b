/* POP3 command-line parser (see pop3-parser.h). */
#include "protocols/pop3/pop3-parser.h"

#include "core/buf.h"
#include "core/slice.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

struct pop3_parser {
    struct pop3_parser_limits limits;
    struct buf line;  /* the line being received, then the complete one */
    struct buf words; /* a copy of `rest` with the spaces between arguments as NULs */
    char name[POP3_MAX_KEYWORD + 1];
    const char **args;
    size_t args_cap;
    struct pop3_command cmd;
    struct pop3_parse_error err;
    enum pop3_parse_result last; /* the event the current storage belongs to */
    bool expect_line;
    bool fatal;
};

void pop3_parser_limits_default(struct pop3_parser_limits *limits)
{
    limits->max_line = POP3_DEFAULT_LINE;
    limits->max_args = POP3_DEFAULT_ARGS;
}

struct pop3_parser *pop3_parser_new(const struct pop3_parser_limits *limits)
{
    struct pop3_parser *p = xcalloc(1, sizeof(*p));
    if (limits != NULL)
        p->limits = *limits;
    else
        pop3_parser_limits_default(&p->limits);
    if (p->limits.max_line == 0)
        p->limits.max_line = 1;
    p->last = POP3_PARSE_NEED_MORE;
    return p;
}

void pop3_parser_free(struct pop3_parser *p)
{
    if (p == NULL)
        return;
    buf_free(&p->line);
    buf_free(&p->words);
    free(p->args);
    free(p);
}

/* Drops what the previous event handed out; a partial line stays. */
static void forget_event(struct pop3_parser *p)
{
    if (p->last == POP3_PARSE_NEED_MORE)
        return;
    buf_reset(&p->line);
    buf_reset(&p->words);
    p->last = POP3_PARSE_NEED_MORE;
}

void pop3_parser_reset(struct pop3_parser *p)
{
    buf_reset(&p->line);
    buf_reset(&p->words);
    p->last = POP3_PARSE_NEED_MORE;
    p->expect_line = false;
    p->fatal = false;
}

static enum pop3_parse_result fail(struct pop3_parser *p, enum pop3_parse_error_code code,
                                   const char *message)
{
    p->err.code = code;
    p->err.message = message;
    p->err.fatal = code == POP3_PARSE_ERR_LINE_TOO_LONG;
    if (p->err.fatal)
        p->fatal = true;
    p->last = POP3_PARSE_ERROR;
    return POP3_PARSE_ERROR;
}

static bool bad_byte(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

/* Splits the complete line (CRLF removed) into keyword and arguments. */
static enum pop3_parse_result parse_command(struct pop3_parser *p)
{
    const char *s = p->line.data;
    size_t n = p->line.len;
    bool blank = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (bad_byte(c))
            return fail(p, POP3_PARSE_ERR_SYNTAX, "Invalid character in command.");
        if (c != ' ')
            blank = false;
    }
    if (blank)
        return fail(p, POP3_PARSE_ERR_EMPTY, "Empty command.");
    size_t klen = 0;
    while (klen < n && s[klen] != ' ')
        klen++;
    if (klen == 0 || klen > POP3_MAX_KEYWORD)
        return fail(p, POP3_PARSE_ERR_SYNTAX, "Unknown command.");
    for (size_t i = 0; i < klen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f)
            return fail(p, POP3_PARSE_ERR_SYNTAX, "Unknown command.");
        p->name[i] = (char)(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    }
    p->name[klen] = '\0';
    const char *rest = klen < n ? s + klen + 1 : "";
    size_t rest_len = klen < n ? n - klen - 1 : 0;

    /* Arguments: runs of spaces separate them. */
    buf_reset(&p->words);
    buf_append(&p->words, rest, rest_len);
    char *w = p->words.data;
    size_t count = 0;
    size_t i = 0;
    while (i < rest_len) {
        while (i < rest_len && w[i] == ' ')
            w[i++] = '\0';
        if (i >= rest_len)
            break;
        if (count >= p->limits.max_args)
            return fail(p, POP3_PARSE_ERR_TOO_MANY_ARGS, "Too many arguments.");
        p->args = xgrow(p->args, &p->args_cap, count + 1, sizeof(*p->args));
        p->args[count++] = w + i;
        while (i < rest_len && w[i] != ' ')
            i++;
    }
    p->cmd.name = p->name;
    p->cmd.args = p->args;
    p->cmd.arg_count = count;
    p->cmd.rest = rest;
    p->cmd.rest_len = rest_len;
    p->last = POP3_PARSE_COMMAND;
    return POP3_PARSE_COMMAND;
}

enum pop3_parse_result pop3_parser_feed(struct pop3_parser *p, const void *data, size_t len,
                                        size_t *consumed)
{
    *consumed = 0;
    if (p->fatal)
        return POP3_PARSE_ERROR;
    forget_event(p);
    const char *in = data;
    const char *lf = len > 0 ? memchr(in, '\n', len) : NULL;
    size_t max = p->limits.max_line;
    if (lf == NULL) {
        /* Room for max_line bytes and the CR of the CRLF still to come. */
        if (p->line.len + len > max + 1 ||
            (len > 0 && p->line.len + len == max + 1 && in[len - 1] != '\r')) {
            *consumed = len;
            buf_reset(&p->line);
            return fail(p, POP3_PARSE_ERR_LINE_TOO_LONG, "Line too long.");
        }
        buf_append(&p->line, in, len);
        *consumed = len;
        return POP3_PARSE_NEED_MORE;
    }
    size_t take = (size_t)(lf - in);
    size_t total = p->line.len + take;
    bool cr = take > 0 ? in[take - 1] == '\r'
                       : (p->line.len > 0 && p->line.data[p->line.len - 1] == '\r');
    size_t content = cr ? total - 1 : total;
    *consumed = take + 1;
    if (content > max) {
        buf_reset(&p->line);
        return fail(p, POP3_PARSE_ERR_LINE_TOO_LONG, "Line too long.");
    }
    buf_append(&p->line, in, take);
    if (cr) {
        p->line.len--;
        p->line.data[p->line.len] = '\0';
    }
    if (p->expect_line) {
        p->expect_line = false;
        p->last = POP3_PARSE_LINE;
        return POP3_PARSE_LINE;
    }
    return parse_command(p);
}

const struct pop3_command *pop3_parser_command(const struct pop3_parser *p)
{
    return p->last == POP3_PARSE_COMMAND ? &p->cmd : NULL;
}

const struct pop3_parse_error *pop3_parser_error(const struct pop3_parser *p)
{
    return p->last == POP3_PARSE_ERROR || p->fatal ? &p->err : NULL;
}

void pop3_parser_expect_line(struct pop3_parser *p)
{
    p->expect_line = true;
}

const char *pop3_parser_line(const struct pop3_parser *p, size_t *len)
{
    if (p->last != POP3_PARSE_LINE)
        return NULL;
    *len = p->line.len;
    return p->line.data;
}

bool pop3_parser_in_line(const struct pop3_parser *p)
{
    return !p->fatal && p->last == POP3_PARSE_NEED_MORE && p->line.len > 0;
}

bool pop3_parse_number(const char *text, uint64_t max, uint64_t *out)
{
    return strlen(text) <= 20 && str_parse_u64(text, max, out);
}
