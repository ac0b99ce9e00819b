/* LMTP command lines: verbs, paths, ESMTP parameters (see lmtp-parser.h). */
#include "protocols/lmtp/lmtp-parser.h"

#include "core/utf8.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    enum lmtp_verb verb;
} verbs[] = {
    {"LHLO", LMTP_VERB_LHLO}, {"HELO", LMTP_VERB_HELO},         {"EHLO", LMTP_VERB_EHLO},
    {"MAIL", LMTP_VERB_MAIL}, {"RCPT", LMTP_VERB_RCPT},         {"DATA", LMTP_VERB_DATA},
    {"BDAT", LMTP_VERB_BDAT}, {"RSET", LMTP_VERB_RSET},         {"NOOP", LMTP_VERB_NOOP},
    {"QUIT", LMTP_VERB_QUIT}, {"VRFY", LMTP_VERB_VRFY},         {"EXPN", LMTP_VERB_EXPN},
    {"HELP", LMTP_VERB_HELP}, {"STARTTLS", LMTP_VERB_STARTTLS}, {"XCLIENT", LMTP_VERB_XCLIENT},
};

static bool fail(struct lmtp_reply_error *err, int code, const char *enhanced, const char *text)
{
    err->code = code;
    err->enhanced = enhanced;
    err->text = text;
    return false;
}

