/* libFuzzer target: the MIME parser and the IMAP views of a message
 * (storage/message/message-parser.h, message-date.h,
 * protocols/imap/imap-envelope.h, imap-bodystructure.h, imap-section.h).
 * Input layout:
 *   byte 0     choices: bit 0 small limits (depth 8, 16 parts, 4 headers)
 *   byte 1, 2  seed for the partial ranges
 *   byte 3..   the stored message (each run in an exact-size allocation)
 * Steps and invariants:
 *   1. message_parse(): every range inside the message; each part's header
 *      before its body; children inside their parent's body, in order and
 *      not overlapping; line and bare-LF counts agree with the bytes; the
 *      part count and depth within the limits. message_header_block() gives
 *      the root's header range and counts exactly as the parse did.
 *   2. ENVELOPE of every message node, BODY and BODYSTRUCTURE of the root:
 *      parentheses balance outside strings and literals.
 *   3. BODY[] equals RFC822.SIZE bytes; for every part, BODY[n] has the
 *      part's CRLF size and a partial <start.count> is exactly the matching
 *      slice of the full section; HEADER / TEXT / MIME / HEADER.FIELDS of a
 *      few parts; BINARY and BINARY.SIZE agree; the top-level HEADER and
 *      HEADER.FIELDS[.NOT] from the header block alone equal the parsed ones.
 *   4. message_date_parse() on the Date: header. */
#include "core/buf.h"
#include "protocols/imap/imap-bodystructure.h"
#include "protocols/imap/imap-envelope.h"
#include "protocols/imap/imap-section.h"
#include "storage/message/message-date.h"
#include "storage/message/message-parser.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t count_lf(const char *s, size_t len, size_t *bare)
{
    size_t n = 0;
    *bare = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\n') {
            n++;
            if (i == 0 || s[i - 1] != '\r')
                (*bare)++;
        }
    }
    return n;
}

static void check_range(const struct message *m, const struct message_range *r)
{
    assert(r->start <= m->len && r->len <= m->len - r->start);
    size_t bare;
    size_t lines = count_lf(m->data + r->start, r->len, &bare);
    assert(lines == r->lines);
    assert(bare == r->bare_lf);
}

/* Walks an IMAP structure: parentheses balance outside quoted strings and
 * literals, and the text ends at depth zero. */
static void check_balanced(const struct buf *b)
{
    long depth = 0;
    for (size_t i = 0; i < b->len; i++) {
        char c = b->data[i];
        if (c == '"') {
            for (i++; i < b->len && b->data[i] != '"'; i++) {
                if (b->data[i] == '\\')
                    i++;
            }
            assert(i < b->len);
        } else if (c == '{') {
            size_t n = strtoul(b->data + i + 1, NULL, 10);
            const char *crlf = strstr(b->data + i, "}\r\n");
            assert(crlf != NULL);
            i = (size_t)(crlf - b->data) + 2 + n;
            assert(i < b->len);
        } else if (c == '(') {
            depth++;
        } else if (c == ')') {
            depth--;
            assert(depth >= 0);
        }
    }
    assert(depth == 0);
}

static void check_tree(const struct message *m, const struct message_limits *limits)
{
    assert(m->part_count >= 1 && m->part_count <= limits->max_parts);
    for (size_t i = 0; i < m->part_count; i++) {
        const struct message_part *p = &m->parts[i];
        check_range(m, &p->header);
        check_range(m, &p->body);
        assert(p->header.start + p->header.len <= p->body.start);
        assert(p->depth <= limits->max_depth);
        assert(p->type != NULL && p->subtype != NULL);
        if (p->kind == MESSAGE_PART_MESSAGE)
            assert(p->child_count == 1);
        size_t prev_end = p->body.start, n = 0;
        for (size_t c = p->first_child; c != MESSAGE_PART_NONE; c = m->parts[c].next_sibling) {
            const struct message_part *child = &m->parts[c];
            assert(child->parent == i && c > i);
            assert(child->depth == p->depth + 1);
            assert(child->header.start >= prev_end);
            prev_end = child->body.start + child->body.len;
            assert(prev_end <= p->body.start + p->body.len);
            n++;
        }
        assert(n == p->child_count);
    }
    assert(m->parts[0].header.start == 0);
    assert(m->parts[0].body.start + m->parts[0].body.len == m->len);
}

