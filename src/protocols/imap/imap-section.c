/* IMAP section extraction (see imap-section.h). */
#include "protocols/imap/imap-section.h"

#include "storage/message/message-decode.h"

#include <string.h>
#include <strings.h>

/* Writes bytes through an optional <start.count> window. */
struct emitter {
    struct buf *out;
    uint64_t skip;
    uint64_t left;
    bool limited;
};

static void emit(struct emitter *e, const char *data, size_t len)
{
    if (e->skip >= len) {
        e->skip -= len;
        return;
    }
    data += e->skip;
    len -= (size_t)e->skip;
    e->skip = 0;
    if (e->limited) {
        if (e->left < len)
            len = (size_t)e->left;
        e->left -= len;
    }
    if (len > 0)
        buf_append(e->out, data, len);
}

/* Emits stored bytes [start, start+len) with every bare LF as CRLF. */
static void emit_crlf(struct emitter *e, const char *data, size_t start, size_t len)
{
    size_t pos = start, end = start + len;
    while (pos < end) {
        const char *lf = memchr(data + pos, '\n', end - pos);
        if (lf == NULL) {
            emit(e, data + pos, end - pos);
            return;
        }
        size_t at = (size_t)(lf - data);
        if (at > start && data[at - 1] == '\r') {
            emit(e, data + pos, at + 1 - pos);
        } else {
            emit(e, data + pos, at - pos);
            emit(e, "\r\n", 2);
        }
        pos = at + 1;
    }
}

static void emit_range(struct emitter *e, const struct message *msg, const struct message_range *r)
{
    emit_crlf(e, msg->data, r->start, r->len);
}

/* ---- section-spec parsing ---- */

static bool word_is(const char *s, size_t len, size_t at, const char *word)
{
    size_t n = strlen(word);
    return len - at >= n && strncasecmp(s + at, word, n) == 0;
}

static bool parse_fields(const char *s, size_t len, size_t i, struct imap_section *out,
                         struct petrel_error *err)
{
    if (i >= len || s[i] != ' ')
        return petrel_error_set(err, PETREL_ERR_INVALID, "HEADER.FIELDS needs a list");
    i++;
    if (i >= len || s[i] != '(')
        return petrel_error_set(err, PETREL_ERR_INVALID, "HEADER.FIELDS needs a list");
    i++;
    while (i < len && s[i] != ')') {
        if (s[i] == ' ') {
            i++;
            continue;
        }
        size_t start = i;
        bool quoted = s[i] == '"';
        if (quoted) {
            start = ++i;
            while (i < len && s[i] != '"')
                i++;
        } else {
            while (i < len && s[i] != ' ' && s[i] != ')')
                i++;
        }
        if (i == start || (quoted && i >= len))
            return petrel_error_set(err, PETREL_ERR_INVALID, "bad header field name");
        if (out->field_count == IMAP_SECTION_MAX_FIELDS)
            return petrel_error_set(err, PETREL_ERR_INVALID, "too many header fields");
        out->fields[out->field_count].name = s + start;
        out->fields[out->field_count].len = i - start;
        out->field_count++;
        if (quoted)
            i++;
    }
    if (i >= len || i + 1 != len || out->field_count == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "bad header field list");
    return true;
}

