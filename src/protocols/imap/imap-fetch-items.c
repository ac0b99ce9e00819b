#include "protocols/imap/imap-fetch-items.h"

#include "core/slice.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    unsigned attrs;
} simple_items[] = {
    {"FLAGS", IMAP_FETCH_FLAGS},
    {"INTERNALDATE", IMAP_FETCH_INTERNALDATE},
    {"RFC822.SIZE", IMAP_FETCH_RFC822_SIZE},
    {"ENVELOPE", IMAP_FETCH_ENVELOPE},
    {"BODY", IMAP_FETCH_BODY},
    {"BODYSTRUCTURE", IMAP_FETCH_BODYSTRUCTURE},
    {"UID", IMAP_FETCH_UID},
    {"MODSEQ", IMAP_FETCH_MODSEQ},
    {"RFC822", IMAP_FETCH_RFC822},
    {"RFC822.HEADER", IMAP_FETCH_RFC822_HEADER},
    {"RFC822.TEXT", IMAP_FETCH_RFC822_TEXT},
};

#define FAST_ATTRS (IMAP_FETCH_FLAGS | IMAP_FETCH_INTERNALDATE | IMAP_FETCH_RFC822_SIZE)
#define ALL_ATTRS (FAST_ATTRS | IMAP_FETCH_ENVELOPE)
#define FULL_ATTRS (ALL_ATTRS | IMAP_FETCH_BODY)

static void body_free(struct imap_fetch_body *b)
{
    for (size_t i = 0; i < b->field_count; i++)
        free(b->fields[i]);
    free(b->fields);
    b->fields = NULL;
    b->field_count = 0;
}

void imap_fetch_items_free(struct imap_fetch_items *items)
{
    for (size_t i = 0; i < items->body_count; i++)
        body_free(&items->bodies[i]);
    free(items->bodies);
    memset(items, 0, sizeof(*items));
}

static bool bad(struct petrel_error *err, const char *msg)
{
    return petrel_error_set(err, PETREL_ERR_INVALID, "%s", msg);
}

/* Decimal without sign, 1 to 20 digits; false when empty or over `max`. */
static bool parse_u64(struct slice s, uint64_t max, uint64_t *out)
{
    return s.len <= 20 && slice_parse_u64(s, max, out);
}

static bool is_field_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '(' && c != ')' && c != '{' && c != '"' && c != '\\' &&
           c != '%' && c != '*';
}

/* "(" astring *(SP astring) ")" filling b->fields; `s` is the rest of the
 * section after "HEADER.FIELDS[.NOT] ". */
static bool parse_field_list(struct slice s, struct imap_fetch_body *b, struct petrel_error *err)
{
    if (s.len < 2 || s.ptr[0] != '(' || s.ptr[s.len - 1] != ')')
        return bad(err, "Invalid header field list in FETCH section");
    size_t i = 1;
    size_t end = s.len - 1;
    size_t cap = 0;
    while (i < end) {
        if (s.ptr[i] == ' ') {
            i++;
            continue;
        }
        struct buf name = {0};
        if (s.ptr[i] == '"') {
            i++;
            while (i < end && s.ptr[i] != '"') {
                if (s.ptr[i] == '\\' && i + 1 < end)
                    i++;
                buf_append_char(&name, s.ptr[i]);
                i++;
            }
            if (i >= end) {
                buf_free(&name);
                return bad(err, "Unterminated quoted header field name");
            }
            i++;
        } else {
            size_t start = i;
            while (i < end && is_field_char((unsigned char)s.ptr[i]))
                i++;
            if (i == start || (i < end && s.ptr[i] != ' ')) {
                buf_free(&name);
                return bad(err, "Invalid header field name in FETCH section");
            }
            buf_append(&name, s.ptr + start, i - start);
        }
        if (name.len == 0 || memchr(name.data, ':', name.len) != NULL ||
            strlen(name.data) != name.len) {
            buf_free(&name);
            return bad(err, "Invalid header field name in FETCH section");
        }
        b->fields = xgrow(b->fields, &cap, b->field_count + 1, sizeof(*b->fields));
        b->fields[b->field_count++] = buf_steal(&name);
    }
    if (b->field_count == 0)
        return bad(err, "Empty header field list in FETCH section");
    return true;
}

