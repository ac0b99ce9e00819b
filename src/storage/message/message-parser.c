/* MIME structure parsing (see message-parser.h).
 *
 * One scanner walks the message line by line, front to back, exactly once:
 * it keeps the count of LFs and of bare LFs before the current line so every
 * range gets its CRLF-form size from two marks, without rescanning nested
 * parts. Multipart boundaries of all open multiparts sit on a stack; a line
 * that matches any of them ends every part nested inside its owner, which is
 * how a missing inner end boundary is tolerated. */
#include "storage/message/message-parser.h"

#include "core/xalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A position with the line-end counts of everything before it. */
struct mark {
    size_t pos;
    size_t lines;
    size_t bare_lf;
};

struct line {
    size_t start;
    size_t content_end; /* before CRLF / LF / the end of the message */
    size_t next;        /* the next line's start */
};

struct boundary {
    const char *text;
    size_t len;
};

/* Where a part ended: at the end of the message, or at the boundary line
 * under the scanner, which matches stack entry `boundary` (a close
 * delimiter when `closing`). */
struct part_end {
    bool at_eof;
    size_t boundary;
    bool closing;
};

struct parser {
    const char *data;
    size_t len;
    struct message *msg;
    struct message_limits limits;
    size_t parts_cap;
    size_t *last_child; /* per part: its latest child, to append siblings in O(1) */
    struct mark cur;    /* the scanner: start of the next unread line */
    struct boundary *stack;
    size_t stack_count;
    struct buf scratch;
};

void message_limits_default(struct message_limits *limits)
{
    limits->max_depth = MESSAGE_DEFAULT_MAX_DEPTH;
    limits->max_parts = MESSAGE_DEFAULT_MAX_PARTS;
    limits->max_headers = MESSAGE_DEFAULT_MAX_HEADERS;
}

size_t message_range_crlf_size(const struct message_range *range)
{
    return range->len + range->bare_lf;
}

static bool is_wsp(char c)
{
    return c == ' ' || c == '\t';
}

/* ---- the line scanner ---- */

/* Reads the line at the scanner without consuming it; false at the end. */
static bool peek_line(const struct parser *p, struct line *l)
{
    size_t start = p->cur.pos;
    if (start >= p->len)
        return false;
    const char *lf = memchr(p->data + start, '\n', p->len - start);
    l->start = start;
    if (lf == NULL) {
        l->content_end = p->len;
        l->next = p->len;
        return true;
    }
    size_t at = (size_t)(lf - p->data);
    l->content_end = at > start && p->data[at - 1] == '\r' ? at - 1 : at;
    l->next = at + 1;
    return true;
}

static void consume_line(struct parser *p, const struct line *l)
{
    if (l->next > l->start && p->data[l->next - 1] == '\n') {
        p->cur.lines++;
        if (l->next - 1 == l->start || p->data[l->next - 2] != '\r')
            p->cur.bare_lf++;
    }
    p->cur.pos = l->next;
}

/* The mark just before the line end that precedes the line starting at
 * `at` (that line end belongs to the boundary line), never before `floor`. */
static struct mark mark_before_line(const struct parser *p, struct mark at, struct mark floor)
{
    if (at.pos == 0 || at.pos <= floor.pos)
        return floor;
    bool crlf = at.pos >= 2 && p->data[at.pos - 2] == '\r';
    struct mark m = {at.pos - (crlf ? 2 : 1), at.lines - 1, at.bare_lf - (crlf ? 0 : 1)};
    return m.pos < floor.pos ? floor : m;
}

static struct message_range range_between(struct mark from, struct mark to)
{
    struct message_range r = {from.pos, to.pos - from.pos, to.lines - from.lines,
                              to.bare_lf - from.bare_lf};
    return r;
}

/* Matches a line against the open boundaries, innermost first: "--" boundary,
 * optionally "--", then only blanks. Exact matching keeps boundaries that
 * are prefixes of each other apart. */
static bool match_boundary(const struct parser *p, const struct line *l, size_t *index,
                           bool *closing)
{
    const char *s = p->data + l->start;
    size_t len = l->content_end - l->start;
    if (p->stack_count == 0 || len < 2 || s[0] != '-' || s[1] != '-')
        return false;
    while (len > 2 && is_wsp(s[len - 1]))
        len--;
    for (size_t i = p->stack_count; i-- > 0;) {
        const struct boundary *b = &p->stack[i];
        if (len < 2 + b->len || memcmp(s + 2, b->text, b->len) != 0)
            continue;
        size_t rest = len - 2 - b->len;
        if (rest == 0 || (rest == 2 && s[len - 2] == '-' && s[len - 1] == '-')) {
            *index = i;
            *closing = rest == 2;
            return true;
        }
    }
    return false;
}