bool imap_section_parse(const char *spec, size_t len, struct imap_section *out,
                        struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    size_t i = 0;
    while (i < len && spec[i] >= '0' && spec[i] <= '9') {
        unsigned long n = 0;
        while (i < len && spec[i] >= '0' && spec[i] <= '9') {
            n = n * 10 + (unsigned long)(spec[i++] - '0');
            if (n > 0xffffffUL)
                return petrel_error_set(err, PETREL_ERR_INVALID, "part number too large");
        }
        if (n == 0 || out->number_count == IMAP_SECTION_MAX_NUMBERS)
            return petrel_error_set(err, PETREL_ERR_INVALID, "bad part number");
        out->numbers[out->number_count++] = (unsigned)n;
        if (i == len)
            return true;
        if (spec[i] != '.')
            return petrel_error_set(err, PETREL_ERR_INVALID, "bad section");
        i++;
        if (i == len)
            return petrel_error_set(err, PETREL_ERR_INVALID, "bad section");
    }
    if (i == len)
        return true;
    if (word_is(spec, len, i, "HEADER.FIELDS.NOT")) {
        out->text = IMAP_SECTION_HEADER_FIELDS_NOT;
        return parse_fields(spec, len, i + 17, out, err);
    }
    if (word_is(spec, len, i, "HEADER.FIELDS")) {
        out->text = IMAP_SECTION_HEADER_FIELDS;
        return parse_fields(spec, len, i + 13, out, err);
    }
    if (len - i == 6 && word_is(spec, len, i, "HEADER")) {
        out->text = IMAP_SECTION_HEADER;
        return true;
    }
    if (len - i == 4 && word_is(spec, len, i, "TEXT")) {
        out->text = IMAP_SECTION_TEXT;
        return true;
    }
    if (len - i == 4 && word_is(spec, len, i, "MIME") && out->number_count > 0) {
        out->text = IMAP_SECTION_MIME;
        return true;
    }
    return petrel_error_set(err, PETREL_ERR_INVALID, "bad section");
}

/* ---- BODY[section] ---- */

static bool field_listed(const struct message *msg, const struct message_header_field *f,
                         const struct imap_section *section)
{
    for (size_t i = 0; i < section->field_count; i++) {
        const struct imap_section_field *want = &section->fields[i];
        if (want->len == f->name_len &&
            strncasecmp(msg->data + f->name_start, want->name, want->len) == 0)
            return true;
    }
    return false;
}

static void emit_header_fields(struct emitter *e, const struct message *msg,
                               const struct message_range *header,
                               const struct imap_section *section)
{
    bool wanted = section->text == IMAP_SECTION_HEADER_FIELDS;
    struct message_header_field f;
    size_t pos = header->start;
    while (message_header_next(msg->data, header, &pos, &f)) {
        if (!f.has_colon || field_listed(msg, &f, section) != wanted)
            continue;
        emit_crlf(e, msg->data, f.start, f.len);
        /* A field cut short by the end of the block still ends its line. */
        if (f.len == 0 || msg->data[f.start + f.len - 1] != '\n')
            emit(e, "\r\n", 2);
    }
    emit(e, "\r\n", 2);
}

static size_t section_part(const struct message *msg, const struct imap_section *section)
{
    if (section->number_count == 0)
        return 0;
    return message_part_by_number(msg, section->numbers, section->number_count);
}

bool imap_section_fetch(const struct message *msg, const struct imap_section *section, bool partial,
                        uint64_t start, uint64_t count, struct buf *out, struct petrel_error *err)
{
    struct emitter e = {out, partial ? start : 0, count, partial};
    size_t part = section_part(msg, section);
    if (part == MESSAGE_PART_NONE)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no such part");
    const struct message_part *p = &msg->parts[part];
    if (section->text == IMAP_SECTION_BODY) {
        if (section->number_count == 0)
            emit_crlf(&e, msg->data, 0, msg->len);
        else
            emit_range(&e, msg, &p->body);
        return true;
    }
    if (section->text == IMAP_SECTION_MIME) {
        emit_range(&e, msg, &p->header);
        return true;
    }
    size_t node = section->number_count == 0 ? 0 : message_part_message(msg, part);
    if (node == MESSAGE_PART_NONE)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "part is not a message");
    const struct message_part *m = &msg->parts[node];
    if (section->text == IMAP_SECTION_HEADER)
        emit_range(&e, msg, &m->header);
    else if (section->text == IMAP_SECTION_TEXT)
        emit_range(&e, msg, &m->body);
    else
        emit_header_fields(&e, msg, &m->header, section);
    return true;
}