/* RFC 5322 atext without the dot. */
static bool is_atext(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-/=?^_`{|}~", c) != NULL;
}

static bool is_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Length of the valid UTF-8 sequence of a non-ASCII character at p, 0 when
 * invalid or cut. */
static size_t utf8_len(const char *p, const char *end)
{
    uint32_t cp;
    return utf8_decode((const unsigned char *)p, (size_t)(end - p), &cp);
}

struct cursor {
    char *p;
    char *end;
};

static void skip_spaces(struct cursor *c)
{
    while (c->p < c->end && *c->p == ' ')
        c->p++;
}

/* "@dom,@dom:" source route (RFC 5321 4.1.2: accepted, then ignored). */
static bool skip_source_route(struct cursor *c)
{
    while (c->p < c->end && *c->p == '@') {
        c->p++;
        char *start = c->p;
        while (c->p < c->end && (is_alnum((unsigned char)*c->p) || *c->p == '-' || *c->p == '.'))
            c->p++;
        if (c->p == start || c->p >= c->end)
            return false;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == ':') {
            c->p++;
            return true;
        }
        return false;
    }
    return false;
}

/* A quoted string, decoded where it stands. On success c->p is past the
 * closing quote and *out the decoded bytes. */
static bool parse_quoted(struct cursor *c, struct lmtp_slice *out, bool *utf8)
{
    char *w = c->p; /* the opening quote is overwritten first */
    char *start = w;
    c->p++;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            c->p++;
            out->ptr = start;
            out->len = (size_t)(w - start);
            return true;
        }
        if (ch == '\\') {
            if (c->p + 1 >= c->end)
                return false;
            unsigned char q = (unsigned char)c->p[1];
            if (q < 32 || q > 126)
                return false;
            *w++ = (char)q;
            c->p += 2;
            continue;
        }
        if (ch >= 0x80) {
            size_t n = utf8_len(c->p, c->end);
            if (n == 0)
                return false;
            *utf8 = true;
            memmove(w, c->p, n);
            w += n;
            c->p += n;
            continue;
        }
        if (ch < 32 || ch > 126)
            return false;
        *w++ = (char)ch;
        c->p++;
    }
    return false;
}

/* Atoms and dots (leniently: empty atoms are accepted here and quoted again
 * when the address is written out). */
static bool parse_dot_string(struct cursor *c, struct lmtp_slice *out, bool *utf8)
{
    char *start = c->p;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch >= 0x80) {
            size_t n = utf8_len(c->p, c->end);
            if (n == 0)
                return false;
            *utf8 = true;
            c->p += n;
        } else if (is_atext(ch) || ch == '.') {
            c->p++;
        } else {
            break;
        }
    }
    out->ptr = start;
    out->len = (size_t)(c->p - start);
    return out->len > 0;
}

/* Domain (labels of letters, digits, '-' and UTF-8, joined by single dots)
 * or an address literal "[...]". */
static bool parse_domain(struct cursor *c, struct lmtp_slice *out, bool *utf8)
{
    char *start = c->p;
    if (c->p < c->end && *c->p == '[') {
        c->p++;
        while (c->p < c->end && *c->p != ']') {
            unsigned char ch = (unsigned char)*c->p;
            if (ch < 33 || ch > 126 || ch == '[' || ch == '\\')
                return false;
            c->p++;
        }
        if (c->p >= c->end || c->p == start + 1)
            return false;
        c->p++;
        out->ptr = start;
        out->len = (size_t)(c->p - start);
        return true;
    }
    size_t label = 0;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '.') {
            if (label == 0)
                return false;
            label = 0;
            c->p++;
            continue;
        }
        if (ch >= 0x80) {
            size_t n = utf8_len(c->p, c->end);
            if (n == 0)
                return false;
            *utf8 = true;
            c->p += n;
            label += n;
            continue;
        }
        if (!is_alnum(ch) && ch != '-')
            break;
        c->p++;
        label++;
    }
    out->ptr = start;
    out->len = (size_t)(c->p - start);
    return out->len > 0 && label > 0;
}

static bool parse_path(struct cursor *c, bool is_mail, struct lmtp_path *path,
                       struct lmtp_reply_error *err)
{
    const char *enh = is_mail ? "5.1.7" : "5.1.3";
    const char *bad = is_mail ? "Bad sender address syntax" : "Bad recipient address syntax";
    memset(path, 0, sizeof(*path));
    if (c->p >= c->end || *c->p != '<')
        return fail(err, 501, enh, bad);
    c->p++;
    if (c->p < c->end && *c->p == '>') {
        if (!is_mail)
            return fail(err, 501, enh, "Null recipient address not allowed");
        c->p++;
        path->null = true;
        path->local.ptr = path->domain.ptr = c->p;
        return true;
    }
    if (c->p < c->end && *c->p == '@' && !skip_source_route(c))
        return fail(err, 501, enh, bad);
    bool ok;
    if (c->p < c->end && *c->p == '"') {
        path->quoted = true;
        ok = parse_quoted(c, &path->local, &path->utf8);
    } else {
        ok = parse_dot_string(c, &path->local, &path->utf8);
    }
    if (!ok)
        return fail(err, 501, enh, bad);
    path->domain.ptr = c->p;
    if (c->p < c->end && *c->p == '@') {
        c->p++;
        if (!parse_domain(c, &path->domain, &path->utf8))
            return fail(err, 501, enh, bad);
    } else if (is_mail) {
        return fail(err, 501, enh, "Sender address needs a domain");
    }
    if (c->p >= c->end || *c->p != '>')
        return fail(err, 501, enh, bad);
    c->p++;
    if (path->local.len > LMTP_MAX_LOCAL_PART || path->domain.len > LMTP_MAX_DOMAIN)
        return fail(err, 501, enh, "Address too long");
    return true;
}

/* esmtp-param *(SP esmtp-param), RFC 5321 4.1.2; UTF-8 allowed in values
 * (RFC 6531 3.3). */
static bool parse_params(struct cursor *c, struct lmtp_command *cmd, struct lmtp_reply_error *err)
{
    while (c->p < c->end) {
        if (*c->p != ' ')
            return fail(err, 501, "5.5.4", "Syntax error in parameters");
        skip_spaces(c);
        if (c->p >= c->end)
            break; /* trailing spaces */
        if (cmd->param_count >= LMTP_MAX_PARAMS)
            return fail(err, 555, "5.5.4", "Too many parameters");
        struct lmtp_param *p = &cmd->params[cmd->param_count];
        char *start = c->p;
        while (c->p < c->end && (is_alnum((unsigned char)*c->p) || *c->p == '-'))
            c->p++;
        p->keyword.ptr = start;
        p->keyword.len = (size_t)(c->p - start);
        if (p->keyword.len == 0 || !is_alnum((unsigned char)*start))
            return fail(err, 501, "5.5.4", "Syntax error in parameters");
        if (p->keyword.len > LMTP_MAX_PARAM_KEYWORD)
            return fail(err, 555, "5.5.4", "Unsupported parameter");
        p->has_value = false;
        p->value.ptr = c->p;
        p->value.len = 0;
        if (c->p < c->end && *c->p == '=') {
            c->p++;
            p->has_value = true;
            p->value.ptr = c->p;
            while (c->p < c->end && *c->p != ' ') {
                unsigned char ch = (unsigned char)*c->p;
                if (ch >= 0x80) {
                    size_t n = utf8_len(c->p, c->end);
                    if (n == 0)
                        return fail(err, 501, "5.5.4", "Syntax error in parameters");
                    c->p += n;
                    continue;
                }
                if (ch < 33 || ch > 126 || ch == '=')
                    return fail(err, 501, "5.5.4", "Syntax error in parameters");
                c->p++;
            }
            p->value.len = (size_t)(c->p - p->value.ptr);
            if (p->value.len == 0)
                return fail(err, 501, "5.5.4", "Syntax error in parameters");
        }
        cmd->param_count++;
    }
    return true;
}

static bool has_prefix_ci(const struct cursor *c, const char *prefix)
{
    size_t n = strlen(prefix);
    return (size_t)(c->end - c->p) >= n && strncasecmp(c->p, prefix, n) == 0;
}

bool lmtp_parse_command(char *line, size_t len, struct lmtp_command *cmd,
                        struct lmtp_reply_error *err)
{
    memset(cmd, 0, sizeof(*cmd));
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if ((ch < 32 && ch != '\t') || ch == 127)
            return fail(err, 500, "5.5.2", "Invalid characters in command");
    }
    struct cursor c = {line, line + len};
    char *verb = c.p;
    while (c.p < c.end && *c.p != ' ')
        c.p++;
    cmd->verb_text.ptr = verb;
    cmd->verb_text.len = (size_t)(c.p - verb);
    if (cmd->verb_text.len == 0)
        return fail(err, 500, "5.5.2", "Syntax error, command unrecognized");
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        if (strlen(verbs[i].name) == cmd->verb_text.len &&
            strncasecmp(verbs[i].name, verb, cmd->verb_text.len) == 0)
            cmd->verb = verbs[i].verb;
    }
    if (cmd->verb == LMTP_VERB_UNKNOWN)
        return fail(err, 500, "5.5.2", "Syntax error, command unrecognized");
    skip_spaces(&c);
    cmd->arg.ptr = c.p;
    cmd->arg.len = (size_t)(c.end - c.p);
    switch (cmd->verb) {
    case LMTP_VERB_DATA:
    case LMTP_VERB_RSET:
    case LMTP_VERB_QUIT:
    case LMTP_VERB_STARTTLS:
        if (cmd->arg.len > 0)
            return fail(err, 501, "5.5.4", "Syntax error, no parameters allowed");
        return true;
    case LMTP_VERB_XCLIENT:
        if (cmd->arg.len == 0)
            return fail(err, 501, "5.5.4", "Syntax error, XCLIENT needs attributes");
        return true;
    case LMTP_VERB_LHLO:
    case LMTP_VERB_HELO:
    case LMTP_VERB_EHLO:
        if (cmd->arg.len == 0)
            return fail(err, 501, "5.5.4", "Syntax error, missing domain");
        return true;
    case LMTP_VERB_MAIL:
    case LMTP_VERB_RCPT: {
        bool is_mail = cmd->verb == LMTP_VERB_MAIL;
        const char *kw = is_mail ? "FROM:" : "TO:";
        if (!has_prefix_ci(&c, kw))
            return fail(err, 501, "5.5.4",
                        is_mail ? "Syntax error, expected MAIL FROM:<address>"
                                : "Syntax error, expected RCPT TO:<address>");
        c.p += strlen(kw);
        skip_spaces(&c);
        return parse_path(&c, is_mail, &cmd->path, err) && parse_params(&c, cmd, err);
    }
    default:
        return true;
    }
}

static bool keyword_is(const struct lmtp_param *p, const char *name)
{
    return p->keyword.len == strlen(name) && strncasecmp(p->keyword.ptr, name, p->keyword.len) == 0;
}

static bool value_is(const struct lmtp_param *p, const char *name)
{
    return p->value.len == strlen(name) && strncasecmp(p->value.ptr, name, p->value.len) == 0;
}

bool lmtp_mail_params_parse(const struct lmtp_command *cmd, struct lmtp_mail_params *out,
                            struct lmtp_reply_error *err)
{
    memset(out, 0, sizeof(*out));
    bool seen_body = false;
    for (size_t i = 0; i < cmd->param_count; i++) {
        const struct lmtp_param *p = &cmd->params[i];
        if (keyword_is(p, "SIZE")) {
            if (out->has_size || !p->has_value || p->value.len > 20)
                return fail(err, 501, "5.5.4", "Invalid SIZE parameter");
            uint64_t v = 0;
            for (size_t k = 0; k < p->value.len; k++) {
                char ch = p->value.ptr[k];
                if (ch < '0' || ch > '9')
                    return fail(err, 501, "5.5.4", "Invalid SIZE parameter");
                unsigned d = (unsigned)(ch - '0');
                if (v > (UINT64_MAX - d) / 10)
                    return fail(err, 501, "5.5.4", "Invalid SIZE parameter");
                v = v * 10 + d;
            }
            out->has_size = true;
            out->size = v;
        } else if (keyword_is(p, "BODY")) {
            if (seen_body || !p->has_value)
                return fail(err, 501, "5.5.4", "Invalid BODY parameter");
            seen_body = true;
            if (value_is(p, "7BIT"))
                out->body = LMTP_BODY_7BIT;
            else if (value_is(p, "8BITMIME"))
                out->body = LMTP_BODY_8BITMIME;
            else
                return fail(err, 555, "5.5.4", "Unsupported BODY type");
        } else if (keyword_is(p, "SMTPUTF8")) {
            if (out->smtputf8 || p->has_value)
                return fail(err, 501, "5.5.4", "Invalid SMTPUTF8 parameter");
            out->smtputf8 = true;
        } else {
            return fail(err, 555, "5.5.4", "Unsupported parameter");
        }
    }
    return true;
}

bool lmtp_is_dot_string(const char *s, size_t len)
{
    if (len == 0 || s[0] == '.' || s[len - 1] == '.')
        return false;
    for (size_t i = 0; i < len;) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '.') {
            if (s[i + 1] == '.')
                return false;
            i++;
        } else if (ch >= 0x80) {
            uint32_t cp;
            size_t n = utf8_decode((const unsigned char *)s + i, len - i, &cp);
            if (n == 0)
                return false;
            i += n;
        } else if (is_atext(ch)) {
            i++;
        } else {
            return false;
        }
    }
    return true;
}

void lmtp_path_format(const struct lmtp_path *path, struct buf *out)
{
    if (path->null)
        return;
    if (lmtp_is_dot_string(path->local.ptr, path->local.len)) {
        buf_append(out, path->local.ptr, path->local.len);
    } else {
        buf_append_char(out, '"');
        for (size_t i = 0; i < path->local.len; i++) {
            char ch = path->local.ptr[i];
            if (ch == '"' || ch == '\\')
                buf_append_char(out, '\\');
            buf_append_char(out, ch);
        }
        buf_append_char(out, '"');
    }
    if (path->domain.len > 0) {
        buf_append_char(out, '@');
        buf_append(out, path->domain.ptr, path->domain.len);
    }
}