/* ---- structured field values (RFC 2045, RFC 2183, RFC 2231, RFC 3282) ---- */

static bool is_tspecial(char c)
{
    return strchr("()<>@,;:\\\"/[]?=", c) != NULL;
}

static bool is_token_char(char c)
{
    unsigned char u = (unsigned char)c;
    return u > 32 && u < 127 && !is_tspecial(c);
}

/* Skips blanks and (nested) comments. */
static size_t skip_cfws(const char *s, size_t len, size_t i)
{
    while (i < len) {
        if (is_wsp(s[i]) || s[i] == '\r' || s[i] == '\n') {
            i++;
        } else if (s[i] == '(') {
            size_t depth = 0;
            while (i < len) {
                if (s[i] == '\\' && i + 1 < len) {
                    i += 2;
                    continue;
                }
                if (s[i] == '(')
                    depth++;
                else if (s[i] == ')' && --depth == 0) {
                    i++;
                    break;
                }
                i++;
            }
        } else {
            break;
        }
    }
    return i;
}

static size_t scan_token(const char *s, size_t len, size_t i)
{
    while (i < len && is_token_char(s[i]))
        i++;
    return i;
}

/* Reads a quoted string starting at the '"' at `i` into `out` (unescaped); a
 * missing closing quote ends at the end of the value. Returns the index after. */
static size_t scan_quoted(const char *s, size_t len, size_t i, struct buf *out)
{
    for (i++; i < len && s[i] != '"'; i++) {
        if (s[i] == '\\' && i + 1 < len)
            i++;
        buf_append_char(out, s[i]);
    }
    return i < len ? i + 1 : i;
}

struct raw_param {
    char *name;
    char *value;
};

/* Splits "name*3*" into the base name, the section number and whether the
 * value is RFC 2231 extended (charset'lang'%XX). False for a plain name. */
static bool rfc2231_split(const char *name, size_t *base_len, long *section, bool *extended)
{
    const char *star = strchr(name, '*');
    if (star == NULL)
        return false;
    *base_len = (size_t)(star - name);
    const char *s = star + 1;
    *section = -1;
    *extended = false;
    if (*s >= '0' && *s <= '9') {
        long n = 0;
        while (*s >= '0' && *s <= '9' && n < 100000)
            n = n * 10 + (*s++ - '0');
        *section = n;
        if (*s == '*') {
            *extended = true;
            s++;
        }
    } else {
        *extended = true;
    }
    return *s == '\0' && *base_len > 0;
}

/* A parameter kept under its own name: moved from `raw`. */
static void take_as_is(struct message_param *param, struct raw_param *raw, bool *used)
{
    param->name = raw->name;
    param->value = raw->value;
    raw->name = raw->value = NULL;
    *used = true;
}

/* Joins RFC 2231 continuations (name*0, name*1*, ...) into one parameter:
 * "name" when no piece is extended, else "name*" whose value keeps the
 * charset'language' prefix and the %-encoding as sent. */
static void params_join_continuations(struct raw_param *raw, size_t count,
                                      struct message_param **out, size_t *out_count)
{
    struct message_param *params = count > 0 ? xcalloc(count, sizeof(*params)) : NULL;
    size_t n = 0;
    bool *used = count > 0 ? xcalloc(count, sizeof(*used)) : NULL;
    for (size_t i = 0; i < count; i++) {
        size_t base_len;
        long section;
        bool extended;
        if (used[i])
            continue;
        if (!rfc2231_split(raw[i].name, &base_len, &section, &extended) || section < 0) {
            take_as_is(&params[n++], &raw[i], &used[i]);
            continue;
        }
        /* Gather sections 0, 1, 2... of this base name in order. */
        struct buf value = {0};
        bool any_extended = false;
        for (long want = 0;; want++) {
            size_t found = count;
            for (size_t j = i; j < count; j++) {
                size_t bl;
                long sec;
                bool ext;
                if (!used[j] && rfc2231_split(raw[j].name, &bl, &sec, &ext) && sec == want &&
                    bl == base_len && strncasecmp(raw[j].name, raw[i].name, bl) == 0) {
                    found = j;
                    any_extended |= ext;
                    break;
                }
            }
            if (found == count)
                break;
            buf_append_str(&value, raw[found].value);
            used[found] = true;
        }
        if (!used[i]) {
            /* No section 0: keep the piece under its own name. */
            buf_free(&value);
            take_as_is(&params[n++], &raw[i], &used[i]);
            continue;
        }
        params[n].name = xasprintf("%.*s%s", (int)base_len, raw[i].name, any_extended ? "*" : "");
        params[n].value = buf_steal(&value);
        n++;
    }
    for (size_t i = 0; i < count; i++) {
        free(raw[i].name);
        free(raw[i].value);
    }
    free(used);
    *out = params;
    *out_count = n;
}