static uint32_t rng_next(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

static void fetch_spec(const struct message *m, const char *spec, uint32_t *rng)
{
    struct imap_section sec;
    struct petrel_error err = {0};
    if (!imap_section_parse(spec, strlen(spec), &sec, &err))
        return;
    struct buf full = {0}, part = {0};
    if (!imap_section_fetch(m, &sec, false, 0, 0, &full, &err)) {
        assert(err.code == PETREL_ERR_NOT_FOUND);
        return;
    }
    uint64_t start = rng_next(rng) % (full.len + 2);
    uint64_t count = rng_next(rng) % (full.len + 2);
    bool ok = imap_section_fetch(m, &sec, true, start, count, &part, &err);
    assert(ok);
    uint64_t want = start >= full.len ? 0 : full.len - start;
    if (want > count)
        want = count;
    assert(part.len == want);
    assert(want == 0 || memcmp(part.data, full.data + start, want) == 0);
    if (sec.number_count == 0 && sec.text != IMAP_SECTION_BODY && sec.text != IMAP_SECTION_TEXT) {
        /* The header-block shortcut (cached header of a FETCH) answers the
         * same bytes, whole and partial. */
        const struct message_range *h = &m->parts[0].header;
        struct buf alone = {0};
        imap_section_fetch_header(m->data + h->start, h->len, &sec, false, 0, 0, &alone);
        assert(alone.len == full.len);
        assert(full.len == 0 || memcmp(alone.data, full.data, full.len) == 0);
        buf_reset(&alone);
        imap_section_fetch_header(m->data + h->start, h->len, &sec, true, start, count, &alone);
        assert(alone.len == part.len);
        assert(part.len == 0 || memcmp(alone.data, part.data, part.len) == 0);
        buf_free(&alone);
    }
    buf_free(&full);
    buf_free(&part);
}

static void check_sections(const struct message *m, uint32_t *rng)
{
    struct imap_section all;
    struct petrel_error err = {0};
    struct buf b = {0};
    imap_section_parse("", 0, &all, &err);
    bool ok = imap_section_fetch(m, &all, false, 0, 0, &b, &err);
    assert(ok);
    assert(b.len == imap_section_rfc822_size(m));
    buf_free(&b);
    fetch_spec(m, "HEADER", rng);
    fetch_spec(m, "TEXT", rng);
    fetch_spec(m, "HEADER.FIELDS (From Subject content-type)", rng);
    fetch_spec(m, "HEADER.FIELDS.NOT (Received)", rng);
    fetch_spec(m, "1", rng);
    fetch_spec(m, "1.MIME", rng);
    fetch_spec(m, "2.HEADER", rng);
    fetch_spec(m, "2.TEXT", rng);
    fetch_spec(m, "1.1", rng);
    fetch_spec(m, "2.1.HEADER.FIELDS (To)", rng);
    /* BODY[n] of the first parts reached by numbers 1..3 (and 1.1..1.3):
     * its length is the part's CRLF size. */
    for (unsigned a = 1; a <= 3; a++) {
        for (unsigned depth = 1; depth <= 2; depth++) {
            unsigned nums[2] = {a, a};
            size_t idx = message_part_by_number(m, nums, depth);
            if (idx == MESSAGE_PART_NONE)
                continue;
            struct imap_section sec = {0};
            sec.numbers[0] = nums[0];
            sec.numbers[1] = nums[1];
            sec.number_count = depth;
            ok = imap_section_fetch(m, &sec, false, 0, 0, &b, &err);
            assert(ok);
            assert(b.len == message_range_crlf_size(&m->parts[idx].body));
            buf_reset(&b);
            uint64_t size = 0;
            bool sized = imap_section_binary_size(m, nums, depth, &size, &err);
            bool fetched = imap_section_binary(m, nums, depth, false, 0, 0, &b, &err);
            assert(sized == fetched);
            assert(!fetched || size == b.len);
            assert(fetched || err.code == PETREL_ERR_UNSUPPORTED);
            buf_reset(&b);
        }
    }
    buf_free(&b);
}

static void check_views(const struct message *m)
{
    struct buf b = {0};
    imap_bodystructure_append(&b, m, 0, true);
    check_balanced(&b);
    buf_reset(&b);
    imap_bodystructure_append(&b, m, 0, false);
    check_balanced(&b);
    for (size_t i = 0; i < m->part_count; i++) {
        if (!m->parts[i].is_message)
            continue;
        buf_reset(&b);
        imap_envelope_append(&b, m->data, &m->parts[i].header);
        check_balanced(&b);
    }
    /* The Date: header through the date parser. */
    struct message_header_field f;
    size_t pos = m->parts[0].header.start;
    while (message_header_next(m->data, &m->parts[0].header, &pos, &f)) {
        if (!message_header_is(m->data, &f, "date"))
            continue;
        int64_t epoch;
        int zone;
        if (message_date_parse(m->data + f.value_start, f.value_len, &epoch, &zone))
            assert(zone > -24 * 60 && zone < 24 * 60);
        break;
    }
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    struct message_limits limits;
    message_limits_default(&limits);
    if (data[0] & 1) {
        limits.max_depth = 8;
        limits.max_parts = 16;
        limits.max_headers = 4;
    }
    uint32_t rng = ((uint32_t)data[1] << 8 | data[2]) | 0x10000;
    size_t len = size - 3;
    char *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data + 3, len);
    struct message m;
    message_parse(copy, len, &limits, &m);
    check_tree(&m, &limits);
    /* The header block found without the parse is the parsed one. */
    struct message_range hb = message_header_block(copy, len);
    const struct message_range *ph = &m.parts[0].header;
    assert(hb.start == ph->start && hb.len == ph->len && hb.lines == ph->lines &&
           hb.bare_lf == ph->bare_lf);
    check_views(&m);
    check_sections(&m, &rng);
    message_free(&m);
    free(copy);
    return 0;
}