/* section-spec inside the brackets: [part *("." part)] ["." text] or text. */
static bool parse_section(struct slice s, struct imap_fetch_body *b, struct petrel_error *err)
{
    size_t i = 0;
    while (i < s.len && s.ptr[i] >= '0' && s.ptr[i] <= '9') {
        size_t start = i;
        while (i < s.len && s.ptr[i] >= '0' && s.ptr[i] <= '9')
            i++;
        uint64_t v = 0;
        if (!parse_u64((struct slice){s.ptr + start, i - start}, UINT32_MAX, &v) || v == 0)
            return bad(err, "Invalid part number in FETCH section");
        if (b->part_count == IMAP_SECTION_MAX_PARTS)
            return bad(err, "Too many part numbers in FETCH section");
        b->parts[b->part_count++] = (uint32_t)v;
        if (i == s.len)
            return true;
        if (s.ptr[i] != '.')
            return bad(err, "Invalid FETCH section");
        i++;
        if (i == s.len)
            return bad(err, "Invalid FETCH section");
    }
    if (i == s.len)
        return true; /* BODY[] */
    if (b->kind != IMAP_FETCH_BODY_SECTION)
        return bad(err, "BINARY sections take part numbers only");
    struct slice rest = {s.ptr + i, s.len - i};
    const char *sp = memchr(rest.ptr, ' ', rest.len);
    struct slice word = {rest.ptr, sp != NULL ? (size_t)(sp - rest.ptr) : rest.len};
    if (slice_eq_ci(word, "HEADER.FIELDS") || slice_eq_ci(word, "HEADER.FIELDS.NOT")) {
        b->text = word.len == 13 ? IMAP_SECTION_HEADER_FIELDS : IMAP_SECTION_HEADER_FIELDS_NOT;
        if (sp == NULL)
            return bad(err, "Missing header field list in FETCH section");
        struct slice list = {sp + 1, rest.len - word.len - 1};
        return parse_field_list(list, b, err);
    }
    if (sp != NULL)
        return bad(err, "Invalid FETCH section");
    if (slice_eq_ci(word, "HEADER"))
        b->text = IMAP_SECTION_HEADER;
    else if (slice_eq_ci(word, "TEXT"))
        b->text = IMAP_SECTION_TEXT;
    else if (slice_eq_ci(word, "MIME") && b->part_count > 0)
        b->text = IMAP_SECTION_MIME;
    else
        return bad(err, "Invalid FETCH section");
    return true;
}

/* "<" number "." nz-number ">" */
static bool parse_partial(struct slice s, struct imap_fetch_body *b, struct petrel_error *err)
{
    if (s.len < 5 || s.ptr[0] != '<' || s.ptr[s.len - 1] != '>')
        return bad(err, "Invalid partial range in FETCH item");
    const char *dot = memchr(s.ptr, '.', s.len);
    if (dot == NULL)
        return bad(err, "Invalid partial range in FETCH item");
    struct slice start = {s.ptr + 1, (size_t)(dot - s.ptr) - 1};
    struct slice count = {dot + 1, (size_t)(s.ptr + s.len - 1 - dot) - 1};
    if (!parse_u64(start, INT64_MAX, &b->partial_start) ||
        !parse_u64(count, INT64_MAX, &b->partial_count) || b->partial_count == 0)
        return bad(err, "Invalid partial range in FETCH item");
    b->partial = true;
    return true;
}