/* Parses "; name=value; name="quoted"" from `i` on. Lenient: a bare value
 * runs to the next ';' (unquoted file names with blanks are common). */
static void parse_params(const char *s, size_t len, size_t i, struct message_param **out,
                         size_t *out_count, bool *hit_limit)
{
    struct raw_param raw[MESSAGE_MAX_PARAMS];
    size_t count = 0;
    while (i < len) {
        const char *semi = memchr(s + i, ';', len - i);
        if (semi == NULL)
            break;
        i = skip_cfws(s, len, (size_t)(semi - s) + 1);
        size_t name_start = i;
        i = scan_token(s, len, i);
        size_t name_end = i;
        i = skip_cfws(s, len, i);
        if (name_end == name_start || i >= len || s[i] != '=')
            continue;
        i = skip_cfws(s, len, i + 1);
        struct buf value = {0};
        if (i < len && s[i] == '"') {
            i = scan_quoted(s, len, i, &value);
        } else {
            size_t v = i;
            while (i < len && s[i] != ';')
                i++;
            size_t e = i;
            while (e > v && is_wsp(s[e - 1]))
                e--;
            buf_append(&value, s + v, e - v);
        }
        if (count == MESSAGE_MAX_PARAMS) {
            *hit_limit = true;
            buf_free(&value);
            break;
        }
        raw[count].name = xstrndup(s + name_start, name_end - name_start);
        raw[count].value = buf_steal(&value);
        count++;
    }
    params_join_continuations(raw, count, out, out_count);
}

static void parse_content_type(struct message_part *part, const char *s, size_t len,
                               bool *hit_limit)
{
    size_t i = skip_cfws(s, len, 0);
    size_t type_start = i;
    i = scan_token(s, len, i);
    size_t type_end = i;
    i = skip_cfws(s, len, i);
    if (type_end == type_start || i >= len || s[i] != '/')
        return; /* invalid: RFC 2045 5.2 says treat as text/plain */
    i = skip_cfws(s, len, i + 1);
    size_t sub_start = i;
    i = scan_token(s, len, i);
    if (i == sub_start)
        return;
    part->type = xstrndup(s + type_start, type_end - type_start);
    part->subtype = xstrndup(s + sub_start, i - sub_start);
    part->has_content_type = true;
    parse_params(s, len, i, &part->params, &part->param_count, hit_limit);
}

static void parse_content_disposition(struct message_part *part, const char *s, size_t len,
                                      bool *hit_limit)
{
    size_t i = skip_cfws(s, len, 0);
    size_t start = i;
    i = scan_token(s, len, i);
    if (i == start)
        return;
    part->disposition = xstrndup(s + start, i - start);
    parse_params(s, len, i, &part->disposition_params, &part->disposition_param_count, hit_limit);
}

static void parse_content_language(struct message_part *part, const char *s, size_t len,
                                   bool *hit_limit)
{
    size_t i = 0;
    while (i < len) {
        i = skip_cfws(s, len, i);
        size_t start = i;
        while (i < len && (is_token_char(s[i]) || s[i] == '.'))
            i++;
        if (i > start) {
            if (part->language_count == MESSAGE_MAX_PARAMS) {
                *hit_limit = true;
                return;
            }
            if (part->languages == NULL)
                part->languages = xcalloc(MESSAGE_MAX_PARAMS, sizeof(char *));
            part->languages[part->language_count++] = xstrndup(s + start, i - start);
        }
        i = skip_cfws(s, len, i);
        if (i < len && s[i] != ',') {
            const char *comma = memchr(s + i, ',', len - i);
            i = comma == NULL ? len : (size_t)(comma - s);
        }
        if (i < len)
            i++;
    }
}