void imap_section_fetch_header(const char *header, size_t len, const struct imap_section *section,
                               bool partial, uint64_t start, uint64_t count, struct buf *out)
{
    struct emitter e = {out, partial ? start : 0, count, partial};
    if (section->text == IMAP_SECTION_HEADER) {
        emit_crlf(&e, header, 0, len);
        return;
    }
    /* Only the bytes and the block's extent matter to the field walk. */
    const struct message block = {.data = header, .len = len};
    const struct message_range range = {.start = 0, .len = len};
    emit_header_fields(&e, &block, &range, section);
}

uint64_t imap_section_rfc822_size(const struct message *msg)
{
    if (msg->part_count == 0)
        return msg->len;
    const struct message_part *root = &msg->parts[0];
    /* The root's header and body cover the message; a bare LF in the gap a
     * cut header leaves cannot exist (the root is never cut by a boundary). */
    return (uint64_t)msg->len + root->header.bare_lf + root->body.bare_lf;
}

/* ---- BINARY[section] ---- */

static const struct message_part *binary_part(const struct message *msg, const unsigned *numbers,
                                              size_t count, enum message_cte *cte,
                                              struct petrel_error *err)
{
    size_t part = count == 0 ? 0 : message_part_by_number(msg, numbers, count);
    if (part == MESSAGE_PART_NONE) {
        petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no such part");
        return NULL;
    }
    const struct message_part *p = &msg->parts[part];
    *cte = count == 0 ? MESSAGE_CTE_IDENTITY : message_part_cte(p);
    if (*cte == MESSAGE_CTE_UNKNOWN) {
        petrel_error_set(err, PETREL_ERR_UNSUPPORTED, "unknown Content-Transfer-Encoding: %s",
                         p->encoding);
        return NULL;
    }
    return p;
}

/* RFC 3516: a part sent with Content-Transfer-Encoding: binary is its own
 * content, bare LFs, CRs and NULs included; only 7bit/8bit text (and a
 * whole message) is given with CRLF line ends. */
static bool binary_as_stored(const struct message_part *p, size_t count)
{
    return count > 0 && p->encoding != NULL && strcasecmp(p->encoding, "binary") == 0;
}

static void decode_part(const struct message *msg, const struct message_part *p,
                        enum message_cte cte, struct buf *out)
{
    const char *body = msg->data + p->body.start;
    if (cte == MESSAGE_CTE_BASE64)
        message_decode_base64(out, body, p->body.len);
    else
        message_decode_qp(out, body, p->body.len);
}

bool imap_section_binary(const struct message *msg, const unsigned *numbers, size_t count,
                         bool partial, uint64_t start, uint64_t len, struct buf *out,
                         struct petrel_error *err)
{
    enum message_cte cte;
    const struct message_part *p = binary_part(msg, numbers, count, &cte, err);
    if (p == NULL)
        return false;
    struct emitter e = {out, partial ? start : 0, len, partial};
    if (cte == MESSAGE_CTE_IDENTITY) {
        if (count == 0)
            emit_crlf(&e, msg->data, 0, msg->len);
        else if (binary_as_stored(p, count))
            emit(&e, msg->data + p->body.start, p->body.len);
        else
            emit_range(&e, msg, &p->body);
        return true;
    }
    struct buf decoded = {0};
    decode_part(msg, p, cte, &decoded);
    emit(&e, decoded.data != NULL ? decoded.data : "", decoded.len);
    buf_free(&decoded);
    return true;
}

bool imap_section_binary_size(const struct message *msg, const unsigned *numbers, size_t count,
                              uint64_t *size, struct petrel_error *err)
{
    enum message_cte cte;
    const struct message_part *p = binary_part(msg, numbers, count, &cte, err);
    if (p == NULL)
        return false;
    if (cte == MESSAGE_CTE_IDENTITY) {
        *size = count == 0                   ? imap_section_rfc822_size(msg)
                : binary_as_stored(p, count) ? p->body.len
                                             : message_range_crlf_size(&p->body);
        return true;
    }
    struct buf decoded = {0};
    decode_part(msg, p, cte, &decoded);
    *size = decoded.len;
    buf_free(&decoded);
    return true;
}