/* Where the section's closing ']' is (quoted strings skipped), or len. */
static size_t section_end(const char *s, size_t len, size_t i)
{
    size_t parens = 0;
    for (; i < len; i++) {
        if (s[i] == '"') {
            for (i++; i < len && s[i] != '"'; i++)
                if (s[i] == '\\')
                    i++;
            if (i >= len)
                return len;
        } else if (s[i] == '(') {
            parens++;
        } else if (s[i] == ')' && parens > 0) {
            parens--;
        } else if (s[i] == ']' && parens == 0) {
            return i;
        }
    }
    return len;
}

static bool parse_body_item(struct slice item, size_t bracket, struct imap_fetch_items *out,
                            size_t *body_cap, struct petrel_error *err)
{
    struct imap_fetch_body b;
    memset(&b, 0, sizeof(b));
    struct slice prefix = {item.ptr, bracket};
    if (slice_eq_ci(prefix, "BODY")) {
        b.kind = IMAP_FETCH_BODY_SECTION;
    } else if (slice_eq_ci(prefix, "BODY.PEEK")) {
        b.kind = IMAP_FETCH_BODY_SECTION;
        b.peek = true;
    } else if (slice_eq_ci(prefix, "BINARY")) {
        b.kind = IMAP_FETCH_BINARY_SECTION;
    } else if (slice_eq_ci(prefix, "BINARY.PEEK")) {
        b.kind = IMAP_FETCH_BINARY_SECTION;
        b.peek = true;
    } else if (slice_eq_ci(prefix, "BINARY.SIZE")) {
        b.kind = IMAP_FETCH_BINARY_SIZE;
        b.peek = true;
    } else {
        return bad(err, "Unknown FETCH item");
    }
    size_t close = section_end(item.ptr, item.len, bracket + 1);
    if (close == item.len)
        return bad(err, "Missing ']' in FETCH item");
    struct slice section = {item.ptr + bracket + 1, close - bracket - 1};
    struct slice rest = {item.ptr + close + 1, item.len - close - 1};
    bool ok = parse_section(section, &b, err);
    if (ok && rest.len > 0) {
        if (b.kind == IMAP_FETCH_BINARY_SIZE)
            ok = bad(err, "BINARY.SIZE takes no partial range");
        else
            ok = parse_partial(rest, &b, err);
    }
    if (!ok) {
        body_free(&b);
        return false;
    }
    out->bodies = xgrow(out->bodies, body_cap, out->body_count + 1, sizeof(*out->bodies));
    out->bodies[out->body_count++] = b;
    return true;
}

static bool parse_item(const struct imap_arg *arg, struct imap_fetch_items *out, size_t *body_cap,
                       struct petrel_error *err)
{
    if (arg->type != IMAP_ARG_ATOM)
        return bad(err, "Invalid FETCH item");
    struct slice item = {arg->str, arg->len};
    const char *bracket = memchr(item.ptr, '[', item.len);
    if (bracket != NULL)
        return parse_body_item(item, (size_t)(bracket - item.ptr), out, body_cap, err);
    for (size_t i = 0; i < sizeof(simple_items) / sizeof(simple_items[0]); i++) {
        if (slice_eq_ci(item, simple_items[i].name)) {
            out->attrs |= simple_items[i].attrs;
            return true;
        }
    }
    return bad(err, "Unknown FETCH item");
}