/* A simple field's value: unfolded, blanks trimmed at both ends. */
static char *trimmed_dup(const char *s, size_t len)
{
    size_t start = 0;
    while (start < len && is_wsp(s[start]))
        start++;
    while (len > start && is_wsp(s[len - 1]))
        len--;
    return xstrndup(s + start, len - start);
}

/* The first token (comments skipped): Content-Transfer-Encoding. */
static char *token_dup(const char *s, size_t len)
{
    size_t i = skip_cfws(s, len, 0);
    size_t start = i;
    i = scan_token(s, len, i);
    return i > start ? xstrndup(s + start, i - start) : NULL;
}

void message_header_unfold(struct buf *out, const char *value, size_t len)
{
    buf_reserve(out, len);
    for (size_t i = 0; i < len; i++) {
        char c = value[i];
        if (c == '\r' || c == '\n')
            continue;
        buf_append_char(out, c == '\0' ? ' ' : c);
    }
}

static bool name_is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

/* Interprets one header field of a part; the first of each kind wins. */
static void apply_field(struct parser *p, size_t index, const struct message_header_field *f)
{
    const char *name = p->data + f->name_start;
    size_t nlen = f->name_len;
    if (!f->has_colon || nlen < 8 || strncasecmp(name, "content-", 8) != 0)
        return;
    struct message_part *part = &p->msg->parts[index];
    buf_reset(&p->scratch);
    message_header_unfold(&p->scratch, p->data + f->value_start, f->value_len);
    const char *v = p->scratch.data != NULL ? p->scratch.data : "";
    size_t vlen = p->scratch.len;
    if (name_is(name, nlen, "content-type")) {
        if (!part->has_content_type)
            parse_content_type(part, v, vlen, &p->msg->hit_limit);
    } else if (name_is(name, nlen, "content-transfer-encoding")) {
        if (part->encoding == NULL)
            part->encoding = token_dup(v, vlen);
    } else if (name_is(name, nlen, "content-disposition")) {
        if (part->disposition == NULL)
            parse_content_disposition(part, v, vlen, &p->msg->hit_limit);
    } else if (name_is(name, nlen, "content-language")) {
        if (part->language_count == 0)
            parse_content_language(part, v, vlen, &p->msg->hit_limit);
    } else if (name_is(name, nlen, "content-id")) {
        if (part->id == NULL)
            part->id = trimmed_dup(v, vlen);
    } else if (name_is(name, nlen, "content-description")) {
        if (part->description == NULL)
            part->description = trimmed_dup(v, vlen);
    } else if (name_is(name, nlen, "content-location")) {
        if (part->location == NULL)
            part->location = trimmed_dup(v, vlen);
    } else if (name_is(name, nlen, "content-md5")) {
        if (part->md5 == NULL)
            part->md5 = trimmed_dup(v, vlen);
    }
}

/* ---- header fields ---- */

/* Splits a field's first line into name and value start. */
static void field_first_line(const char *data, const struct line *l, struct message_header_field *f)
{
    const char *s = data + l->start;
    size_t len = l->content_end - l->start;
    const char *colon = memchr(s, ':', len);
    f->start = l->start;
    f->name_start = l->start;
    if (colon == NULL) {
        f->has_colon = false;
        f->name_len = len;
        f->value_start = l->content_end;
        f->value_len = 0;
        return;
    }
    f->has_colon = true;
    size_t name_len = (size_t)(colon - s);
    while (name_len > 0 && is_wsp(s[name_len - 1]))
        name_len--;
    f->name_len = name_len;
    size_t v = (size_t)(colon - s) + 1;
    while (v < len && is_wsp(s[v]))
        v++;
    f->value_start = l->start + v;
    f->value_len = len - v;
}

bool message_header_next(const char *data, const struct message_range *header, size_t *pos,
                         struct message_header_field *out)
{
    size_t end = header->start + header->len;
    size_t at = *pos;
    if (at >= end)
        return false;
    bool first = true;
    size_t value_end = 0;
    while (at < end) {
        const char *lf = memchr(data + at, '\n', end - at);
        struct line l = {at, end, end};
        if (lf != NULL) {
            size_t x = (size_t)(lf - data);
            l.content_end = x > at && data[x - 1] == '\r' ? x - 1 : x;
            l.next = x + 1;
        }
        if (first) {
            if (l.content_end == l.start)
                return false; /* the blank line ending the block */
            field_first_line(data, &l, out);
            value_end = l.content_end;
            first = false;
        } else if (is_wsp(data[at]) && out->has_colon) {
            value_end = l.content_end;
        } else {
            break;
        }
        at = l.next;
    }
    if (out->has_colon)
        out->value_len = value_end > out->value_start ? value_end - out->value_start : 0;
    out->len = at - out->start;
    *pos = at;
    return true;
}

bool message_header_is(const char *data, const struct message_header_field *field, const char *name)
{
    return field->has_colon && name_is(data + field->name_start, field->name_len, name);
}

/* ---- the tree ---- */

static size_t part_new(struct parser *p, size_t parent, unsigned depth)
{
    struct message *msg = p->msg;
    size_t cap = p->parts_cap;
    msg->parts = xgrow(msg->parts, &p->parts_cap, msg->part_count + 1, sizeof(*msg->parts));
    p->last_child = xgrow(p->last_child, &cap, msg->part_count + 1, sizeof(*p->last_child));
    size_t index = msg->part_count++;
    struct message_part *part = &msg->parts[index];
    memset(part, 0, sizeof(*part));
    part->parent = parent;
    part->first_child = MESSAGE_PART_NONE;
    part->next_sibling = MESSAGE_PART_NONE;
    part->depth = depth;
    part->is_message =
        parent == MESSAGE_PART_NONE || msg->parts[parent].kind == MESSAGE_PART_MESSAGE;
    if (parent != MESSAGE_PART_NONE) {
        struct message_part *pp = &msg->parts[parent];
        if (pp->first_child == MESSAGE_PART_NONE)
            pp->first_child = index;
        else
            msg->parts[p->last_child[parent]].next_sibling = index;
        pp->child_count++;
        p->last_child[parent] = index;
    }
    return index;
}

/* Reads the header block of part `index`; the scanner ends at the body.
 * Returns false when a boundary line cut the header short (`end` says which). */
static bool parse_header(struct parser *p, size_t index, struct mark *header_end,
                         struct part_end *end)
{
    struct mark start = p->cur;
    struct message_header_field field;
    bool open = false;
    size_t field_count = 0;
    struct line l = {0};
    bool complete = true;
    while (true) {
        if (!peek_line(p, &l)) {
            *header_end = p->cur;
            end->at_eof = true;
            break;
        }
        size_t which;
        bool closing;
        if (match_boundary(p, &l, &which, &closing)) {
            *header_end = mark_before_line(p, p->cur, start);
            end->at_eof = false;
            end->boundary = which;
            end->closing = closing;
            complete = false;
            break;
        }
        if (l.content_end == l.start) {
            consume_line(p, &l);
            *header_end = p->cur;
            break;
        }
        if (open && is_wsp(p->data[l.start]) && field.has_colon) {
            field.value_len = l.content_end - field.value_start;
        } else {
            if (open && field_count++ < p->limits.max_headers)
                apply_field(p, index, &field);
            field_first_line(p->data, &l, &field);
            open = true;
        }
        consume_line(p, &l);
    }
    if (open && field_count++ < p->limits.max_headers)
        apply_field(p, index, &field);
    if (field_count > p->limits.max_headers)
        p->msg->hit_limit = true;
    p->msg->parts[index].header = range_between(start, *header_end);
    return complete && !end->at_eof;
}

/* Skips body lines up to the next boundary line of any open multipart. */
static void skip_to_boundary(struct parser *p, struct part_end *end)
{
    struct line l = {0};
    while (peek_line(p, &l)) {
        if (match_boundary(p, &l, &end->boundary, &end->closing)) {
            end->at_eof = false;
            return;
        }
        consume_line(p, &l);
    }
    end->at_eof = true;
}

static void parse_part(struct parser *p, size_t index, struct part_end *end);