static bool parse_modifiers(const struct imap_arg *mods, struct imap_fetch_items *out,
                            struct petrel_error *err)
{
    if (mods->type != IMAP_ARG_LIST || mods->count == 0)
        return bad(err, "Invalid FETCH modifiers");
    for (size_t i = 0; i < mods->count; i += 2) {
        const struct imap_arg *name = &mods->list[i];
        if (imap_arg_atom_equals(name, "VANISHED")) {
            if (out->vanished)
                return bad(err, "VANISHED given twice");
            out->vanished = true;
            i--; /* no value */
            continue;
        }
        if (!imap_arg_atom_equals(name, "CHANGEDSINCE"))
            return bad(err, "Unknown FETCH modifier");
        if (i + 1 >= mods->count || mods->list[i + 1].type != IMAP_ARG_ATOM)
            return bad(err, "CHANGEDSINCE needs a mod-sequence value");
        const struct imap_arg *v = &mods->list[i + 1];
        if (out->changedsince)
            return bad(err, "CHANGEDSINCE given twice");
        if (!parse_u64((struct slice){v->str, v->len}, INT64_MAX, &out->changedsince_modseq) ||
            out->changedsince_modseq == 0)
            return bad(err, "Invalid CHANGEDSINCE value");
        out->changedsince = true;
        out->attrs |= IMAP_FETCH_MODSEQ;
    }
    if (out->vanished && !out->changedsince)
        return bad(err, "VANISHED needs CHANGEDSINCE");
    return true;
}

bool imap_fetch_items_parse(const struct imap_arg *items, const struct imap_arg *modifiers,
                            struct imap_fetch_items *out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t body_cap = 0;
    bool ok = true;
    if (imap_arg_atom_equals(items, "ALL")) {
        out->attrs = ALL_ATTRS;
    } else if (imap_arg_atom_equals(items, "FAST")) {
        out->attrs = FAST_ATTRS;
    } else if (imap_arg_atom_equals(items, "FULL")) {
        out->attrs = FULL_ATTRS;
    } else if (items->type == IMAP_ARG_LIST) {
        if (items->count == 0)
            ok = bad(err, "Empty FETCH item list");
        for (size_t i = 0; ok && i < items->count; i++)
            ok = parse_item(&items->list[i], out, &body_cap, err);
    } else {
        ok = parse_item(items, out, &body_cap, err);
    }
    if (ok && modifiers != NULL)
        ok = parse_modifiers(modifiers, out, err);
    if (!ok)
        imap_fetch_items_free(out);
    return ok;
}

static void write_field(struct buf *out, const char *name)
{
    bool atom = true;
    for (const char *c = name; *c != '\0'; c++)
        atom = atom && is_field_char((unsigned char)*c) && *c != ']';
    if (atom) {
        buf_append_str(out, name);
        return;
    }
    buf_append_char(out, '"');
    for (const char *c = name; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\')
            buf_append_char(out, '\\');
        buf_append_char(out, *c);
    }
    buf_append_char(out, '"');
}

void imap_fetch_body_name(const struct imap_fetch_body *body, struct buf *out)
{
    static const char *const kinds[] = {"BODY[", "BINARY[", "BINARY.SIZE["};
    static const char *const texts[] = {"",     "HEADER", "HEADER.FIELDS", "HEADER.FIELDS.NOT",
                                        "TEXT", "MIME"};
    buf_append_str(out, kinds[body->kind]);
    for (size_t i = 0; i < body->part_count; i++)
        buf_printf(out, "%s%u", i > 0 ? "." : "", (unsigned)body->parts[i]);
    if (body->text != IMAP_SECTION_BODY) {
        if (body->part_count > 0)
            buf_append_char(out, '.');
        buf_append_str(out, texts[body->text]);
    }
    if (body->field_count > 0) {
        buf_append_str(out, " (");
        for (size_t i = 0; i < body->field_count; i++) {
            if (i > 0)
                buf_append_char(out, ' ');
            write_field(out, body->fields[i]);
        }
        buf_append_char(out, ')');
    }
    buf_append_char(out, ']');
    if (body->partial)
        buf_printf(out, "<%llu>", (unsigned long long)body->partial_start);
}

bool imap_fetch_items_set_seen(const struct imap_fetch_items *items)
{
    if ((items->attrs & (IMAP_FETCH_RFC822 | IMAP_FETCH_RFC822_TEXT)) != 0)
        return true;
    for (size_t i = 0; i < items->body_count; i++)
        if (!items->bodies[i].peek)
            return true;
    return false;
}