/* Cuts `r` to end at `limit` at most; the bytes cut are at most a line end. */
static void range_clip(const struct parser *p, struct message_range *r, size_t limit)
{
    if (r->start >= limit) {
        *r = (struct message_range){limit, 0, 0, 0};
        return;
    }
    for (size_t i = limit; i < r->start + r->len; i++) {
        if (p->data[i] != '\n')
            continue;
        r->lines--;
        if (i == 0 || p->data[i - 1] != '\r')
            r->bare_lf--;
    }
    if (r->start + r->len > limit)
        r->len = limit - r->start;
}

/* The line end before a boundary belongs to the boundary, so an empty last
 * part (or a header's blank line) right before an outer boundary can reach
 * past its parent's body end: cut the last child at each level back. */
static void clip_last_descendants(struct parser *p, size_t index, size_t limit)
{
    size_t c = index;
    while (p->msg->parts[c].first_child != MESSAGE_PART_NONE) {
        c = p->last_child[c];
        range_clip(p, &p->msg->parts[c].header, limit);
        range_clip(p, &p->msg->parts[c].body, limit);
    }
}

static bool encoding_is_identity(const char *encoding)
{
    return encoding == NULL || strcasecmp(encoding, "7bit") == 0 ||
           strcasecmp(encoding, "8bit") == 0 || strcasecmp(encoding, "binary") == 0;
}

/* The body of multipart part `index`: preamble, parts, epilogue. */
static void parse_multipart_body(struct parser *p, size_t index, const char *boundary,
                                 struct part_end *end)
{
    size_t mine = p->stack_count;
    p->stack[p->stack_count++] = (struct boundary){boundary, strlen(boundary)};
    skip_to_boundary(p, end); /* the preamble */
    unsigned depth = p->msg->parts[index].depth + 1;
    while (!end->at_eof && end->boundary == mine && !end->closing) {
        struct line l = {0};
        peek_line(p, &l);
        consume_line(p, &l);
        if (p->msg->part_count >= p->limits.max_parts) {
            p->msg->hit_limit = true;
            skip_to_boundary(p, end);
            continue;
        }
        size_t child = part_new(p, index, depth);
        parse_part(p, child, end);
    }
    p->stack_count = mine;
    if (!end->at_eof && end->boundary == mine) {
        /* The close delimiter: the epilogue runs to an outer boundary. */
        struct line l = {0};
        peek_line(p, &l);
        consume_line(p, &l);
        skip_to_boundary(p, end);
    }
}

static void set_default_type(struct parser *p, size_t index)
{
    struct message_part *part = &p->msg->parts[index];
    if (part->has_content_type)
        return;
    size_t parent = part->parent;
    bool in_digest = parent != MESSAGE_PART_NONE &&
                     p->msg->parts[parent].kind == MESSAGE_PART_MULTIPART &&
                     message_part_is(&p->msg->parts[parent], "multipart", "digest");
    part->type = xstrdup(in_digest ? "message" : "text");
    part->subtype = xstrdup(in_digest ? "rfc822" : "plain");
}

/* Parses part `index` from the scanner position: header, then body. */
static void parse_part(struct parser *p, size_t index, struct part_end *end)
{
    struct mark header_end;
    bool has_body = parse_header(p, index, &header_end, end);
    set_default_type(p, index);
    struct message_part *part = &p->msg->parts[index];
    if (!has_body) {
        part->body = range_between(header_end, header_end);
        return;
    }
    const char *boundary = NULL;
    bool container = false;
    if (message_part_is(part, "multipart", NULL)) {
        boundary = message_param_find(part->params, part->param_count, "boundary");
        container =
            boundary != NULL && boundary[0] != '\0' && strlen(boundary) <= MESSAGE_MAX_BOUNDARY;
    } else if (message_part_is(part, "message", "rfc822") ||
               message_part_is(part, "message", "global")) {
        container = encoding_is_identity(part->encoding);
    }
    if (container &&
        (part->depth >= p->limits.max_depth || p->msg->part_count >= p->limits.max_parts)) {
        p->msg->hit_limit = true;
        container = false;
    }
    struct mark body_start = p->cur;
    if (!container) {
        skip_to_boundary(p, end);
    } else if (boundary != NULL) {
        part->kind = MESSAGE_PART_MULTIPART;
        parse_multipart_body(p, index, boundary, end);
    } else {
        part->kind = MESSAGE_PART_MESSAGE;
        size_t child = part_new(p, index, part->depth + 1);
        parse_part(p, child, end);
    }
    struct mark body_end = end->at_eof ? p->cur : mark_before_line(p, p->cur, body_start);
    part = &p->msg->parts[index];
    part->body = range_between(body_start, body_end);
    if (part->first_child != MESSAGE_PART_NONE)
        clip_last_descendants(p, index, body_end.pos);
}

struct message_range message_header_block(const char *data, size_t len)
{
    /* The root has no enclosing boundary, so its header ends only at an
     * empty line or the end; the counts follow consume_line. */
    struct message_range r = {0, 0, 0, 0};
    size_t pos = 0;
    while (pos < len) {
        const char *lf = memchr(data + pos, '\n', len - pos);
        if (lf == NULL) {
            pos = len;
            break;
        }
        size_t at = (size_t)(lf - data);
        bool cr = at > pos && data[at - 1] == '\r';
        r.lines++;
        if (!cr)
            r.bare_lf++;
        bool empty = at == pos || (cr && at - 1 == pos);
        pos = at + 1;
        if (empty)
            break;
    }
    r.len = pos;
    return r;
}

void message_parse(const char *data, size_t len, const struct message_limits *limits,
                   struct message *out)
{
    memset(out, 0, sizeof(*out));
    out->data = data;
    out->len = len;
    struct parser p = {0};
    p.data = data;
    p.len = len;
    p.msg = out;
    if (limits != NULL)
        p.limits = *limits;
    else
        message_limits_default(&p.limits);
    p.stack = xcalloc((size_t)p.limits.max_depth + 1, sizeof(*p.stack));
    struct part_end end = {0};
    size_t root = part_new(&p, MESSAGE_PART_NONE, 0);
    parse_part(&p, root, &end);
    free(p.stack);
    free(p.last_child);
    buf_free(&p.scratch);
}

static void params_free(struct message_param *params, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(params[i].name);
        free(params[i].value);
    }
    free(params);
}

void message_free(struct message *msg)
{
    for (size_t i = 0; i < msg->part_count; i++) {
        struct message_part *part = &msg->parts[i];
        free(part->type);
        free(part->subtype);
        params_free(part->params, part->param_count);
        free(part->encoding);
        free(part->id);
        free(part->description);
        free(part->md5);
        free(part->location);
        free(part->disposition);
        params_free(part->disposition_params, part->disposition_param_count);
        for (size_t j = 0; j < part->language_count; j++)
            free(part->languages[j]);
        free(part->languages);
    }
    free(msg->parts);
    memset(msg, 0, sizeof(*msg));
}

const char *message_param_find(const struct message_param *params, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++) {
        if (strcasecmp(params[i].name, name) == 0)
            return params[i].value;
    }
    return NULL;
}

bool message_part_is(const struct message_part *part, const char *type, const char *subtype)
{
    return strcasecmp(part->type, type) == 0 &&
           (subtype == NULL || strcasecmp(part->subtype, subtype) == 0);
}

static size_t nth_child(const struct message *msg, size_t part, unsigned n)
{
    size_t c = msg->parts[part].first_child;
    for (unsigned i = 1; i < n && c != MESSAGE_PART_NONE; i++)
        c = msg->parts[c].next_sibling;
    return c;
}

size_t message_part_by_number(const struct message *msg, const unsigned *numbers, size_t count)
{
    if (msg->part_count == 0 || count == 0)
        return MESSAGE_PART_NONE;
    size_t part = 0;
    bool at_message = true; /* `part` is a message whose body can be its part 1 */
    for (size_t i = 0; i < count; i++) {
        unsigned n = numbers[i];
        if (n == 0)
            return MESSAGE_PART_NONE;
        if (msg->parts[part].kind == MESSAGE_PART_MULTIPART) {
            part = nth_child(msg, part, n);
            if (part == MESSAGE_PART_NONE)
                return part;
        } else if (!at_message || n != 1) {
            return MESSAGE_PART_NONE;
        }
        at_message = false;
        if (i + 1 < count && msg->parts[part].kind == MESSAGE_PART_MESSAGE) {
            part = msg->parts[part].first_child;
            at_message = true;
        }
    }
    return part;
}

size_t message_part_message(const struct message *msg, size_t part)
{
    if (part >= msg->part_count)
        return MESSAGE_PART_NONE;
    if (msg->parts[part].kind == MESSAGE_PART_MESSAGE)
        return msg->parts[part].first_child;
    return msg->parts[part].is_message ? part : MESSAGE_PART_NONE;
}
